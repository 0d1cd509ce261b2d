"""Static description of the simulated DGX models and driver branches.

Values come from real captures (tests/sim/captures, tests/fixtures/nvidia-smi/public) and
from /work/shared/notes/nvidia-smi-reference.md; where a value could not be confirmed it is
marked UNCONFIRMED in docs/simulator.md.  Pure data, standard library only.
"""

MODEL_NAMES = ("dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-spark")

# MIG GPU-instance profile: (id, slices(g), mem_slots, max_instances, sm, ce, dec, enc, jpeg, ofa,
# name, gib).  Placements are in memory slots (8 per GPU).
_PLACEMENTS = {
    19: (0, 1, 2, 3, 4, 5, 6), 20: (0, 1, 2, 3, 4, 5, 6), 15: (0, 2, 4, 6),
    14: (0, 2, 4), 9: (0, 4), 5: (0,), 0: (0,),
}
_MEMSLOTS = {19: 1, 20: 1, 15: 2, 14: 2, 9: 4, 5: 4, 0: 8}
_GSLICES = {19: 1, 20: 1, 15: 1, 14: 2, 9: 3, 5: 4, 0: 7}
_MAXINST = {19: 7, 20: 1, 15: 4, 14: 3, 9: 2, 5: 1, 0: 1}
PROFILE_ORDER = (19, 20, 15, 14, 9, 5, 0)


def _mig_table(names, gib, sm, ce, dec, jpeg, ofa):
    table = {}
    for i, pid in enumerate(PROFILE_ORDER):
        table[pid] = {
            "id": pid, "name": names[i], "gib": gib[i], "sm": sm[i], "ce": ce[i], "dec": dec[i],
            "enc": 0, "jpeg": jpeg[i], "ofa": ofa[i], "g": _GSLICES[pid], "mem_slots": _MEMSLOTS[pid],
            "max": _MAXINST[pid], "placements": _PLACEMENTS[pid],
        }
    return table


MIG_A100_40 = _mig_table(
    ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    (4.75, 4.75, 9.62, 9.62, 19.50, 19.50, 39.25),
    (14, 14, 14, 28, 42, 56, 98), (1, 1, 1, 2, 3, 4, 7), (0, 1, 1, 1, 2, 2, 5),
    (0, 1, 0, 0, 0, 0, 1), (0, 1, 0, 0, 0, 0, 1))
# A100-SXM4-80GB, every field of `nvidia-smi mig -lgip` (ids, instance counts, GiB, P2P No,
# SM/CE/DEC/ENC/JPEG/OFA) as published A100 80GB transcripts show them (read 2026-12-04):
# * an A100-SXM4-80GB on driver 550.54.14 listing all seven profiles: 1g.10gb(+me) 9.50 GiB,
#   1g.20gb and 2g.20gb 19.50, 3g.40gb and 4g.40gb 39.25, 7g.80gb 78.75; an A100 80GB PCIe on a
#   driver that lists 1g.20gb and an HGX A100 8-GPU board show the same 78.75;
# * an A100 80GB PCIe on driver 515.86.01 (before the 1g.20gb profile existed) shows 79.00 for
#   7g.80gb, the other sizes the same: the 7g size moved with the driver, not the board.
# The simulator lists 1g.20gb and defaults to R580, so it follows the 550 capture.  Its MIG devices
# then show 9728 MiB (1g.10gb) and 40192 MiB (3g/4g.40gb), as those transcripts' `nvidia-smi` does.
# Placements ({0..6}:1, {0,2,4,6}:2, {0,2,4}:2, {0,4}:4, {0}:4, {0}:8) are the A100's in NVIDIA's
# MIG user guide ("Supported MIG Profiles", A100) and agree with the captures' `mig -lgi` starts.
# These replace 9.75 / 78.50 (computed, not read from a GPU) and, before those, the H100's sizes.
# tests/sim/test_mig_a100_80gb.py checks every field against these values.
MIG_A100_80 = _mig_table(
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    (9.50, 9.50, 19.50, 19.50, 39.25, 39.25, 78.75),
    (14, 14, 14, 28, 42, 56, 98), (1, 1, 1, 2, 3, 4, 7), (0, 1, 1, 1, 2, 2, 5),
    (0, 1, 0, 0, 0, 0, 1), (0, 1, 0, 0, 0, 0, 1))
MIG_H100 = _mig_table(
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    (9.75, 9.75, 19.62, 19.62, 39.50, 39.50, 79.25),
    (16, 16, 26, 32, 60, 64, 132), (1, 1, 1, 2, 3, 4, 8), (1, 1, 1, 2, 3, 4, 7),
    (1, 1, 1, 2, 3, 4, 7), (0, 1, 0, 0, 0, 0, 1))
# H200: verbatim from `nvidia-smi mig -lgip` on a real H200, driver 580.159.04.
MIG_H200 = _mig_table(
    ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    (16.00, 16.00, 32.50, 32.50, 69.75, 69.75, 140.00),
    (16, 16, 26, 32, 60, 64, 132), (1, 1, 1, 2, 3, 4, 8), (1, 1, 1, 2, 3, 4, 7),
    (1, 1, 1, 2, 3, 4, 7), (0, 1, 0, 0, 0, 0, 1))

# Compute-instance profile ids by compute slices (NVML_COMPUTE_INSTANCE_PROFILE_*).
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
CI_SLICES_BY_PROFILE = {v: k for k, v in CI_PROFILE_BY_SLICES.items()}


def _graphics_steps(top, bottom, step=15):
    return list(range(top, bottom - 1, -step))


_DGX_A100_BUS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
_DGX_H100_BUS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
_A100_AFFINITY = (("48-63,176-191", "3"), ("48-63,176-191", "3"), ("16-31,144-159", "1"),
                  ("16-31,144-159", "1"), ("112-127,240-255", "7"), ("112-127,240-255", "7"),
                  ("80-95,208-223", "5"), ("80-95,208-223", "5"))
_H100_AFFINITY = tuple([("0-55,112-167", "0")] * 4 + [("56-111,168-223", "1")] * 4)

_COMMON_HOPPER = {
    "arch": "Hopper", "compute_cap": "9.0", "pcie_gen": 5, "mig": True, "nvswitch": True,
    "ampere_mig": False, "unified_memory": False, "cpu_arch": "x86_64", "link": "NV18",
    "bus_ids": _DGX_H100_BUS, "affinity": _H100_AFFINITY, "ecc": True,
    "board_part": "692-2G520-0280-001", "gpu_part": "2330-885-A1", "inforom_img": "G520.0200.00.05",
    "mem_clock": 2619, "gr_max": 1980, "video_max": 1545, "gr_default_app": 1980, "gr_min": 345,
    "idle_gr": 345, "idle_video": 765, "power_min": 200.0, "power_max": 700.0, "power_default": 700.0,
    "idle_power": 71.0, "pm_supported": True, "bar1": 131072, "fabric": True,
}

MODELS = {
    "dgx-a100-40gb": dict(_COMMON_HOPPER, **{
        "product": "DGX A100 40GB", "gpu_name": "NVIDIA A100-SXM4-40GB", "old_name": "A100-SXM4-40GB",
        "arch": "Ampere", "compute_cap": "8.0", "pcie_gen": 4, "ampere_mig": True, "link": "NV12",
        "bus_ids": _DGX_A100_BUS, "affinity": _A100_AFFINITY, "device_id": "0x20B010DE",
        "sub_device_id": "0x134F10DE", "memory_total": 40960, "memory_reserved": 571,
        "vbios": "92.00.45.00.03", "board_part": "692-2G506-0200-002", "gpu_part": "20B0-884-A1",
        "inforom_img": "G506.0200.00.04", "mem_clock": 1215, "gr_max": 1410, "video_max": 1290,
        "gr_default_app": 1095, "gr_min": 210, "idle_gr": 210, "idle_video": 585, "power_min": 100.0,
        "power_max": 400.0, "power_default": 400.0, "idle_power": 52.0, "mig_profiles": MIG_A100_40,
        "bar1": 65536, "gpus": 8,
    }),
    "dgx-a100-80gb": dict(_COMMON_HOPPER, **{
        "product": "DGX A100 80GB", "gpu_name": "NVIDIA A100-SXM4-80GB", "old_name": "A100-SXM4-80GB",
        "arch": "Ampere", "compute_cap": "8.0", "pcie_gen": 4, "ampere_mig": True, "link": "NV12",
        "bus_ids": _DGX_A100_BUS, "affinity": _A100_AFFINITY, "device_id": "0x20B210DE",
        "sub_device_id": "0x147F10DE", "memory_total": 81920, "memory_reserved": 708,
        "vbios": "92.00.36.00.02", "board_part": "692-2G506-0210-002", "gpu_part": "20B2-895-A1",
        "inforom_img": "G506.0210.00.04", "mem_clock": 1593, "gr_max": 1410, "video_max": 1290,
        "gr_default_app": 1275, "gr_min": 210, "idle_gr": 210, "idle_video": 585, "power_min": 100.0,
        "power_max": 400.0, "power_default": 400.0, "idle_power": 61.0, "mig_profiles": MIG_A100_80,
        "bar1": 131072, "gpus": 8,
    }),
    "dgx-h100": dict(_COMMON_HOPPER, **{
        "product": "DGX H100", "gpu_name": "NVIDIA H100 80GB HBM3", "old_name": "H100 80GB HBM3",
        "device_id": "0x233010DE", "sub_device_id": "0x16C110DE", "memory_total": 81559,
        "memory_reserved": 479, "vbios": "96.00.A5.00.01", "mig_profiles": MIG_H100, "gpus": 8,
    }),
    "dgx-h200": dict(_COMMON_HOPPER, **{
        "product": "DGX H200", "gpu_name": "NVIDIA H200", "old_name": "H200",
        "device_id": "0x233510DE", "sub_device_id": "0x18BE10DE", "memory_total": 143771,
        "memory_reserved": 616, "vbios": "96.00.A5.00.1A", "board_part": "692-2G520-0282-001",
        "gpu_part": "2335-895-A1", "inforom_img": "G520.0282.02.02", "mem_clock": 3201,
        "idle_power": 80.0, "mig_profiles": MIG_H200, "bar1": 262144, "gpus": 8,
    }),
    "dgx-spark": dict(_COMMON_HOPPER, **{
        "product": "DGX Spark", "gpu_name": "NVIDIA GB10", "old_name": "GB10", "arch": "Blackwell",
        "compute_cap": "12.1", "pcie_gen": 5, "mig": False, "nvswitch": False, "unified_memory": True,
        "cpu_arch": "aarch64", "link": None, "bus_ids": None, "affinity": (("0-19", "0"),),
        "device_id": "0x2E1210DE", "sub_device_id": "0x000010DE", "memory_total": None,
        "memory_reserved": None, "vbios": "9A.0B.10.00.03", "board_part": "N/A", "gpu_part": "N/A",
        "inforom_img": "N/A", "mem_clock": 4266, "gr_max": 3003, "video_max": 2505,
        "gr_default_app": 3003, "gr_min": 208, "idle_gr": 208, "idle_video": 600,
        "power_min": None, "power_max": None, "power_default": None, "idle_power": 4.0,
        "pm_supported": False, "mig_profiles": None, "ecc": False, "bar1": None, "gpus": 1,
        "fabric": False,
    }),
}

# CUDA version reported by each driver branch (nvidia-smi banner / --version).
CUDA_BY_BRANCH = {
    470: "11.4", 510: "11.6", 515: "11.7", 520: "11.8", 525: "12.0", 530: "12.1", 535: "12.2",
    545: "12.3", 550: "12.4", 555: "12.5", 560: "12.6", 565: "12.7", 570: "12.8", 575: "12.9",
    580: "13.0", 590: "13.1", 595: "13.2", 610: "13.3",
}

DEFAULT_DRIVER = "580.95.05"


def cuda_version(branch):
    best = None
    for b in sorted(CUDA_BY_BRANCH):
        if b <= branch:
            best = CUDA_BY_BRANCH[b]
    return best or "11.0"


def field_generation(branch):
    """Which real --help-query-gpu listing a driver branch answers with."""
    if branch >= 600:
        return "610"
    if branch >= 595:
        return "595"
    if branch >= 590:
        return "590"
    return "580"


def supported_clocks(model):
    """[(mem_mhz, [graphics_mhz, ...])] as `-q -d SUPPORTED_CLOCKS` lists them."""
    m = MODELS[model]
    gr = _graphics_steps(m["gr_max"], m["gr_min"])
    pairs = [(m["mem_clock"], gr)]
    if m["arch"] == "Hopper":
        pairs.append((m["mem_clock"] - 1000 if m["mem_clock"] > 3000 else 1593, gr))
    return pairs


def bus_id(model, index):
    m = MODELS[model]
    if m["bus_ids"] is None:
        return "0000000F:01:00.0"
    return "00000000:%s:00.0" % m["bus_ids"][index]
