# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The storage_tuning role's host-side reads, without Ansible: which block devices the
patterns match, their queue settings and limits read from sysfs, the plan the role applies,
and every refusal and warning that depends on them (``dgxops.fleet.block_devices``).

The messages are the role's own (they name its variables); tests compare them literally.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

# The files read per device, relative to <sysfs_root>/block/<dev>.
QUEUE_FILES = ("queue/scheduler", "queue/nr_requests", "queue/read_ahead_kb", "mq/0/nr_tags")


def read_value(path):
    """The last line of a sysfs file, stripped; '' when it is missing, empty or unreadable
    (what ``grep -H -s ''`` reported per file)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (OSError, IOError):
        return ""
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[-1].strip() if lines else ""


def jinja_int(value):
    """Jinja's ``int`` filter: int, else int(float), else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def current_scheduler(raw):
    """The bracketed scheduler of a queue/scheduler line, else its first word, else ''."""
    tokens = raw.split()
    marked = [t for t in tokens if t.startswith("[")]
    return ((marked + tokens + [""])[0]).replace("[", "").replace("]", "")


def list_devices(sysfs_root):
    """Entry names of <sysfs_root>/block, sorted; [] when it cannot be listed."""
    try:
        return sorted(os.listdir(os.path.join(sysfs_root, "block")))
    except (OSError, IOError):
        return []


def match_devices(rules, names):
    """[(rule, [device, ...])] in rule order; a device is matched by the rule's anchored regex."""
    out = []
    for rule in rules:
        regex = re.compile(rule["regex"])
        out.append((rule, [n for n in names if regex.match(n)]))
    return out


def duplicate_refusals(rules, matched):
    """One message per device that more than one pattern matches."""
    counts = {}
    for _rule, devices in matched:
        for dev in devices:
            counts[dev] = counts.get(dev, 0) + 1
    messages = []
    for dev in sorted(d for d, n in counts.items() if n > 1):
        which = "".join(" storage_tuning_block_devices[%s] (%s)" % (r["position"], r["pattern"])
                        for r in rules if re.match(r["regex"], dev))
        messages.append(
            "storage_tuning_block_devices: device %s matches more than one pattern: %s. Allowed: each "
            "device matched by one pattern only (udev would apply both rules and the last one would win, "
            "so the outcome would depend on the rule order)." % (dev, which))
    return messages


def unmatched_notes(matched, sysfs_root):
    return ["storage_tuning_block_devices[%s] pattern %s matches no device in %s/block now; the udev rule "
            "applies it when one appears." % (rule["position"], rule["pattern"], sysfs_root)
            for rule, devices in matched if not devices]


def plan_item(rule, dev, values, policy, max_sched_requests):
    """The role's plan entry for one device matched by one rule; ``values`` maps the
    QUEUE_FILES names to what sysfs holds ('' when missing)."""
    sched_raw = values.get("queue/scheduler", "")
    nr_raw = values.get("queue/nr_requests", "")
    tags_raw = values.get("mq/0/nr_tags", "")
    ra_raw = values.get("queue/read_ahead_kb", "")
    sched_current = current_scheduler(sched_raw)
    sched_after = rule.get("scheduler") or sched_current
    if sched_after == "none":
        limit = int(tags_raw) if re.match(r"^[0-9]+$", tags_raw) else None
    else:
        limit = max_sched_requests
    requested = rule.get("nr_requests")
    if requested is None:
        effective = None
    elif policy == "clamp" and limit is not None:
        effective = min(requested, limit)
    else:
        effective = requested
    return {
        "device": dev,
        "position": rule["position"],
        "pattern": rule["pattern"],
        "scheduler_file": sched_raw != "",
        "scheduler_current": sched_current,
        "schedulers_available": sched_raw.replace("[", "").replace("]", "").split(),
        "scheduler": rule.get("scheduler"),
        "scheduler_after": sched_after,
        "nr_requests_file": nr_raw != "",
        "nr_requests_current": jinja_int(nr_raw) if nr_raw != "" else None,
        "nr_requests_requested": requested,
        "nr_requests_limit": limit,
        "nr_requests": effective,
        "nr_tags": jinja_int(tags_raw) if tags_raw != "" else None,
        "read_ahead_file": ra_raw != "",
        "read_ahead_kb_current": jinja_int(ra_raw) if ra_raw != "" else None,
        "read_ahead_kb": rule.get("read_ahead_kb"),
    }


def build_plan(matched, sysfs_root, policy, max_sched_requests):
    plan = []
    for rule, devices in matched:
        for dev in devices:
            values = dict((name, read_value(os.path.join(sysfs_root, "block", dev, name))) for name in QUEUE_FILES)
            plan.append(plan_item(rule, dev, values, policy, max_sched_requests))
    return plan


def scheduler_refusals(plan, sysfs_root):
    return ["storage_tuning_block_devices[%s].scheduler: %s cannot be set on %s (pattern %s): it has no "
            "%s/block/%s/queue/scheduler (a bio-based device such as zram, md or dm-linear). Allowed: a "
            "pattern that matches only request-based disks."
            % (i["position"], i["scheduler"], i["device"], i["pattern"], sysfs_root, i["device"])
            for i in plan if i["scheduler"] is not None and not i["scheduler_file"]]


def nr_requests_refusals(plan, sysfs_root):
    messages = []
    for i in plan:
        if i["nr_requests_requested"] is None:
            continue
        limit = i["nr_requests_limit"]
        if i["nr_requests_file"] and limit is not None and i["nr_requests"] <= limit:
            continue
        nr_tags = "%s/block/%s/mq/0/nr_tags" % (sysfs_root, i["device"])
        if i["scheduler_after"] == "none" and limit is not None:
            why = "Its queue depth is %s (%s), so the kernel would reject the write with EINVAL." % (limit, nr_tags)
        elif limit is None:
            why = "Its queue depth cannot be read (%s is missing) and %s." % (
                nr_tags, "nr_requests does not exist either" if not i["nr_requests_file"] else "cannot be checked")
        else:
            why = "With an I/O scheduler the kernel limit is %s (MAX_SCHED_RQ)." % limit
        messages.append(
            "storage_tuning_block_devices[%s].nr_requests: %s is more than device %s accepts with scheduler "
            "'%s'. %s Allowed: 4 to %s. With scheduler 'none' leave nr_requests unset (the kernel already uses "
            "the whole queue depth), lower it, or set storage_tuning_nr_requests_policy to 'clamp'. Nothing has "
            "been changed." % (i["position"], i["nr_requests_requested"], i["device"], i["scheduler_after"], why,
                               limit if limit is not None else "the queue depth"))
    return messages


def read_ahead_refusals(plan, page_kb):
    return ["storage_tuning_block_devices[%s].read_ahead_kb: %s is not a multiple of this host's page size "
            "(%s KiB); the kernel would round it down and every run would write it again%s. Allowed: a "
            "multiple of %s KiB on a device that has queue/read_ahead_kb."
            % (i["position"], i["read_ahead_kb"], page_kb,
               "" if i["read_ahead_file"] else ", and the device has no queue/read_ahead_kb", page_kb)
            for i in plan
            if i["read_ahead_kb"] is not None and (not i["read_ahead_file"] or i["read_ahead_kb"] % page_kb != 0)]


def plan_warnings(plan):
    """The clamp warnings, then the warnings about schedulers the device does not list yet."""
    clamped = ["WARNING storage_tuning: storage_tuning_block_devices[%s].nr_requests %s is above the limit %s "
               "of %s (scheduler '%s'); storage_tuning_nr_requests_policy is 'clamp', so %s is used."
               % (i["position"], i["nr_requests_requested"], i["nr_requests_limit"], i["device"],
                  i["scheduler_after"], i["nr_requests"])
               for i in plan if i["nr_requests_requested"] is not None
               and i["nr_requests"] < i["nr_requests_requested"]]
    unlisted = ["WARNING storage_tuning: scheduler '%s' is not listed for %s (%s); the kernel tries to load "
                "its module when it is selected, and the role reads the value back."
                % (i["scheduler"], i["device"], " ".join(i["schedulers_available"]))
                for i in plan if i["scheduler"] is not None and i["scheduler_file"]
                and i["scheduler"] not in i["schedulers_available"]]
    return clamped + unlisted


def check_block_devices(rules, sysfs_root, policy, max_sched_requests, page_kb):
    """(plan, notes, refusals) for the normalized rules, in the order the role checked them:
    the first kind of refusal found stops (later checks are not made), and ``notes`` holds only
    the notes of the checks made before it."""
    if not rules:
        return [], [], []
    matched = match_devices(rules, list_devices(sysfs_root))
    refusals = duplicate_refusals(rules, matched)
    if refusals:
        return [], [], refusals
    notes = unmatched_notes(matched, sysfs_root)
    plan = build_plan(matched, sysfs_root, policy, max_sched_requests)
    for check in (lambda: scheduler_refusals(plan, sysfs_root), lambda: nr_requests_refusals(plan, sysfs_root),
                  lambda: read_ahead_refusals(plan, page_kb)):
        refusals = check()
        if refusals:
            return plan, notes, refusals
    return plan, notes + plan_warnings(plan), []


# ------------------------------------------------------------------ TRIM and udev

def fstrim_refusal(timer, unit_lines, detail):
    """The refusal of the fstrim_timer strategy when the timer is not loaded, else None."""
    if "LoadState=loaded" in unit_lines:
        return None
    return ("storage_tuning_trim_strategy: 'fstrim_timer' needs %s (shipped by util-linux), but it is not "
            "available on this host (%s). Allowed: install the timer, or set storage_tuning_trim_strategy to "
            "'discard' or 'none'." % (timer, ", ".join(unit_lines) or detail))


def fstrim_ready(unit_lines, in_container):
    """Whether the timer needs nothing: loaded, enabled, and active (a container never activates
    util-linux's timer: ConditionVirtualization=!container, so there enabled is all there is)."""
    props = dict(line.split("=", 1) for line in unit_lines if "=" in line)
    return (props.get("LoadState") == "loaded" and props.get("UnitFileState") == "enabled"
            and (in_container or props.get("ActiveState") == "active"))


def discard_warning(timer):
    return ("WARNING storage_tuning: storage_tuning_trim_strategy is 'discard' but %s is enabled on this host, "
            "so the entries in storage_tuning_mounts get both continuous discard and the weekly fstrim. The role "
            "leaves the timer alone (other filesystems may rely on it); fstrim(8) recommends the timer alone."
            % timer)


def udev_missing_warning(rule_path):
    return ("WARNING storage_tuning: udevadm is not installed on this host; the rule %s is written but nothing "
            "will apply it at boot or hot-plug." % rule_path)


def udev_version(stdout):
    """The leading number of ``udevadm --version`` (``255 (255.4-1ubuntu8)`` -> 255), 0 when none."""
    found = re.match(r"[0-9]+", stdout or "")
    return int(found.group(0)) if found else 0
