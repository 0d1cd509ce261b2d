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
        if name not in ("monitoring_declared_driver_version", "monitoring_declared_power_limit_watts",
                        "gpu_tuning_platform"):  # derived: the resolved platform (below)
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
    # read as the role's `nccl_mpi_enabled | bool` reads it: the string "no" is off
    for off in ("no", "false", "0", "off"):
        assert role_inputs.collect("nccl", getter(dict(values, nccl_mpi_enabled=off)))["nccl_mpi_mca_params"] == {}
    assert role_inputs.collect("nccl", getter(dict(values, nccl_mpi_enabled="yes")))["nccl_mpi_mca_params"] == {
        "btl": "^openib"}
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


def _platform_vars(**kw):
    values = dict(defaults("gpu_tuning"))
    values.update(yaml.safe_load((ROOT / "roles" / "gpu_tuning" / "vars" / "main.yml").read_text()))
    values.update(kw)
    return values


@pytest.mark.parametrize("variables, platform", [
    ({}, "generic"),                                                           # nothing known
    ({"ansible_facts": {"nvidia_smi": {"model_family": "h100"}}}, "dgx_h100"),  # the GPU facts
    ({"ansible_facts": {"nvidia_smi": {"model_family": "gb10"}}}, "dgx_spark"),
    ({"group_names": ["rack1", "dgx_a100", "dgx_h200"]}, "dgx_a100"),           # first platform group
    ({"ansible_facts": {"nvidia_smi": {"model_family": "l40s"}}, "group_names": ["dgx_h200"]}, "dgx_h200"),
    ({"gpu_tuning_platform": "dgx_h200", "ansible_facts": {"nvidia_smi": {"model_family": "a100"}}}, "dgx_h200"),
])
def test_gpu_tuning_platform_is_resolved_with_its_data(variables, platform):
    """Formerly a set_fact + include_vars in gpu_tuning's tasks/validate.yml; now the action's, for the
    role's own entry point and site.yml's validate play alike."""
    config = role_inputs.collect("gpu_tuning", getter(_platform_vars(**variables)))
    assert config["gpu_tuning_platform"] == platform
    data = yaml.safe_load((ROOT / "roles" / "gpu_tuning" / "vars" / (platform + ".yml")).read_text())
    assert config["gpu_tuning_platform_data"] == data["__gpu_tuning_platform_data"]


def test_an_unknown_gpu_tuning_platform_has_no_data():
    config = role_inputs.collect("gpu_tuning", getter(_platform_vars(gpu_tuning_platform="dgx_z9")))
    assert (config["gpu_tuning_platform"], config["gpu_tuning_platform_data"]) == ("dgx_z9", {})


@pytest.mark.parametrize("role", ["nvidia_driver", "monitoring"])
@pytest.mark.parametrize("facts, ok", [
    ({"distribution": "Debian", "distribution_major_version": "12", "distribution_version": "12.7",
      "architecture": "x86_64"}, True),
    ({"distribution": "Ubuntu", "distribution_major_version": "24", "distribution_version": "24.04",
      "architecture": "aarch64"}, True),
    ({"distribution": "Debian", "distribution_major_version": "11", "distribution_version": "11.9",
      "architecture": "x86_64"}, False),
    ({"distribution": "Rocky", "distribution_major_version": "9", "distribution_version": "9.4",
      "architecture": "x86_64"}, False),
    ({}, True),  # facts not gathered: nothing to check
])
def test_the_distribution_is_checked_by_the_validator(role, facts, ok):
    """Formerly an assert task in the role's tasks/validate.yml; now the validator's, from the facts."""
    from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_monitoring, validate_nvidia_driver

    values = dict(defaults(role))
    values.update(yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text()))
    values.update(ansible_facts=facts, nvidia_driver_branch="580", inventory_hostname="n1", groups={"all": ["n1"]})
    config = role_inputs.collect(role, getter(values))
    validator = validate_nvidia_driver if role == "nvidia_driver" else validate_monitoring
    errors = [e for e in validator.validate(config).errors if e.startswith("ansible_facts.distribution")]
    if ok:
        assert errors == []
    else:
        assert len(errors) == 1
        assert "%s %s" % (facts["distribution"], facts["distribution_version"]) in errors[0]
        assert "allowed: Ubuntu-22 or Ubuntu-24 or Debian-12" in errors[0]


def test_the_driver_refuses_an_architecture_without_cuda_packages():
    from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_nvidia_driver

    values = dict(defaults("nvidia_driver"))
    values.update(yaml.safe_load((ROOT / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text()))
    values.update(nvidia_driver_branch="580", ansible_facts={
        "distribution": "Ubuntu", "distribution_major_version": "22", "distribution_version": "22.04",
        "architecture": "ppc64le"})
    errors = validate_nvidia_driver.validate(role_inputs.collect("nvidia_driver", getter(values))).errors
    assert errors == ["ansible_facts.distribution: invalid value 'Ubuntu 22.04 on ppc64le'; "
                      "allowed: Ubuntu-22 or Ubuntu-24 or Debian-12 on aarch64 or x86_64"]


@pytest.mark.parametrize("facts, override, layout, source", [
    ({"distribution": "Debian", "distribution_major_version": "12", "architecture": "x86_64"}, {},
     "debian", "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"),
    ({"distribution": "Ubuntu", "distribution_major_version": "24", "architecture": "aarch64"}, {},
     "ubuntu", "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"),
    ({"distribution": "Ubuntu", "distribution_major_version": "22", "architecture": "x86_64"},
     {"nvidia_driver_repo_url": "file:/srv/mirror", "nvidia_driver_package_layout": "debian"},
     "debian", "file:/srv/mirror/"),
])
def test_the_driver_repository_and_layout_are_resolved_by_the_validator(facts, override, layout, source):
    """Formerly tasks/settle.yml (include_vars of vars/<Distribution-Major>.yml + set_fact)."""
    from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_nvidia_driver

    role_vars = yaml.safe_load((ROOT / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text())
    values = dict(defaults("nvidia_driver"))
    values.update(role_vars)
    values.update(nvidia_driver_branch="580", ansible_facts=facts, **override)
    result = validate_nvidia_driver.validate(role_inputs.collect("nvidia_driver", getter(values)))
    assert result.normalized["source_url"] == source
    assert result.normalized["layout_name"] == layout
    assert result.normalized["layout_data"] == role_vars["__nvidia_driver_layouts"][layout]


def test_gpu_tuning_sees_the_nvidia_driver_persistenced_values_declared_for_the_host():
    config = role_inputs.collect("gpu_tuning", getter(defaults("gpu_tuning")))
    assert config["__nvidia_driver_declared"] == {}
    values = dict(defaults("gpu_tuning"), nvidia_driver_persistence_mode=False, nvidia_driver_persistenced_user=None)
    config = role_inputs.collect("gpu_tuning", getter(values))
    assert config["__nvidia_driver_declared"] == {"nvidia_driver_persistence_mode": False,
                                                  "nvidia_driver_persistenced_user": None}


def test_what_the_nvidia_driver_role_writes_into_the_persistenced_dropin():
    values = defaults("nvidia_driver")
    assert role_inputs.nvidia_driver_persistenced(getter(values)) == {
        "nvidia_driver_persistence_mode": True, "nvidia_driver_persistenced_user": "nvidia-persistenced",
        "nvidia_driver_persistenced_path": "/usr/bin/nvidia-persistenced"}
    # the driver play renders the host's gpu_tuning_persistence_mode where it is a boolean
    mode = role_inputs.nvidia_driver_persistenced(getter(dict(values, gpu_tuning_persistence_mode=False)))
    assert mode["nvidia_driver_persistence_mode"] is False
    unset = role_inputs.nvidia_driver_persistenced(getter(dict(values, gpu_tuning_persistence_mode=None)))
    assert unset["nvidia_driver_persistence_mode"] is True
    # the role leaves the daemon alone: nothing to agree on
    assert role_inputs.nvidia_driver_persistenced(getter(dict(values, nvidia_driver_persistenced=False))) == {}
