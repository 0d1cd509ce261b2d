"""Verify the fleet_identity scenario on the simulated node (testinfra, docker backend): the
role's local fact, check mode, bad input, and the plumbing every scenario relies on."""

import json
import os
import subprocess

import pytest


def test_identity_fact_written(host):
    fact = host.file("/etc/ansible/facts.d/dgxops.fact")
    assert fact.exists
    assert fact.user == "root"
    assert fact.mode == 0o644
    data = json.loads(fact.content_string)
    assert data == {
        "managed_by": "dgxops.fleet",
        "fleet": "molecule-fleet",
        "node_role": "compute",
        "labels": {"model": "dgx-h100", "rack": "r12"},
    }


def test_ansible_reads_the_local_fact(host):
    facts = host.ansible("ansible.builtin.setup", "filter=ansible_local", check=False)
    assert facts["ansible_facts"]["ansible_local"]["dgxops"]["fleet"] == "molecule-fleet"


def _converge(*args):
    playbook = os.path.join(os.path.dirname(__file__), "..", "converge.yml")
    return subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], playbook, *args],
        capture_output=True, text=True, env=dict(os.environ, ANSIBLE_NOCOLOR="1"), check=False,
    )


def test_check_mode_reports_a_change_and_changes_nothing(host):
    before = host.file("/etc/ansible/facts.d/dgxops.fact").content_string
    proc = _converge("--check", "--diff", "-e", json.dumps({"fleet_identity_fleet_name": "other-fleet"}))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed=1" in proc.stdout
    assert '+    "fleet": "other-fleet",' in proc.stdout  # the diff shows the new identity
    assert host.file("/etc/ansible/facts.d/dgxops.fact").content_string == before


def test_systemd_is_pid1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running")
    assert state.stdout.strip() in ("running", "degraded")


def test_node_is_a_simulated_h100(host):
    out = host.check_output("nvidia-smi --query-gpu=index,name --format=csv,noheader")
    rows = [line.split(", ") for line in out.splitlines()]
    assert len(rows) == 8
    assert {name for _idx, name in rows} == {"NVIDIA H100 80GB HBM3"}


@pytest.mark.parametrize("extra, variable", [
    ({"fleet_identity_node_role": "gpu-box"}, "fleet_identity_node_role"),
    ({"fleet_identity_fleet_name": "bad name!"}, "fleet_identity_fleet_name"),
    ({"fleet_identity_labels": {"rack": 12}}, "fleet_identity_labels[rack]"),
])
def test_bad_input_fails_before_changes(host, extra, variable):
    """Run the role with a bad value: it fails naming the variable and the node is untouched."""
    before = host.file("/etc/ansible/facts.d/dgxops.fact").content_string
    proc = _converge("-e", json.dumps(extra))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert variable in output
    # either the role's argument spec or the dgxops.fleet.validate action refused it
    assert "allowed:" in output or "must be one of" in output
    assert "changed=0" in proc.stdout
    assert host.file("/etc/ansible/facts.d/dgxops.fact").content_string == before
