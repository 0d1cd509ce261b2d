# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet consistency (controller only): which nodes of a group differ from the rest, and in what.

Guide 001 section 4.2: before a multi-node benchmark every node must run the same driver, NCCL
and topology. A node's *record* is built from its GPU facts (``dgxops.fleet.nvidia_smi_facts``)
and its fingerprint (``dgxops.fleet.node_fingerprint``); within each group the value most nodes
share is the reference (ties: the one the first host in name order has), and every node that
differs is an outlier, field by field.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# field name -> human title, in report order
FIELDS = (
    ("driver_version", "driver version"),
    ("driver_flavour", "kernel module flavour"),
    ("cuda_version", "CUDA version"),
    ("nccl_version", "NCCL library"),
    ("kernel", "kernel"),
    ("gpu_count", "GPU count"),
    ("gpu_models", "GPU model"),
    ("vbios", "VBIOS"),
    ("topology", "topology signature"),
    ("mig_layout", "MIG layout"),
    ("files", "managed files"),
)


def _mig_layout(gpus):
    """``GPUs 0-7: 7 x 1g.10gb`` (GPUs with the same instances grouped), or ``off``."""
    per_gpu = []
    for gpu in gpus:
        if gpu.get("mig_mode_current") != "Enabled":
            continue
        counts = {}
        for inst in gpu.get("mig_instances") or []:
            counts[str(inst.get("name"))] = counts.get(str(inst.get("name")), 0) + 1
        desc = ", ".join("%d x %s" % (n, name) for name, n in sorted(counts.items())) or "MIG on, no instances"
        per_gpu.append((gpu.get("index"), desc))
    if not per_gpu:
        return "off"
    groups = {}
    for index, desc in per_gpu:
        groups.setdefault(desc, []).append(index)
    parts = []
    for desc, indexes in sorted(groups.items(), key=lambda kv: kv[1]):
        idx = sorted(i for i in indexes if isinstance(i, int))
        if idx and idx == list(range(idx[0], idx[-1] + 1)) and len(idx) > 1:
            label = "GPUs %d-%d" % (idx[0], idx[-1])
        else:
            label = "GPU%s %s" % ("s" if len(indexes) > 1 else "", ",".join(str(i) for i in indexes))
        parts.append("%s: %s" % (label, desc))
    return "; ".join(parts)


def node_record(facts, fingerprint):
    """The compared values of one node from its ``ansible_facts`` and fingerprint (dicts)."""
    smi = (facts or {}).get("nvidia_smi") or {}
    fp = fingerprint or {}
    gpus = smi.get("gpus") or []
    files = fp.get("files") or {}
    return {
        "driver_version": smi.get("driver_version"),
        "driver_flavour": smi.get("kernel_module_flavour"),
        "cuda_version": smi.get("cuda_version"),
        "nccl_version": fp.get("nccl_version"),
        "kernel": fp.get("kernel") or (facts or {}).get("kernel"),
        "gpu_count": smi.get("gpu_count", len(gpus)),
        "gpu_models": ", ".join(sorted(set(str(g.get("name")) for g in gpus))) or None,
        "vbios": ", ".join(sorted(set(str(g.get("vbios_version")) for g in gpus if g.get("vbios_version")))) or None,
        "topology": fp.get("topology_signature"),
        "mig_layout": _mig_layout(gpus),
        # one value for the set; the per-file detail is in file_checksums
        "files": json.dumps(files, sort_keys=True) if files else None,
        "file_checksums": files,
        "healthy": bool((smi.get("health") or {}).get("ok", bool(smi))),
    }


def _reference(values_by_host):
    counts = {}
    order = []
    for host in sorted(values_by_host):
        key = json.dumps(values_by_host[host], sort_keys=True)
        if key not in counts:
            order.append(key)
        counts[key] = counts.get(key, 0) + 1
    best = max(order, key=lambda k: (counts[k], -order.index(k)))
    return json.loads(best), counts[best]


def compare(records, groups):
    """``records``: host -> node_record; ``groups``: host -> group name.

    Returns ``{"consistent", "outlier_count", "groups": {group: {"hosts", "reference",
    "outliers": {host: {field: {"value", "expected", "title"}}}}}}``.
    """
    by_group = {}
    for host in sorted(records):
        by_group.setdefault(groups.get(host) or "ungrouped", []).append(host)
    out = {"consistent": True, "outlier_count": 0, "groups": {}}
    for group, hosts in sorted(by_group.items()):
        reference, outliers = {}, {}
        for field, title in FIELDS:
            values = {h: records[h].get(field) for h in hosts}
            ref, _n = _reference(values)
            reference[field] = ref
            for host in hosts:
                if values[host] != ref:
                    entry = {"title": title, "value": values[host], "expected": ref}
                    if field == "files":
                        mine = records[host].get("file_checksums") or {}
                        theirs = json.loads(ref) if ref else {}
                        entry["differs"] = sorted(p for p in set(mine) | set(theirs) if mine.get(p) != theirs.get(p))
                        entry["value"] = entry["expected"] = None
                    outliers.setdefault(host, {})[field] = entry
        out["groups"][group] = {"hosts": hosts, "reference": reference, "outliers": outliers}
        if outliers:
            out["consistent"] = False
            out["outlier_count"] += len(outliers)
    return out


def render_text(result):
    """Lines an operator reads: one verdict, then per group its outliers and what differs."""
    lines = []
    total = sum(len(g["hosts"]) for g in result["groups"].values())
    if result["consistent"]:
        lines.append("CONSISTENT: %d node(s) in %d group(s) agree on %s" % (
            total, len(result["groups"]), ", ".join(t for _f, t in FIELDS)))
    else:
        lines.append("INCONSISTENT: %d of %d node(s) differ from their group" % (result["outlier_count"], total))
    for group, g in sorted(result["groups"].items()):
        ref = g["reference"]
        lines.append("  %s (%d node(s)): driver %s %s, CUDA %s, NCCL %s, kernel %s, %s x %s, MIG %s" % (
            group, len(g["hosts"]), ref.get("driver_version"), ref.get("driver_flavour"), ref.get("cuda_version"),
            ref.get("nccl_version") or "none found", ref.get("kernel"), ref.get("gpu_count"), ref.get("gpu_models"),
            ref.get("mig_layout")))
        for host, fields in sorted(g["outliers"].items()):
            for field, d in sorted(fields.items()):
                if field == "files":
                    lines.append("    %s: managed files differ: %s" % (host, ", ".join(d.get("differs") or [])))
                else:
                    lines.append("    %s: %s is %s, the group has %s" % (host, d["title"], d["value"], d["expected"]))
    return lines
