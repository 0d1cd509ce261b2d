"""The fleet benchmark's per-task reading (benchmarks/fleet_bench.py --per-task)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import fleet_bench as fb  # noqa: E402

RECAP = """
PLAY RECAP *********************************************************************
n1                         : ok=3    changed=0    unreachable=0    failed=0    skipped=1

TASKS RECAP ********************************************************************
Saturday 05 December 2026  12:15:02 +0000 (0:00:00.191)       0:00:30.557 *****
===============================================================================
Read nvidia-smi facts --------------------------------------------------- 7.49s
Check every enabled role's settings on the controller ------------------- 2.00s
dgxops.fleet.storage_tuning : Enable and start the weekly fstrim.timer --- 1.63s
dgxops.fleet.nccl : Render the NCCL configuration file - a - b ----------- 0.74s
"""


def test_per_task_times_reads_the_recap_in_order():
    assert fb.per_task_times(RECAP) == [
        ("Read nvidia-smi facts", 7.49),
        ("Check every enabled role's settings on the controller", 2.0),
        ("dgxops.fleet.storage_tuning : Enable and start the weekly fstrim.timer", 1.63),
        ("dgxops.fleet.nccl : Render the NCCL configuration file - a - b", 0.74),
    ]
    assert fb.per_task_times("no recap here") == []


def test_per_task_excess_pairs_each_task_with_its_mirror():
    rerun = [("facts", 7.5), ("validate", 2.0)]
    mirror = [("Trivial task 0", 5.0), ("Trivial task 1", 0.25)]
    rows = fb.per_task_excess(rerun, mirror, ["remote", "controller"])
    assert rows == [
        {"task": "facts", "kind": "remote", "s": 7.5, "mirror_s": 5.0, "excess_s": 2.5},
        {"task": "validate", "kind": "controller", "s": 2.0, "mirror_s": 0.25, "excess_s": 1.75},
    ]


def test_the_mirror_floor_mirrors_each_kind(tmp_path):
    path = tmp_path / "mirror.yml"
    fb.floor_playbook(["remote", "controller", "include", "skipped"], path)
    text = path.read_text()
    assert "ansible.builtin.ping:" in text and "ansible.builtin.set_fact:" in text
    assert "ansible.builtin.include_tasks: floor-empty.yml" in text and "when: false" in text
    assert (path.parent / "floor-empty.yml").read_text() == "---\n[]\n"


def test_cpu_probe_reads_both_cgroup_versions_and_splits_the_busy_time(tmp_path):
    v1 = tmp_path / "cpuacct.usage"
    v1.write_text("2500000000\n")  # ns
    v2 = tmp_path / "cpu.stat"
    v2.write_text("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
    probe = fb.CpuProbe([])
    assert probe.snapshot()[1] is None  # no node cgroups found: no node figure
    probe.paths = [str(v1), str(v2)]
    assert probe._nodes() == 4.0
    split = fb.CpuProbe.delta((10.0, 4.0, 100.0), (13.5, 9.0, 110.0))
    assert split == {"controller_cpu_s": 3.5, "nodes_cpu_s": 5.0, "other_cpu_s": 1.5, "busy_cpu_s": 10.0}
    assert fb.CpuProbe.delta((0.0, None, 0.0), (1.0, None, 3.0))["nodes_cpu_s"] is None
