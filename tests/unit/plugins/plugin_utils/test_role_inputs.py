"""The validate action's inputs for a role: names from the argument specs, values from the vars."""

from pathlib import Path

import pytest
import yaml

from ansible_collections.dgxops.fleet.plugins.plugin_utils import role_inputs

ROOT = Path(__file__).resolve().parents[4]
ROLES = sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/tasks/validate.yml"))


def getter(variables):
    return lambda name, default=None: variables.get(name, default)


def defaults(role):
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())


@pytest.mark.parametrize("role", ROLES)
def test_no_task_file_lists_the_role_variables(role):
    # each role variable is written once: defaults + argument specs; the action collects them
    for task in yaml.safe_load((ROOT / "roles" / role / "tasks" / "validate.yml").read_text()):
        args = task.get("dgxops.fleet.validate")
        if args is not None:
            assert "config" not in args, "%s/tasks/validate.yml lists variables for the validator" % role
            assert args["area"] == role


def test_every_validating_role_is_collected():
    assert set(ROLES) == set(role_inputs.ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_every_argument_spec_variable_is_collected(role):
    values = defaults(role)
    config = role_inputs.collect(role, getter(values))
    alone = set(role_inputs.NOT_CHECKED_ALONE.get(role, ()))
    assert set(values) - alone <= set(config) and not alone & set(config)
    for name, value in values.items():
        if name in alone:
            continue
        if name not in ("monitoring_declared_driver_version", "monitoring_declared_power_limit_watts"):
            assert config[name] == value


def test_monitoring_declares_what_the_driver_and_tuning_roles_set():
    values = dict(defaults("monitoring"), nvidia_driver_branch=570, gpu_tuning_power_limit_watts=600,
                  inventory_hostname="n1", ansible_host="10.0.0.1", groups={"all": ["n1", "prom"]},
                  monitoring_prometheus_server="prom")
    config = role_inputs.collect("monitoring", getter(values))
    assert config["monitoring_declared_driver_version"] == "570"
    assert config["monitoring_declared_power_limit_watts"] == 600
    assert config["inventory_address"] == "10.0.0.1"
    assert config["monitoring_prometheus_server_known"] is True
    assert config["monitoring_prometheus_server_is_self"] is False
    values.update(nvidia_driver_version="570.172.08", monitoring_declared_power_limit_watts=500,
                  monitoring_prometheus_server="")
    config = role_inputs.collect("monitoring", getter(values))
    assert config["monitoring_declared_driver_version"] == "570.172.08"
    assert config["monitoring_declared_power_limit_watts"] == 500
    assert config["monitoring_prometheus_server_is_self"] is True


def test_nccl_counts_the_open_mpi_settings_only_where_they_are_written():
    values = dict(defaults("nccl"), nccl_mpi_mca_params={"btl": "^openib"}, __nccl_profiles={"p": {}})
    assert role_inputs.collect("nccl", getter(dict(values, nccl_mpi_enabled=False)))["nccl_mpi_mca_params"] == {}
    config = role_inputs.collect("nccl", getter(dict(values, nccl_mpi_enabled=True)))
    assert config["nccl_mpi_mca_params"] == {"btl": "^openib"}
    assert config["__nccl_profiles"] == {"p": {}}


def test_spark_rapids_sizes_from_the_inventory_and_facts():
    values = dict(defaults("spark_rapids"), spark_rapids_cluster_group="workers",
                  groups={"all": ["a", "b", "c"], "workers": ["a", "b"]}, ansible_play_hosts_all=["a", "b", "c"],
                  ansible_facts={"processor_vcpus": 224, "memtotal_mb": 2000000, "nvidia_smi": {"count": 8}})
    config = role_inputs.collect("spark_rapids", getter(values))
    assert (config["__cluster_group_size"], config["__play_hosts_count"]) == (2, 3)
    assert (config["__facts_vcpus"], config["__facts_memtotal_mb"]) == (224, 2000000)
    assert config["__nvidia_smi_facts"] == {"count": 8}
    assert config["__limit"] is None


def test_the_driver_family_falls_back_to_the_facts():
    values = dict(defaults("nvidia_driver"), ansible_facts={"nvidia_smi": {"model_family": "hopper"}})
    assert role_inputs.collect("nvidia_driver", getter(values))["model_family"] == "hopper"
    values["nvidia_driver_model_family"] = "ampere"
    assert role_inputs.collect("nvidia_driver", getter(values))["model_family"] == "ampere"
