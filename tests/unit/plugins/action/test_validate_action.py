"""The dgxops.fleet.validate action, run for real by ansible-playbook on the controller."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


def run_validate(tmp_path, area, config):
    play = tmp_path / "v.yml"
    play.write_text(f"""
- name: Validate
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Validate settings
      dgxops.fleet.validate:
        area: {area}
        config: {json.dumps(config)}
""")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", str(play)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)


GOOD = {"fleet_identity_fleet_name": "lab", "fleet_identity_node_role": "compute", "fleet_identity_labels": {"rack": "r1"}}


def test_valid_config_passes(tmp_path):
    proc = run_validate(tmp_path, "fleet_identity", GOOD)
    assert proc.returncode == 0, proc.stdout
    assert "ok=1" in proc.stdout and "changed=0" in proc.stdout


@pytest.mark.parametrize("override, expected", [
    ({"fleet_identity_node_role": "gpu"}, "fleet_identity_node_role: invalid value 'gpu'; allowed: compute, spark-driver, login, storage"),
    ({"fleet_identity_fleet_name": "a b"}, "fleet_identity_fleet_name: invalid value 'a b'"),
    ({"fleet_identity_labels": {"rack": 3}}, "fleet_identity_labels[rack]: invalid value 3"),
])
def test_invalid_config_fails_naming_variable(tmp_path, override, expected):
    proc = run_validate(tmp_path, "fleet_identity", dict(GOOD, **override))
    assert proc.returncode == 2, proc.stdout
    assert expected in proc.stdout


def test_unknown_area_is_an_error(tmp_path):
    proc = run_validate(tmp_path, "no_such_area", {})
    assert proc.returncode == 2
    assert "no validator for area 'no_such_area'" in proc.stdout


def test_root_written_paths_are_checked_for_every_area(tmp_path):
    # a role used on its own passes its path variables to its area: the action refuses them too
    proc = run_validate(tmp_path, "fleet_identity", dict(GOOD, fleet_identity_facts_dir="facts.d",
                                                         nccl_conf_mode="0666"))
    assert proc.returncode == 2, proc.stdout
    assert "fleet_identity_facts_dir: invalid value 'facts.d'; allowed: an absolute path" in proc.stdout
    assert "nccl_conf_mode: invalid value '0666'" in proc.stdout


def test_a_secret_in_the_config_is_never_printed(tmp_path):
    labels = {"rack": "r1", "db": {"password": "hunter2-secret"}}
    proc = run_validate(tmp_path, "fleet_identity", dict(GOOD, fleet_identity_labels=labels))
    assert "hunter2-secret" not in proc.stdout
    assert "censored" in proc.stdout or "hidden" in proc.stdout, proc.stdout


def run_play(tmp_path, tasks, extra_vars=None):
    play = tmp_path / "p.yml"
    play.write_text(f"""
- name: Validate
  hosts: localhost
  connection: local
  gather_facts: false
  vars: {json.dumps(extra_vars or {})}
  tasks: {json.dumps(tasks)}
""")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", str(play)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def include_validate(role):
    include = {"name": "dgxops.fleet." + role, "tasks_from": "validate"}
    return [{"name": "Validate the role", "ansible.builtin.include_role": include}]


def test_a_role_collects_its_own_variables(tmp_path):
    # tasks/validate.yml names no variable: the action reads the role's argument specs and the task vars
    show = {"msg": "rule={{ __storage_tuning.udev_rule_path }} trim={{ __storage_tuning.trim_strategy }}"}
    proc = run_play(tmp_path, include_validate("storage_tuning") + [{"name": "Show", "ansible.builtin.debug": show}],
                    {"storage_tuning_trim_strategy": "discard"})
    assert proc.returncode == 0, proc.stdout
    assert "rule=/etc/udev/rules.d/90-dgxops-storage-tuning.rules trim=discard" in proc.stdout


def test_a_collected_bad_value_fails_naming_the_variable(tmp_path):
    proc = run_play(tmp_path, include_validate("fleet_identity"),
                    {"fleet_identity_fleet_name": "lab", "fleet_identity_node_role": "compute",
                     "fleet_identity_labels": {"rack": 3}})
    assert proc.returncode == 2, proc.stdout
    assert "fleet_identity_labels[rack]: invalid value 3" in proc.stdout


def test_a_collected_path_is_checked_in_the_role_that_owns_it(tmp_path):
    # fleet_identity_facts_dir is in the role's argument specs, so the role's own check sees it
    proc = run_play(tmp_path, include_validate("fleet_identity"),
                    {"fleet_identity_fleet_name": "lab", "fleet_identity_node_role": "compute",
                     "fleet_identity_facts_dir": "facts.d"})
    assert proc.returncode == 2, proc.stdout
    assert "fleet_identity_facts_dir: invalid value 'facts.d'; allowed: an absolute path" in proc.stdout


@pytest.mark.parametrize("variables, expected", [
    ({"nccl_conf_mode": "0666"}, "nccl_conf_mode: invalid value '0666'"),
    ({"mig_config_dir": "/etc"}, "mig_config_dir: invalid value '/etc'"),
])
def test_the_files_area_collects_the_path_variables(tmp_path, variables, expected):
    proc = run_play(tmp_path, [{"name": "Check", "dgxops.fleet.validate": {"area": "files"}}], variables)
    assert proc.returncode == 2, proc.stdout
    assert expected in proc.stdout


def test_the_dgxops_area_collects_the_switches(tmp_path):
    proc = run_play(tmp_path, [{"name": "Check", "dgxops.fleet.validate": {"area": "dgxops"}}],
                    {"dgxops_enable_nccl": "maybe", "dgxops_serial": "lots"})
    assert proc.returncode == 2, proc.stdout
    assert "dgxops_enable_nccl: invalid value 'maybe'" in proc.stdout
    assert "dgxops_serial: invalid value 'lots'" in proc.stdout


def test_an_area_without_a_role_needs_config(tmp_path):
    proc = run_play(tmp_path, [{"name": "Check", "dgxops.fleet.validate": {"area": "declared"}}])
    assert proc.returncode == 2, proc.stdout
    assert "validate: area 'declared' needs 'config'" in proc.stdout
