#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_mig
short_description: Declarative MIG layouts on NVIDIA GPUs (mode, GPU instances, compute instances)
version_added: "0.1.0"
description:
  - Brings the MIG mode and the MIG GPU instances (GIs) and compute instances (CIs) of the
    node's GPUs to a declared layout, changing only what differs.
  - Reads the current mode and instances with C(nvidia-smi), and the GPU's own profile table
    (C(nvidia-smi mig -lgip)) and placement table (C(-lgipp)); validates the whole layout of
    every selected GPU against them before anything is changed, so an impossible layout
    (more instances than the GPU holds, instances that cannot be placed together) fails
    with no instance destroyed.
  - Chooses where each new instance goes and creates them with explicit placements,
    largest first (the MIG guide's C(-cgi 19,19,14,9) fails on a real A100 because the 1g
    instances take the 3g's place). Instances that already match are kept where they are.
  - "Mode changes: on Ampere (A100, A30) a MIG mode change stays pending until the GPU is
    reset. With O(allow_reset=true) the module resets the GPU when no process uses it;
    otherwise (or when the reset fails) it reports RV(reboot_required) and leaves the
    instances of that GPU for the next run. On Hopper and later (H100, H200) the change is
    immediate but is lost when the driver reloads or the node reboots: the module warns,
    and the C(dgxops.fleet.mig) role installs a boot unit that re-applies the layout."
  - Refuses to destroy instances or change the mode of a GPU that has running compute
    processes unless O(force=true). The module never kills processes; on a real GPU the
    driver itself refuses to destroy an instance that holds a CUDA context, and that error
    is reported as is.
  - After applying, reads the instances back and fails if they differ from the plan
    (mig-parted once reported success without creating partitions, NVIDIA/mig-parted#18).
  - Only ever exercised against the project's simulated nodes in CI; see docs/simulator.md.
author:
  - dgxops maintainers (@dgxops)
options:
  layout:
    description:
      - Desired state, one entry per group of GPUs. A GPU may be chosen by one entry only;
        GPUs no entry chooses are left alone.
    type: list
    elements: dict
    required: true
    suboptions:
      gpus:
        description:
          - Which GPUs the entry applies to. C(all), an index, a UUID (C(GPU-...)), a range
            such as C(0-3), a comma list C(0,1), or a list of those.
        type: raw
        default: all
      mig:
        description:
          - Whether MIG mode is enabled on these GPUs. With C(false), every instance is
            destroyed and MIG mode disabled.
        type: bool
        default: true
      instances:
        description:
          - GPU instances wanted on each of these GPUs (MIG enabled). An item is a profile
            name as the GPU names it (C(1g.10gb), C(3g.40gb), C(1g.18gb+me)) or a profile id
            (C(19)), meaning one GI with one full-size CI (like C(-C)); or a dictionary with
            C(profile), C(count) (default 1) and C(compute_instances), a list of C(full) or
            C(Nc) sizes such as C([1c, 2c]) (default one full CI).
          - An empty list leaves MIG enabled with no instances.
        type: list
        elements: raw
        default: []
  force:
    description:
      - Destroy instances and change the MIG mode even when compute processes run on the GPU.
        The processes are not stopped by the module.
    type: bool
    default: false
  allow_reset:
    description:
      - On GPUs whose MIG mode change stays pending (Ampere), reset the GPU with
        C(nvidia-smi -r) when no process uses it. With C(false) the module only reports
        RV(reboot_required).
    type: bool
    default: true
  timeout:
    description: Seconds after which one nvidia-smi call is abandoned (needs coreutils C(timeout)).
    type: int
    default: 120
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.nvidia_smi
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
    details: Reads the current state and reports the planned changes without running any setter.
  diff_mode:
    support: full
    details: Shows the MIG mode and instances of each selected GPU before and after.
  platform:
    details: Linux nodes with NVIDIA GPUs that support MIG (A100, A30, H100, H200 and later).
notes:
  - Stop the GPU clients that hold the device (nvidia-persistenced, DCGM, nvidia-fabricmanager,
    monitoring agents, workloads) before a MIG mode change; the C(dgxops.fleet.mig) role does it.
  - Compute-instance sizes follow the NVIDIA MIG user guide (a 4g GI offers 1c, 2c, 4c; a 7g GI
    1c, 2c, 3c, 4c, 7c); CI profile ids are read from C(nvidia-smi mig -lcip).
seealso:
  - name: NVIDIA MIG user guide
    description: Profiles, placements and mode changes.
    link: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
"""

EXAMPLES = r"""
- name: Seven 1g instances on every GPU (guide 000 section 5.3)
  dgxops.fleet.nvidia_mig:
    layout:
      - gpus: all
        instances:
          - profile: 1g.10gb
            count: 7

- name: GPUs 0-3 split for tenants, GPUs 4-7 whole
  dgxops.fleet.nvidia_mig:
    layout:
      - gpus: 0-3
        instances: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]
      - gpus: [4, 5, 6, 7]
        mig: false

- name: One 3g instance split into a 1-slice and a 2-slice compute instance
  dgxops.fleet.nvidia_mig:
    layout:
      - gpus: 0
        instances:
          - profile: 3g.40gb
            compute_instances: [1c, 2c]
          - 4g.40gb
"""

RETURN = r"""
gpus:
  description: State of each GPU after the run (planned state in check mode).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af
      name: NVIDIA A100-SXM4-40GB
      managed: true
      mig_mode_current: Enabled
      mig_mode_pending: Enabled
      mig_mode_persistent: true
      reboot_required: false
      processes: []
      instances:
        - profile: 3g.20gb
          profile_id: 9
          start: 4
          size: 4
          compute_instances: [3c]
          gpu_instance_id: 2
          compute_instance_profile_ids: [2]
actions:
  description: What was done (or would be done in check mode), one line per step.
  returned: always
  type: list
  elements: str
  sample: ["GPU 0: create 3g.20gb at slice 4 with compute instances 3c"]
commands:
  description: The mutating nvidia-smi command lines that were run (empty in check mode).
  returned: always
  type: list
  elements: list
reboot_required:
  description: True when a MIG mode change is pending until the GPU is reset or the node reboots.
  returned: always
  type: bool
reboot_required_gpus:
  description: Indexes of the GPUs whose MIG mode change is pending.
  returned: always
  type: list
  elements: int
mig_devices:
  description: Number of MIG devices (compute instances) on the selected GPUs afterwards.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi
from ansible_collections.dgxops.fleet.plugins.module_utils.mig_state import Runner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            layout=dict(type="list", elements="dict", required=True, options=dict(
                gpus=dict(type="raw", default="all"),
                mig=dict(type="bool", default=True),
                instances=dict(type="list", elements="raw", default=[]),
            )),
            force=dict(type="bool", default=False),
            allow_reset=dict(type="bool", default=True),
            nvidia_smi_path=dict(nvidia_smi.NVIDIA_SMI_PATH_SPEC),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    runner = Runner(module)
    runner.plan()
    runner.apply()
    module.exit_json(**runner.result())


if __name__ == "__main__":
    main()
