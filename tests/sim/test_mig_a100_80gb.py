"""The simulated A100-SXM4-80GB lists the A100's own MIG instance sizes, not the H100's."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simhelp import Node  # noqa: E402

# `nvidia-smi mig -lgip` on an A100-SXM4-80GB (see the source beside MIG_A100_80 in models.py).
A100_80_GIB = {"1g.10gb": "9.75", "1g.10gb+me": "9.75", "1g.20gb": "19.50", "2g.20gb": "19.50",
               "3g.40gb": "39.25", "4g.40gb": "39.25", "7g.80gb": "78.50"}


def _lgip(node):
    rc, out, _err = node.smi("mig", "-lgip", "-i", "0")
    assert rc == 0, out
    return {m.group(1): m.group(2) for m in re.finditer(r"MIG (\S+)\s+\d+\s+\d+/\d+\s+([0-9.]+)", out)}


def test_a100_80gb_instance_sizes(tmp_path):
    node = Node(tmp_path, model="dgx-a100-80gb", driver="580.95.05")
    assert node.smi("-i", "0", "-mig", "1")[0] == 0
    assert node.smi("-r", "-i", "0")[0] == 0
    assert _lgip(node) == A100_80_GIB


def test_a100_80gb_differs_from_h100_where_the_hardware_does(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "h").mkdir()
    a100 = Node(tmp_path / "a", model="dgx-a100-80gb", driver="580.95.05")
    assert a100.smi("-i", "0", "-mig", "1")[0] == 0 and a100.smi("-r", "-i", "0")[0] == 0
    a100_sizes = _lgip(a100)
    h100 = Node(tmp_path / "h", model="dgx-h100", driver="580.95.05")
    assert h100.smi("-i", "0", "-mig", "1")[0] == 0
    h100_sizes = _lgip(h100)
    assert set(a100_sizes) == set(h100_sizes)          # same profile names
    assert a100_sizes["3g.40gb"] != h100_sizes["3g.40gb"]  # 39.25 vs 39.50
    assert a100_sizes["7g.80gb"] != h100_sizes["7g.80gb"]  # 78.50 vs 79.25
