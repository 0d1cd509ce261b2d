# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the ``storage_tuning`` role variables.

Called by the ``dgxops.fleet.validate`` action (``area: storage_tuning``)
before any host is changed. What can only be known on the host -- whether an
fstab entry exists, which schedulers a device offers, the device's queue
depth that bounds ``nr_requests`` with scheduler ``none`` -- is checked by the
role's ``preflight.yml``, still before any change.

``normalized`` holds the values the role uses afterwards:

* ``mounts``: one item per fstab edit with exactly one selector and the
  final ``add`` / ``remove`` lists (atime conflicts and the TRIM strategy
  folded in, ``nodiratime`` dropped when ``noatime`` is added);
* ``block_devices``: each pattern with its ``position`` in the variable, its
  ``alternatives`` and a ``regex`` equivalent to the udev glob, anchored, for
  matching ``/sys/block`` names;
* ``fstab_entries``: the mounts in the shape of ``dgxops.fleet.fstab_options``'
  ``entries`` option.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.module_utils.fstab import check_option, option_key
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_bool, as_int, int_allowed

SCHEDULERS = ("none", "mq-deadline", "kyber", "bfq")
TRIM_STRATEGIES = ("fstrim_timer", "discard", "none")
NR_REQUESTS_POLICIES = ("fail", "clamp")
# BLKDEV_MIN_RQ: the kernel silently raises smaller values to 4.
NR_REQUESTS_MIN = 4
# MAX_SCHED_RQ = 16 * BLKDEV_DEFAULT_RQ: the limit with an I/O scheduler.
# With scheduler "none" the limit is the device's tag depth, read on the host.
NR_REQUESTS_MAX_SCHED = 2048
READ_AHEAD_KB_MAX = 65536
# Options that choose how atime is updated; adding one removes the others.
ATIME_MODES = ("atime", "noatime", "relatime", "norelatime", "strictatime", "nostrictatime")

MOUNT_KEYS = ("target", "source", "uuid", "label", "add", "remove", "remount")
SELECTORS = ("target", "source", "uuid", "label")
DEVICE_KEYS = ("pattern", "scheduler", "nr_requests", "read_ahead_kb")

KNOWN_KEYS = (
    "storage_tuning_mounts",
    "storage_tuning_fstab_backup",
    "storage_tuning_remount",
    "storage_tuning_trim_strategy",
    "storage_tuning_block_devices",
    "storage_tuning_nr_requests_policy",
    "storage_tuning_apply_now",
    "storage_tuning_udev_rule_path",
)

# Kernel device names: no "/", no "..", no quotes or blanks (they would end
# the udev match string or escape the sysfs directory).
_PATTERN_RE = re.compile(r"^[A-Za-z0-9_.\-*?\[\]!|]+$")
_UUID_RE = re.compile(r"^[0-9A-Fa-f][0-9A-Fa-f\-]*$")
_RULES_DIRS = ("/etc/udev/rules.d/", "/run/udev/rules.d/")


def glob_to_regex(pattern):
    """Translate a udev KERNEL glob (``*``, ``?``, ``[...]``, ``[!...]``, ``|``) to an anchored regex.

    udev matches with fnmatch(3) without FNM_PATHNAME and treats ``|`` as
    alternatives. Returns None when a bracket expression is not closed.
    """
    alternatives = []
    for alt in pattern.split("|"):
        out = []
        i = 0
        while i < len(alt):
            ch = alt[i]
            if ch == "*":
                out.append(".*")
            elif ch == "?":
                out.append(".")
            elif ch == "[":
                end = alt.find("]", i + 2 if alt[i + 1:i + 2] in ("!", "]") else i + 1)
                if end < 0:
                    return None
                body = alt[i + 1:end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
            else:
                out.append(re.escape(ch))
            i += 1
        alternatives.append("".join(out))
    return "^(?:" + "|".join(alternatives) + ")$"


def _validate_mount(result, index, item, trim_strategy, global_remount):
    name = "storage_tuning_mounts[%d]" % index
    if not isinstance(item, dict):
        result.error(name, item, "a dictionary with one of target, source, uuid or label, and add/remove lists")
        return None
    for key in item:
        if key not in MOUNT_KEYS:
            result.error("%s.%s" % (name, key), item[key], "only the keys %s" % ", ".join(MOUNT_KEYS))
    selectors = [k for k in SELECTORS if item.get(k) not in (None, "")]
    if len(selectors) != 1:
        result.error(name, dict((k, item.get(k)) for k in SELECTORS if k in item),
                     "exactly one of target (mount point), source, uuid or label")
        return None
    kind = selectors[0]
    value = item[kind]
    vname = "%s.%s" % (name, kind)
    if not isinstance(value, str) or "\n" in value or "\t" in value or "\x00" in value:
        result.error(vname, value, "a single-line string")
        return None
    if kind == "target" and not (value.startswith("/") or value in ("none", "swap")):
        result.error(vname, value, "an absolute mount point such as /raid (or none/swap for swap entries)")
        return None
    if kind == "target" and "/../" in value + "/":
        result.error(vname, value, "a mount point without '..' components")
        return None
    if kind == "uuid" and not _UUID_RE.match(value):
        result.error(vname, value, "a filesystem UUID: hexadecimal digits and '-' (as shown by blkid)")
        return None
    if kind == "label" and ("/" in value or " " in value):
        result.error(vname, value, "a filesystem label without '/' or spaces (fstab cannot quote them)")
        return None

    lists = {}
    ok = True
    for key in ("add", "remove"):
        raw = item.get(key)
        if raw is None:
            raw = []
        if isinstance(raw, str) or not isinstance(raw, list):
            result.error("%s.%s" % (name, key), raw, "a list of mount options, such as [noatime]")
            ok = False
            continue
        for pos, option in enumerate(raw):
            why = check_option(option)
            if why:
                result.error("%s.%s[%d]" % (name, key, pos), option, "a mount option (%s)" % why)
                ok = False
        lists[key] = list(raw)
    if not ok:
        return None
    add, remove = lists["add"], lists["remove"]
    both = [o for o in add if o in remove or option_key(o) in remove]
    if both:
        result.error("%s.add/remove" % name, both, "an option in add or in remove, not both")
        return None

    atime_added = [o for o in add if o in ATIME_MODES]
    if len(atime_added) > 1:
        result.error("%s.add" % name, atime_added, "at most one atime mode (%s)" % ", ".join(ATIME_MODES))
        return None
    if "noatime" in add and "nodiratime" in add:
        add = [o for o in add if o != "nodiratime"]
        result.warn("%s.add: 'nodiratime' is implied by 'noatime' (mount(8)); it is not added to %s=%s"
                    % (name, kind, value))
    extra_remove = []
    if atime_added:
        extra_remove.extend(m for m in ATIME_MODES if m != atime_added[0] and m not in remove)

    if trim_strategy == "fstrim_timer":
        if "discard" in add or any(option_key(o) == "discard" for o in add):
            result.warn("%s.add: 'discard' with storage_tuning_trim_strategy 'fstrim_timer' enables both "
                        "continuous discard and the weekly fstrim.timer on %s=%s; fstrim(8) recommends "
                        "the timer alone" % (name, kind, value))
        elif "discard" not in remove:
            extra_remove.append("discard")
    elif trim_strategy == "discard":
        if "discard" in remove or "nodiscard" in add:
            result.error("%s" % name, {"add": add, "remove": remove},
                         "no 'nodiscard' / removal of 'discard' with storage_tuning_trim_strategy 'discard'")
            return None
        if "discard" not in add and not any(option_key(o) == "discard" for o in add):
            add = add + ["discard"]
        if "nodiscard" not in remove:
            extra_remove.append("nodiscard")

    remount = item.get("remount")
    if remount is None:
        remount = global_remount
    else:
        remount = as_bool("%s.remount" % name, remount, result)
        if remount is None:
            return None
    if not add and not remove and not extra_remove:
        result.warn("%s: no options to add or remove for %s=%s" % (name, kind, value))
    return {
        kind: value,
        "selector": kind,
        "selector_value": value,
        "add": add,
        "remove": remove + [o for o in extra_remove if o not in remove],
        "remount": bool(remount),
    }


def _validate_device(result, index, item):
    name = "storage_tuning_block_devices[%d]" % index
    if not isinstance(item, dict):
        result.error(name, item, "a dictionary with pattern and at least one of scheduler, nr_requests, read_ahead_kb")
        return None
    for key in item:
        if key not in DEVICE_KEYS:
            result.error("%s.%s" % (name, key), item[key], "only the keys %s" % ", ".join(DEVICE_KEYS))
    pattern = item.get("pattern")
    pname = name + ".pattern"
    if not isinstance(pattern, str) or not pattern:
        result.error(pname, pattern, "a kernel device name glob such as nvme[0-9]*n[0-9]*")
        return None
    if "/" in pattern or ".." in pattern:
        result.error(pname, pattern, "a device name glob without '/' or '..' (it names entries of /sys/block)")
        return None
    if not _PATTERN_RE.match(pattern) or "" in pattern.split("|"):
        result.error(pname, pattern, "letters, digits, _ . - and the glob characters * ? [ ] ! | "
                                     "(non-empty alternatives)")
        return None
    regex = glob_to_regex(pattern)
    if regex is None:
        result.error(pname, pattern, "a glob whose [ ] brackets are closed")
        return None
    try:
        re.compile(regex)
    except re.error as exc:
        result.error(pname, pattern, "a valid glob (%s)" % exc)
        return None

    out = {"position": index, "pattern": pattern, "alternatives": pattern.split("|"), "regex": regex,
           "scheduler": None, "nr_requests": None, "read_ahead_kb": None}
    scheduler = item.get("scheduler")
    if scheduler is not None:
        if scheduler not in SCHEDULERS:
            result.error(name + ".scheduler", scheduler, ", ".join(SCHEDULERS))
            return None
        out["scheduler"] = scheduler
    if item.get("nr_requests") is not None:
        nr = as_int(name + ".nr_requests", item["nr_requests"], result, NR_REQUESTS_MIN, NR_REQUESTS_MAX_SCHED,
                    allowed=int_allowed(NR_REQUESTS_MIN, NR_REQUESTS_MAX_SCHED) + " (with scheduler none, at most "
                    "the device's queue depth, checked on the host)")
        if nr is None:
            return None
        out["nr_requests"] = nr
        if scheduler == "none":
            result.warn("%s.nr_requests: with scheduler 'none' the kernel already sets nr_requests to the "
                        "device's queue depth (typically 1023 on NVMe); set nr_requests (%d) only to lower it: "
                        "a value above a device's depth is refused on the host" % (name, nr))
    if item.get("read_ahead_kb") is not None:
        ra = as_int(name + ".read_ahead_kb", item["read_ahead_kb"], result, 0, READ_AHEAD_KB_MAX,
                    allowed=int_allowed(0, READ_AHEAD_KB_MAX) + " KiB, a multiple of 4")
        if ra is None:
            return None
        if ra % 4:
            # The kernel stores read-ahead in pages and reads back a rounded
            # value: a value that is not a page multiple would be rewritten on
            # every run. 4 KiB pages are the smallest; 64 KiB kernels are
            # checked on the host.
            result.error(name + ".read_ahead_kb", ra, "a multiple of the page size in KiB (4, or 64 on "
                                                      "64 KiB-page kernels), from 0 to %d" % READ_AHEAD_KB_MAX)
            return None
        out["read_ahead_kb"] = ra
    if out["scheduler"] is None and out["nr_requests"] is None and out["read_ahead_kb"] is None:
        result.error(name, item, "at least one of scheduler, nr_requests, read_ahead_kb")
        return None
    return out


def validate(config):
    """Validate the ``storage_tuning_*`` variables; see the module docstring."""
    result = ValidationResult()
    for key in config:
        if key not in KNOWN_KEYS:
            result.error(key, config[key], "only the variables %s" % ", ".join(KNOWN_KEYS))

    backup = as_bool("storage_tuning_fstab_backup", config.get("storage_tuning_fstab_backup", True), result)
    remount = as_bool("storage_tuning_remount", config.get("storage_tuning_remount", False), result)
    apply_now = as_bool("storage_tuning_apply_now", config.get("storage_tuning_apply_now", True), result)

    trim = config.get("storage_tuning_trim_strategy", "fstrim_timer")
    if trim not in TRIM_STRATEGIES:
        result.error("storage_tuning_trim_strategy", trim, ", ".join(TRIM_STRATEGIES))
        trim = None
    policy = config.get("storage_tuning_nr_requests_policy", "fail")
    if policy not in NR_REQUESTS_POLICIES:
        result.error("storage_tuning_nr_requests_policy", policy,
                     "fail (refuse a value above the device limit) or clamp (lower it to the limit)")

    rule_path = config.get("storage_tuning_udev_rule_path", "/etc/udev/rules.d/90-dgxops-storage-tuning.rules")
    if not isinstance(rule_path, str) or not rule_path.startswith(_RULES_DIRS) \
            or not rule_path.endswith(".rules") or "/../" in rule_path or "\n" in rule_path \
            or "/" in rule_path[len("/etc/udev/rules.d/"):]:
        result.error("storage_tuning_udev_rule_path", rule_path,
                     "a file directly in /etc/udev/rules.d/ or /run/udev/rules.d/ whose name ends in "
                     ".rules (udev ignores other names)")

    mounts = config.get("storage_tuning_mounts", [])
    normalized_mounts = []
    if mounts is None:
        mounts = []
    if not isinstance(mounts, list):
        result.error("storage_tuning_mounts", mounts, "a list of {target|source|uuid|label, add, remove}")
    elif trim is not None and remount is not None:
        seen = {}
        for index, item in enumerate(mounts):
            norm = _validate_mount(result, index, item, trim, remount)
            if norm is None:
                continue
            key = (norm["selector"], norm["selector_value"].rstrip("/") or "/")
            if key in seen:
                result.error("storage_tuning_mounts[%d].%s" % (index, key[0]), key[1],
                             "each fstab entry once (also selected by storage_tuning_mounts[%d])" % seen[key])
                continue
            seen[key] = index
            normalized_mounts.append(norm)

    devices = config.get("storage_tuning_block_devices", [])
    normalized_devices = []
    if devices is None:
        devices = []
    if not isinstance(devices, list):
        result.error("storage_tuning_block_devices", devices,
                     "a list of {pattern, scheduler, nr_requests, read_ahead_kb}")
    else:
        patterns = {}
        for index, item in enumerate(devices):
            norm = _validate_device(result, index, item)
            if norm is None:
                continue
            if norm["pattern"] in patterns:
                result.error("storage_tuning_block_devices[%d].pattern" % index, norm["pattern"],
                             "each pattern once (also storage_tuning_block_devices[%d])" % patterns[norm["pattern"]])
                continue
            patterns[norm["pattern"]] = index
            normalized_devices.append(norm)

    result.normalized = {
        "mounts": normalized_mounts,
        # The same edits in the shape of dgxops.fleet.fstab_options' entries option.
        "fstab_entries": [
            {m["selector"]: m["selector_value"], "add": m["add"], "remove": m["remove"]}
            for m in normalized_mounts
        ],
        "block_devices": normalized_devices,
        "fstab_backup": bool(backup),
        "remount": bool(remount),
        "apply_now": bool(apply_now),
        "trim_strategy": trim,
        "nr_requests_policy": policy,
        "udev_rule_path": rule_path,
    }
    return result
