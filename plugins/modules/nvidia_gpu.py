#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu
short_description: Declare NVIDIA GPU power, clock, persistence, compute and ECC settings idempotently
version_added: 0.1.0
description:
  - Reads the current settings of every GPU in one C(nvidia-smi --query-gpu) call, compares them
    with the requested ones per GPU, runs C(nvidia-smi) only for what differs (GPUs that need the
    same change share one C(nvidia-smi -i a,b,c) call), then reads the state back and fails when
    it does not match.
  - Returns per-GPU C(before)/C(after) and the list of changes; in diff mode the same is shown as
    a diff. In check mode nothing is changed and the changes that would be made are reported.
  - "Every requested value is checked against each selected GPU's own limits (power.min_limit and
    power.max_limit, the supported application-clock pairs, the maximum graphics clock) B(before any
    GPU is touched): one bad value for one GPU means no GPU is changed, and the message names the
    option, the value and the allowed range."
  - Settings the GPU or driver does not support (application clocks on R590+, application-clock
    permissions on R510+, power limits on DGX Spark's GB10, the auto-boost default on data-centre
    GPUs) are reported in RV(unsupported) with the reason, and cause a warning or a failure
    according to O(on_unsupported). They are never silently skipped.
  - Persistence mode set here uses the legacy C(nvidia-smi -pm) flag, which current drivers mark
    deprecated in favour of the C(nvidia-persistenced) daemon; the M(dgxops.fleet.gpu_tuning) role
    configures the daemon where it is installed and uses this option only where it is not.
  - Changing a setting needs root. Reading and check mode do not.
  - GPU settings other than ECC are lost at reboot or driver reload. RV(reapply) returns the
    C(nvidia-smi) commands that restore the declared state, which the C(gpu_tuning) role writes
    into a boot-time systemd unit.
options:
  gpus:
    description:
      - GPUs to manage. C(all), or a list of indexes, UUIDs (C(GPU-...)) or PCI bus ids
        (C(00000000:07:00.0), C(07:00.0)). An unknown selector is an error.
    type: list
    elements: str
    default: [all]
  persistence_mode:
    description: Desired persistence mode (C(nvidia-smi -pm)).
    type: bool
  power_limit_watts:
    description:
      - Desired power limit in watts (C(nvidia-smi -pl)). Must lie within the GPU's
        power.min_limit and power.max_limit. Mutually exclusive with O(power_limit_percent).
    type: float
  power_limit_percent:
    description:
      - Desired power limit as a percentage (0 < p <= 100) of each GPU's default or maximum limit
        (O(power_limit_percent_of)), rounded to whole watts.
    type: float
  power_limit_percent_of:
    description: What O(power_limit_percent) is a percentage of.
    type: str
    choices: [default, max]
    default: default
  application_clocks:
    description:
      - Desired application clocks, a dictionary with C(memory_mhz) and C(graphics_mhz) that must be
        one of the GPU's supported pairs (C(nvidia-smi -q -d SUPPORTED_CLOCKS)), or the string
        C(default) to reset them (C(-rac)) when they differ from the GPU's defaults.
      - Deprecated by NVIDIA from driver R590; there it is reported as unsupported. Use O(locked_clocks).
    type: raw
  locked_clocks:
    description:
      - Lock the graphics clock to a range, a dictionary with C(min_mhz) and C(max_mhz)
        (C(nvidia-smi -lgc min,max)), or the string C(reset) (C(-rgc)).
      - No nvidia-smi field reports locked clocks, so the module records what it locked in
        O(locked_clocks_record), keyed by the kernel boot id (locks are lost at reboot). A GPU with
        no record for the current boot is treated as not locked as requested and is locked again.
    type: raw
  locked_clocks_record:
    description: Where the module records the clocks it locked (on a tmpfs, so it goes with a reboot).
    type: path
    default: /run/dgxops/nvidia_gpu_locked_clocks.json
  auto_boost_default:
    description: Desired default auto-boost policy (C(--auto-boost-default)). Not supported on data-centre GPUs since Volta.
    type: bool
  compute_mode:
    description: Desired compute mode (C(nvidia-smi -c)). C(EXCLUSIVE_THREAD) is deprecated and refused.
    type: str
    choices: [DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED]
  ecc_mode:
    description:
      - Desired ECC mode (C(nvidia-smi -e)). The change is B(pending until the GPU is reset or the
        node reboots); the module compares with the pending mode, reports RV(pending) and sets
        RV(reboot_required).
    type: bool
  application_clock_permissions:
    description:
      - C(unrestricted) is what the old C(nvidia-smi -acp 0) did. The option was removed from
        nvidia-smi in the R5xx drivers (and could never be read back), so it is always reported as
        unsupported with the reason; it exists so that old playbooks get a clear answer.
    type: str
    choices: [restricted, unrestricted]
  on_unsupported:
    description: What to do when a requested setting is not supported on a GPU or driver.
    type: str
    choices: [warn, fail]
    default: warn
  variable_prefix:
    description:
      - Prefix for option names in messages, so that a role's variable is named (the
        C(gpu_tuning) role passes C(gpu_tuning_)).
    type: str
    default: ''
  timeout:
    description: Seconds each nvidia-smi call may take.
    type: int
    default: 60
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.nvidia_smi
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Only ever exercised against the project's simulated nvidia-smi in tests; on real hardware it
    runs the documented nvidia-smi setters.
  - The guide's C(nvidia-smi -acp 0) and C(-pm 1) are outdated; see O(application_clock_permissions)
    and O(persistence_mode).
seealso:
  - name: nvidia-smi documentation
    description: NVIDIA System Management Interface.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Cap all GPUs at 300 W with persistence on
  dgxops.fleet.nvidia_gpu:
    persistence_mode: true
    power_limit_watts: 300
  become: true

- name: Run GPUs 0 and 1 at 90 percent of their default power limit, exclusive-process
  dgxops.fleet.nvidia_gpu:
    gpus: ["0", "1"]
    power_limit_percent: 90
    compute_mode: EXCLUSIVE_PROCESS
  become: true

- name: Set application clocks on an A100 (R5xx drivers before R590)
  dgxops.fleet.nvidia_gpu:
    application_clocks:
      memory_mhz: 1593
      graphics_mhz: 1410
  become: true

- name: Lock the graphics clock of one GPU by UUID
  dgxops.fleet.nvidia_gpu:
    gpus: [GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af]
    locked_clocks:
      min_mhz: 1980
      max_mhz: 1980
  become: true

- name: Report what would change, without changing anything
  dgxops.fleet.nvidia_gpu:
    power_limit_watts: 300
  check_mode: true
  diff: true
  register: gpu_plan
"""

RETURN = r"""
gpus:
  description: One entry per selected GPU.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
    uuid:
      description: GPU UUID.
      type: str
    pci_bus_id:
      description: PCI bus id.
      type: str
    before:
      description: Managed settings as read before any change.
      type: dict
    after:
      description: Settings read back after the changes (in check mode, the predicted state).
      type: dict
    target:
      description: The resolved desired values (for example the watts a percentage came to).
      type: dict
    changes:
      description: Changes made (or, in check mode, that would be made), with C(setting), C(before), C(after), C(args).
      type: list
      elements: dict
  sample:
    - index: 0
      uuid: GPU-8e100991-ce97-6694-b8eb-b8b1ff5053af
      pci_bus_id: "00000000:07:00.0"
      before: {power_limit_w: 400.0, persistence_mode: false}
      after: {power_limit_w: 300.0, persistence_mode: true}
      target: {power_limit_w: 300.0, persistence_mode: true}
      changes:
        - {setting: power_limit_w, before: 400.0, after: 300.0, args: ["-pl", "300"]}
changes:
  description: Number of per-GPU setting changes made (or that would be made in check mode).
  returned: always
  type: int
  sample: 16
changed_gpus:
  description: Number of GPUs with at least one change.
  returned: always
  type: int
  sample: 8
unsupported:
  description: Requested settings that a GPU or driver does not support, with the reason.
  returned: always
  type: list
  elements: dict
  sample:
    - {index: 0, uuid: GPU-..., setting: application_clock_permissions,
       reason: "nvidia-smi -acp was removed in the R5xx drivers ..."}
pending:
  description: Settings that take effect only after a GPU reset or reboot (ECC mode).
  returned: always
  type: list
  elements: str
reboot_required:
  description: True when a setting is pending until the GPUs are reset or the node reboots.
  returned: always
  type: bool
driver_version:
  description: Driver version reported by nvidia-smi.
  returned: always
  type: str
reapply:
  description:
    - The nvidia-smi argument lists that restore the declared volatile settings (everything but
      ECC) after a reboot, in apply order, and the read-back that proves them
      (C(query_fields) and the expected C(csv,noheader,nounits) C(expected_rows)).
  returned: always
  type: dict
check_mode:
  description:
    - True when the module ran in check mode and changed nothing (however check mode was set,
      C(--check), or C(check_mode) on a play, block or task).
  returned: always
  type: bool
commands:
  description: Every nvidia-smi call made, with argv, rc and duration.
  returned: always
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_gpu_state as S
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi
from ansible_collections.dgxops.fleet.plugins.module_utils import oserror
from ansible_collections.dgxops.fleet.plugins.module_utils.nvidia_smi import NvidiaSmi


def _fail_smi(module, res, msg, **extra):
    error = res.error or {}
    module.fail_json(msg="%s: %s%s" % (msg, error.get("message") or "nvidia-smi failed",
                                       (" Fix: %s" % error["fix"]) if error.get("fix") else ""),
                     rc=res.rc, stdout=res.stdout, stderr=res.stderr, cmd=res.argv,
                     reason=error.get("code"), **extra)


def read_state(module, smi):
    """One --query-gpu call; drops fields an old driver does not know and asks again."""
    fields = list(S.STATE_FIELDS)
    dropped = []
    for _attempt in range(3):
        res = smi.run(["--query-gpu=" + ",".join(fields), "--format=csv"])
        if res.rc == 2:
            bad = [f for f in P.invalid_query_fields(res.stdout + res.stderr) if f in fields and f not in ("index", "uuid")]
            if bad:
                fields = [f for f in fields if f not in bad]
                dropped.extend(bad)
                continue
        break
    if not res.ok:
        _fail_smi(module, res, "cannot read the GPU state")
    gpus, errors = P.gpus_from_query(res.stdout, fields, header=True)
    if errors:
        module.fail_json(msg="cannot parse nvidia-smi --query-gpu output: %s" % "; ".join(errors),
                         rc=res.rc, stdout=res.stdout, stderr=res.stderr, cmd=res.argv)
    for gpu in gpus:
        for field in dropped:
            key = P.QUERY_FIELDS.get(field, (field.replace(".", "_"),))[0]
            gpu[key] = None
            gpu["unavailable"][key] = "field_unknown_to_driver"
    return [S.current_settings(g) for g in gpus]


def read_clock_details(module, smi, gpus):
    res = smi.run(["-q", "-d", "CLOCK,SUPPORTED_CLOCKS"])
    if not res.ok:
        _fail_smi(module, res, "cannot read the supported clocks")
    details = P.clock_details_from_query_text(res.stdout)
    by_bus = {}
    for bus, item in details.items():
        by_bus[S._bus_key(bus)] = item
    supported, boost = {}, {}
    for gpu in gpus:
        item = by_bus.get(S._bus_key(gpu["pci_bus_id"]))
        if item is None:
            continue
        if item["supported"]:
            supported[gpu["uuid"]] = item["supported"]
        boost[gpu["uuid"]] = item["auto_boost_default"]
    return supported, boost


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type="list", elements="str", default=["all"]),
            persistence_mode=dict(type="bool"),
            power_limit_watts=dict(type="float"),
            power_limit_percent=dict(type="float"),
            power_limit_percent_of=dict(type="str", choices=["default", "max"], default="default"),
            application_clocks=dict(type="raw"),
            locked_clocks=dict(type="raw"),
            locked_clocks_record=dict(type="path", default="/run/dgxops/nvidia_gpu_locked_clocks.json"),
            auto_boost_default=dict(type="bool"),
            compute_mode=dict(type="str", choices=["DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED"]),
            ecc_mode=dict(type="bool"),
            application_clock_permissions=dict(type="str", choices=["restricted", "unrestricted"]),
            on_unsupported=dict(type="str", choices=["warn", "fail"], default="warn"),
            variable_prefix=dict(type="str", default=""),
            timeout=dict(type="int", default=60),
            nvidia_smi_path=dict(nvidia_smi.NVIDIA_SMI_PATH_SPEC),
        ),
        mutually_exclusive=[("power_limit_watts", "power_limit_percent")],
        supports_check_mode=True,
    )
    params = module.params
    prefix = params["variable_prefix"] or ""

    desired, errors = S.check_options(params, prefix=prefix)
    if errors:
        module.fail_json(msg="invalid options, nothing was changed:\n- " + "\n- ".join(errors), errors=errors)

    smi = NvidiaSmi(module, binary=params["nvidia_smi_path"], timeout=params["timeout"])

    def commands():
        return [r.record() for r in smi.history]

    current = read_state(module, smi)
    if not current:
        module.fail_json(msg="nvidia-smi reports no GPUs", commands=commands())
    driver = next((g.get("driver_version") for g in current if g.get("driver_version")), None)
    selected, errors = S.select_gpus(current, params["gpus"], prefix=prefix)
    if errors:
        module.fail_json(msg="invalid GPU selection, nothing was changed:\n- " + "\n- ".join(errors),
                         errors=errors, commands=commands())
    # driver_version is not part of current_settings; read it from the first parsed row instead.
    branch = P.driver_branch(driver)

    supported, boost = {}, {}
    needs_details = (isinstance(desired.get("application_clocks"), dict)
                     or isinstance(desired.get("locked_clocks"), dict)
                     or "auto_boost_default" in desired)
    if needs_details:
        supported, boost = read_clock_details(module, smi, selected)
    record_path = params["locked_clocks_record"]
    locked_record = S.load_locked_record(record_path) if "locked_clocks" in desired else {}

    planned = S.plan(selected, desired, branch=branch, supported_clocks=supported,
                     locked_record=locked_record, auto_boost=boost, prefix=prefix)
    if planned["errors"]:
        module.fail_json(msg="requested values are outside the GPUs' limits, no GPU was changed:\n- "
                         + "\n- ".join(planned["errors"]), errors=planned["errors"],
                         unsupported=planned["unsupported"], commands=commands())

    n_changes = S.count_changes(planned)
    before_views = {}
    for gpu in selected:
        before_views[gpu["uuid"]] = S.settings_view(
            gpu, locked=locked_record.get(gpu["uuid"]) if "locked_clocks" in desired else None,
            auto_boost=boost.get(gpu["uuid"]) if "auto_boost_default" in desired else None)

    setter_unsupported = []
    after_views = {}
    if n_changes and not module.check_mode:
        if os.geteuid() != 0:
            module.fail_json(
                msg="changing GPU settings needs root: run the task with become: true "
                    "(%d change(s) pending on %d GPU(s); nothing was changed)"
                    % (n_changes, len([g for g in planned["gpus"] if g["changes"]])),
                changes=n_changes, commands=commands())
        new_record = dict(locked_record)
        for setting, args, uuids in S.group_commands(planned):
            res = smi.run(["-i", ",".join(uuids)] + args)
            problem = S.setter_problems(res.rc, res.stdout, res.stderr)
            if problem is None and res.error is None:
                if setting == "locked_clocks":
                    for uuid in uuids:
                        entry = next(e for e in planned["gpus"] if e["uuid"] == uuid)
                        new_record[uuid] = entry["target"]["locked_clocks"]
                    try:
                        S.save_locked_record(record_path, new_record)
                    except (IOError, OSError) as exc:
                        fail = oserror.fail_args(exc, record_path)
                        fail["msg"] += " (the locked clocks are set; only their record for the boot unit is missing)"
                        module.fail_json(changed=True, commands=commands(), **fail)
                continue
            kind = (problem or {}).get("kind")
            if kind == "not_supported":
                for uuid in uuids:
                    entry = next(e for e in planned["gpus"] if e["uuid"] == uuid)
                    item = {"index": entry["index"], "uuid": uuid, "setting": setting,
                            "reason": "nvidia-smi refused: %s" % problem["text"]}
                    setter_unsupported.append(item)
                    entry["unsupported"].append(item)
                    entry["changes"] = [c for c in entry["changes"] if c["setting"] != setting]
                    entry["target"].pop(setting, None)
                continue
            what = "permission denied (run with become: true)" if kind == "permission" else "nvidia-smi refused the change"
            module.fail_json(
                msg="%s while setting %s on %s: %s" % (
                    what, setting, ", ".join(uuids), (problem or {}).get("text") or (res.error or {}).get("message")),
                rc=res.rc, stdout=res.stdout, stderr=res.stderr, cmd=res.argv, commands=commands(),
                changed=True)
        after = read_state(module, smi)
        by_uuid = dict((g["uuid"], g) for g in after)
        if needs_details:
            supported, boost = read_clock_details(module, smi, selected)
        locked_now = S.load_locked_record(record_path) if "locked_clocks" in desired else {}
        problems = S.verify(planned, by_uuid, locked_record=locked_now, auto_boost=boost)
        if problems:
            module.fail_json(msg="GPU state does not match after applying:\n- " + "\n- ".join(problems),
                             errors=problems, commands=commands(), changed=True)
        for entry in planned["gpus"]:
            gpu = by_uuid[entry["uuid"]]
            after_views[entry["uuid"]] = S.settings_view(
                gpu, locked=locked_now.get(entry["uuid"]) if "locked_clocks" in desired else None,
                auto_boost=boost.get(entry["uuid"]) if "auto_boost_default" in desired else None)
    else:
        for entry in planned["gpus"]:
            after_views[entry["uuid"]] = S.simulate_after(before_views[entry["uuid"]], entry)

    unsupported = planned["unsupported"] + setter_unsupported
    pending = []
    results = []
    for entry in planned["gpus"]:
        for text in entry["pending"]:
            pending.append("GPU %s (%s): %s" % (entry["index"], entry["pci_bus_id"], text))
        results.append({
            "index": entry["index"], "uuid": entry["uuid"], "pci_bus_id": entry["pci_bus_id"],
            "name": entry["name"], "before": before_views[entry["uuid"]], "after": after_views[entry["uuid"]],
            "target": entry["target"], "changes": entry["changes"], "unsupported": entry["unsupported"],
        })
    n_changes = S.count_changes(planned)
    result = dict(
        changed=n_changes > 0, changes=n_changes, changed_gpus=len([r for r in results if r["changes"]]),
        gpus=results, unsupported=unsupported,
        pending=pending, reboot_required=bool(pending), driver_version=driver,
        reapply=S.reapply_plan(planned), commands=commands(), check_mode=module.check_mode,
    )
    if module._diff:
        changed_entries = [r for r in results if r["changes"]]
        result["diff"] = {
            "before_header": "GPU settings before", "after_header": "GPU settings after",
            "before": S.diff_text(changed_entries, "before") if changed_entries else "",
            "after": S.diff_text(changed_entries, "after") if changed_entries else "",
        }
    if unsupported:
        lines = ["GPU %s: %s not supported: %s" % (u["index"], u["setting"], u["reason"]) for u in unsupported]
        # one line per distinct (setting, reason) keeps eight identical GPUs readable
        seen, short = set(), []
        for u in unsupported:
            key = (u["setting"], u["reason"])
            if key in seen:
                continue
            seen.add(key)
            gpus_with = [str(x["index"]) for x in unsupported if (x["setting"], x["reason"]) == key]
            short.append("%s%s on GPU %s: %s" % (prefix, S.OPTION_OF.get(u["setting"], u["setting"]),
                                                 ",".join(gpus_with), u["reason"]))
        if params["on_unsupported"] == "fail":
            result["msg"] = "unsupported settings requested:\n- " + "\n- ".join(short)
            result["unsupported_detail"] = lines
            module.fail_json(**result)
        for line in short:
            module.warn("unsupported: %s" % line)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
