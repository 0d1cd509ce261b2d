# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG device permissions: which ``/dev/nvidia-caps`` nodes (and whole-GPU ``/dev/nvidiaN``
nodes) a tenant's unix group may open, following the MIG instances that exist now.

How the driver does it (MIG user guide, "Device Nodes and Capabilities"; ``nv-caps.c``;
``nvidia-modprobe-utils.c``):

* A CUDA process on a MIG device needs read access to the capability device of its GPU instance
  (``gpuG/giI/access``) and of its compute instance (``gpuG/giI/ciC/access``), plus the usual
  ``/dev/nvidiaG``, ``/dev/nvidiactl`` and ``/dev/nvidia-uvm``. Root (CAP_SYS_ADMIN) always has
  every capability.
* The node of a capability is ``/dev/nvidia-caps/nvidia-cap<minor>``, character major
  ``nvidia-caps`` of ``/proc/devices`` (dynamic), minor from the static table
  ``/proc/driver/nvidia-caps/mig-minors``. ``gpuG`` is the GPU's device minor (``Minor Number``
  of ``nvidia-smi -q``), which is not always the nvidia-smi index.
* The driver cannot create these nodes itself; ``nvidia-modprobe -f
  /proc/driver/nvidia/capabilities/gpuG/mig/giI/access`` does (NVML and CUDA call it), with the
  capability's ``DeviceFileMode`` (0444 for instance access) and owner root:root, and it resets a
  node whose mode or owner differs unless the capability's ``DeviceFileModify`` is 0. Writing
  ``DeviceFileModify: 0`` to the capability's /proc file keeps a managed node as set.
  A new instance gets a new /proc entry with ``DeviceFileModify: 1`` (``NVreg_ModifyDeviceFiles``),
  which is why the grant has to be applied again whenever instances are (re)created: after the
  layout, and at boot.

This file is standard library only and imports nothing from Ansible: the ``mig`` role copies it,
with ``nvidia_smi_parse.py``, to the node for its boot-time unit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import re
import stat

try:
    from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as nsp
except ImportError:  # the boot-time copy next to nvidia_smi_parse.py
    import nvidia_smi_parse as nsp

NVIDIA_MAJOR = 195
CAPS_DEVICE_NAME = "nvidia-caps"
RESTRICTED = {"owner": 0, "group": 0, "mode": 0o400}
ENTRY_KEYS = ("name", "gpus", "profiles", "placements", "owner", "group", "mode")
DEFAULT_MODE = 0o440
_ACCOUNT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$")
_PROFILE = re.compile(r"^\d+g\.\d+gb(\+[a-z0-9.+-]+)?$")
_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,}$")
_OCTAL = re.compile(r"^0?[0-7]{1,3}$")
_MINORS_LINE = re.compile(r"^(\S+)\s+(\d+)\s*$")
_CAP_NAME = re.compile(r"^gpu(\d+)/gi(\d+)/(?:ci(\d+)/)?access$")
_MODIFY = re.compile(r"DeviceFileModify:\s*(\d+)")
_MODIFY_PARAM = re.compile(r"ModifyDeviceFiles:\s*(\d+)")
MIG_EMPTY = ("No MIG-enabled devices found", "No GPU instances found", "No compute instances found",
             "No MIG-supported devices found")


class DeviceAccessError(Exception):
    pass


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _err(where, value, allowed):
    return DeviceAccessError("%s: invalid value %r; allowed: %s" % (where, value, allowed))


# ---------------------------------------------------------------------------
# The variable (controller side and module side: same messages)
# ---------------------------------------------------------------------------

def normalize_selector(value, where):
    """``all``, an index, a ``GPU-`` UUID, ``"0-3"``, ``"0,2"`` or a list of those."""
    items = value if isinstance(value, list) else [value]
    allowed = "'all', a GPU index, a GPU UUID (GPU-...), a range such as '0-3' or a list of those"
    if not items or value is None:
        raise _err(where, value, allowed)
    out = []
    for item in items:
        if isinstance(item, str) and item.strip().lower() == "all":
            if len(items) > 1:
                raise _err(where, value, "'all' on its own")
            return "all"
        parts = [item] if _is_int(item) else ([p.strip() for p in item.split(",")] if isinstance(item, str) else [item])
        for part in parts:
            if _is_int(part) and part >= 0:
                out.append(part)
            elif isinstance(part, str) and part.isdigit():
                out.append(int(part))
            elif isinstance(part, str) and _RANGE.match(part) and \
                    int(_RANGE.match(part).group(1)) <= int(_RANGE.match(part).group(2)):
                low, high = _RANGE.match(part).groups()
                out.extend(range(int(low), int(high) + 1))
            elif isinstance(part, str) and _UUID.match(part):
                out.append(part)
            else:
                raise _err(where, part, allowed)
    seen = []
    for item in out:
        if item not in seen:
            seen.append(item)
    return seen


def normalize_mode(value, where):
    allowed = "an octal mode string such as '0440' (quote it in YAML)"
    if _is_int(value) and 0 <= value <= 0o777:
        return value
    if isinstance(value, str) and _OCTAL.match(value.strip()):
        return int(value.strip(), 8)
    raise _err(where, value, allowed)


def normalize_account(value, where, kind):
    if _is_int(value) and value >= 0:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, str) and _ACCOUNT.match(value):
        return value
    raise _err(where, value, "a %s name such as %s, or a numeric id" % (kind, "root" if kind == "user" else "tenant-a"))


def normalize_access(value, where="mig_device_access"):
    """Check the variable; return ``(entries, warnings)``. Raises DeviceAccessError."""
    if value is None:
        return [], []
    if not isinstance(value, list):
        raise _err(where, value, "a list of {gpus, group, owner, mode, profiles, placements, name} entries")
    entries = []
    warnings = []
    names = set()
    for pos, entry in enumerate(value):
        here = "%s[%d]" % (where, pos)
        if not isinstance(entry, dict):
            raise _err(here, entry, "a dictionary with at least gpus and group")
        unknown = sorted(set(entry) - set(ENTRY_KEYS))
        if unknown:
            raise _err(here, ", ".join(unknown), "keys " + ", ".join(ENTRY_KEYS))
        name = entry.get("name")
        if name is None:
            name = "entry %d" % pos
        elif not isinstance(name, str) or not name.strip() or "\n" in name:
            raise _err(here + ".name", name, "a one-line label")
        if name in names:
            raise _err(here + ".name", name, "a name not used by another entry")
        names.add(name)
        if "gpus" not in entry:
            raise _err(here + ".gpus", None, "'all', a GPU index, a GPU UUID, a range such as '0-3' or a list of those")
        gpus = normalize_selector(entry.get("gpus"), here + ".gpus")
        if entry.get("group") is None:
            raise _err(here + ".group", None, "the unix group that gets the devices, e.g. tenant-a")
        group = normalize_account(entry.get("group"), here + ".group", "group")
        owner = normalize_account(entry.get("owner", "root"), here + ".owner", "user")
        mode = normalize_mode(entry.get("mode", DEFAULT_MODE), here + ".mode")
        if mode & 0o007:
            warnings.append("%s.mode %s gives every user access to these devices: the group %s gains "
                            "nothing over others (use e.g. 0440)" % (here, oct(mode)[-3:].rjust(4, "0"), group))
        if not mode & 0o040:
            warnings.append("%s.mode %s gives the group %s no read access: its processes cannot use the "
                            "devices (use e.g. 0440)" % (here, "0" + oct(mode)[2:].rjust(3, "0"), group))
        profiles = entry.get("profiles")
        if profiles is not None:
            if not isinstance(profiles, list) or not profiles or not all(
                    isinstance(p, str) and _PROFILE.match(p.strip().lower()) for p in profiles):
                raise _err(here + ".profiles", profiles, "a non-empty list of GPU instance profile names such as [1g.10gb, 3g.40gb]")
            profiles = [p.strip().lower() for p in profiles]
        placements = entry.get("placements")
        if placements is not None:
            if not isinstance(placements, list) or not placements or not all(
                    _is_int(p) and 0 <= p <= 7 for p in placements):
                raise _err(here + ".placements", placements, "a non-empty list of placement start slices 0-7, e.g. [0, 4]")
        entries.append({"name": name, "gpus": gpus, "profiles": profiles, "placements": placements,
                        "owner": owner, "group": group, "mode": mode})
    return entries, warnings


# ---------------------------------------------------------------------------
# The driver's tables
# ---------------------------------------------------------------------------

def parse_proc_devices(text):
    """``/proc/devices`` -> {character device name: major} (the way nvidia-modprobe reads it)."""
    out = {}
    in_chr = False
    for line in (text or "").splitlines():
        if line.strip() == "Character devices:":
            in_chr = True
            continue
        if in_chr and not line.strip():
            break
        if in_chr:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit():
                out[parts[1]] = int(parts[0])
    return out


def parse_mig_minors(text):
    """``/proc/driver/nvidia-caps/mig-minors`` -> {"gpu0/gi1/access": 12, ...}."""
    out = {}
    for line in (text or "").splitlines():
        match = _MINORS_LINE.match(line.strip())
        if match:
            out[match.group(1)] = int(match.group(2))
    return out


def gpu_minors_from_query(text):
    """``nvidia-smi -q`` -> {pci bus id (upper case): device minor}."""
    tree = nsp.parse_query_text(text)
    out = {}
    for key, node in tree.items():
        if key.startswith("GPU ") and isinstance(node, dict):
            minor = node.get("Minor Number")
            if isinstance(minor, str) and minor.strip().isdigit():
                out[key[4:].strip().upper()] = int(minor)
    return out


def node_view(query_csv, q_text, lgi_text, lci_text):
    """GPUs with their device minor and MIG instances, from nvidia-smi output.

    ``query_csv``: ``--query-gpu=index,uuid,pci.bus_id,mig.mode.current --format=csv,noheader``.
    """
    minors = gpu_minors_from_query(q_text)
    gis = nsp.parse_mig_lgi(lgi_text)
    cis = nsp.parse_mig_lci(lci_text)
    gpus = []
    for line in (query_csv or "").splitlines():
        cells = nsp.split_csv_row(line)
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        index = int(cells[0])
        mode, _reason = nsp.parse_mode(cells[3])
        instances = []
        for gi in gis:
            if gi["gpu"] != index:
                continue
            instances.append({"gi": gi["instance_id"], "profile": gi["name"].lower(),
                              "start": gi["placement_start"],
                              "cis": sorted(ci["ci_id"] for ci in cis
                                            if ci["gpu"] == index and ci["gi_id"] == gi["instance_id"])})
        gpus.append({"index": index, "uuid": cells[1], "bus_id": cells[2].upper(),
                     "minor": minors.get(cells[2].upper()),
                     "mig": mode == "Enabled", "instances": sorted(instances, key=lambda i: i["gi"])})
    return {"gpus": gpus}


def gather(run):
    """Read the node through ``run(args) -> (rc, stdout)`` (nvidia-smi arguments only)."""
    rc, query = run(["--query-gpu=index,uuid,pci.bus_id,mig.mode.current", "--format=csv,noheader"])
    if rc != 0:
        raise DeviceAccessError("nvidia-smi --query-gpu failed (rc %s): %s" % (rc, " ".join(query.split())[:300]))
    rc, q_text = run(["-q"])
    if rc != 0:
        raise DeviceAccessError("nvidia-smi -q failed (rc %s): %s" % (rc, " ".join(q_text.split())[:300]))
    lgi = lci = ""
    if "Enabled" in query:
        rc, lgi = run(["mig", "-lgi"])
        if rc != 0 and not any(m in lgi for m in MIG_EMPTY):
            raise DeviceAccessError("nvidia-smi mig -lgi failed (rc %s): %s" % (rc, " ".join(lgi.split())[:300]))
        rc, lci = run(["mig", "-lci"])
        if rc != 0 and not any(m in lci for m in MIG_EMPTY):
            raise DeviceAccessError("nvidia-smi mig -lci failed (rc %s): %s" % (rc, " ".join(lci.split())[:300]))
    return node_view(query, q_text, lgi, lci)


# ---------------------------------------------------------------------------
# Plan: which node gets which owner, group and mode
# ---------------------------------------------------------------------------

def _resolve_gpus(entry, gpus, where):
    indexes = [g["index"] for g in gpus]
    if entry["gpus"] == "all":
        return list(indexes)
    by_uuid = dict((g["uuid"].lower(), g["index"]) for g in gpus)
    out = []
    for item in entry["gpus"]:
        if _is_int(item):
            if item not in indexes:
                raise _err(where + ".gpus", item, "GPU indexes of this node: %s" % (
                    ", ".join(str(i) for i in indexes) or "none"))
            out.append(item)
        else:
            idx = by_uuid.get(item.lower())
            if idx is None:
                raise _err(where + ".gpus", item, "GPU UUIDs of this node: %s" % (", ".join(sorted(by_uuid)) or "none"))
            out.append(idx)
    return out


def _account_id(value, kind, where):
    if _is_int(value):
        return value
    try:
        return (pwd.getpwnam(value).pw_uid if kind == "user" else grp.getgrnam(value).gr_gid)
    except KeyError:
        raise _err(where, value, "a %s that exists on this node (create it first) or a numeric id" % kind)


def plan(entries, view, minors, caps_major, dev_dir="/dev", capabilities_dir="/proc/driver/nvidia/capabilities",
         restrict_unassigned=True, existing_caps=None, variable="mig_device_access"):
    """Desired state of every managed node.

    Returns ``(nodes, warnings)``; ``nodes`` maps a path to ``{major, minor, uid, gid, mode,
    kind ('mig' | 'gpu'), gpu, gi, ci, cap, proc, entry}``. ``existing_caps``: minors of the
    nvidia-cap nodes present in ``dev_dir/nvidia-caps`` (stale ones of managed GPUs are
    restricted). Raises DeviceAccessError on a conflict or an unknown GPU, group or user.
    """
    warnings = []
    gpus = dict((g["index"], g) for g in view["gpus"])
    caps_dir = os.path.join(dev_dir, "nvidia-caps")
    nodes = {}
    managed = set()

    def cap_node(gpu, gi, ci, spec, label):
        if gpu["minor"] is None:
            raise DeviceAccessError("GPU %d: its device minor is unknown (no 'Minor Number' in nvidia-smi -q)" % gpu["index"])
        name = "gpu%d/gi%d/%saccess" % (gpu["minor"], gi, "" if ci is None else "ci%d/" % ci)
        if name not in minors:
            raise DeviceAccessError("%s is not listed in the mig-minors table (%d entries); is this the driver's "
                                    "/proc/driver/nvidia-caps/mig-minors?" % (name, len(minors)))
        path = os.path.join(caps_dir, "nvidia-cap%d" % minors[name])
        proc = os.path.join(capabilities_dir, "gpu%d" % gpu["minor"], "mig", "gi%d" % gi,
                            *(["ci%d" % ci, "access"] if ci is not None else ["access"]))
        return path, {"major": caps_major, "minor": minors[name], "kind": "mig", "gpu": gpu["index"],
                      "gi": gi, "ci": ci, "cap": name, "proc": proc, "entry": label,
                      "uid": spec["uid"], "gid": spec["gid"], "mode": spec["mode"]}

    def claim(path, node):
        old = nodes.get(path)
        if old is not None and (old["uid"], old["gid"], old["mode"]) != (node["uid"], node["gid"], node["mode"]):
            raise DeviceAccessError("%s: %s (%s) is given to both %s and %s with different owner, "
                                    "group or mode; allowed: one grant per MIG instance or GPU"
                                    % (variable, path, node["cap"] or "GPU %d" % node["gpu"], old["entry"], node["entry"]))
        if old is None:
            nodes[path] = node

    for pos, entry in enumerate(entries):
        where = "%s[%d]" % (variable, pos)
        label = entry["name"]
        spec = {"uid": _account_id(entry["owner"], "user", where + ".owner"),
                "gid": _account_id(entry["group"], "group", where + ".group"), "mode": entry["mode"]}
        for idx in _resolve_gpus(entry, view["gpus"], where):
            gpu = gpus[idx]
            managed.add(idx)
            if not gpu["mig"]:
                if entry["profiles"] or entry["placements"]:
                    warnings.append("%s (%s): GPU %d has MIG disabled; profiles/placements select nothing there"
                                    % (where, label, idx))
                    continue
                if gpu["minor"] is None:
                    raise DeviceAccessError("GPU %d: its device minor is unknown (no 'Minor Number' in nvidia-smi -q)" % idx)
                claim(os.path.join(dev_dir, "nvidia%d" % gpu["minor"]),
                      {"major": NVIDIA_MAJOR, "minor": gpu["minor"], "kind": "gpu", "gpu": idx, "gi": None, "ci": None,
                       "cap": None, "proc": None, "entry": label, "uid": spec["uid"], "gid": spec["gid"],
                       "mode": spec["mode"]})
                continue
            chosen = [gi for gi in gpu["instances"]
                      if (not entry["profiles"] or gi["profile"] in entry["profiles"])
                      and (not entry["placements"] or gi["start"] in entry["placements"])]
            if not chosen:
                warnings.append("%s (%s): no MIG instance on GPU %d matches (instances: %s)" % (
                    where, label, idx, ", ".join("gi%d %s@%d" % (g["gi"], g["profile"], g["start"])
                                                 for g in gpu["instances"]) or "none"))
            for gi in chosen:
                claim(*cap_node(gpu, gi["gi"], None, spec, label))
                for ci in gi["cis"]:
                    claim(*cap_node(gpu, gi["gi"], ci, spec, label))

    if restrict_unassigned:
        root = dict(uid=RESTRICTED["owner"], gid=RESTRICTED["group"], mode=RESTRICTED["mode"])
        for idx in sorted(managed):
            gpu = gpus[idx]
            if not gpu["mig"]:
                continue
            for gi in gpu["instances"]:
                for ci in [None] + list(gi["cis"]):
                    path, node = cap_node(gpu, gi["gi"], ci, root, "unassigned")
                    if path not in nodes:
                        nodes[path] = node
        # nodes left behind by instances that no longer exist
        by_minor = dict((minor, name) for name, minor in minors.items())
        managed_minors = set(gpus[i]["minor"] for i in managed)
        for minor in sorted(existing_caps or ()):
            match = _CAP_NAME.match(by_minor.get(minor, ""))
            path = os.path.join(caps_dir, "nvidia-cap%d" % minor)
            if match and int(match.group(1)) in managed_minors and path not in nodes:
                gpu_index = [i for i in managed if gpus[i]["minor"] == int(match.group(1))][0]
                nodes[path] = {"major": caps_major, "minor": minor, "kind": "mig", "gpu": gpu_index,
                               "gi": int(match.group(2)),
                               "ci": None if match.group(3) is None else int(match.group(3)),
                               "cap": by_minor[minor], "proc": None, "entry": "stale",
                               "uid": 0, "gid": 0, "mode": RESTRICTED["mode"]}
    return nodes, warnings


# ---------------------------------------------------------------------------
# Apply
# ---------------------------------------------------------------------------

def _describe(uid, gid, mode):
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return "%s:%s %04o" % (user, group, mode)


def read_modify(path):
    try:
        with open(path) as fh:
            match = _MODIFY.search(fh.read())
    except (IOError, OSError):
        return None
    return int(match.group(1)) if match else None


def existing_cap_minors(dev_dir):
    caps_dir = os.path.join(dev_dir, "nvidia-caps")
    out = []
    try:
        names = os.listdir(caps_dir)
    except OSError:
        return out
    for name in names:
        match = re.match(r"^nvidia-cap(\d+)$", name)
        if match:
            out.append(int(match.group(1)))
    return out


def apply(nodes, check=False):
    """Bring every node to its plan. Returns ``(changes, before, after)``."""
    changes = []
    before = {}
    after = {}
    dirs = sorted(set(os.path.dirname(p) for p, n in nodes.items() if n["kind"] == "mig"))
    for d in dirs:
        if not os.path.isdir(d):
            changes.append("%s: created directory root:root 0755" % d)
            if not check:
                os.makedirs(d, 0o755)
                os.chown(d, 0, 0)
                os.chmod(d, 0o755)
    for path in sorted(nodes, key=lambda p: (nodes[p]["kind"], nodes[p]["minor"])):
        node = nodes[path]
        want = _describe(node["uid"], node["gid"], node["mode"])
        rdev = os.makedev(node["major"], node["minor"])
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if st is not None and (not stat.S_ISCHR(st.st_mode) or st.st_rdev != rdev):
            before[path] = "not c %d:%d" % (node["major"], node["minor"])
            changes.append("%s: replaced (was not the character device %d:%d)" % (path, node["major"], node["minor"]))
            if not check:
                os.unlink(path)
            st = None
        if st is None:
            before.setdefault(path, "absent")
            changes.append("%s: created c %d:%d %s (%s)" % (path, node["major"], node["minor"], want, node["entry"]))
            if not check:
                os.mknod(path, stat.S_IFCHR | node["mode"], rdev)
                os.chown(path, node["uid"], node["gid"])
                os.chmod(path, node["mode"])
        else:
            have = _describe(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))
            before[path] = have
            if (st.st_uid, st.st_gid) != (node["uid"], node["gid"]) or stat.S_IMODE(st.st_mode) != node["mode"]:
                changes.append("%s: %s -> %s (%s)" % (path, have, want, node["entry"]))
                if not check:
                    os.chown(path, node["uid"], node["gid"])
                    os.chmod(path, node["mode"])
        after[path] = want
        if node["proc"]:
            modify = read_modify(node["proc"])
            if modify is not None and modify != 0:
                changes.append("%s: DeviceFileModify 1 -> 0 (nvidia-modprobe keeps %s as set)" % (node["proc"], path))
                if not check:
                    with open(node["proc"], "w") as fh:
                        fh.write("DeviceFileModify: 0\n")
    return changes, before, after


def modify_device_files_warning(params_path, nodes):
    """A warning when whole-GPU nodes are managed but the driver resets /dev/nvidiaN."""
    if not any(n["kind"] == "gpu" for n in nodes.values()):
        return None
    try:
        with open(params_path) as fh:
            match = _MODIFY_PARAM.search(fh.read())
    except (IOError, OSError):
        return None
    if match and match.group(1) != "0":
        return ("%s has ModifyDeviceFiles: 1: nvidia-modprobe resets /dev/nvidiaN to the driver's "
                "NVreg_DeviceFileUID/GID/Mode whenever a CUDA or NVML client runs; load the nvidia module with "
                "NVreg_ModifyDeviceFiles=0 to keep the whole-GPU grants" % params_path)
    return None


def node_summary(nodes):
    return [{"path": p, "kind": n["kind"], "gpu": n["gpu"], "gpu_instance": n["gi"],
             "compute_instance": n["ci"], "capability": n["cap"], "major": n["major"], "minor": n["minor"],
             "entry": n["entry"], "owner": _describe(n["uid"], n["gid"], n["mode"]).split(" ")[0],
             "mode": "%04o" % n["mode"]} for p, n in sorted(nodes.items(), key=lambda kv: (kv[1]["kind"], kv[1]["minor"]))]


def read_text(path, what):
    try:
        with open(path) as fh:
            return fh.read()
    except (IOError, OSError) as exc:
        raise DeviceAccessError("%s: cannot read %s (%s)" % (what, path, exc))


def run_all(config, run, check=False):
    """Everything the module and the boot unit do. ``config``: entries (normalised), paths, flags.

    Returns a dict with ``changed``, ``changes``, ``nodes``, ``warnings``, ``diff``.
    """
    majors = parse_proc_devices(read_text(config["proc_devices"], "proc_devices"))
    if CAPS_DEVICE_NAME not in majors:
        raise DeviceAccessError("proc_devices: %s lists no '%s' character device; allowed: the driver's /proc/devices "
                                "with the nvidia-caps major (NVIDIA driver >= 450 with nv_cap_enable_devfs=1, the "
                                "default since R450)" % (config["proc_devices"], CAPS_DEVICE_NAME))
    minors = parse_mig_minors(read_text(config["mig_minors"], "mig_minors"))
    if not minors:
        raise DeviceAccessError("mig_minors: %s has no capability lines (expected lines such as "
                                "'gpu0/gi1/access 12')" % config["mig_minors"])
    view = gather(run)
    nodes, warnings = plan(config["access"], view, minors, majors[CAPS_DEVICE_NAME], config["dev_dir"],
                           config["capabilities_dir"], config.get("restrict_unassigned", True),
                           existing_cap_minors(config["dev_dir"]), config.get("variable", "access"))
    warn = modify_device_files_warning(config.get("nvidia_params", "/proc/driver/nvidia/params"), nodes)
    if warn:
        warnings.append(warn)
    changes, before, after = apply(nodes, check=check)
    return {"changed": bool(changes), "changes": changes, "nodes": node_summary(nodes), "warnings": warnings,
            "diff": {"before": before, "after": after}}
