"""spark_rapids against what upstream ships: the spark-rapids shim table (one per plugin release),
the keys of spark-rapids configs.md, the cluster-manager keys, and every Spark key of the catalog
checked against the constant pools of the pyspark jars in .venv (the real Spark 4.3 artifact)."""
import glob
import os
import re
import struct
import zipfile

import pytest

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_spark_rapids import (
    RAPIDS_SHUFFLE_RE, shuffle_manager_class, supported_shims, validate)

from test_validate_spark_rapids import ROLE_VARS, config, ok

SHIMS = ROLE_VARS["__spark_rapids_shims"]
PAIRS = [(release, spark) for release, versions in SHIMS.items() for spark in versions]


# ------------------------------------------------------------------ item 1: shims
@pytest.mark.parametrize("release, spark", PAIRS)
def test_every_supported_pair_renders_the_shim_class_of_the_table(release, spark):
    norm = ok(config(spark_rapids_plugin_version=release + ".0", spark_rapids_spark_version=spark))
    manager = norm["settings"]["spark.shuffle.manager"]
    shim = RAPIDS_SHUFFLE_RE.match(manager).group(1)
    # the class's shim package is the one for exactly this Spark release of the table
    assert shim == "spark" + spark.replace(".", "")
    assert manager == shuffle_manager_class(spark)


@pytest.mark.parametrize("release, spark", [
    ("25.08.0", "4.1.0"), ("25.08.0", "4.2.0"), ("25.08.0", "4.3.0"),   # no release has a 4.1+ shim
    ("25.08.0", "3.5.7"), ("25.08.0", "4.0.1"),                          # patch releases newer than the shims
    ("24.12.0", "3.5.6"), ("24.08.1", "4.0.0"), ("25.06.0", "4.0.0"),
])
def test_pair_without_a_shim_is_refused_listing_the_supported_versions(release, spark):
    result = validate(config(spark_rapids_plugin_version=release, spark_rapids_spark_version=spark))
    assert result.normalized == {}
    [error] = [e for e in result.errors if e.startswith("spark_rapids_spark_version")]
    assert "'%s'" % spark in error
    for version in SHIMS[release[:5]]:
        assert version in error
    assert "spark%s.RapidsShuffleManager does not exist" % spark.replace(".", "") in error


def test_unknown_plugin_release_is_refused_naming_the_known_ones():
    result = validate(config(spark_rapids_plugin_version="25.10.0", spark_rapids_spark_version="3.5.1"))
    [error] = result.errors
    assert error.startswith("spark_rapids_plugin_version") and "25.08" in error and "23.10" in error


def test_without_the_plugin_any_spark_line_of_the_catalog_passes_and_no_shim_is_named():
    norm = ok(config(spark_rapids_plugin_enabled=False, spark_rapids_shuffle_mode="none",
                     spark_rapids_spark_version="3.5.7"))
    assert "spark.shuffle.manager" not in norm["settings"]
    assert "spark.plugins" not in norm["settings"]
    assert validate(config(spark_rapids_plugin_enabled=False, spark_rapids_shuffle_mode="none",
                           spark_rapids_spark_version="4.3.0")).errors


def test_shim_table_shape():
    assert supported_shims({"__spark_rapids_shims": SHIMS}, "25.08.0")[-1] == "4.0.0"
    assert supported_shims({"__spark_rapids_shims": SHIMS}, "25.08.0")[-2] == "3.5.6"
    for release, versions in SHIMS.items():
        assert re.match(r"^[0-9]{2}\.[0-9]{2}$", release)
        assert versions == sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".")))
        assert all(not v.startswith("4.") or v == "4.0.0" for v in versions)


# ------------------------------------------------------------------ item 7: keys
@pytest.mark.parametrize("settings", [
    {"spark.rapids.memory.host.offHeapLimit.enabled": True, "spark.rapids.memory.host.offHeapLimit.size": "64g"},
    {"spark.rapids.memory.host.spillStorageSize": "-1"},
    {"spark.rapids.memory.host.spillStorageSize": -1},
    {"spark.rapids.sql.maxConcurrentGpuTasks": 4},
    {"spark.rapids.filecache.enabled": True},
    {"spark.rapids.sql.metrics.level": "DEBUG"},
    {"spark.rapids.sql.metrics.level": "moderate"},
    {"spark.rapids.sql.explain": "not_on_gpu"},
    {"spark.rapids.sql.explain": "All"},
    {"spark.rapids.memory.gpu.allocFraction": 0, "spark.rapids.memory.gpu.minAllocFraction": 0},
    {"spark.rapids.sql.format.parquet.reader.type": "MULTITHREADED"},
    {"spark.rapids.sql.incompatibleOps.enabled": True},
])
def test_upstream_keys_and_values_are_accepted(settings):
    norm = ok(config(spark_rapids_settings=settings))
    for key in settings:
        assert key in norm["settings"]


def test_spill_storage_size_warns_naming_the_off_heap_limit_keys():
    result = validate(config(spark_rapids_settings={"spark.rapids.memory.host.spillStorageSize": "-1"}))
    assert any("offHeapLimit.enabled" in w and "offHeapLimit.size" in w for w in result.warnings)


def test_max_concurrent_gpu_tasks_needs_a_plugin_that_has_it():
    result = validate(config(spark_rapids_plugin_version="24.12.0",
                             spark_rapids_settings={"spark.rapids.sql.maxConcurrentGpuTasks": 4}))
    assert any("maxConcurrentGpuTasks" in e and "25.06" in e for e in result.errors)


@pytest.mark.parametrize("key, value", [
    ("spark.rapids.memory.host.spillStorageSize", "-2"),
    ("spark.rapids.memory.gpu.allocFraction", "1.5"),
    ("spark.rapids.sql.explain", "SOME"),
    ("spark.rapids.sql.metrics.level", "VERBOSE"),
])
def test_values_outside_what_upstream_takes_are_still_refused(key, value):
    assert validate(config(spark_rapids_settings={key: value})).errors


@pytest.mark.parametrize("mode", ["UCX", "CACHE_ONLY"])
@pytest.mark.parametrize("key", ["spark.shuffle.service.enabled", "spark.authenticate"])
def test_shuffle_service_and_authentication_refused_for_ucx_and_cache_only(mode, key):
    result = validate(config(spark_rapids_shuffle_mode=mode, spark_rapids_profile="benchmark",
                             spark_rapids_settings={key: True}))
    assert any(key in e and mode in e for e in result.errors), result.errors


def test_cache_only_production_uses_shuffle_tracking():
    s = ok(config(spark_rapids_shuffle_mode="CACHE_ONLY"))["settings"]
    assert s["spark.shuffle.service.enabled"] == "false"
    assert s["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"


K8S = {"spark.kubernetes.executor.podTemplateFile": "/opt/spark/conf/executor-gpu.yaml",
       "spark.kubernetes.driver.podTemplateFile": "/opt/spark/conf/driver.yaml",
       "spark.kubernetes.container.image": "nvcr.io/nvidia/spark:latest",
       "spark.kubernetes.node.selector.nvidia.com/gpu.present": "true",
       "spark.kubernetes.executor.node.selector.nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
       "spark.executor.resource.gpu.vendor": "nvidia.com",
       "spark.driver.resource.gpu.vendor": "nvidia.com"}
YARN = {"spark.yarn.executor.resource.yarn.io/gpu.amount": "1", "spark.yarn.queue": "gpu"}


def test_kubernetes_keys_with_kubernetes():
    s = ok(config(spark_rapids_cluster_manager="kubernetes", spark_rapids_settings=K8S))["settings"]
    assert s["spark.kubernetes.node.selector.nvidia.com/gpu.present"] == "true"


def test_yarn_keys_with_yarn():
    s = ok(config(spark_rapids_cluster_manager="yarn", spark_rapids_settings=YARN))["settings"]
    assert s["spark.yarn.executor.resource.yarn.io/gpu.amount"] == "1"


@pytest.mark.parametrize("manager, settings", [("standalone", K8S), ("yarn", K8S), ("standalone", YARN),
                                               ("kubernetes", YARN)])
def test_cluster_manager_keys_refused_with_another_manager(manager, settings):
    result = validate(config(spark_rapids_cluster_manager=manager, spark_rapids_settings=settings))
    mgr_keys = [k for k in settings if k.startswith(("spark.kubernetes.", "spark.yarn."))]
    for key in mgr_keys:
        assert any(key in e and manager in e for e in result.errors), (key, result.errors)


# ------------------------------------------------------------------ item 11: the pyspark jars
JARS = glob.glob(os.path.join(os.path.dirname(__import__("pyspark").__file__), "jars", "spark-*.jar")) \
    if __import__("importlib").util.find_spec("pyspark") else []


@pytest.fixture(scope="module")
def constant_pool():
    if not JARS:
        pytest.skip("pyspark is not installed")
    blob = bytearray()
    for jar in JARS:
        with zipfile.ZipFile(jar) as zf:
            for name in zf.namelist():
                if name.endswith(".class"):
                    blob += zf.read(name)
    return bytes(blob)


def _constant(blob, text):
    """True when text is a CONSTANT_Utf8 entry (tag 1, 2-byte length) of some class: exactly that string."""
    raw = text.encode()
    return b"\x01" + struct.pack(">H", len(raw)) + raw in blob


# Spark builds the resource keys from parts: SPARK_EXECUTOR_PREFIX + ".resource." + name + "." + AMOUNT.
COMPOSED = re.compile(r"^(spark\.(?:executor|driver|task|worker))\.resource\.gpu\.(amount|discoveryScript|vendor)$")


def test_every_spark_key_of_the_catalog_is_a_key_of_the_pyspark_jars(constant_pool):
    catalog = ROLE_VARS["__spark_rapids_key_catalog"]
    prefixes = ROLE_VARS["__spark_rapids_key_prefixes"]
    missing = []
    for key in list(catalog) + list(prefixes):
        if key.startswith("spark.rapids."):
            continue   # spark-rapids' own keys (RapidsConf), not in Spark's jars
        composed = COMPOSED.match(key)
        if composed:
            found = all(_constant(constant_pool, part) for part in (composed.group(1), "resource", composed.group(2)))
        else:
            found = _constant(constant_pool, key)
        if not found:
            missing.append(key)
    assert missing == []


def test_the_constant_pool_check_can_fail(constant_pool):
    assert _constant(constant_pool, "spark.executor.memory")
    assert not _constant(constant_pool, "spark.executor.memoryOverHead")
    assert not _constant(constant_pool, "spark.kubernetes.executor.podTemplate")   # a prefix is not a key


# ------------------------------------------------------------------ item 10: DGX Spark (GB10)
GB10_HOST_MIB = 131072   # 128 GiB of LPDDR5x shared by the Grace CPU and the GB10 GPU


@pytest.fixture
def gb10_facts(tmp_path, monkeypatch):
    """The facts module's answer on a simulated DGX Spark (memory.total is [N/A] on GB10)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "modules"))
    import test_nvidia_smi_facts_sim as sim
    state, bindir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\nexec %s -m dgxops.sim.fakesmi \"$@\"\n" % sys.executable)
    (bindir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", sim.SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("DGXOPS_SIM_STATE_DIR", str(state))
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ["PATH"])
    import subprocess
    subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi.admin", "init", "--model", "dgx-spark",
                    "--driver", sim.DRIVER], check=True, capture_output=True, timeout=60)
    _res, facts = sim.facts_of(monkeypatch, {"gather_subset": ["default"]})
    assert facts["unified_memory"] is True and facts["gpus"][0]["memory_total_mib"] is None
    return facts


def test_dgx_spark_is_sized_from_the_one_memory_counted_once(gb10_facts):
    norm = ok(config(spark_rapids_gpus_per_node=None, spark_rapids_gpu_memory_mib=None,
                     spark_rapids_cpus_per_node=20, spark_rapids_host_memory_mib=GB10_HOST_MIB,
                     __nvidia_smi_facts=gb10_facts))
    s, sizing = norm["settings"], norm["sizing"]
    heap = int(s["spark.executor.memory"][:-1])
    overhead = int(s["spark.executor.memoryOverhead"][:-1])
    pool = float(s["spark.rapids.memory.gpu.allocFraction"]) * 128
    # heap + overhead + the RAPIDS pool + the OS reserve fit in the 128 GiB: nothing counted twice
    assert heap + overhead + pool + sizing["unified_os_reserve_gib"] <= 128
    assert (heap, overhead, pool) == (44, 12, 56)
    assert s["spark.rapids.memory.gpu.maxAllocFraction"] == s["spark.rapids.memory.gpu.allocFraction"] == "0.4375"
    # the discrete-GPU formula would ask for GPU x 1.2 + 2 on top of a GPU that is the whole memory
    assert heap < 128 * 6 // 5 + 2 and "twice" in sizing["formula"]
    assert s["spark.worker.resource.gpu.amount"] == "1"
    assert not any("exceeds this node's memory" in w for w in validate(config(
        spark_rapids_gpus_per_node=None, spark_rapids_gpu_memory_mib=None, spark_rapids_cpus_per_node=20,
        spark_rapids_host_memory_mib=GB10_HOST_MIB, __nvidia_smi_facts=gb10_facts)).warnings)


def test_dgx_spark_without_host_memory_is_refused(gb10_facts):
    result = validate(config(spark_rapids_gpus_per_node=None, spark_rapids_gpu_memory_mib=None,
                             spark_rapids_host_memory_mib=None, __nvidia_smi_facts=gb10_facts))
    assert any(e.startswith("spark_rapids_host_memory_mib") for e in result.errors), result.errors


def test_dgx_spark_gpu_budget_more_than_half_is_refused(gb10_facts):
    result = validate(config(spark_rapids_gpus_per_node=None, spark_rapids_gpu_memory_mib=100000,
                             spark_rapids_host_memory_mib=GB10_HOST_MIB, __nvidia_smi_facts=gb10_facts))
    assert any(e.startswith("spark_rapids_gpu_memory_mib") for e in result.errors), result.errors
