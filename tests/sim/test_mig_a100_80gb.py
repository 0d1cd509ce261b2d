"""The simulated A100-SXM4-80GB lists the A100 80GB's own MIG profiles, field by field.

Expected values: published `nvidia-smi mig -lgip` transcripts of A100 80GB GPUs (read 2026-12-04;
the sources and why 7g.80gb is 78.75 and not the R515 79.00 are written beside MIG_A100_80 in
src/dgxops/sim/fakesmi/models.py).  Typed here from those transcripts, not from models.py, so a
wrong table in the simulator fails.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simhelp import Node  # noqa: E402

# name: (profile id, instances, GiB, P2P, SM, DEC, ENC, CE, JPEG, OFA), as `mig -lgip` prints them
A100_80_LGIP = {
    "1g.10gb": (19, 7, "9.50", "No", 14, 0, 0, 1, 0, 0),
    "1g.10gb+me": (20, 1, "9.50", "No", 14, 1, 0, 1, 1, 1),
    "1g.20gb": (15, 4, "19.50", "No", 14, 1, 0, 1, 0, 0),
    "2g.20gb": (14, 3, "19.50", "No", 28, 1, 0, 2, 0, 0),
    "3g.40gb": (9, 2, "39.25", "No", 42, 2, 0, 3, 0, 0),
    "4g.40gb": (5, 1, "39.25", "No", 56, 2, 0, 4, 0, 0),
    "7g.80gb": (0, 1, "78.75", "No", 98, 5, 0, 7, 1, 1),
}
# `mig -lgipp`: profile id -> (placement starts, size in memory slices); NVIDIA's MIG user guide, A100
A100_80_LGIPP = {19: ("0,1,2,3,4,5,6", 1), 20: ("0,1,2,3,4,5,6", 1), 15: ("0,2,4,6", 2),
                 14: ("0,2,4", 2), 9: ("0,4", 4), 5: ("0", 4), 0: ("0", 8)}
# MIG device memory in `nvidia-smi` (the transcripts' 9728MiB and 40192MiB)
A100_80_DEVICE_MIB = {"1g.10gb": 9728, "3g.40gb": 40192}

_ROW = re.compile(r"^\|\s+0\s+MIG (\S+)\s+(\d+)\s+\d+/(\d+)\s+([0-9.]+)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\n"
                  r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+\|", re.M)


def _mig_on(tmp_path, model="dgx-a100-80gb"):
    node = Node(tmp_path, model=model, driver="580.95.05")
    assert node.smi("-i", "0", "-mig", "1")[0] == 0
    if model.startswith("dgx-a100"):
        assert node.smi("-r", "-i", "0")[0] == 0       # Ampere: the mode change waits for a reset
    return node


def _lgip(node):
    rc, out, _err = node.smi("mig", "-lgip", "-i", "0")
    assert rc == 0, out
    rows = {}
    for m in _ROW.finditer(out):
        g = m.groups()
        rows[g[0]] = (int(g[1]), int(g[2]), g[3], g[4]) + tuple(int(x) for x in g[5:])
    return rows


def test_a100_80gb_lgip_every_field(tmp_path):
    assert _lgip(_mig_on(tmp_path)) == A100_80_LGIP


def test_a100_80gb_placements(tmp_path):
    rc, out, _err = _mig_on(tmp_path).smi("mig", "-lgipp", "-i", "0")
    assert rc == 0, out
    got = {int(m.group(1)): (m.group(2), int(m.group(3)))
           for m in re.finditer(r"Profile ID\s+(\d+) Placements? ?: \{([0-9,]+)\}:(\d+)", out)}
    assert got == A100_80_LGIPP


def test_a100_80gb_mig_device_memory(tmp_path):
    node = _mig_on(tmp_path)
    rc, out, _err = node.smi("mig", "-cgi", "3g.40gb,1g.10gb", "-C", "-i", "0")
    assert rc == 0, out
    rc, out, _err = node.smi("-i", "0")
    assert rc == 0, out
    # MIG devices rows: | GPU GI CI MIG | used / total | ... (GI 1 = the 3g.40gb, GI 2 = the 1g.10gb)
    totals = {int(gi): int(total) for gi, total in
              re.findall(r"^\|\s+0\s+(\d+)\s+0\s+\d+\s+\|\s+\d+MiB /\s*(\d+)MiB", out, re.M)}
    assert totals == {1: A100_80_DEVICE_MIB["3g.40gb"], 2: A100_80_DEVICE_MIB["1g.10gb"]}, out


def test_a100_80gb_differs_from_h100_where_the_hardware_does(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "h").mkdir()
    a100 = _lgip(_mig_on(tmp_path / "a"))
    h100 = _lgip(_mig_on(tmp_path / "h", model="dgx-h100"))
    assert set(a100) == set(h100)                      # the same profile names and ids
    assert {n: r[0] for n, r in a100.items()} == {n: r[0] for n, r in h100.items()}
    for name in ("1g.10gb", "3g.40gb", "7g.80gb"):     # 9.50/39.25/78.75 vs 9.75/39.50/79.25
        assert a100[name][2] != h100[name][2], name
    assert a100["7g.80gb"][4] == 98 and h100["7g.80gb"][4] == 132   # SMs: GA100 vs GH100
