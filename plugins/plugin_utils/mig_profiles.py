# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-model MIG GPU-instance profile tables known on the controller.

Drivers before R550 list MIG profiles (``nvidia-smi mig -lgip``/``-lgipp``) only on GPUs whose
MIG mode is already enabled, so the facts of a node with MIG off carry no table.  The validate
play uses these tables then, so a layout is refused before any GPU mode changes.  The facts'
own table (from the GPU) is preferred whenever it is there.

Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
(https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html: A100-SXM4-40GB,
A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM5-141GB tables), placements checked against the real
H200 capture ``tests/fixtures/nvidia-smi/device-h200/mig-lgipp.txt`` (driver 580); read 2026-12-03.
``tests/unit/plugins/module_utils/test_mig_profiles.py`` checks every table against that capture
and against the simulator's per-model tables (derived from real captures).

Each table is ``{profile_id: {id, name, max, starts, size, slices}}``, the shape of
:func:`mig_layout.profile_table`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_layout as ml

# profile id -> (max instances, placement starts, memory slices); the same on every 8-slice GPU
_GEOMETRY = {
    19: (7, [0, 1, 2, 3, 4, 5, 6], 1),
    20: (1, [0, 1, 2, 3, 4, 5, 6], 1),
    15: (4, [0, 2, 4, 6], 2),
    14: (3, [0, 2, 4], 2),
    9: (2, [0, 4], 4),
    5: (1, [0], 4),
    0: (1, [0], 8),
}
# model -> profile id -> name
_NAMES = {
    "a100-40gb": {19: "1g.5gb", 20: "1g.5gb+me", 15: "1g.10gb", 14: "2g.10gb", 9: "3g.20gb",
                  5: "4g.20gb", 0: "7g.40gb"},
    "a100-80gb": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb",
                  5: "4g.40gb", 0: "7g.80gb"},
    "h100": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb",
             5: "4g.40gb", 0: "7g.80gb"},
    "h200": {19: "1g.18gb", 20: "1g.18gb+me", 15: "1g.35gb", 14: "2g.35gb", 9: "3g.71gb",
             5: "4g.71gb", 0: "7g.141gb"},
}
MODELS = tuple(sorted(_NAMES))


def model_key(model_family, memory_total_mib):
    """The table key of a GPU: ``a100-40gb``/``a100-80gb`` (by memory), ``h100``, ``h200`` or None."""
    family = (model_family or "").lower()
    if family == "a100":
        return "a100-80gb" if (memory_total_mib or 0) > 60000 else "a100-40gb"
    return family if family in _NAMES else None


def table(model):
    """The profile table of ``model`` (a key of :data:`MODELS`), or None for an unknown model."""
    names = _NAMES.get(model)
    if names is None:
        return None
    out = {}
    for pid, name in names.items():
        count, starts, size = _GEOMETRY[pid]
        out[pid] = {"id": pid, "name": name, "max": count, "starts": list(starts), "size": size,
                    "slices": ml.gi_slices(name)}
    return out


def table_from_facts(gpu):
    """The profile table the facts read from one GPU (``mig_profiles``/``mig_placements``), or None."""
    profiles = gpu.get("mig_profiles") or []
    placements = gpu.get("mig_placements") or []
    if not profiles or not placements:
        return None
    idx = gpu.get("index")
    lgip = [dict(p, gpu=idx) for p in profiles]
    lgipp = [dict(p, gpu=idx) for p in placements]
    return ml.profile_table(lgip, lgipp, idx) or None
