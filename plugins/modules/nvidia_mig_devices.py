#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_mig_devices
short_description: Give unix groups exactly their MIG instances' capability devices
version_added: "0.1.0"
description:
  - Sets owner, group and mode of the C(/dev/nvidia-caps/nvidia-cap<minor>) nodes that guard the
    MIG GPU instances and compute instances that exist now, so a tenant's group can open exactly
    the MIG devices it is given; whole GPUs (MIG disabled) are granted through C(/dev/nvidiaN).
  - The minor of each capability comes from the driver's static table
    C(/proc/driver/nvidia-caps/mig-minors) (C(gpu<minor>/gi<id>/access), C(gpu<minor>/gi<id>/ci<id>/access),
    where C(gpu<minor>) is the GPU's device minor from C(nvidia-smi -q)), the character major from the
    C(nvidia-caps) line of C(/proc/devices). Missing nodes are created with C(mknod), as
    C(nvidia-modprobe -f) would.
  - For every managed capability it writes C(DeviceFileModify 0) to the capability's file under
    C(/proc/driver/nvidia/capabilities), so C(nvidia-modprobe) (run by NVML and CUDA) no longer resets
    the node to the driver's mode 0444 root:root.
  - With O(restrict_unassigned=true), the instances of the selected MIG GPUs that no entry grants,
    and nodes left from instances that no longer exist, become root-only (0400 root:root).
  - Run it after every change of MIG instances (the driver makes a new capability, with
    C(DeviceFileModify 1), for every new instance); the C(dgxops.fleet.mig) role does so after the
    layout and at boot.
author:
  - dgxops maintainers (@dgxops)
options:
  access:
    description: Grants, one entry per group of MIG instances or GPUs.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: A label for messages.
        type: str
      gpus:
        description:
          - Which GPUs. C(all), an index, a UUID (C(GPU-...)), a range such as C(0-3), a comma list
            C(0,1), or a list of those. On a GPU with MIG enabled the entry grants its instances
            (all, or those of O(access[].profiles) / O(access[].placements)); on a GPU with MIG
            disabled, the whole GPU (C(/dev/nvidiaN)).
        type: raw
        required: true
      profiles:
        description: Only GPU instances of these profiles (for example C(1g.10gb)).
        type: list
        elements: str
      placements:
        description: Only GPU instances that start at these memory slices (C(-lgi) Placement Start).
        type: list
        elements: int
      owner:
        description: Owner of the nodes (name or uid).
        type: raw
        default: root
      group:
        description: Group that gets the devices (name or gid).
        type: raw
        required: true
      mode:
        description: Mode of the nodes, an octal string such as C('0440') (read access is what the capability checks).
        type: raw
        default: '0440'
  restrict_unassigned:
    description: Make the other instances of the selected MIG GPUs (and stale nodes) root-only.
    type: bool
    default: true
  proc_devices:
    description: The kernel's device list (character majors).
    type: path
    default: /proc/devices
  mig_minors:
    description: The driver's MIG capability minor table.
    type: path
    default: /proc/driver/nvidia-caps/mig-minors
  capabilities_dir:
    description: The driver's capability files (C(gpuN/mig/giI/access)).
    type: path
    default: /proc/driver/nvidia/capabilities
  nvidia_params:
    description: The driver's parameters (C(ModifyDeviceFiles)), read to warn when whole-GPU grants would be reset.
    type: path
    default: /proc/driver/nvidia/params
  dev_dir:
    description: Directory of the device nodes (C(nvidia-caps/) and C(nvidiaN) live under it).
    type: path
    default: /dev
  timeout:
    description: Seconds each nvidia-smi call may take.
    type: int
    default: 120
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.nvidia_smi
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
    details: Reads the nodes and reports what would change without creating or changing any.
  diff_mode:
    support: full
    details: Shows owner, group and mode of every managed node before and after.
  platform:
    details: Linux nodes with an NVIDIA driver that uses /dev based capabilities (R450 and later).
notes:
  - Root (CAP_SYS_ADMIN) always has every capability; grants only matter for other users.
  - A MIG device also needs C(/dev/nvidiactl), C(/dev/nvidia-uvm) and C(/dev/nvidiaN) (0666 by
    default); this module leaves those alone on MIG GPUs.
  - Only ever exercised against the project's simulated nodes in CI; see docs/simulator.md.
seealso:
  - module: dgxops.fleet.nvidia_mig
  - name: NVIDIA MIG user guide, Device Nodes and Capabilities
    description: The mig-minors table, nvidia-modprobe and DeviceFileModify.
    link: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/device-nodes-and-capabilities.html
"""

EXAMPLES = r"""
- name: Tenant alpha gets the 1g instances of GPUs 0-3, beta the 3g ones; GPU 7 (MIG off) goes to gamma
  dgxops.fleet.nvidia_mig_devices:
    access:
      - {name: alpha, gpus: 0-3, profiles: [1g.10gb], group: tenant-alpha}
      - {name: beta, gpus: 0-3, profiles: [3g.40gb], group: tenant-beta, mode: "0440"}
      - {name: gamma, gpus: 7, group: tenant-gamma, mode: "0660"}
"""

RETURN = r"""
changes:
  description: What was (or in check mode would be) changed, one line per node or capability file.
  returned: always
  type: list
  elements: str
nodes:
  description: Every managed node with path, kind (mig or gpu), gpu, gpu_instance, compute_instance, capability, major, minor, entry, owner and mode.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_devices as md
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi
from ansible_collections.dgxops.fleet.plugins.module_utils import oserror


def main():
    module = AnsibleModule(
        argument_spec=dict(
            access=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str"),
                gpus=dict(type="raw", required=True),
                profiles=dict(type="list", elements="str"),
                placements=dict(type="list", elements="int"),
                owner=dict(type="raw", default="root"),
                group=dict(type="raw", required=True),
                mode=dict(type="raw", default="0440"),
            )),
            restrict_unassigned=dict(type="bool", default=True),
            nvidia_smi_path=dict(nvidia_smi.NVIDIA_SMI_PATH_SPEC),
            proc_devices=dict(type="path", default="/proc/devices"),
            mig_minors=dict(type="path", default="/proc/driver/nvidia-caps/mig-minors"),
            capabilities_dir=dict(type="path", default="/proc/driver/nvidia/capabilities"),
            nvidia_params=dict(type="path", default="/proc/driver/nvidia/params"),
            dev_dir=dict(type="path", default="/dev"),
            timeout=dict(type="int", default=120),
        ),
        supports_check_mode=True,
    )
    params = module.params
    access = [dict((k, v) for k, v in entry.items() if v is not None) for entry in params["access"]]
    try:
        entries, warnings = md.normalize_access(access, "access")
    except md.DeviceAccessError as exc:
        module.fail_json(msg=str(exc))
    smi = nvidia_smi.NvidiaSmi(module, binary=params["nvidia_smi_path"], timeout=params["timeout"])

    def run(args):
        res = smi.run(args)
        return (res.rc if res.rc is not None else 127), (res.stdout or "") + (res.stderr or "")

    config = {"access": entries, "restrict_unassigned": params["restrict_unassigned"],
              "proc_devices": params["proc_devices"], "mig_minors": params["mig_minors"],
              "capabilities_dir": params["capabilities_dir"], "nvidia_params": params["nvidia_params"],
              "dev_dir": params["dev_dir"]}
    try:
        result = md.run_all(config, run, check=module.check_mode)
    except md.DeviceAccessError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(**oserror.fail_args(exc, params["dev_dir"], "change the device nodes under"))
    for warning in warnings + result.pop("warnings"):
        module.warn(warning)
    diff = result.pop("diff")
    if module._diff:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
