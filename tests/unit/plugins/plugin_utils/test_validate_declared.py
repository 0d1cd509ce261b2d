"""validate_declared: the declared state, across roles, against the host's facts (before any change)."""

import pytest

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_declared import validate


def facts(family="a100", mib=40960, count=8, mig="Disabled", profiles=None, placements=None):
    gpus = []
    for i in range(count):
        gpus.append({"index": i, "uuid": "GPU-%08d-0000-0000-0000-000000000000" % i,
                     "name": "NVIDIA A100-SXM4-40GB", "memory_total_mib": mib,
                     "mig_mode_current": mig, "mig_mode_pending": mig,
                     "mig_profiles": profiles or [], "mig_placements": placements or []})
    return {"gpu_count": count, "model_family": family, "gpus": gpus, "health": {"ok": True}}


def run(layout=None, enabled=("mig",), **extra):
    config = {"facts": extra.pop("facts", facts()), "enabled": list(enabled), "mig_layout": layout or []}
    config.update(extra)
    return validate(config)


@pytest.mark.parametrize("layout, expected", [
    # 1g.20gb exists on A100-80GB/H100 only: refused on the A100-40GB before MIG is turned on
    ([{"gpus": 0, "instances": [{"profile": "1g.20gb", "count": 1}]}], "profile '1g.20gb' is not offered"),
    ([{"gpus": "all", "instances": [{"profile": "1g.5gb", "count": 8}]}], "at most 7 instance"),
    ([{"gpus": 0, "instances": [{"profile": 42, "count": 1}]}], "profile id 42 is not offered"),
    ([{"gpus": 0, "instances": [{"profile": "1g.5gb+me", "count": 2}]}], "at most 1 instance"),
    ([{"gpus": 0, "instances": [{"profile": "1g.5gb+me", "count": 1}, {"profile": "1g.5gb+me", "count": 1}]}],
     "at most 1 instance"),
    ([{"gpus": 12, "instances": [{"profile": "1g.5gb", "count": 1}]}], "GPU index 12 does not exist"),
    ([{"gpus": 0, "instances": [{"profile": "4g.20gb", "count": 1}, {"profile": "3g.20gb", "count": 2}]}],
     "memory slices"),
])
def test_bad_layout_refused_against_the_model_table(layout, expected):
    result = run(layout)
    assert result.errors, result.as_dict()
    assert any(expected in e for e in result.errors), result.errors
    assert any("mig_layout" in e for e in result.errors)


def test_good_layout_passes_and_reports_mig_on():
    result = run([{"gpus": "0-3", "instances": [{"profile": "3g.20gb", "count": 2}]}, {"gpus": "4-7", "mig": False}])
    assert result.errors == [] and result.normalized["mig_declared_on"] is True


def test_the_gpus_own_table_wins_over_the_model_table():
    # a GPU whose driver lists only 1g.10gb (id 19): 3g.20gb is refused though the model table has it
    f = facts(profiles=[{"name": "1g.10gb", "id": 19, "instances_total": 7}],
              placements=[{"profile_id": 19, "starts": [0, 1, 2, 3, 4, 5, 6], "size": 1}])
    result = run([{"gpus": 0, "instances": [{"profile": "3g.20gb", "count": 1}]}], facts=f)
    assert any("the GPU's own table" in e for e in result.errors), result.errors


def test_h100_uses_its_own_names():
    f = facts(family="h100", mib=81559)
    assert run([{"gpus": "all", "instances": [{"profile": "1g.20gb", "count": 4}]}], facts=f).errors == []
    assert run([{"gpus": "all", "instances": [{"profile": "1g.5gb", "count": 1}]}], facts=f).errors


def test_mig_declared_with_standalone_spark_is_refused():
    layout = [{"gpus": "all", "instances": [{"profile": "3g.20gb", "count": 2}]}]
    bad = run(layout, enabled=("mig", "spark_rapids"), spark_rapids_cluster_manager="standalone")
    assert any(e.startswith("spark_rapids_cluster_manager: invalid value 'standalone'") for e in bad.errors)
    ok = run(layout, enabled=("mig", "spark_rapids"), spark_rapids_cluster_manager="yarn")
    assert ok.errors == []
    # MIG declared off everywhere: standalone is fine
    off = run([{"gpus": "all", "mig": False}], enabled=("mig", "spark_rapids"),
              spark_rapids_cluster_manager="standalone")
    assert off.errors == []


def test_gpu_tuning_index_beyond_the_gpu_count():
    result = run(enabled=("gpu_tuning",), gpu_tuning_gpus=["0", "12"])
    assert result.errors == ["gpu_tuning_gpus: invalid value '12'; allowed: a GPU index from 0 to 7 (the node "
                             "has 8 GPU(s)), a UUID, a PCI bus id or 'all'"]
    assert run(enabled=("gpu_tuning",), gpu_tuning_gpus=["all"]).errors == []


def test_tenant_cpus_beyond_the_node():
    tenants = [{"name": "a", "allowed_cpus": "0-999"}]
    result = run(enabled=("tenant_isolation",), tenant_isolation_tenants=tenants, vcpus=128)
    assert result.errors == ["tenant_isolation_tenants[0].allowed_cpus: invalid value '0-999'; allowed: "
                             "CPUs 0-127 (the node has 128 CPUs)"]
    tenants = [{"name": "a", "allowed_cpus": "0-15,64-79"}]
    assert run(enabled=("tenant_isolation",), tenant_isolation_tenants=tenants, vcpus=128).errors == []


def test_spark_values_a_user_would_want_refused_or_warned():
    many = run(enabled=("spark_rapids",), spark_rapids_settings={"spark.rapids.sql.concurrentGpuTasks": 1000})
    assert any("concurrentGpuTasks" in e and "1000" in e for e in many.errors)
    assert run(enabled=("spark_rapids",), spark_rapids_settings={"spark.rapids.sql.concurrentGpuTasks": 4}).errors == []
    dyn = run(enabled=("spark_rapids",), spark_rapids_profile="benchmark",
              spark_rapids_settings={"spark.dynamicAllocation.enabled": "true"})
    assert dyn.errors == [] and any("benchmark" in w for w in dyn.warnings)


@pytest.mark.parametrize("address, warned", [("0.0.0.0", True), ("::", True), ("127.0.0.1", False), ("10.0.0.5", False)])
def test_monitoring_on_every_address_is_warned(address, warned):
    result = run(enabled=("monitoring",), monitoring_listen_address=address)
    assert result.errors == [] and bool(result.warnings) is warned


def test_installed_driver_that_does_not_support_the_gpu():
    f = dict(facts(family="h100", mib=81559), driver_branch=470, driver_version="470.256.02")
    bad = run(enabled=("gpu_tuning",), facts=f)
    assert bad.errors and bad.errors[0].startswith("the installed NVIDIA driver (branch R470, 470.256.02) does not "
                                                   "support h100 GPUs; allowed: branch 525 or newer")
    # the driver role installs the declared branch in this run; its own validator checks that one
    assert run(enabled=("nvidia_driver", "gpu_tuning"), facts=f).errors == []
    assert run(enabled=("gpu_tuning",), facts=dict(f, driver_branch=580)).errors == []
