#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_smi_facts
short_description: Gather NVIDIA GPU facts from nvidia-smi or NVML
version_added: 0.1.0
description:
  - Returns C(ansible_facts.nvidia_smi) with the driver, CUDA and NVML versions, the kernel
    module flavour (open or proprietary), one record per GPU, and summaries roles decide from
    (C(gpu_count), C(model_family), C(nvswitch), C(mig_capable), C(unified_memory)).
  - The default subset costs one C(nvidia-smi --query-gpu) process (plus a C(--version) call only
    where C(libcuda.so.1) cannot be loaded to read the CUDA version). Topology, MIG profiles,
    clocks, health counters and processes are collected only when asked for with O(gather_subset).
  - When nvidia-ml-py (C(pynvml)) is importable on the node and O(backend=auto), NVML is used
    instead of nvidia-smi for the C(gpus), C(clocks) and C(health) subsets; if NVML cannot
    initialise, the module falls back to nvidia-smi so the error reported is nvidia-smi's.
  - Never fails because the GPUs are unhealthy (driver not loaded, GPU lost, no GPUs, hang) unless
    O(require_gpus=true). It returns what it could read and C(health) with the reason, the exit
    code and a fix.
  - Every nvidia-smi call runs with an argv list, C(LC_ALL=C) and a timeout (coreutils
    C(timeout -k 5 N) wraps the call because C(run_command) has no timeout of its own).
  - Values nvidia-smi reports as unavailable (C([N/A]), C([Not Supported]), C([Unknown Error]),
    C([Requested functionality has been deprecated]), empty cells) become null, and the reason is
    kept in each GPU's C(unavailable) dictionary.
options:
  gather_subset:
    description:
      - What to collect. C(min) (always) reads only files (C(/proc/driver/nvidia/version),
        C(/proc/modules), NVSwitch PCI devices) and starts no process.
      - C(gpus) (the default) adds per-GPU identity, memory, persistence, power limits, compute,
        ECC and MIG modes, fabric state and the driver's recovery action in one C(--query-gpu) call.
      - C(clocks) adds application, default application and max clocks; C(health) adds uncorrected
        ECC errors, row remapping, temperature and P-state. Both join the same single query.
      - C(topology) runs C(nvidia-smi topo -m) (link matrix, NVLink count per GPU pair, CPU and
        NUMA affinity). C(mig) runs C(mig -lgip)/C(-lgipp), and C(mig -lgi) plus C(-L) when MIG is
        enabled. C(versions) runs C(nvidia-smi --version). C(processes) lists compute processes.
      - C(all) selects everything; C(!name) removes a subset; C(default) means C(gpus).
    type: list
    elements: str
    default: [default]
  backend:
    description:
      - C(auto) uses NVML through nvidia-ml-py when importable, else nvidia-smi.
      - C(nvml) prefers NVML (falls back to nvidia-smi with a warning when it is not importable).
      - C(nvidia-smi) never uses NVML.
      - Topology, MIG tables, versions and processes always come from nvidia-smi.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  timeout:
    description: Seconds each nvidia-smi call may take before it is killed (exit 124 is reported as C(timeout)).
    type: int
    default: 30
  require_gpus:
    description:
      - Fail the task when GPU facts could not be read or C(health.ok) is false (for example the driver
        is not loaded, a GPU is lost, no GPUs are found, or O(expected_gpu_count) does not match).
    type: bool
    default: false
  expected_gpu_count:
    description:
      - Number of GPUs this node must show. A different count is a health issue (a GPU fell off the
        bus or was excluded) and fails the task when O(require_gpus=true).
    type: int
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.nvidia_smi
  - dgxops.fleet.attributes.facts
attributes:
  check_mode:
    support: full
    details: Only reads; the result is the same in check mode.
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - Queries only; the module never changes GPU state.
  - C(memory_total_mib) is null on unified-memory GPUs (DGX Spark GB10), where nvidia-smi reports C([N/A]).
  - C(mig_capable) is true when every GPU reports a MIG mode (Enabled or Disabled); GPUs without MIG report C([N/A]).
  - C(nvswitch) is true when NVSwitch PCI devices or C(/proc/driver/nvidia-nvswitch/devices) entries are
    visible (C(nvswitch_source=pci|proc)), or when a GPU reports a completed NVSwitch fabric registration
    (C(nvswitch_source=gpu_fabric_state), for example in a VM whose switches the host manages).
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Gather the common GPU facts (one nvidia-smi call)
  dgxops.fleet.nvidia_smi_facts:

- name: Gather everything and fail unless all eight GPUs are healthy
  dgxops.fleet.nvidia_smi_facts:
    gather_subset: [all]
    require_gpus: true
    expected_gpu_count: 8

- name: Only MIG profiles and the topology on top of the defaults
  dgxops.fleet.nvidia_smi_facts:
    gather_subset: [default, mig, topology]

- name: Use the facts
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_smi.gpu_count }} x {{ ansible_facts.nvidia_smi.model_family }}, driver {{ ansible_facts.nvidia_smi.driver_version }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: complex
  contains:
    nvidia_smi:
      description: GPU facts; keys listed in docs/facts.md and docs/development.md ("Facts contract").
      returned: always
      type: complex
      contains:
        gpu_count:
          description: Number of GPUs nvidia-smi (or NVML) reports; 0 when it failed.
          type: int
          sample: 8
        driver_version:
          description: Driver version, from nvidia-smi/NVML or else C(/proc/driver/nvidia/version).
          type: str
          sample: "580.159.04"
        driver_branch:
          description: First component of the driver version.
          type: int
          sample: 580
        cuda_version:
          description: Highest CUDA version the driver supports.
          type: str
          sample: "13.0"
        cuda_version_source:
          description: Where the CUDA version came from (C(nvml), C(libcuda), C(nvidia-smi --version)).
          type: str
          sample: libcuda
        nvml_version:
          description: NVML version (NVML backend or the C(versions) subset), else null.
          type: str
          sample: "13.580.159.04"
        kernel_module_flavour:
          description: C(open) or C(proprietary) from C(/proc/driver/nvidia/version); null when not loaded.
          type: str
          sample: open
        kernel_module_version:
          description: Version of the loaded kernel module.
          type: str
          sample: "580.159.04"
        kernel_module_loaded:
          description: Whether the nvidia kernel module is loaded.
          type: bool
        model_family:
          description: Family of the first GPU (a100, h100, h200, gb10, l40s, geforce, ...), null if unknown.
          type: str
          sample: h200
        model_families:
          description: All families present, in GPU order.
          type: list
          elements: str
        nvswitch:
          description: Whether the GPUs are connected through NVSwitches (see notes).
          type: bool
        nvswitch_count:
          description: NVSwitch devices visible to this OS.
          type: int
        nvswitch_source:
          description: How C(nvswitch) was decided (C(pci), C(proc), C(gpu_fabric_state)) or null.
          type: str
        fabric_attached:
          description: Whether any GPU reports a completed NVSwitch fabric registration.
          type: bool
        mig_capable:
          description: Whether every GPU supports MIG.
          type: bool
        mig_enabled:
          description: Whether MIG is currently enabled on any GPU.
          type: bool
        unified_memory:
          description: Whether a GPU uses system memory (no dedicated framebuffer).
          type: bool
        gpus:
          description:
            - One record per GPU with C(index), C(uuid), C(name), C(pci_bus_id), C(memory_total_mib),
              C(persistence_mode), C(power_limit_w), C(power_enforced_limit_w), C(power_default_limit_w),
              C(power_min_limit_w), C(power_max_limit_w), C(compute_mode), C(compute_capability),
              C(ecc_mode_current), C(ecc_mode_pending), C(mig_mode_current), C(mig_mode_pending),
              C(mig_capable), C(fabric_state), C(recovery_action), C(model_family), C(unified_memory) and
              C(unavailable) (key to reason for every null value).
            - With C(clocks), C(clocks_*_mhz); with C(health), C(ecc_errors_uncorrected_volatile),
              C(remapped_rows_pending), C(remapped_rows_failure), C(temperature_c), C(pstate); with
              C(topology), C(cpu_affinity), C(numa_node), C(nvlink_peers); with C(mig), C(mig_profiles),
              C(mig_placements), C(mig_instances), C(mig_devices).
          type: list
          elements: dict
        topology:
          description: With C(topology), the link C(matrix), C(nvlink_pairs), C(cpu_affinity), C(numa_affinity), C(gpu_numa_id), C(nics).
          type: dict
          returned: when topology is gathered
        processes:
          description: With C(processes), compute processes (gpu_uuid, pid, process_name, used_gpu_memory_mib).
          type: list
          returned: when processes are gathered
        health:
          description:
            - C(ok), C(reason), C(rc) (the contract), plus C(code) (for example C(driver_not_loaded), C(gpu_lost),
              C(no_devices), C(timeout), C(not_installed), C(gpu_issues)), C(fix), C(issues) and C(warnings).
          type: dict
          sample: {"ok": false, "code": "driver_not_loaded", "rc": 9, "reason": "the NVIDIA driver is not loaded (exit 9)",
                   "fix": "Load it with modprobe nvidia ...", "issues": [], "warnings": []}
        collection:
          description: How the facts were collected (backend, subsets, each command with rc and milliseconds, total duration_ms, warnings).
          type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi as smi


def run_module(module, pynvml_module=None, cuda_probe=None):
    subsets, errors = smi.resolve_subsets(module.params["gather_subset"])
    if errors:
        module.fail_json(msg="; ".join(errors))
    if module.params["timeout"] is not None and module.params["timeout"] <= 0:
        module.fail_json(msg="timeout: invalid value %r; allowed: a positive number of seconds" % module.params["timeout"])
    expected = module.params["expected_gpu_count"]
    if expected is not None and expected < 0:
        module.fail_json(msg="expected_gpu_count: invalid value %r; allowed: an integer >= 0" % expected)
    facts = smi.gather(module, subsets, backend=module.params["backend"], timeout=module.params["timeout"],
                       binary=module.params["nvidia_smi_path"], pynvml_module=pynvml_module,
                       cuda_probe=cuda_probe, expected_gpu_count=expected)
    for warning in facts["collection"]["warnings"]:
        module.warn(warning)
    health = facts["health"]
    if module.params["require_gpus"] and (not health["ok"] or facts["gpu_count"] == 0):
        failure = facts["collection"].get("last_failure") or {}
        reason = health["reason"] or "no GPUs found"
        module.fail_json(msg="GPU facts required but unavailable: %s. Fix: %s" % (reason, health["fix"] or "see health"),
                         rc=failure.get("rc", health["rc"]), stdout=failure.get("stdout", ""),
                         stderr=failure.get("stderr", ""), ansible_facts={"nvidia_smi": facts})
    module.exit_json(changed=False, ansible_facts={"nvidia_smi": facts})


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gather_subset=dict(type="list", elements="str", default=["default"]),
            backend=dict(type="str", choices=["auto", "nvml", "nvidia-smi"], default="auto"),
            timeout=dict(type="int", default=30),
            nvidia_smi_path=dict(smi.NVIDIA_SMI_PATH_SPEC),
            require_gpus=dict(type="bool", default=False),
            expected_gpu_count=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
