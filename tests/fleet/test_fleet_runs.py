"""site.yml and the dgxops CLI on a real 3-node simulated fleet, through ansible-runner."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from dgxops.runner import PlaybookRun, run_playbook

CLI = [sys.executable, "-m", "dgxops.cli"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, check=False)


def test_site_converges_then_changes_nothing(sim_fleet):
    _fleet, nodes, inventory = sim_fleet
    first = run_playbook(PlaybookRun("site.yml", inventory=inventory))
    assert first.ok, first.summary()
    assert set(first.hosts) == {n.name for n in nodes}
    second = run_playbook(PlaybookRun("site.yml", inventory=inventory))
    assert second.ok, second.summary()
    assert {h: s["changed"] for h, s in second.hosts.items()} == {n.name: 0 for n in nodes}
    assert second.changed_tasks == []
    # the storage role's host-side preflight runs once per host and run: in the preconditions
    # play, before any change; the role itself does not read the same things again
    assert _task_runs(second, "Read the TRIM timer, udev and the block devices the settings need") == {n.name: 1 for n in nodes}


def _task_runs(result, task):
    """How often each host ran (ok, changed or skipped) the task named `task` in a kept run."""
    runs = {}
    for path in sorted((Path(result.artifact_dir) / "job_events").glob("*.json")):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") in ("runner_on_ok", "runner_on_skipped") and data.get("task") == task:
            runs[data["host"]] = runs.get(data["host"], 0) + 1
    return runs


def test_check_mode_after_converge_reports_nothing_to_change(sim_fleet):
    _fleet, _nodes, inventory = sim_fleet
    proc = cli("check", "-i", inventory, "--json", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["changed"] == 0


def test_facts_json_lists_every_nodes_gpus(sim_fleet):
    _fleet, nodes, inventory = sim_fleet
    proc = cli("facts", "-i", inventory, "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    by_host = data["hosts"]
    assert set(by_host) == {n.name for n in nodes}
    counts = {n.model: by_host[n.name]["gpu_count"] for n in nodes}
    assert counts == {"dgx-a100-80gb": 8, "dgx-h100": 8, "dgx-spark": 1}
    names = {n.model: {g["name"] for g in by_host[n.name]["gpus"]} for n in nodes}
    assert names["dgx-h100"] == {"NVIDIA H100 80GB HBM3"}
    assert names["dgx-spark"] == {"NVIDIA GB10"}
    assert len(data["rows"]) == 17


def test_doctor_json(sim_fleet):
    _fleet, nodes, inventory = sim_fleet
    proc = cli("doctor", "-i", inventory, "--json")
    # simulated nodes have no kernel module in /proc: the verdict is "degraded", which the
    # doctor playbook does not fail on by default
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["ok"] is True and set(data["hosts"]) == {n.name for n in nodes}


def test_report_html(sim_fleet, tmp_path):
    _fleet, nodes, inventory = sim_fleet
    out = tmp_path / "report.html"
    proc = cli("report", "-i", inventory, "--format", "html", "--output", str(out), "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    page = out.read_text()
    for node in nodes:
        assert ">%s</td>" % node.name in page
    assert json.loads(proc.stdout)["output"] == str(out)


def test_unreachable_host_is_reported_and_others_finish(sim_fleet, tmp_path):
    fleet, nodes, inventory = sim_fleet
    victim = nodes[0].name
    play = tmp_path / "slow.yml"
    play.write_text("""
- name: Two steps
  hosts: dgx
  gather_facts: false
  tasks:
    - name: First step
      ansible.builtin.command: "true"
      changed_when: false
    - name: Wait a moment
      ansible.builtin.pause:
        seconds: 4
    - name: Second step
      ansible.builtin.command: "true"
      changed_when: false
""")
    stopped = threading.Event()
    second_ok = set()

    def progress(event):
        if event.kind == "ok" and event.text == "Second step":
            second_ok.add(event.host)
        # stop one node between the two steps: it must be reported, the others must finish
        if event.kind == "task" and event.text == "Wait a moment" and not stopped.is_set():
            subprocess.run(["/usr/bin/docker", "stop", "-t", "0", victim], capture_output=True, check=False)
            stopped.set()

    try:
        result = run_playbook(PlaybookRun(str(play), inventory=inventory), progress=progress)
        assert stopped.is_set()
        assert not result.ok
        assert [f.host for f in result.failures] == [victim]
        others = [n.name for n in nodes if n.name != victim]
        assert second_ok == set(others)
        for host in others:
            assert result.hosts[host]["failures"] == 0 and result.hosts[host]["dark"] == 0
        assert result.hosts[victim]["dark"] + result.hosts[victim]["failures"] == 1
    finally:
        subprocess.run(["/usr/bin/docker", "start", victim], capture_output=True, check=False)
        _wait_booted(victim)


def _wait_booted(name):
    subprocess.run(["/usr/bin/docker", "exec", name, "systemctl", "is-system-running", "--wait"],
                   capture_output=True, check=False, timeout=60)
