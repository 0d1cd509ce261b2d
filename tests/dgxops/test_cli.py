"""dgxops CLI: JSON output and exit codes scripts can rely on (localhost runs, no Docker)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "dgxops.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          check=False, timeout=300)


def playbook(tmp_path, body):
    path = tmp_path / "p.yml"
    path.write_text("- name: CLI test\n  hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n" + body)
    return str(path)


def test_run_json_success_and_save(tmp_path):
    pb = playbook(tmp_path, "    - name: Nothing\n      ansible.builtin.debug:\n        msg: hi\n")
    saved = tmp_path / "r.json"
    proc = cli("run", pb, "-i", "localhost,", "--json", "--save", str(saved))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["status"] == "successful" and data["hosts"]["localhost"]["ok"] == 1
    assert json.loads(saved.read_text()) == data


def test_run_failure_exits_1_with_the_message(tmp_path):
    pb = playbook(tmp_path, "    - name: Break\n      ansible.builtin.fail:\n        msg: broken on purpose\n")
    proc = cli("run", pb, "-i", "localhost,", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["failures"] == [{"host": "localhost", "task": "Break", "msg": "broken on purpose", "unreachable": False}]


def test_unreachable_only_exits_3(tmp_path):
    pb = tmp_path / "u.yml"
    pb.write_text("- name: Unreachable\n  hosts: all\n  gather_facts: false\n  tasks:\n"
                  "    - name: Ping\n      ansible.builtin.ping:\n")
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    ghost:\n      ansible_connection: docker\n      ansible_host: dgxops-no-such-container\n")
    proc = cli("run", str(pb), "-i", str(inv), "--json")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert [f["host"] for f in data["failures"]] == ["ghost"] and data["failures"][0]["unreachable"] is True


def test_check_detailed_exitcode_2_when_changes_are_pending(tmp_path):
    target = tmp_path / "f"
    pb = playbook(tmp_path, "    - name: Write\n      ansible.builtin.copy:\n        content: x\n        dest: %s\n        mode: '0644'\n" % target)
    proc = cli("check", pb, "-i", "localhost,", "--json", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["changed"] == 1 and not target.exists()
    assert data["diffs"] and data["diffs"][0]["task"] == "Write"
    target.write_text("x")
    again = cli("check", pb, "-i", "localhost,", "--json", "--detailed-exitcode")
    assert again.returncode == 0 and json.loads(again.stdout)["changed"] == 0


def test_usage_errors_exit_2(tmp_path):
    assert cli("run").returncode == 2
    assert cli("sim", "frobnicate").returncode == 2
    assert cli("run", "x.yml", "--no-such-option").returncode == 2
    # extra vars are Ansible's to parse: its own message comes back
    pb = playbook(tmp_path, "    - name: Nothing\n      ansible.builtin.debug:\n")
    proc = cli("run", pb, "-i", "localhost,", "-e", "[1, 2]", "--json")
    assert proc.returncode == 1 and "extra vars" in proc.stdout.lower()


def test_sim_down_json_for_an_unknown_fleet(tmp_path):
    env_dir = tmp_path / "state"
    proc = subprocess.run([sys.executable, "-m", "dgxops.cli", "sim", "down", "--fleet", "never-started", "--json"],
                          capture_output=True, text=True, cwd=ROOT, check=False,
                          env=dict(os.environ, DGXOPS_STATE_DIR=str(env_dir)))
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == {"fleet": "never-started", "removed": []}
