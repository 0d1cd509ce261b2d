#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: block_devices
short_description: Read the block devices, TRIM timer and udev state the storage_tuning role needs, in one task
version_added: 0.2.0
description:
  - The host-side preflight of the C(dgxops.fleet.storage_tuning) role (its C(preflight.yml)) as one
    read-only task. Nothing on the host is changed.
  - Finds the entries of C(<sysfs_root>/block) each pattern of O(devices) matches, refuses a device
    that two patterns match, reads each matching device's C(queue/scheduler), C(queue/nr_requests),
    C(queue/read_ahead_kb) and C(mq/0/nr_tags), and returns the plan the role applies (RV(plan)).
  - Refuses, before any change, a scheduler on a device without C(queue/scheduler), an C(nr_requests)
    above what the device accepts (its queue depth with scheduler C(none), C(MAX_SCHED_RQ) otherwise;
    with O(nr_requests_policy=clamp) it is lowered to the limit instead, with a warning), and a
    C(read_ahead_kb) that is not a whole number of pages. The checks run in that order; the first one
    that refuses stops the module, which reports every device it refuses.
  - With O(trim_strategy) other than C(none), looks up the TRIM timer (C(systemctl show)); with
    C(fstrim_timer) a timer that is not loaded is refused, and whether the host is a container is
    read (C(systemd-detect-virt --container)). Reads the udev version (C(udevadm --version)) and
    whether udevd's control socket exists.
  - The messages name the role's variables; notes and warnings are returned in RV(notes), and with
    O(warn_notes) also shown as warnings. A refusal fails the module with every refused device in
    C(msg) and in RV(refusals); RV(notes) then holds the notes of the checks made before it.
options:
  warn_notes:
    description:
      - Also show every note as an Ansible warning, the refusal's included (what the role does,
        instead of a task that prints RV(notes)).
    type: bool
    default: false
  devices:
    description:
      - The role's normalized block device rules (C(block_devices) of the
        M(dgxops.fleet.validate) action's C(normalized) result for the C(storage_tuning) area).
    type: list
    elements: dict
    default: []
    suboptions:
      position:
        description: Index of the rule in C(storage_tuning_block_devices).
        type: int
        required: true
      pattern:
        description: The udev KERNEL glob, as written.
        type: str
        required: true
      regex:
        description: The anchored regular expression equivalent to O(devices[].pattern).
        type: str
        required: true
      alternatives:
        description: The alternatives of the glob (not used; accepted as the validator returns it).
        type: list
        elements: str
      scheduler:
        description: The I/O scheduler wanted, or null.
        type: str
      nr_requests:
        description: The nr_requests wanted, or null.
        type: int
      read_ahead_kb:
        description: The read_ahead_kb wanted, or null.
        type: int
  nr_requests_policy:
    description: What to do when nr_requests exceeds a device's limit, refuse (V(fail)) or lower it (V(clamp)).
    type: str
    choices: [fail, clamp]
    default: fail
  max_sched_requests:
    description: The kernel's nr_requests limit with an I/O scheduler (C(MAX_SCHED_RQ)).
    type: int
    default: 2048
  sysfs_root:
    description: Where sysfs is mounted; tests point it at a fake tree.
    type: path
    default: /sys
  trim_strategy:
    description: The role's TRIM strategy; V(none) skips the timer look-up.
    type: str
    choices: [fstrim_timer, discard, none]
    default: none
  fstrim_timer:
    description: The systemd timer unit that runs fstrim.
    type: str
    default: fstrim.timer
  mounts:
    description: Whether the role edits any fstab entry (the warning about discard and the timer together needs one).
    type: bool
    default: false
  udev_rule_path:
    description: The role's udev rule, named in the warning when udevadm is missing.
    type: str
    default: /etc/udev/rules.d/90-dgxops-storage-tuning.rules
  udev_control:
    description: udevd's control socket; it exists while udevd runs.
    type: path
    default: /run/udev/control
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
    details: The module only reads.
  diff_mode:
    support: none
notes:
  - Devices are listed by name in C(<sysfs_root>/block) (whole disks; partitions live below their disk).
  - A sysfs file that is missing or unreadable counts as absent.
seealso:
  - module: dgxops.fleet.validate
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Read the host state the storage settings need, and refuse what it cannot take
  dgxops.fleet.block_devices:
    devices:
      - position: 0
        pattern: "nvme[0-9]*n[0-9]*"
        regex: "^(?:nvme[0-9].*n[0-9].*)$"
        scheduler: none
        nr_requests: null
        read_ahead_kb: 256
    trim_strategy: fstrim_timer
  register: storage_host

- name: Print the notes and warnings
  ansible.builtin.debug:
    msg: "{{ item }}"
  loop: "{{ storage_host.notes }}"
"""

RETURN = r"""
plan:
  description: One item per matching device (rule order, devices sorted by name within a rule).
  returned: always
  type: list
  elements: dict
  contains:
    device:
      description: Device name in C(<sysfs_root>/block).
      type: str
    position:
      description: Index of the rule that matches it.
      type: int
    pattern:
      description: The rule's pattern.
      type: str
    scheduler_file:
      description: Whether C(queue/scheduler) exists.
      type: bool
    scheduler_current:
      description: The scheduler in use (C('') when none can be read).
      type: str
    schedulers_available:
      description: The schedulers C(queue/scheduler) lists.
      type: list
      elements: str
    scheduler:
      description: The scheduler wanted, or null.
      type: str
    scheduler_after:
      description: The scheduler once the settings are applied.
      type: str
    nr_requests_file:
      description: Whether C(queue/nr_requests) exists.
      type: bool
    nr_requests_current:
      description: Its value, or null.
      type: int
    nr_requests_requested:
      description: The nr_requests asked for, or null.
      type: int
    nr_requests_limit:
      description: The limit with RV(plan[].scheduler_after), null when unknown.
      type: int
    nr_requests:
      description: The nr_requests to write (clamped with O(nr_requests_policy=clamp)), or null.
      type: int
    nr_tags:
      description: The queue depth (C(mq/0/nr_tags)), or null.
      type: int
    read_ahead_file:
      description: Whether C(queue/read_ahead_kb) exists.
      type: bool
    read_ahead_kb_current:
      description: Its value, or null.
      type: int
    read_ahead_kb:
      description: The read_ahead_kb wanted, or null.
      type: int
  sample:
    - device: nvme0n1
      position: 0
      pattern: "nvme[0-9]*n[0-9]*"
      scheduler_file: true
      scheduler_current: mq-deadline
      schedulers_available: [mq-deadline, kyber, bfq, none]
      scheduler: none
      scheduler_after: none
      nr_requests_file: true
      nr_requests_current: 256
      nr_requests_requested: null
      nr_requests_limit: 1023
      nr_requests: null
      nr_tags: 1023
      read_ahead_file: true
      read_ahead_kb_current: 128
      read_ahead_kb: 256
notes:
  description: Notes (patterns that match no device) and C(WARNING storage_tuning:) lines, in the order the checks ran.
  returned: always
  type: list
  elements: str
refusals:
  description: The refusals, one per device or per check (also joined in C(msg)); empty unless the module failed.
  returned: always
  type: list
  elements: str
fstrim_unit:
  description: The C(LoadState=), C(UnitFileState=) and C(ActiveState=) lines of O(fstrim_timer); empty when not looked up.
  returned: always
  type: list
  elements: str
fstrim_timer_ready:
  description:
    - Whether O(fstrim_timer) is loaded, enabled and active (in a container only loaded and enabled,
      since util-linux's timer never becomes active there), so the role has nothing to do for it.
    - Always false unless O(trim_strategy=fstrim_timer).
  returned: always
  type: bool
in_container:
  description: Whether C(systemd-detect-virt --container) says the host is a container (only read with O(trim_strategy=fstrim_timer)).
  returned: always
  type: bool
udev_version:
  description: The udev version (C(udevadm --version)), 0 when udevadm is missing.
  returned: always
  type: int
udevadm_found:
  description: Whether C(udevadm --version) ran.
  returned: always
  type: bool
udevd_running:
  description: Whether O(udev_control) exists.
  returned: always
  type: bool
page_kb:
  description: The host's page size in KiB.
  returned: always
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import block_devices as bd

ENV = {"LC_ALL": "C"}


def _run(module, argv):
    """(rc, stdout with its final newline stripped, the command module's msg or None)."""
    try:
        rc, out, _err = module.run_command(argv, environ_update=ENV, handle_exceptions=False)
    except OSError:
        return None, "", "Error executing command."
    return rc, out.rstrip("\r\n"), "The command exited with a non-zero return code." if rc != 0 else None


def main():
    rule = dict(position=dict(type="int", required=True), pattern=dict(type="str", required=True),
                regex=dict(type="str", required=True), alternatives=dict(type="list", elements="str"),
                scheduler=dict(type="str"), nr_requests=dict(type="int"), read_ahead_kb=dict(type="int"))
    module = AnsibleModule(
        argument_spec=dict(
            devices=dict(type="list", elements="dict", options=rule, default=[]),
            nr_requests_policy=dict(type="str", choices=["fail", "clamp"], default="fail"),
            max_sched_requests=dict(type="int", default=2048),
            sysfs_root=dict(type="path", default="/sys"),
            trim_strategy=dict(type="str", choices=["fstrim_timer", "discard", "none"], default="none"),
            fstrim_timer=dict(type="str", default="fstrim.timer"),
            mounts=dict(type="bool", default=False),
            udev_rule_path=dict(type="str", default="/etc/udev/rules.d/90-dgxops-storage-tuning.rules"),
            udev_control=dict(type="path", default="/run/udev/control"),
            warn_notes=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    timer = p["fstrim_timer"]
    result = dict(changed=False, plan=[], notes=[], refusals=[], fstrim_unit=[], fstrim_timer_ready=False, in_container=False,
                  udev_version=0, udevadm_found=False, udevd_running=False,
                  page_kb=os.sysconf("SC_PAGESIZE") // 1024)

    def warn_notes():
        if p["warn_notes"]:
            for note in result["notes"]:
                module.warn(note[len("WARNING "):] if note.startswith("WARNING ") else note)

    def refuse(refusals):
        result["refusals"] = refusals
        warn_notes()
        module.fail_json(msg="\n".join(refusals), **result)

    # TRIM: the timer, and whether its ConditionVirtualization=!container keeps it inactive
    if p["trim_strategy"] != "none":
        rc, out, msg = _run(module, ["systemctl", "show", "--property=LoadState", "--property=UnitFileState",
                                     "--property=ActiveState", timer])
        result["fstrim_unit"] = out.splitlines()
        if p["trim_strategy"] == "fstrim_timer":
            result["in_container"] = _run(module, ["systemd-detect-virt", "--container"])[0] == 0
            refusal = bd.fstrim_refusal(timer, result["fstrim_unit"], msg or "no systemctl")
            if refusal:
                refuse([refusal])
            result["fstrim_timer_ready"] = bd.fstrim_ready(result["fstrim_unit"], result["in_container"])
        elif p["mounts"] and "UnitFileState=enabled" in result["fstrim_unit"]:
            result["notes"].append(bd.discard_warning(timer))

    # udev: udevadm verify needs systemd 254; the reload handler needs udevd
    rc, out, _msg = _run(module, ["udevadm", "--version"])
    result["udevadm_found"] = rc == 0
    result["udev_version"] = bd.udev_version(out) if rc == 0 else 0
    result["udevd_running"] = os.path.lexists(p["udev_control"])
    if p["devices"] and rc != 0:
        result["notes"].append(bd.udev_missing_warning(p["udev_rule_path"]))

    plan, notes, refusals = bd.check_block_devices(p["devices"], p["sysfs_root"], p["nr_requests_policy"],
                                                   p["max_sched_requests"], result["page_kb"])
    result["plan"] = plan
    result["notes"].extend(notes)
    if refusals:
        refuse(refusals)
    warn_notes()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
