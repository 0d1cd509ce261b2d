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
    show = {"msg": "rule={{ __storage_tuning_config.udev_rule_path }} trim={{ __storage_tuning_config.trim_strategy }}"}
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


# --------------------------------------------------------------------------- area roles: site.yml's one task per host

def roles_task(roles, register=False):
    task = {"name": "Check every role", "dgxops.fleet.validate": {"area": "roles", "roles": roles}}
    if register:
        task["register"] = "checked"
    return [task]


def test_roles_reads_each_role_s_defaults_where_the_host_sets_nothing(tmp_path):
    # no role is loaded in the play: the action reads defaults/main.yml and vars/main.yml itself
    show = {"msg": "rule={{ checked.normalized.storage_tuning.udev_rule_path }} "
                   "trim={{ checked.normalized.storage_tuning.trim_strategy }} "
                   "name={{ checked.normalized.fleet_identity.fleet_identity_fleet_name }}"}
    proc = run_play(tmp_path, roles_task(["fleet_identity", "storage_tuning"], register=True)
                    + [{"name": "Show", "ansible.builtin.debug": show}],
                    {"storage_tuning_trim_strategy": "discard"})
    assert proc.returncode == 0, proc.stdout
    assert "rule=/etc/udev/rules.d/90-dgxops-storage-tuning.rules trim=discard name=default" in proc.stdout


def test_roles_templates_a_default_that_refers_to_the_host_s_variables(tmp_path):
    # spark_rapids_conf_dir defaults to "{{ spark_rapids_spark_home }}/conf": rendered with the
    # host's Spark home, it is checked as a root-written directory (a relative path is not one)
    proc = run_play(tmp_path, roles_task(["spark_rapids"]),
                    {"spark_rapids_spark_home": "spark", "spark_rapids_gpus_per_node": 8,
                     "spark_rapids_gpu_memory_mib": 81920, "spark_rapids_cpus_per_node": 128,
                     "spark_rapids_host_memory_mib": 1048576})
    assert proc.returncode == 2, proc.stdout
    assert "- spark_rapids_conf_dir: invalid value 'spark/conf'" in proc.stdout
    # the host's own variable is named once, though both its role and the files check see it
    assert "2 invalid setting(s) for roles (spark_rapids):" in proc.stdout


def test_roles_lists_every_bad_value_of_every_role_at_once(tmp_path):
    proc = run_play(tmp_path, roles_task(["fleet_identity", "nccl", "storage_tuning"]),
                    {"fleet_identity_labels": {"rack": 3},           # the validator's
                     "nccl_conf_mode": "0666",                       # the root-written files'
                     "storage_tuning_fstab_backup": "weekly"})       # the argument specs' (a bool)
    assert proc.returncode == 2, proc.stdout
    text = " ".join(proc.stdout.split())
    assert "fleet_identity_labels[rack]: invalid value 3" in text
    assert "nccl_conf_mode: invalid value '0666'" in text
    assert "storage_tuning: argument 'storage_tuning_fstab_backup' is of type" in text
    assert "invalid setting(s) for roles (fleet_identity, nccl, storage_tuning)" in text


def test_roles_checks_the_declared_state_across_roles(tmp_path):
    # MIG declared and Spark standalone on one host: validate_declared, from the roles' results
    proc = run_play(tmp_path, roles_task(["mig", "spark_rapids"]),
                    {"mig_layout_name": "all-1g.10gb", "mig_gpu_model": "a100-80gb",
                     "spark_rapids_cluster_manager": "standalone", "spark_rapids_gpus_per_node": 8,
                     "spark_rapids_gpu_memory_mib": 81920, "spark_rapids_cpus_per_node": 128,
                     "spark_rapids_host_memory_mib": 1048576})
    assert proc.returncode == 2, proc.stdout
    assert "standalone" in proc.stdout and "MIG" in proc.stdout


def test_roles_checks_the_persistenced_values_both_roles_write(tmp_path):
    # site.yml's driver and gpu_tuning plays write the one nvidia-persistenced drop-in: a host that
    # sets only gpu_tuning's user would have it rewritten (and the daemon restarted) twice per run
    driver = {"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open"}
    proc = run_play(tmp_path, roles_task(["nvidia_driver", "gpu_tuning"]),
                    dict(driver, gpu_tuning_persistenced_user=None, gpu_tuning_platform="dgx_h100"))
    text = " ".join(proc.stdout.split())
    assert proc.returncode == 2, proc.stdout
    assert ('gpu_tuning_persistence_mode / gpu_tuning_persistenced_user / gpu_tuning_persistenced_path '
            '(true, null, "/usr/bin/nvidia-persistenced") differ from nvidia_driver_persistence_mode / '
            '_persistenced_user / _persistenced_path (true, "nvidia-persistenced", "/usr/bin/nvidia-persistenced")'
            in text), text
    # the same values in both roles pass; so does gpu_tuning alone (its values are then the only ones)
    ok = run_play(tmp_path, roles_task(["nvidia_driver", "gpu_tuning"]),
                  dict(driver, gpu_tuning_persistenced_user=None, nvidia_driver_persistenced_user="",
                       gpu_tuning_platform="dgx_h100"))
    assert ok.returncode == 0, ok.stdout
    alone = run_play(tmp_path, roles_task(["gpu_tuning"]),
                     {"gpu_tuning_persistenced_user": None, "gpu_tuning_platform": "dgx_h100"})
    assert alone.returncode == 0, alone.stdout


def test_roles_checks_the_tenants_cpu_lists_against_the_gathered_cpu_count(tmp_path):
    # the validate play gathers the hardware facts where a tenant pins CPUs; the roles task then
    # refuses a CPU list beyond the node's CPUs (site.yml needs no second task for it)
    tenants = {"tenant_isolation_tenants": [{"name": "big", "allowed_cpus": "0-999"}]}
    setup = [{"name": "Gather", "ansible.builtin.setup": {"gather_subset": ["!all", "!min", "hardware"]}}]
    proc = run_play(tmp_path, setup + roles_task(["tenant_isolation"]), tenants)
    assert proc.returncode == 2, proc.stdout
    assert "tenant_isolation_tenants[0].allowed_cpus: invalid value '0-999'" in " ".join(proc.stdout.split())
    assert "(the node has %d CPUs)" % os.cpu_count() in proc.stdout


def test_roles_refuses_an_unknown_role(tmp_path):
    proc = run_play(tmp_path, roles_task(["fleet_identity", "nope"]))
    assert proc.returncode == 2, proc.stdout
    assert "'roles' must be a list of" in proc.stdout


def test_roles_hides_a_secret_and_says_so_for_the_task_that_records_it(tmp_path):
    # site.yml's validate play records the validated settings with no_log: secrets_hidden
    spark = {"spark_rapids_gpus_per_node": 8, "spark_rapids_gpu_memory_mib": 81920, "spark_rapids_cpus_per_node": 128,
             "spark_rapids_host_memory_mib": 1048576,
             "spark_rapids_settings": {"spark.ssl.keyStorePassword": "hunter2-secret"},
             "spark_rapids_allowed_extra_keys": ["spark.ssl.keyStorePassword"]}
    record = {"name": "Record", "ansible.builtin.set_fact": {"kept": "{{ checked.normalized }}"},
              "no_log": "{{ checked.secrets_hidden }}"}
    show = {"name": "Show", "ansible.builtin.debug": {"msg": "hidden={{ checked.secrets_hidden }}"}}
    proc = run_play(tmp_path, roles_task(["spark_rapids"], register=True) + [record, show], spark)
    assert proc.returncode == 0, proc.stdout
    assert "hidden=True" in proc.stdout
    assert "hunter2-secret" not in proc.stdout
    proc = run_play(tmp_path, roles_task(["fleet_identity"], register=True) + [show])
    assert "hidden=False" in proc.stdout
