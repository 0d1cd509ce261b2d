# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Declarative MIG layouts: normalisation, validation and placement planning (pure functions).

Nothing here runs a command.  The module ``dgxops.fleet.nvidia_mig`` reads the GPU's own
profile table (``nvidia-smi mig -lgip``), placement table (``-lgipp``) and current instances
(``-lgi``/``-lci``) and hands the parsed rows to :func:`plan_gpu`, which decides what to keep,
what to destroy and where to create the rest, or raises :class:`LayoutError` *before* anything
is touched.  The controller-side validator (``validate_mig.py``) uses :func:`normalize_layout`
so a bad layout reads the same on the controller and on the node.

Model of a GPU used here (the same model NVML uses):

* a GPU has a small number of *memory slices* (8 on A100/H100/H200); a GPU-instance (GI)
  profile occupies ``size`` consecutive slices and may only *start* at the slices listed by
  ``-lgipp`` (``{0,4}:4`` for 3g: start at 0 or 4, four slices);
* every profile has a maximum instance count (``Instances Free/Total`` in ``-lgip``);
* a GI holds compute instances (CIs); by default one CI spanning the whole GI (``-C``).

Placement is decided here and passed to the driver explicitly (``-cgi 9:4``), so creation
never depends on the driver's own first-fit choice (``-cgi 19,19,14,9`` fails with
"Insufficient Resources" on a real A100 because the 1g instances land where the 3g must go).
Existing instances that already match the desired layout are kept where they are; the plan
keeps as many as a valid arrangement allows and destroys only the rest.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# NVML compute-instance profile ids by compute-slice count (nvml.h
# NVML_COMPUTE_INSTANCE_PROFILE_<N>_SLICE).  Used when -lcip is not read.
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_SLICES_BY_PROFILE = dict((v, k) for k, v in CI_PROFILE_BY_SLICES.items())
# Compute-instance sizes a GPU instance of N compute slices offers (``-lcip`` in the NVIDIA MIG
# user guide: a 4g GI offers 1c/2c/4g, a 7g GI 1c/2c/3c/4c/7g).  The full-size CI is always
# created with ``-C`` (its profile id differs between GI profiles, e.g. 7 on 1g.10gb of an
# A100-40GB), so only the partial sizes' ids come from CI_PROFILE_BY_SLICES.
CI_SLICES_OFFERED = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7),
                     8: (1, 2, 3, 4, 8)}

_PROFILE_NAME = re.compile(r"^(\d+)g\.(\d+)gb(\+[a-z0-9.+-]+)?$")
_CI_NAME = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.(\d+)gb(\+[a-z0-9.+-]+)?$")
_CI_SHORT = re.compile(r"^(\d+)c$")

MAX_SEARCH_NODES = 200000


class LayoutError(Exception):
    """A layout that is malformed or cannot be realised on the GPU."""


# ---------------------------------------------------------------------------
# Structural normalisation (shared by the controller validator and the module)
# ---------------------------------------------------------------------------

def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def normalize_profile_ref(value, where):
    """A GI profile reference: a name (``1g.10gb``, ``MIG 1g.10gb+me``) or an id (``19``)."""
    if _is_int(value):
        if value < 0:
            raise LayoutError("%s: invalid value %r; allowed: a profile name such as '1g.10gb' "
                              "or a profile id (a non-negative integer)" % (where, value))
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        if text.upper().startswith("MIG "):
            text = text[4:].strip()
        text = text.lower()
        if _PROFILE_NAME.match(text):
            return text
    raise LayoutError("%s: invalid value %r; allowed: a GPU instance profile name such as "
                      "'1g.10gb', '3g.40gb' or '1g.10gb+me', or a profile id such as 19"
                      % (where, value))


def normalize_ci_ref(value, where):
    """A CI reference: ``full``, ``Nc`` (N compute slices) or a CI profile name (``1c.3g.40gb``).

    Returns the number of compute slices, or ``"full"``.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text.startswith("mig "):
            text = text[4:].strip()
        if text in ("full", "default"):
            return "full"
        match = _CI_SHORT.match(text)
        if match and int(match.group(1)) > 0:
            return int(match.group(1))
        match = _CI_NAME.match(text)
        if match:
            return int(match.group(1)) if match.group(1) else "full"
    raise LayoutError("%s: invalid value %r; allowed: 'full' (one compute instance spanning the "
                      "GPU instance), 'Nc' such as '1c' or '2c', or a compute instance profile "
                      "name such as '1c.3g.40gb'" % (where, value))


def normalize_instances(instances, where):
    """Normalise a GPU's instance list to ``[{profile, count, compute_instances}]``.

    Items are a profile reference (one GI, one full CI) or a dict with ``profile``,
    optional ``count`` (default 1) and optional ``compute_instances`` (list of CI references,
    default one full CI).
    """
    if instances is None:
        return []
    if not isinstance(instances, list):
        raise LayoutError("%s: invalid value %r; allowed: a list of profile names/ids or of "
                          "{profile, count, compute_instances} dictionaries" % (where, instances))
    out = []
    for pos, item in enumerate(instances):
        here = "%s[%d]" % (where, pos)
        if isinstance(item, dict):
            unknown = sorted(set(item) - set(("profile", "count", "compute_instances")))
            if unknown:
                raise LayoutError("%s: unknown key(s) %s; allowed: profile, count, "
                                  "compute_instances" % (here, ", ".join(unknown)))
            if "profile" not in item:
                raise LayoutError("%s: invalid value %r; allowed: a dictionary with a 'profile' "
                                  "key" % (here, item))
            profile = normalize_profile_ref(item["profile"], here + ".profile")
            count = item.get("count", 1)
            if isinstance(count, str) and count.strip().isdigit():
                count = int(count.strip())
            if not _is_int(count) or not 1 <= count <= 8:
                raise LayoutError("%s.count: invalid value %r; allowed: an integer from 1 to 8"
                                  % (here, count))
            cis = item.get("compute_instances")
            if cis is None:
                cis = ["full"]
            if not isinstance(cis, list) or not cis:
                raise LayoutError("%s.compute_instances: invalid value %r; allowed: a non-empty "
                                  "list such as ['full'] or ['1c', '2c']" % (here, cis))
            ci_refs = [normalize_ci_ref(ci, "%s.compute_instances[%d]" % (here, n))
                       for n, ci in enumerate(cis)]
            if "full" in ci_refs and len(ci_refs) > 1:
                raise LayoutError("%s.compute_instances: invalid value %r; allowed: 'full' alone "
                                  "or a list of 'Nc' slices" % (here, cis))
            out.append({"profile": profile, "count": count, "compute_instances": ci_refs})
        else:
            out.append({"profile": normalize_profile_ref(item, here), "count": 1,
                        "compute_instances": ["full"]})
    return out


_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,}$")


def normalize_selector(value, where):
    """GPU selector: ``all``, an index, a UUID, ``"0-3"``, ``"0,1"``, or a list of those.

    Returns ``"all"`` or a list of ints and ``GPU-`` UUID strings (order kept, no duplicates).
    """
    items = value if isinstance(value, list) else [value]
    if not items:
        raise LayoutError("%s: invalid value %r; allowed: 'all', a GPU index, a GPU UUID, "
                          "a range '0-3' or a list of those" % (where, value))
    out = []
    for item in items:
        if isinstance(item, str) and item.strip().lower() == "all":
            if len(items) > 1:
                raise LayoutError("%s: invalid value %r; allowed: 'all' on its own" % (where, value))
            return "all"
        parts = [item] if _is_int(item) else (
            [p.strip() for p in item.split(",")] if isinstance(item, str) else [item])
        for part in parts:
            if _is_int(part) and part >= 0:
                out.append(part)
                continue
            if isinstance(part, str):
                if part.isdigit():
                    out.append(int(part))
                    continue
                match = _RANGE.match(part)
                if match and int(match.group(1)) <= int(match.group(2)):
                    out.extend(range(int(match.group(1)), int(match.group(2)) + 1))
                    continue
                if _UUID.match(part):
                    out.append(part)
                    continue
            raise LayoutError("%s: invalid value %r; allowed: 'all', a GPU index, a GPU UUID "
                              "(GPU-...), a range such as '0-3' or a list of those" % (where, part))
    seen = []
    for item in out:
        if item not in seen:
            seen.append(item)
    return seen


def normalize_layout(layout, where="layout"):
    """Normalise the module's ``layout`` list.

    Each entry: ``{gpus: selector (default all), mig: bool (default true when instances
    are given), instances: [...]}``.  Returns a list of normalised entries.
    """
    if not isinstance(layout, list) or not layout:
        raise LayoutError("%s: invalid value %r; allowed: a non-empty list of {gpus, mig, "
                          "instances} entries" % (where, layout))
    out = []
    for pos, entry in enumerate(layout):
        here = "%s[%d]" % (where, pos)
        if not isinstance(entry, dict):
            raise LayoutError("%s: invalid value %r; allowed: a dictionary with keys gpus, mig, "
                              "instances" % (here, entry))
        unknown = sorted(set(entry) - set(("gpus", "mig", "instances")))
        if unknown:
            raise LayoutError("%s: unknown key(s) %s; allowed: gpus, mig, instances"
                              % (here, ", ".join(unknown)))
        gpus = normalize_selector(entry.get("gpus", "all"), here + ".gpus")
        instances = normalize_instances(entry.get("instances"), here + ".instances")
        mig = entry.get("mig")
        if mig is None:
            mig = True
        if isinstance(mig, str) and mig.lower() in ("true", "yes", "on", "enabled", "1"):
            mig = True
        elif isinstance(mig, str) and mig.lower() in ("false", "no", "off", "disabled", "0"):
            mig = False
        if not isinstance(mig, bool):
            raise LayoutError("%s.mig: invalid value %r; allowed: true or false" % (here, mig))
        if not mig and instances:
            raise LayoutError("%s.instances: invalid value %r; allowed: no instances when "
                              "mig is false" % (here, entry.get("instances")))
        out.append({"gpus": gpus, "mig": mig, "instances": instances})
    return out


def select_gpus(entries, gpus):
    """Map normalised entries onto the node's GPUs.

    ``gpus``: list of ``{index, uuid, ...}``.  Returns ``{index: entry}``.  A GPU chosen by two
    entries, or a selector naming a GPU the node does not have, is an error.
    """
    by_uuid = dict((g["uuid"].lower(), g["index"]) for g in gpus if g.get("uuid"))
    indexes = [g["index"] for g in gpus]
    chosen = {}
    for pos, entry in enumerate(entries):
        here = "layout[%d].gpus" % pos
        if entry["gpus"] == "all":
            targets = list(indexes)
        else:
            targets = []
            for item in entry["gpus"]:
                if _is_int(item):
                    if item not in indexes:
                        raise LayoutError("%s: GPU index %d does not exist on this node; allowed: "
                                          "%s" % (here, item, ", ".join(str(i) for i in indexes)))
                    targets.append(item)
                else:
                    idx = by_uuid.get(item.lower())
                    if idx is None:
                        raise LayoutError("%s: GPU UUID %s does not exist on this node; allowed: "
                                          "%s" % (here, item, ", ".join(sorted(by_uuid)) or "none"))
                    targets.append(idx)
        for idx in targets:
            if idx in chosen:
                raise LayoutError("%s: GPU %d is already chosen by layout[%d]; each GPU may be "
                                  "chosen by one entry only" % (here, idx, chosen[idx][0]))
            chosen[idx] = (pos, entry)
    return dict((idx, value[1]) for idx, value in chosen.items())


# ---------------------------------------------------------------------------
# The GPU's own tables
# ---------------------------------------------------------------------------

def gi_slices(name):
    """Compute slices of a GI profile name: ``3g.40gb`` -> 3."""
    match = _PROFILE_NAME.match((name or "").lower())
    return int(match.group(1)) if match else None


def profile_table(lgip_rows, lgipp_rows, gpu):
    """Build ``{profile_id: {id, name, max, starts, size, slices}}`` for one GPU.

    ``lgip_rows``/``lgipp_rows`` are the parsed ``-lgip``/``-lgipp`` rows
    (``nvidia_smi_parse.parse_mig_lgip``/``parse_mig_lgipp``) for any number of GPUs.
    """
    table = {}
    for row in lgip_rows:
        if row.get("gpu") != gpu:
            continue
        table[row["id"]] = {"id": row["id"], "name": row["name"].lower(),
                            "max": row["instances_total"], "starts": [], "size": None,
                            "slices": gi_slices(row["name"])}
    for row in lgipp_rows:
        if row.get("gpu") != gpu or row["profile_id"] not in table:
            continue
        entry = table[row["profile_id"]]
        entry["starts"] = sorted(set(entry["starts"]) | set(row["starts"]))
        entry["size"] = row["size"]
    return table


def total_slots(table):
    """Number of memory slices of the GPU (the largest placement end)."""
    ends = [s + p["size"] for p in table.values() if p["size"] for s in p["starts"]]
    return max(ends) if ends else 0


def total_compute(table):
    """Compute slices of the GPU (those of its largest profile: 7 on A100/H100/H200)."""
    return max([p["slices"] or 0 for p in table.values()] or [0])


def is_media_extension(prof):
    return "+me" in prof["name"]


def describe_table(table):
    return ", ".join("%s (id %d, max %d)" % (p["name"], p["id"], p["max"])
                     for p in sorted(table.values(), key=lambda p: (-(p["size"] or 0), p["id"])))


def resolve_profile(table, ref, where):
    """Profile id for a name or id, checked against the GPU's table."""
    if _is_int(ref):
        if ref in table:
            return ref
        raise LayoutError("%s: profile id %d is not offered by this GPU; allowed: %s"
                          % (where, ref, describe_table(table)))
    for pid, prof in table.items():
        if prof["name"] == ref:
            return pid
    raise LayoutError("%s: profile %r is not offered by this GPU; allowed: %s"
                      % (where, ref, describe_table(table)))


def resolve_cis(table, pid, ci_refs, where):
    """Compute-slice tuple (sorted, largest first) for a GI of profile ``pid``."""
    total = table[pid]["slices"]
    if total is None:
        raise LayoutError("%s: cannot tell the compute slices of profile %r"
                          % (where, table[pid]["name"]))
    slices = []
    for ref in ci_refs:
        if ref == "full":
            slices.append(total)
        else:
            offered = CI_SLICES_OFFERED.get(total, tuple(n for n in CI_PROFILE_BY_SLICES if n <= total))
            if ref not in offered:
                allowed = sorted(offered)
                raise LayoutError("%s: compute instance of %d slices does not fit GPU instance "
                                  "%s; allowed: %s" % (where, ref, table[pid]["name"],
                                                       ", ".join("%dc" % n for n in allowed)))
            slices.append(ref)
    if sum(slices) > total:
        raise LayoutError("%s: compute instances %s need %d compute slices but %s has %d"
                          % (where, ", ".join("%dc" % n for n in slices), sum(slices),
                             table[pid]["name"], total))
    return tuple(sorted(slices, reverse=True))


def desired_instances(table, instances, where):
    """Expand normalised instances into ``[{profile_id, cis}]`` checked against the table."""
    out = []
    counts = {}
    for pos, item in enumerate(instances):
        here = "%s[%d]" % (where, pos)
        pid = resolve_profile(table, item["profile"], here + ".profile")
        cis = resolve_cis(table, pid, item["compute_instances"], here + ".compute_instances")
        counts[pid] = counts.get(pid, 0) + item["count"]
        out.extend({"profile_id": pid, "cis": cis} for _n in range(item["count"]))
    for pid, count in sorted(counts.items()):
        prof = table[pid]
        if count > prof["max"]:
            raise LayoutError("%s: %d x %s requested but this GPU holds at most %d instance(s) of "
                              "that profile" % (where, count, prof["name"], prof["max"]))
        if not prof["starts"] or not prof["size"]:
            raise LayoutError("%s: the GPU reports no placements for %s (id %d)"
                              % (where, prof["name"], pid))
    slots = total_slots(table)
    used = sum(table[d["profile_id"]]["size"] for d in out)
    if used > slots:
        raise LayoutError("%s: the layout needs %d memory slices but the GPU has %d (%s)"
                          % (where, used, slots, describe_instances(table, out)))
    compute = sum(table[d["profile_id"]]["slices"] or 0 for d in out)
    if compute > total_compute(table):
        raise LayoutError("%s: the layout needs %d compute slices but the GPU has %d (%s)"
                          % (where, compute, total_compute(table), describe_instances(table, out)))
    media = [d for d in out if is_media_extension(table[d["profile_id"]])]
    if len(media) > 1:
        raise LayoutError("%s: %d media-extension (+me) instances requested; allowed: at most one "
                          "per GPU" % (where, len(media)))
    return out


def describe_instances(table, items):
    counts = {}
    order = []
    for item in items:
        name = table[item["profile_id"]]["name"] if item["profile_id"] in table else str(item["profile_id"])
        if name not in counts:
            order.append(name)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join("%d x %s" % (counts[n], n) if counts[n] > 1 else n for n in order) or "none"


# ---------------------------------------------------------------------------
# Current state
# ---------------------------------------------------------------------------

def ci_slices_of(ci_row, gi_profile_slices):
    """Compute slices of an existing CI (from its name, else its profile id)."""
    name = ci_row.get("name") or ""
    match = _CI_NAME.match(name)
    if match:
        return int(match.group(1)) if match.group(1) else gi_profile_slices
    return CI_SLICES_BY_PROFILE.get(ci_row.get("profile_id"), ci_row.get("size"))


def current_instances(lgi_rows, lci_rows, gpu):
    """Current GIs of one GPU: ``[{gi_id, profile_id, name, start, size, cis, ci_ids}]``."""
    out = []
    for row in lgi_rows:
        if row["gpu"] != gpu:
            continue
        slices = gi_slices(row["name"])
        cis = [c for c in lci_rows if c["gpu"] == gpu and c["gi_id"] == row["instance_id"]]
        sized = sorted(((ci_slices_of(c, slices), c["profile_id"]) for c in cis), reverse=True)
        out.append({
            "gi_id": row["instance_id"], "profile_id": row["profile_id"],
            "name": row["name"].lower(), "start": row["placement_start"],
            "size": row["placement_size"],
            "cis": tuple(n for n, _p in sized),
            "ci_profile_ids": [p for _n, p in sized],
            "ci_ids": sorted(c["ci_id"] for c in cis),
        })
    return sorted(out, key=lambda g: (g["start"], g["gi_id"]))


# ---------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------

def _desired_sort_key(table):
    return lambda d: (-table[d["profile_id"]]["size"], len(table[d["profile_id"]]["starts"]),
                      d["profile_id"], d["cis"])


def place(table, desired, current=()):
    """Find start slices for ``desired`` keeping as many ``current`` GIs as possible.

    Returns a list (same order as ``desired`` sorted largest first) of
    ``{"profile_id", "cis", "start", "keep": current GI or None}``, or None when no
    arrangement exists.  Exhaustive search with symmetry breaking (identical instances are
    placed at increasing starts); at most 8 slices, so it is tiny.
    """
    slots = total_slots(table)
    items = sorted(desired, key=_desired_sort_key(table))
    by_start = {}
    for gi in current:
        by_start.setdefault((gi["profile_id"], gi["start"]), gi)
    best = {"score": None, "assign": None}
    nodes = [0]
    # upper bound on the score still reachable from item i on
    remaining_bound = [0] * (len(items) + 1)
    for i in range(len(items) - 1, -1, -1):
        remaining_bound[i] = remaining_bound[i + 1] + 3

    def search(i, used, assign, score, claimed):
        nodes[0] += 1
        if nodes[0] > MAX_SEARCH_NODES:
            return
        if best["score"] is not None and score + remaining_bound[i] <= best["score"]:
            return
        if i == len(items):
            best["score"] = score
            best["assign"] = list(assign)
            return
        item = items[i]
        prof = table[item["profile_id"]]
        lower = -1
        if i > 0 and items[i - 1]["profile_id"] == item["profile_id"] and items[i - 1]["cis"] == item["cis"]:
            lower = assign[-1]["start"]
        options = []
        for start in prof["starts"]:
            if start <= lower or start + prof["size"] > slots:
                continue
            span = set(range(start, start + prof["size"]))
            if span & used:
                continue
            keep = by_start.get((item["profile_id"], start))
            gain = 0
            if keep is not None and keep["gi_id"] not in claimed:
                gain = 3 if keep["cis"] == item["cis"] else 2
            else:
                keep = None
            options.append((-gain, start, span, keep))
        options.sort(key=lambda o: (o[0], o[1]))
        for neg_gain, start, span, keep in options:
            assign.append({"profile_id": item["profile_id"], "cis": item["cis"],
                           "start": start, "keep": keep})
            if keep is not None:
                claimed.add(keep["gi_id"])
            search(i + 1, used | span, assign, score - neg_gain, claimed)
            if keep is not None:
                claimed.discard(keep["gi_id"])
            assign.pop()

    search(0, set(), [], 0, set())
    return best["assign"]


def plan_gpu(table, desired, current, gpu_label="GPU"):
    """Plan the changes that turn ``current`` into ``desired`` on one MIG-enabled GPU.

    Returns ``{"keep": [...], "destroy": [GI...], "recreate_cis": [(GI, cis)],
    "create": [{profile_id, name, start, cis}], "after": [...]}`` with ``create`` in creation
    order (largest first).  Raises :class:`LayoutError` when the layout cannot be placed;
    the caller must call this for every GPU before changing any of them.
    """
    assign = place(table, desired, current)
    if assign is None:
        raise LayoutError(
            "%s: the layout %s cannot be placed on this GPU: its placement table allows %s; no "
            "arrangement of these instances fits the %d memory slices"
            % (gpu_label, describe_instances(table, desired),
               "; ".join("%s at slice %s (%d slices)" % (
                   table[p]["name"], "/".join(str(s) for s in table[p]["starts"]), table[p]["size"])
                   for p in sorted(set(d["profile_id"] for d in desired),
                                   key=lambda p: -table[p]["size"])),
               total_slots(table)))
    kept_ids = set(a["keep"]["gi_id"] for a in assign if a["keep"] is not None)
    plan = {"keep": [], "destroy": [], "recreate_cis": [], "create": [], "after": []}
    for gi in current:
        if gi["gi_id"] not in kept_ids:
            plan["destroy"].append(gi)
    for a in assign:
        name = table[a["profile_id"]]["name"]
        if a["keep"] is not None:
            plan["keep"].append(a["keep"])
            if a["keep"]["cis"] != a["cis"]:
                plan["recreate_cis"].append((a["keep"], a["cis"]))
        else:
            plan["create"].append({"profile_id": a["profile_id"], "name": name,
                                   "start": a["start"], "cis": a["cis"]})
        plan["after"].append({"profile": name, "profile_id": a["profile_id"],
                              "start": a["start"], "size": table[a["profile_id"]]["size"],
                              "compute_instances": ["%dc" % n for n in a["cis"]]})
    plan["create"].sort(key=lambda c: (-table[c["profile_id"]]["size"], c["start"]))
    plan["after"].sort(key=lambda x: x["start"])
    return plan


def full_ci(table, pid, cis):
    """True when ``cis`` is the single full-size CI of a GI of profile ``pid`` (what ``-C`` makes)."""
    return tuple(cis) == (table[pid]["slices"],)


def layout_summary(instances):
    """Stable, human-readable view of a GI list (for diffs): ``["3g.40gb@4 [3c]", ...]``."""
    return ["%s@%d [%s]" % (i["profile"] if "profile" in i else i["name"], i["start"],
                            ",".join(i["compute_instances"]) if "compute_instances" in i
                            else ",".join("%dc" % n for n in i["cis"]))
            for i in sorted(instances, key=lambda x: x["start"])]
