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
  nvidia_smi:
    description: The nvidia-smi executable (name looked up on PATH, or a path).
    type: str
    default: nvidia-smi
  timeout:
    description: Seconds after which one nvidia-smi call is abandoned (needs coreutils C(timeout)).
    type: int
    default: 120
extends_documentation_fragment:
  - dgxops.fleet.attributes
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

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_layout as ml
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as nsp

# GPU families whose MIG mode is stored in the InfoROM and survives a reboot (Ampere).
PERSISTENT_MIG_FAMILIES = ("a100", "a800", "a30")
GPU_FIELDS = ("index", "uuid", "name", "pci.bus_id", "mig.mode.current", "mig.mode.pending")
APP_FIELDS = ("gpu_uuid", "pid", "process_name")
_EMPTY_MIG = ("No GPU instances found", "No compute instances found",
              nsp.MIG_NOT_ENABLED)


class SmiError(Exception):
    def __init__(self, msg, cmd, rc, stdout, stderr):
        Exception.__init__(self, msg)
        self.msg = msg
        self.cmd = cmd
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr


class Smi(object):
    """nvidia-smi through the shared command layer (module_utils/nvidia_smi.py: argv lists,
    C locale, coreutils timeout, exit-code classification) plus the MIG "nothing here"
    answers, which are not errors for this module."""

    def __init__(self, module, binary, timeout):
        self.smi = nvidia_smi.NvidiaSmi(module, binary=binary, timeout=timeout)
        self.commands = []

    def run(self, args, mutating=False, allow_empty=False):
        if mutating:
            self.commands.append([self.smi.binary] + list(args))
        res = self.smi.run(args)
        if res.ok:
            return res.stdout
        if allow_empty and any(m in (res.stdout or "") for m in _EMPTY_MIG):
            return ""
        err = res.error or {}
        raise SmiError("%s failed: %s%s" % (
            " ".join(["nvidia-smi"] + list(args)), err.get("message", "rc %s" % res.rc),
            (". Fix: %s" % err["fix"]) if err.get("fix") and err.get("code") not in ("other_error",) else ""),
            res.argv, res.rc, res.stdout, res.stderr)


def read_gpus(smi):
    out = smi.run(["--query-gpu=%s" % ",".join(GPU_FIELDS), "--format=csv,noheader"])
    gpus = []
    for line in out.splitlines():
        if not line.strip():
            continue
        cells = nsp.split_csv_row(line)
        if len(cells) != len(GPU_FIELDS) or not cells[0].isdigit():
            raise SmiError("unexpected nvidia-smi --query-gpu row %r" % line, [], 0, out, "")
        current, _r = nsp.parse_mode(cells[4])
        pending, _r = nsp.parse_mode(cells[5])
        gpus.append({"index": int(cells[0]), "uuid": cells[1], "name": cells[2],
                     "pci_bus_id": cells[3], "mig_mode_current": current,
                     "mig_mode_pending": pending})
    return gpus


def read_processes(smi, gpus):
    out = smi.run(["--query-compute-apps=%s" % ",".join(APP_FIELDS), "--format=csv,noheader"])
    by_uuid = dict((g["uuid"], g["index"]) for g in gpus)
    procs = {}
    for line in out.splitlines():
        if not line.strip() or line.startswith("No running"):
            continue
        cells = nsp.split_csv_row(line, len(APP_FIELDS), 2)
        if len(cells) < 3:
            continue
        idx = by_uuid.get(cells[0])
        if idx is None:
            continue
        procs.setdefault(idx, []).append({"pid": int(cells[1]) if cells[1].isdigit() else cells[1],
                                          "name": cells[2]})
    return procs


def read_tables(smi):
    """Profile and placement rows of every GPU whose tables nvidia-smi shows now."""
    lgip = smi.run(["mig", "-lgip"], allow_empty=True)
    lgipp = smi.run(["mig", "-lgipp"], allow_empty=True)
    return nsp.parse_mig_lgip(lgip), nsp.parse_mig_lgipp(lgipp)


def read_instances(smi):
    lgi = smi.run(["mig", "-lgi"], allow_empty=True)
    lci = smi.run(["mig", "-lci"], allow_empty=True)
    return nsp.parse_mig_lgi(lgi), nsp.parse_mig_lci(lci)


def ci_profile_ids(smi, index, gi_id):
    """``{ci profile name: id}`` offered by one GI (``-lcip``)."""
    out = smi.run(["mig", "-i", str(index), "-lcip", "-gi", str(gi_id)], allow_empty=True)
    return {row["name"]: row["id"] for row in nsp.parse_mig_lcip(out) if row["gi_id"] == gi_id}


def persistent_mig(gpu):
    return nsp.model_family(gpu["name"]) in PERSISTENT_MIG_FAMILIES


def view(gpu, instances, table=None):
    """The per-GPU view returned and diffed."""
    mig = gpu["mig_mode_current"] == "Enabled"
    rows = []
    for gi in instances:
        rows.append({"profile": gi.get("profile") or gi.get("name"),
                     "profile_id": gi["profile_id"], "start": gi["start"], "size": gi["size"],
                     "compute_instances": list(gi["compute_instances"]) if "compute_instances" in gi
                     else ["%dc" % n for n in gi["cis"]]})
        if "gi_id" in gi:
            rows[-1]["gpu_instance_id"] = gi["gi_id"]
            rows[-1]["compute_instance_profile_ids"] = list(gi.get("ci_profile_ids", []))
    rows.sort(key=lambda r: r["start"])
    return {"mig": "enabled" if mig else "disabled",
            "pending": gpu["mig_mode_pending"],
            "instances": ml.layout_summary(rows) if mig else []}, rows


class Runner(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        binary = self.params["nvidia_smi"]
        path = binary if os.path.sep in binary else module.get_bin_path(binary)
        if not path:
            module.fail_json(msg="nvidia_smi: %r was not found on PATH; allowed: the name or path of "
                                 "the nvidia-smi executable" % binary)
        self.smi = Smi(module, path, self.params["timeout"])
        self.actions = []
        self.changed = False
        self.warnings = []

    def fail(self, msg, exc=None, **extra):
        result = dict(extra)
        result.update(actions=self.actions, commands=self.smi.commands, changed=self.changed)
        if exc is not None:
            result.update(rc=exc.rc, stdout=exc.stdout, stderr=exc.stderr, cmd=exc.cmd)
        self.module.fail_json(msg=msg, **result)

    # ------------------------------------------------------------------ plan
    def plan(self):
        try:
            entries = ml.normalize_layout(self.params["layout"])
        except ml.LayoutError as exc:
            self.fail(str(exc))
        try:
            self.gpus = read_gpus(self.smi)
            self.procs = read_processes(self.smi, self.gpus)
            lgip, lgipp = read_tables(self.smi)
            any_mig = any(g["mig_mode_current"] == "Enabled" for g in self.gpus)
            lgi, lci = read_instances(self.smi) if any_mig else ([], [])
        except SmiError as exc:
            self.fail(exc.msg, exc)
        if not self.gpus:
            self.fail("nvidia-smi lists no GPUs on this node")
        try:
            self.chosen = ml.select_gpus(entries, self.gpus)
        except ml.LayoutError as exc:
            self.fail(str(exc))
        self.lgi, self.lci = lgi, lci
        plans = {}
        errors = []
        for gpu in self.gpus:
            idx = gpu["index"]
            if idx not in self.chosen:
                continue
            entry = self.chosen[idx]
            label = "GPU %d (%s)" % (idx, gpu["name"])
            if gpu["mig_mode_current"] is None:
                errors.append("%s: MIG is not supported (mig.mode.current is not available); "
                              "allowed: a layout with mig: false only on GPUs that support MIG, or "
                              "leave this GPU out of the layout" % label)
                continue
            current = ml.current_instances(lgi, lci, idx)
            p = {"gpu": gpu, "entry": entry, "current": current, "table": None, "plan": None,
                 "label": label, "busy": self.procs.get(idx, []), "pos": self._entry_pos(entry)}
            if entry["mig"]:
                table = ml.profile_table(lgip, lgipp, idx)
                if not table and gpu["mig_mode_current"] == "Enabled":
                    errors.append("%s: nvidia-smi mig -lgip lists no profiles for this GPU" % label)
                    continue
                if table:
                    p["table"] = table
                    try:
                        want = ml.desired_instances(
                            table, entry["instances"],
                            "%s: layout[%d].instances" % (label, p["pos"]))
                        # a GPU whose mode changes has no instances to keep
                        cur = current if gpu["mig_mode_current"] == "Enabled" else []
                        p["want"] = want
                        p["plan"] = ml.plan_gpu(table, want, cur, label)
                    except ml.LayoutError as exc:
                        errors.append(str(exc))
                        continue
            plans[idx] = p
        if errors:
            self.fail("the MIG layout cannot be applied; nothing was changed:\n- " + "\n- ".join(errors),
                      errors=errors)
        self.plans = plans
        self._guard_busy()

    def _entry_pos(self, entry):
        for pos, e in enumerate(ml.normalize_layout(self.params["layout"])):
            if e == entry:
                return pos
        return 0

    def _guard_busy(self):
        refusals = []
        for idx, p in sorted(self.plans.items()):
            if not p["busy"]:
                continue
            destroys = self._destructive_steps(p)
            if destroys and not self.params["force"]:
                refusals.append("%s has running compute processes (%s); refusing to %s. Stop the "
                                "workloads first or set force=true" % (
                                    p["label"], ", ".join("pid %s %s" % (q["pid"], q["name"])
                                                          for q in p["busy"]),
                                    "; ".join(destroys)))
        if refusals:
            self.fail("busy GPUs; nothing was changed:\n- " + "\n- ".join(refusals), errors=refusals)

    def _destructive_steps(self, p):
        gpu, entry = p["gpu"], p["entry"]
        steps = []
        enabled = gpu["mig_mode_current"] == "Enabled"
        if not entry["mig"]:
            if p["current"]:
                steps.append("destroy its instances %s" % ", ".join(ml.layout_summary(
                    [{"name": g["name"], "start": g["start"], "cis": g["cis"]} for g in p["current"]])))
            if enabled:
                steps.append("disable MIG mode")
        else:
            if not enabled:
                steps.append("enable MIG mode")
            elif p["plan"]:
                gone = p["plan"]["destroy"] + [gi for gi, _c in p["plan"]["recreate_cis"]]
                if gone:
                    steps.append("destroy instances %s" % ", ".join(ml.layout_summary(
                        [{"name": g["name"], "start": g["start"], "cis": g["cis"]} for g in gone])))
        return steps

    # ------------------------------------------------------------------ apply
    def apply(self):
        """Phases: mode changes (all GPUs), late validation, instance changes, one read-back."""
        check = self.module.check_mode
        try:
            self._mode_phase(check)
            for idx, p in sorted(self.plans.items()):
                p.setdefault("reboot_required", False)
                if p["entry"]["mig"] and not p["reboot_required"]:
                    self._instances_phase(idx, p, check)
            if not check:
                self._verify()
        except SmiError as exc:
            self.fail(exc.msg, exc)

    def _note(self, text):
        self.actions.append(text)
        self.changed = True

    def _mode_phase(self, check):
        smi = self.smi
        enable, disable, cancel = [], [], []
        for idx, p in sorted(self.plans.items()):
            gpu, entry = p["gpu"], p["entry"]
            enabled = gpu["mig_mode_current"] == "Enabled"
            if not entry["mig"]:
                if p["current"]:
                    self._note("GPU %d: destroy all MIG instances (%s)" % (idx, ", ".join(ml.layout_summary(
                        [{"name": g["name"], "start": g["start"], "cis": g["cis"]} for g in p["current"]]))))
                    if not check:
                        self._destroy(idx, p["current"])
                if enabled or gpu["mig_mode_pending"] == "Enabled":
                    self._note("GPU %d: disable MIG mode" % idx)
                    disable.append(idx)
            elif not enabled:
                self._note("GPU %d: enable MIG mode" % idx)
                enable.append(idx)
            elif gpu["mig_mode_pending"] == "Disabled":
                self._note("GPU %d: cancel the pending MIG disable" % idx)
                cancel.append(idx)
        if check:
            return
        for ids, value in ((disable, "0"), (enable + cancel, "1")):
            if ids:
                smi.run(["-i", ",".join(str(i) for i in ids), "-mig", value], mutating=True)
        if not (enable or disable):
            return
        want = dict((i, "Disabled") for i in disable)
        want.update((i, "Enabled") for i in enable)
        now = dict((g["index"], g) for g in read_gpus(smi))
        pending = [i for i in sorted(want) if now[i]["mig_mode_current"] != want[i]]
        for idx in pending:
            busy = self.procs.get(idx)
            if self.params["allow_reset"] and not busy:
                self._note("GPU %d: reset the GPU so the pending MIG mode takes effect" % idx)
                try:
                    smi.run(["-r", "-i", str(idx)], mutating=True)
                except SmiError as exc:
                    self.warnings.append("GPU %d: the GPU reset failed (%s)" % (idx, exc.msg))
        if pending:
            now = dict((g["index"], g) for g in read_gpus(smi))
        late = []
        for idx in sorted(want):
            p = self.plans[idx]
            gpu = now[idx]
            p["gpu"] = gpu
            if gpu["mig_mode_current"] != want[idx]:
                p["reboot_required"] = True
                busy = self.procs.get(idx)
                self.warnings.append(
                    "GPU %d (%s): MIG mode %s is pending (%s). Reboot the node, or stop the GPU's clients "
                    "and reset it, then run again to create the instances"
                    % (idx, gpu["name"], want[idx].lower(),
                       "the GPU has running processes" if busy else
                       "allow_reset is false" if not self.params["allow_reset"] else
                       "the GPU reset did not apply it"))
                continue
            if want[idx] == "Enabled":
                if not persistent_mig(gpu):
                    self.warnings.append(
                        "GPU %d (%s): MIG mode took effect at once but is lost when the driver reloads or "
                        "the node reboots; re-apply the layout at boot (the dgxops.fleet.mig role installs "
                        "a unit for it)" % (idx, gpu["name"]))
                if p["plan"] is None:
                    late.append(idx)
        if late:
            # tables were unavailable while MIG was off (drivers before R550): validate now,
            # before any instance exists on these GPUs.
            lgip, lgipp = read_tables(smi)
            errors = []
            for idx in late:
                p = self.plans[idx]
                table = ml.profile_table(lgip, lgipp, idx)
                try:
                    if not table:
                        raise ml.LayoutError("%s: nvidia-smi mig -lgip lists no profiles" % p["label"])
                    p["table"] = table
                    p["want"] = ml.desired_instances(table, p["entry"]["instances"],
                                                     "%s: layout[%d].instances" % (p["label"], p["pos"]))
                    p["plan"] = ml.plan_gpu(table, p["want"], [], p["label"])
                except ml.LayoutError as exc:
                    errors.append(str(exc))
            if errors:
                restored = self._restore_mode(late)
                self.fail("MIG mode was enabled only to read this driver's MIG profile table, and the layout "
                          "cannot be placed; no instance was created and MIG mode was %s:\n- "
                          % restored + "\n- ".join(errors), errors=errors)

    def _restore_mode(self, indexes):
        """Put MIG mode back to Disabled on ``indexes`` (enabled by this run only to read the tables)."""
        smi = self.smi
        ids = ",".join(str(i) for i in indexes)
        self._note("GPU %s: disable MIG mode again (the layout was refused)" % ids)
        try:
            smi.run(["-i", ids, "-mig", "0"], mutating=True)
            now = dict((g["index"], g) for g in read_gpus(smi))
            pending = [i for i in indexes if now[i]["mig_mode_current"] != "Disabled"]
            for idx in pending:
                if self.params["allow_reset"] and not self.procs.get(idx):
                    self._note("GPU %d: reset the GPU so MIG mode is disabled again" % idx)
                    smi.run(["-r", "-i", str(idx)], mutating=True)
            if pending:
                now = dict((g["index"], g) for g in read_gpus(smi))
        except SmiError as exc:
            return "NOT restored (%s; disable it with nvidia-smi -i %s -mig 0 and reset the GPU)" % (exc.msg, ids)
        left = [i for i in indexes if now[i]["mig_mode_current"] != "Disabled"]
        if left:
            return ("set back to Disabled but is still pending on GPU(s) %s: reboot the node or reset them"
                    % ", ".join(str(i) for i in left))
        return "restored to Disabled on GPU(s) %s" % ids

    def _instances_phase(self, idx, p, check):
        plan = p["plan"]
        if plan is None:
            if check:
                self.actions.append(
                    "GPU %d: validate and create %s once MIG mode is enabled (this driver lists the MIG "
                    "profiles only on MIG-enabled GPUs)" % (idx, ", ".join(
                        "%d x %s" % (i["count"], i["profile"]) for i in p["entry"]["instances"]) or "no instances"))
            return
        if not plan["destroy"] and not plan["create"] and not plan["recreate_cis"]:
            return
        self._note_plan(idx, p)
        if check:
            return
        si = str(idx)
        if plan["destroy"]:
            self._destroy(idx, plan["destroy"])
        if plan["recreate_cis"]:
            with_cis = [gi for gi, _c in plan["recreate_cis"] if gi["ci_ids"]]
            if with_cis:
                self.smi.run(["mig", "-i", si, "-gi", ",".join(str(g["gi_id"]) for g in with_cis), "-dci"],
                             mutating=True)
            for gi, cis in plan["recreate_cis"]:
                self._create_cis(idx, gi["gi_id"], p["table"], gi["profile_id"], cis)
        self._create(idx, p)
        p["applied"] = True

    def _note_plan(self, idx, p):
        plan = p["plan"]
        for gi in plan["destroy"]:
            self.actions.append("GPU %d: destroy %s (GPU instance %d) at slice %d"
                                % (idx, gi["name"], gi["gi_id"], gi["start"]))
        for gi, cis in plan["recreate_cis"]:
            self.actions.append("GPU %d: replace the compute instances of %s (GPU instance %d) with %s"
                                % (idx, gi["name"], gi["gi_id"], ", ".join("%dc" % n for n in cis)))
        for c in plan["create"]:
            self.actions.append("GPU %d: create %s at slice %d with compute instances %s"
                                % (idx, c["name"], c["start"], ", ".join("%dc" % n for n in c["cis"])))
        if plan["destroy"] or plan["create"] or plan["recreate_cis"]:
            self.changed = True

    def _destroy(self, idx, gis):
        si = str(idx)
        ids = ",".join(str(g["gi_id"]) for g in gis)
        if any(g["ci_ids"] for g in gis):
            with_cis = ",".join(str(g["gi_id"]) for g in gis if g["ci_ids"])
            self.smi.run(["mig", "-i", si, "-gi", with_cis, "-dci"], mutating=True)
        self.smi.run(["mig", "-i", si, "-gi", ids, "-dgi"], mutating=True)

    def _create(self, idx, p):
        plan, table = p["plan"], p["table"]
        si = str(idx)
        full = [c for c in plan["create"] if ml.full_ci(table, c["profile_id"], c["cis"])]
        custom = [c for c in plan["create"] if not ml.full_ci(table, c["profile_id"], c["cis"])]
        if full:
            spec = ",".join("%d:%d" % (c["profile_id"], c["start"]) for c in full)
            self.smi.run(["mig", "-i", si, "-cgi", spec, "-C"], mutating=True)
        for c in custom:
            self.smi.run(["mig", "-i", si, "-cgi", "%d:%d" % (c["profile_id"], c["start"])], mutating=True)
            lgi, _lci = read_instances(self.smi)
            gi_id = None
            for row in lgi:
                if row["gpu"] == idx and row["placement_start"] == c["start"] and row["profile_id"] == c["profile_id"]:
                    gi_id = row["instance_id"]
            if gi_id is None:
                raise SmiError("the GPU instance %s created at slice %d is not listed by -lgi"
                               % (c["name"], c["start"]), [], 0, "", "")
            self._create_cis(idx, gi_id, table, c["profile_id"], c["cis"])

    def _create_cis(self, idx, gi_id, table, pid, cis):
        si = str(idx)
        if ml.full_ci(table, pid, cis):
            names = [table[pid]["name"]]
        else:
            names = [table[pid]["name"] if n == table[pid]["slices"] else "%dc.%s" % (n, table[pid]["name"])
                     for n in cis]
        offered = ci_profile_ids(self.smi, idx, gi_id)
        ids = []
        for name in names:
            if name in offered:
                ids.append(offered[name])
            else:
                slices = ml.gi_slices(name) if "c." not in name else int(name.split("c.")[0])
                ids.append(ml.CI_PROFILE_BY_SLICES[slices])
        self.smi.run(["mig", "-i", si, "-gi", str(gi_id), "-cci", ",".join(str(i) for i in ids)],
                     mutating=True)

    def _verify(self):
        applied = [idx for idx, p in sorted(self.plans.items()) if p.get("applied")]
        if not applied:
            return
        lgi, lci = read_instances(self.smi)
        wrong = []
        for idx in applied:
            p = self.plans[idx]
            now = ml.current_instances(lgi, lci, idx)
            got = sorted((g["profile_id"], g["start"], g["cis"]) for g in now)
            want = sorted((a["profile_id"], a["start"], tuple(int(x[:-1]) for x in a["compute_instances"]))
                          for a in p["plan"]["after"])
            if got != want:
                wrong.append("GPU %d has %s but the layout wants %s" % (
                    idx, ml.layout_summary([{"name": g["name"], "start": g["start"], "cis": g["cis"]}
                                            for g in now]) or "no instances",
                    ml.layout_summary(p["plan"]["after"])))
        if wrong:
            self.fail("the MIG layout was not applied as planned:\n- " + "\n- ".join(wrong), errors=wrong)

    # ------------------------------------------------------------------ result
    def result(self):
        check = self.module.check_mode
        if not check and self.changed:
            try:
                gpus_now = dict((g["index"], g) for g in read_gpus(self.smi))
                lgi, lci = read_instances(self.smi)
            except SmiError as exc:
                self.fail(exc.msg, exc)
        else:
            gpus_now = dict((g["index"], g) for g in self.gpus)
            lgi, lci = self.lgi, self.lci
        out_gpus = []
        before, after = {}, {}
        reboot = []
        devices = 0
        for gpu in self.gpus:
            idx = gpu["index"]
            p = self.plans.get(idx)
            now = gpus_now.get(idx, gpu)
            current = ml.current_instances(lgi, lci, idx) if now["mig_mode_current"] == "Enabled" else []
            b_view, _rows = view(gpu, p["current"] if p else current)
            if p and check:
                # planned state
                planned = dict(now)
                if p["entry"]["mig"]:
                    planned["mig_mode_current"] = planned["mig_mode_pending"] = "Enabled"
                    rows = p["plan"]["after"] if p["plan"] else []
                else:
                    planned["mig_mode_current"] = planned["mig_mode_pending"] = "Disabled"
                    rows = []
                a_view, a_rows = view(planned, rows)
                now = planned
            else:
                a_view, a_rows = view(now, current)
            if p and p.get("reboot_required"):
                reboot.append(idx)
            if now["mig_mode_current"] == "Enabled":
                devices += sum(len(r["compute_instances"]) for r in a_rows)
            if p:
                key = "GPU %d" % idx
                before[key] = b_view
                after[key] = a_view
            out_gpus.append({
                "index": idx, "uuid": gpu["uuid"], "name": gpu["name"], "managed": p is not None,
                "mig_mode_current": now["mig_mode_current"], "mig_mode_pending": now["mig_mode_pending"],
                "mig_mode_persistent": persistent_mig(gpu),
                "reboot_required": idx in reboot,
                "processes": self.procs.get(idx, []),
                "instances": a_rows,
            })
        for w in self.warnings:
            self.module.warn(w)
        result = {"changed": self.changed, "gpus": out_gpus, "actions": self.actions,
                  "commands": self.smi.commands, "reboot_required": bool(reboot),
                  "reboot_required_gpus": reboot, "mig_devices": devices}
        if self.module._diff:
            result["diff"] = {"before": before, "after": after}
        return result


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
            nvidia_smi=dict(type="str", default="nvidia-smi"),
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
