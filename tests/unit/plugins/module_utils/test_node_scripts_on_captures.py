"""Scripts the roles install on nodes read nvidia-smi through the shipped nvidia_smi_parse (real captures)."""

import importlib.util
import os
import sys

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_nvidia_smi_parse import section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
COLLECTOR = os.path.join(ROOT, "roles", "monitoring", "files", "dgxops-textfile-collector.py")
H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
ALIASES = {"clocks.sm": "clocks.current.sm"}


def load_collector():
    spec = importlib.util.spec_from_file_location("dgxops_textfile_collector", COLLECTOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_smi(tmp_path, name, fields):
    """An nvidia-smi that answers the collector's two calls with the capture's own output."""
    cmd, body = section(name, "nvidia-smi --query-gpu=")
    captured = cmd.split("=", 1)[1].split(" ", 1)[0].split(",")
    rows = P.parse_csv(body, captured, header=True)["rows"]
    (tmp_path / "query.txt").write_text("".join(", ".join(r[ALIASES.get(f, f)] for f in fields) + "\n" for r in rows))
    (tmp_path / "list.txt").write_text(section(name, "nvidia-smi -L")[1])
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$1" in -L) exec cat %s;; *) exec cat %s;; esac\n'
                   % (tmp_path / "list.txt", tmp_path / "query.txt"))
    smi.chmod(0o755)
    return str(smi)


def test_textfile_collector_reads_a_mig_capture_with_the_shared_parser(tmp_path):
    collector = load_collector()
    smi = fake_smi(tmp_path, H100_MIG, collector.FIELDS)
    gpus, mig = collector.read_gpus(smi, 30, P)
    assert [g["index"] for g in gpus] == ["0"]
    assert gpus[0]["mig.mode.current"] == "Enabled"
    assert gpus[0]["power.limit"] == 700.0 and gpus[0]["uuid"].startswith("GPU-")
    assert mig == {"0": 4}  # 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb
    declared = {"power_limit_watts": 700.0, "mig_layout": {"gpus": [
        {"index": 0, "mig": True, "instances": [{"compute_instances": 1}] * 3}]}}
    lines = collector.metrics(declared, gpus, mig, 0.0)
    assert 'dgxops_drift{item="mig_devices",gpu="0",detail="declared 3, present 4"} 1.0' in lines
    assert any(line.startswith('dgxops_gpu_power_limit_watts{gpu="0"') and line.endswith(" 700.0") for line in lines)
