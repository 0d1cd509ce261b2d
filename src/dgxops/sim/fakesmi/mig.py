"""MIG GPU-instance / compute-instance bookkeeping with the real placement rules.

A GPU has 8 memory slots and 7 compute slices.  A GPU instance of profile P occupies
``mem_slots`` consecutive memory slots starting at one of P's allowed placements; two instances
may not overlap, at most ``max`` instances of a profile exist, and only one "+me" (media
extension) instance may exist.  With no placement given, the driver tries the allowed starts
from the highest down (it packs small instances at the top, which is why the MIG guide warns
to create 3g instances before 1g/2g ones).
"""

from .models import CI_PROFILE_BY_SLICES, CI_SLICES_BY_PROFILE, MODELS, PROFILE_ORDER


class MigError(Exception):
    def __init__(self, reason):
        Exception.__init__(self, reason)
        self.reason = reason


def profiles(state):
    return MODELS[state["model"]]["mig_profiles"]


def resolve_gi_profile(state, token):
    """'9', '3g.71gb', 'MIG 3g.71gb' -> profile dict, or None."""
    table = profiles(state)
    t = token.strip()
    if t.lower().startswith("mig "):
        t = t[4:].strip()
    if t.isdigit():
        return table.get(int(t))
    for p in table.values():
        if p["name"].lower() == t.lower():
            return p
    return None


def occupied(g):
    slots = set()
    for gi in g["gpu_instances"]:
        slots.update(range(gi["start"], gi["start"] + gi["size"]))
    return slots


def _fits(g, prof, start):
    need = set(range(start, start + prof["mem_slots"]))
    return not (need & occupied(g))


def check_create(state, g, prof, start=None):
    """Return the start slot a new instance of prof would get, or raise MigError."""
    table = profiles(state)
    existing = [gi for gi in g["gpu_instances"] if gi["profile"] == prof["id"]]
    if len(existing) >= prof["max"]:
        raise MigError("Insufficient Resources")
    if prof["name"].endswith("+me"):
        if any(table[gi["profile"]]["name"].endswith("+me") for gi in g["gpu_instances"]):
            raise MigError("Insufficient Resources")
    used_g = sum(table[gi["profile"]]["g"] for gi in g["gpu_instances"])
    if used_g + prof["g"] > 7:
        raise MigError("Insufficient Resources")
    if start is not None:
        if start not in prof["placements"]:
            raise MigError("Invalid Argument")
        if not _fits(g, prof, start):
            raise MigError("Insufficient Resources")
        return start
    for s in sorted(prof["placements"], reverse=True):
        if _fits(g, prof, s):
            return s
    raise MigError("Insufficient Resources")


def _new_gi_id(g, prof):
    if prof["g"] == 7:
        return 0
    ids = {gi["id"] for gi in g["gpu_instances"]}
    i = 1
    while i in ids:
        i += 1
    return i


def create_gi(state, g, prof, start=None):
    s = check_create(state, g, prof, start)
    gi = {"id": _new_gi_id(g, prof), "profile": prof["id"], "start": s, "size": prof["mem_slots"],
          "compute_instances": []}
    g["gpu_instances"].append(gi)
    g["gpu_instances"].sort(key=lambda x: x["id"])
    return gi


def ci_profile_id(state, gi_prof, slices):
    """Compute-instance profile id; a full-size CI on the 2-memory-slot 1g profile uses id 7."""
    if slices == 1 and gi_prof["id"] == 15:
        return 7
    return CI_PROFILE_BY_SLICES[slices]


def ci_slices(ci_profile):
    if ci_profile == 7:
        return 1
    return CI_SLICES_BY_PROFILE.get(ci_profile)


def ci_name(state, gi, ci):
    table = profiles(state)
    p = table[gi["profile"]]
    if ci["slices"] == p["g"]:
        return p["name"]
    return "%dc.%s" % (ci["slices"], p["name"])


_CI_SLICES_OFFERED = {1: (1,), 2: (1, 2), 3: (1, 2, 3), 4: (1, 2, 4), 7: (1, 2, 3, 4, 7)}


def ci_profiles_for(state, gi):
    """[(ci_profile_id, slices, name)] that a GPU instance offers (largest last)."""
    p = profiles(state)[gi["profile"]]
    out = []
    for slices in _CI_SLICES_OFFERED[p["g"]]:
        pid = ci_profile_id(state, p, slices)
        name = p["name"] if slices == p["g"] else "%dc.%s" % (slices, p["name"])
        out.append((pid, slices, name))
    return out


def create_ci(state, g, gi, ci_profile):
    p = profiles(state)[gi["profile"]]
    slices = ci_slices(ci_profile)
    offered = {pid for pid, _, _ in ci_profiles_for(state, gi)}
    if slices is None or ci_profile not in offered:
        raise MigError("Invalid Argument")
    used = sum(c["slices"] for c in gi["compute_instances"])
    if used + slices > p["g"]:
        raise MigError("Insufficient Resources")
    ids = {c["id"] for c in gi["compute_instances"]}
    i = 0
    while i in ids:
        i += 1
    import uuid  # only where MIG devices are named (most calls never get here)

    ns = uuid.uuid5(uuid.NAMESPACE_URL, g["uuid"])
    ci = {"id": i, "profile": ci_profile, "slices": slices, "start": used,
          "uuid": "MIG-%s" % uuid.uuid5(ns, "%d/%d/%d" % (gi["id"], i, len(gi["compute_instances"])))}
    gi["compute_instances"].append(ci)
    gi["compute_instances"].sort(key=lambda c: c["id"])
    return ci


def remaining_capacity(state, g, prof):
    """How many more instances of prof could be created now (-lgip Free column)."""
    table = profiles(state)
    existing = len([gi for gi in g["gpu_instances"] if gi["profile"] == prof["id"]])
    if prof["name"].endswith("+me") and any(table[gi["profile"]]["name"].endswith("+me")
                                            for gi in g["gpu_instances"]):
        return 0
    used_g = sum(table[gi["profile"]]["g"] for gi in g["gpu_instances"])
    occ = occupied(g)
    n = 0
    for s in prof["placements"]:
        need = set(range(s, s + prof["mem_slots"]))
        if not need & occ:
            occ |= need
            n += 1
    n = min(n, prof["max"] - existing, (7 - used_g) // prof["g"])
    return max(n, 0)


def mig_devices(state, g):
    """[(device_index, gi, ci)] in nvidia-smi's enumeration order."""
    out = []
    for gi in sorted(g["gpu_instances"], key=lambda x: x["id"]):
        for ci in sorted(gi["compute_instances"], key=lambda c: c["id"]):
            out.append((len(out), gi, ci))
    return out


__all__ = ["MigError", "PROFILE_ORDER"]
