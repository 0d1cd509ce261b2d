"""Validation and sizing of the spark_rapids role (controller side), plus its discovery script."""
import json
import os
import subprocess
import sys

import jinja2
import pytest
import yaml

from ansible_collections.dgxops.fleet.plugins.module_utils import gpu_discovery
from ansible_collections.dgxops.fleet.plugins.plugin_utils import spark_sizing
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_spark_rapids import validate
from ansible_collections.dgxops.fleet.plugins.filter.spark_rapids import spark_properties_line

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "spark_rapids")
with open(os.path.join(ROLE, "vars", "main.yml")) as fh:
    ROLE_VARS = yaml.safe_load(fh)
with open(os.path.join(ROLE, "defaults", "main.yml")) as fh:
    DEFAULTS = yaml.safe_load(fh)


def config(**overrides):
    cfg = {k: v for k, v in DEFAULTS.items() if k.startswith("spark_rapids_")}
    cfg["spark_rapids_conf_dir"] = "/opt/spark/conf"
    cfg.update({k: v for k, v in ROLE_VARS.items() if k.startswith("__spark_rapids_")})
    cfg.update({"spark_rapids_gpus_per_node": 8, "spark_rapids_gpu_memory_mib": 81920,
                "spark_rapids_cpus_per_node": 256, "spark_rapids_host_memory_mib": 1048576,
                "spark_rapids_cluster_nodes": 1})
    cfg.update(overrides)
    return cfg


def facts(model_mib, count=8, mig=None):
    gpus = [{"index": i, "uuid": "GPU-%d" % i, "name": "x", "memory_total_mib": model_mib,
             "mig_mode_current": "Enabled" if mig and i in mig else "Disabled"} for i in range(count)]
    return {"gpu_count": count, "gpus": gpus}


def ok(cfg):
    result = validate(cfg)
    assert result.errors == []
    return result.normalized


# --------------------------------------------------------------------------- sizing
@pytest.mark.parametrize("mib, gib, memory", [
    (81920, 80, "98g"),    # A100-SXM4-80GB: 80 x 1.2 + 2
    (40960, 40, "50g"),    # A100-SXM4-40GB: 40 x 1.2 + 2
    (81559, 80, "98g"),    # H100 80GB HBM3 reports 81559 MiB = 79.65 GiB -> 80
    (143771, 140, "170g"),  # H200 reports 143771 MiB = 140.40 GiB -> 140
    (15360, 15, "20g"),    # 15 x 1.2 = 18 exactly
    (16384, 16, "22g"),    # 16 x 1.2 = 19.2 -> 20 (rounded up) + 2
])
def test_executor_memory_formula(mib, gib, memory):
    assert spark_sizing.mib_to_gib(mib) == gib
    assert spark_sizing.size(8, mib)["executor_memory"] == memory


def test_mib_rounding_is_half_up():
    assert spark_sizing.mib_to_gib(1535) == 1
    assert spark_sizing.mib_to_gib(1536) == 2


@pytest.mark.parametrize("cores", range(1, 17))
def test_task_gpu_amount_fits_exactly_cores_tasks(cores):
    amount = spark_sizing.task_gpu_amount(cores)
    value = float(amount)
    assert value == 1 or value <= 0.5
    assert int(1 / value) == cores


def test_sizing_from_facts_a100_80_vs_40():
    big = ok(config(spark_rapids_gpus_per_node=None, spark_rapids_gpu_memory_mib=None,
                    __nvidia_smi_facts=facts(81920)))
    small = ok(config(spark_rapids_gpus_per_node=None, spark_rapids_gpu_memory_mib=None,
                      __nvidia_smi_facts=facts(40960)))
    assert big["settings"]["spark.executor.memory"] == "98g"
    assert small["settings"]["spark.executor.memory"] == "50g"
    assert big["settings"]["spark.worker.resource.gpu.amount"] == "8"
    assert big["settings"]["spark.executor.cores"] == "16"                    # 256 CPUs / 8, capped at 16
    assert big["settings"]["spark.task.resource.gpu.amount"] == "0.0625"
    assert big["settings"]["spark.rapids.memory.pinnedPool.size"] == "4g"     # 1 TiB host
    assert big["settings"]["spark.executor.memoryOverhead"] == "14g"          # 4g pinned + max(10g, 8g direct)
    assert small["settings"]["spark.executor.memoryOverhead"] == "12g"        # 4g pinned + max(5g, 8g direct)
    assert big["settings"]["spark.sql.shuffle.partitions"] == "32"           # 8 GPUs x 4 concurrent


def test_overrides_win_over_facts_and_user_wins_over_sizing():
    norm = ok(config(__nvidia_smi_facts=facts(40960, count=4), spark_rapids_gpu_memory_mib=81920,
                     spark_rapids_gpus_per_node=2,
                     spark_rapids_settings={"spark.executor.cores": 4}))
    assert norm["settings"]["spark.executor.memory"] == "98g"
    assert norm["settings"]["spark.worker.resource.gpu.amount"] == "2"
    assert norm["settings"]["spark.executor.cores"] == "4"
    assert norm["overridden"] == ["spark.executor.cores"]


def test_heterogeneous_gpus_size_on_the_smallest():
    f = facts(81920)
    f["gpus"][3]["memory_total_mib"] = 40960
    result = validate(config(spark_rapids_gpus_per_node=None, spark_rapids_gpu_memory_mib=None,
                             __nvidia_smi_facts=f))
    assert result.normalized["settings"]["spark.executor.memory"] == "50g"
    assert any("differ in memory" in w for w in result.warnings)


# --------------------------------------------------------------------- must-show rules
def test_pooling_enabled_is_translated_on_25_04_naming_the_replacement():
    result = validate(config(spark_rapids_settings={"spark.rapids.memory.gpu.pooling.enabled": False}))
    assert result.errors == []
    settings = result.normalized["settings"]
    assert "spark.rapids.memory.gpu.pooling.enabled" not in settings
    assert settings["spark.rapids.memory.gpu.pool"] == "NONE"
    assert any("spark.rapids.memory.gpu.pool" in w and "25.04" in w for w in result.warnings)


def test_pooling_enabled_is_refused_on_request_naming_the_replacement():
    result = validate(config(spark_rapids_deprecated_keys="refuse",
                             spark_rapids_settings={"spark.rapids.memory.gpu.pooling.enabled": True}))
    assert len(result.errors) == 1
    assert "spark.rapids.memory.gpu.pooling.enabled" in result.errors[0]
    assert "use spark.rapids.memory.gpu.pool instead" in result.errors[0]


def test_pooling_enabled_is_kept_before_25_04():
    result = validate(config(spark_rapids_plugin_version="24.12.0",
                             spark_rapids_settings={"spark.rapids.memory.gpu.pooling.enabled": True}))
    assert result.errors == []
    assert result.normalized["settings"]["spark.rapids.memory.gpu.pooling.enabled"] == "true"
    assert any("deprecated" in w for w in result.warnings)


def test_misspelled_key_is_refused_with_a_suggestion():
    result = validate(config(spark_rapids_settings={"spark.rapids.sql.enable": True}))
    assert len(result.errors) == 1
    assert "spark_rapids_settings['spark.rapids.sql.enable']" in result.errors[0]
    assert "did you mean spark.rapids.sql.enabled" in result.errors[0]
    assert result.normalized == {}


# ------------------------------------------------------------- bad inputs (each names the key)
BAD = [
    ({"spark_rapids_settings": {"spark.rapids.sql.enable": True}}, "spark.rapids.sql.enable"),
    ({"spark_rapids_settings": {"spark.executor.resource.gpu.amount": 2}}, "spark.executor.resource.gpu.amount"),
    ({"spark_rapids_settings": {"spark.task.resource.gpu.amount": 0.7}}, "spark.task.resource.gpu.amount"),
    ({"spark_rapids_settings": {"spark.task.resource.gpu.amount": 2}}, "spark.task.resource.gpu.amount"),
    ({"spark_rapids_settings": {"spark.executor.memory": 4096}}, "spark.executor.memory"),
    ({"spark_rapids_settings": {"spark.executor.memory": "1.5g"}}, "spark.executor.memory"),
    ({"spark_rapids_settings": {"spark.sql.files.maxPartitionBytes": "32gib"}}, "spark.sql.files.maxPartitionBytes"),
    ({"spark_rapids_settings": {"spark.dynamicAllocation.enabled": "yes"}}, "spark.dynamicAllocation.enabled"),
    ({"spark_rapids_settings": {"spark.rapids.shuffle.mode": "ucx"}}, "spark.rapids.shuffle.mode"),
    ({"spark_rapids_settings": {"spark.rapids.memory.gpu.pool": "POOL"}}, "spark.rapids.memory.gpu.pool"),
    ({"spark_rapids_settings": {"spark.executor.extraJavaOptions": "-Xmx8g"}}, "spark.executor.extraJavaOptions"),
    ({"spark_rapids_settings": {"spark.driver.extraJavaOptions": "-Dspark.foo=1"}}, "spark.driver.extraJavaOptions"),
    ({"spark_rapids_settings": {"spark.app.name": '"quoted"'}}, "spark.app.name"),
    ({"spark_rapids_settings": {"spark.app.name": "x # comment"}}, "spark.app.name"),
    ({"spark_rapids_settings": {"spark.app.name": "a\nb"}}, "spark.app.name"),
    ({"spark_rapids_settings": {"spark.app.name": " padded"}}, "spark.app.name"),
    ({"spark_rapids_settings": {"spark.locality.wait": "3"}}, "spark.locality.wait"),
    ({"spark_rapids_settings": {"spark.executor.cores": 0}}, "spark.executor.cores"),
    ({"spark_rapids_settings": {"spark.executor.minMemoryOverhead": "1g"}}, "spark.executor.minMemoryOverhead"),
    ({"spark_rapids_settings": {"spark.rapids.sql.concurrentGpuTasks.dynamic": True},
      "spark_rapids_plugin_version": "24.12.0"}, "spark.rapids.sql.concurrentGpuTasks.dynamic"),
    ({"spark_rapids_settings": {"spark.rapids.memory.gpu.pooling.size": "12g"}}, "spark.rapids.memory.gpu.pooling.size"),
    ({"spark_rapids_settings": {"spark.executorEnv.BAD-NAME": "x"}}, "spark.executorEnv.BAD-NAME"),
    ({"spark_rapids_settings": {"spark bad": "x"}}, "spark bad"),
    ({"spark_rapids_settings": {"spark.shuffle.manager": "com.nvidia.spark.rapids.spark330.RapidsShuffleManager"}},
     "spark.shuffle.manager"),
    ({"spark_rapids_settings": {"spark.executor.memoryOverhead": "1g"}}, "spark.executor.memoryOverhead"),
    ({"spark_rapids_settings": {"spark.rapids.memory.gpu.allocFraction": 0.1}}, "spark.rapids.memory.gpu.allocFraction"),
    ({"spark_rapids_settings": {"spark.dynamicAllocation.minExecutors": 20,
                                "spark.dynamicAllocation.maxExecutors": 4}}, "spark.dynamicAllocation.minExecutors"),
    ({"spark_rapids_settings": {"spark.rapids.memory.gpu.pool": "ARENA",
                                "spark.rapids.memory.gpu.pooling.enabled": False}},
     "spark.rapids.memory.gpu.pooling.enabled"),
    ({"spark_rapids_shuffle_mode": "UCX", "spark_rapids_profile": "benchmark",
      "spark_rapids_settings": {"spark.shuffle.service.enabled": True}}, "spark.shuffle.service.enabled"),
    ({"spark_rapids_shuffle_mode": "UCX", "spark_rapids_profile": "benchmark",
      "spark_rapids_settings": {"spark.authenticate": True}}, "spark.authenticate"),
    ({"spark_rapids_settings": {"spark.executor.memory": ["98g"]}}, "spark.executor.memory"),
    ({"spark_rapids_spark_version": "3.5"}, "spark_rapids_spark_version"),
    ({"spark_rapids_spark_version": "2.4.8"}, "spark_rapids_spark_version"),
    ({"spark_rapids_plugin_version": "22.12.0"}, "spark_rapids_plugin_version"),
    ({"spark_rapids_profile": "prod"}, "spark_rapids_profile"),
    ({"spark_rapids_shuffle_mode": "ucx"}, "spark_rapids_shuffle_mode"),
    ({"spark_rapids_gpus_per_node": -1}, "spark_rapids_gpus_per_node"),
    ({"spark_rapids_gpus_per_node": None}, "spark_rapids_gpus_per_node"),
    ({"spark_rapids_gpu_memory_mib": None}, "spark_rapids_gpu_memory_mib"),
    ({"spark_rapids_discovery_script_path": "relative/script"}, "spark_rapids_discovery_script_path"),
    ({"spark_rapids_jar_path": "/opt/rapids.zip"}, "spark_rapids_jar_path"),
    ({"spark_rapids_jar_url": "https://example.invalid/r.jar", "spark_rapids_jar_path": "/opt/r.jar"},
     "spark_rapids_jar_checksum"),
    ({"spark_rapids_install": True}, "spark_rapids_spark_tarball"),
    ({"spark_rapids_install": True, "spark_rapids_spark_tarball": "https://example.invalid/spark.tgz"},
     "spark_rapids_spark_tarball_checksum"),
    ({"spark_rapids_allowed_extra_keys": ["foo.bar"]}, "spark_rapids_allowed_extra_keys"),
    ({"spark_rapids_env": {"BAD NAME": "x"}}, "spark_rapids_env"),
    ({"spark_rapids_cluster_manager": "kubernetes", "spark_rapids_dynamic_allocation_shuffle": "service"},
     "spark.shuffle.service.enabled"),
    ({"__nvidia_smi_facts": facts(81920, mig=[0, 1]), "spark_rapids_gpus_per_node": None,
      "spark_rapids_gpu_memory_mib": None, "spark_rapids_cluster_manager": "yarn"}, "spark_rapids_gpu_memory_mib"),
    ({"__nvidia_smi_facts": facts(81920, mig=[0])}, "spark_rapids_cluster_manager"),
]


@pytest.mark.parametrize("overrides, name", BAD, ids=[name for _o, name in BAD])
def test_bad_input_is_refused_naming_the_key(overrides, name):
    result = validate(config(**overrides))
    assert result.errors, "accepted: %r" % (overrides,)
    assert any(name in e for e in result.errors), result.errors
    assert all("allowed:" in e for e in result.errors)
    assert result.normalized == {}


def test_bad_inputs_are_at_least_fifteen_distinct_keys():
    assert len({name for _o, name in BAD}) >= 15


def test_every_error_is_reported_at_once():
    result = validate(config(spark_rapids_profile="prod", spark_rapids_shuffle_mode="x",
                             spark_rapids_spark_version="3"))
    assert len(result.errors) == 3


# ------------------------------------------------------------------------ good inputs
def test_allowed_extra_keys_pass_untyped():
    norm = ok(config(spark_rapids_allowed_extra_keys=["spark.custom.*", "spark.sql.legacy.timeParserPolicy"],
                     spark_rapids_settings={"spark.custom.a.b": "v", "spark.sql.legacy.timeParserPolicy": "LEGACY"}))
    assert norm["settings"]["spark.custom.a.b"] == "v"


def test_profiles_production_and_benchmark():
    prod = ok(config(spark_rapids_cluster_nodes=4))["settings"]
    assert prod["spark.dynamicAllocation.enabled"] == "true"
    assert prod["spark.shuffle.service.enabled"] == "true"
    assert prod["spark.dynamicAllocation.maxExecutors"] == "32"
    bench = ok(config(spark_rapids_profile="benchmark", spark_rapids_cluster_nodes=4))["settings"]
    assert bench["spark.dynamicAllocation.enabled"] == "false"
    assert bench["spark.executor.instances"] == "32"
    assert "spark.dynamicAllocation.maxExecutors" not in bench


def test_ucx_shuffle_settings_and_tracking():
    norm = ok(config(spark_rapids_shuffle_mode="UCX", spark_rapids_spark_version="4.0.0",
                     spark_rapids_ucx_env={"UCX_TLS": "cuda_copy,cuda_ipc,rc,tcp"}))
    s = norm["settings"]
    assert s["spark.shuffle.manager"] == "com.nvidia.spark.rapids.spark400.RapidsShuffleManager"
    assert s["spark.rapids.shuffle.mode"] == "UCX"
    assert s["spark.shuffle.service.enabled"] == "false"
    assert s["spark.dynamicAllocation.shuffleTracking.enabled"] == "true"
    assert s["spark.executorEnv.UCX_ERROR_SIGNALS"] == ""
    assert s["spark.executorEnv.UCX_TLS"] == "cuda_copy,cuda_ipc,rc,tcp"


def test_mig_with_overrides_on_yarn():
    norm = ok(config(__nvidia_smi_facts=facts(81920, mig=[0, 1]), spark_rapids_cluster_manager="yarn",
                     spark_rapids_gpus_per_node=14, spark_rapids_gpu_memory_mib=9984))
    assert norm["settings"]["spark.executor.memory"] == "14g"   # 10 GiB x 1.2 + 2
    assert "spark.worker.resource.gpu.amount" not in norm["settings"]


# ------------------------------------------------------------------- rendering / filter
@pytest.mark.parametrize("value, line", [
    ("98g", "spark.x 98g"),
    ("", "spark.x"),
    ("C:\\tmp", "spark.x C:\\\\tmp"),
    ("=a", "spark.x \\=a"),
    (":a", "spark.x \\:a"),
    ("a b  c", "spark.x a b  c"),
])
def test_properties_line(value, line):
    assert spark_properties_line(value, "spark.x") == line


def test_template_renders_sorted_unique_lines():
    norm = ok(config(spark_rapids_settings={"spark.app.name": "a=b"}))
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")),
                             keep_trailing_newline=True, trim_blocks=True)  # as Ansible's template module
    env.filters["dgxops.fleet.spark_properties_line"] = spark_properties_line
    text = env.get_template("spark-defaults.conf.j2").render(
        __spark_rapids_config=norm, __spark_rapids_managed_header="hdr", spark_rapids_spark_version="3.5.1",
        spark_rapids_plugin_version="25.08.0")
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == sorted(body) and len(body) == len(norm["settings"])
    assert "spark.app.name a=b" in body


# ------------------------------------------------------- discovery script vs fake nvidia-smi
@pytest.fixture
def discovery(tmp_path):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROLE, "templates")))
    env.filters["to_json"] = json.dumps
    script = tmp_path / "discovery.py"
    # The role copies gpu_discovery.py and nvidia_smi_parse.py to the lib dir; here they are read in place.
    script.write_text(env.get_template("gpu-discovery.py.j2").render(
        spark_rapids_discovery_python=sys.executable, spark_rapids_nvidia_smi_path=str(tmp_path / "nvidia-smi"),
        __spark_rapids_discovery_lib_dir=os.path.join(ROOT, "plugins", "module_utils"),
        __spark_rapids_managed_header="hdr", __spark_rapids_config={"discovery": {"mig_address": "index"}}))
    smi = tmp_path / "nvidia-smi"
    calls = tmp_path / "calls.log"
    smi.write_text("#!/bin/sh\necho \"$*\" >> %s\nexec %s -m dgxops.sim.fakesmi \"$@\"\n" % (calls, sys.executable))
    smi.chmod(0o755)
    state = tmp_path / "sim"
    state.mkdir()
    env_vars = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), DGXOPS_SIM_STATE_DIR=str(state))

    def sim(*args):
        return subprocess.run([str(smi)] + list(args), env=env_vars, capture_output=True, text=True, timeout=60, check=False)

    def admin(*args):
        return subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi.admin"] + list(args), env=env_vars,
                              capture_output=True, text=True, timeout=60, check=True)

    def run(*args):
        return subprocess.run([sys.executable, str(script)] + list(args), env=env_vars, capture_output=True,
                              text=True, timeout=60, check=False)

    def smi_calls():
        return calls.read_text().splitlines() if calls.exists() else []
    return {"run": run, "admin": admin, "sim": sim, "calls": smi_calls}


def test_discovery_lists_gpu_indexes(discovery):
    discovery["admin"]("init", "--model", "dgx-a100-80gb", "--driver", "580.95.05")
    proc = discovery["run"]()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"name": "gpu", "addresses": [str(i) for i in range(8)]}
    # no GPU in MIG mode: one nvidia-smi process, no -L
    assert discovery["calls"]() == [" ".join(gpu_discovery.QUERY_ARGS)]


def test_discovery_lists_mig_devices(discovery):
    discovery["admin"]("init", "--model", "dgx-a100-80gb", "--driver", "580.95.05")
    enable = discovery["sim"]("-i", "0", "-mig", "1")
    assert enable.returncode == 0, enable.stdout + enable.stderr
    discovery["admin"]("reset")  # A100: MIG mode becomes current after a reset
    create = discovery["sim"]("mig", "-i", "0", "-cgi", "19,19,19", "-C")
    assert create.returncode == 0, create.stdout + create.stderr
    listing = discovery["sim"]("-L").stdout
    mig_uuids = [line.split("UUID: ")[1].rstrip(")") for line in listing.splitlines() if "MIG" in line]
    assert len(mig_uuids) == 3
    before = len(discovery["calls"]())
    proc = discovery["run"]()
    # a GPU in MIG mode: the query, then the listing of its MIG devices
    assert discovery["calls"]()[before:] == [" ".join(gpu_discovery.QUERY_ARGS), "-L"]
    assert proc.returncode == 0, proc.stderr
    # GPU 0 contributes its 3 MIG devices, GPUs 1-7 themselves: 10 CUDA ordinals.
    assert json.loads(proc.stdout)["addresses"] == [str(i) for i in range(10)]
    assert "mixes whole GPUs and MIG devices" in proc.stderr
    uuids = discovery["run"]("--mig-address", "uuid")
    assert json.loads(uuids.stdout)["addresses"][:3] == mig_uuids
    visible = discovery["run"]("--cuda-visible-devices").stdout.strip().split(",")
    assert visible[:3] == mig_uuids and visible[3].startswith("GPU-")


def test_discovery_skips_mig_gpu_without_devices(discovery):
    discovery["admin"]("init", "--model", "dgx-h200", "--driver", "580.95.05")
    assert discovery["sim"]("-i", "7", "-mig", "1").returncode == 0
    proc = discovery["run"]()
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["addresses"] == [str(i) for i in range(7)]
    assert "GPU 7 is in MIG mode but has no MIG devices" in proc.stderr


def test_discovery_fails_loudly_without_nvidia_smi(tmp_path, discovery):
    proc = discovery["run"]("--nvidia-smi", str(tmp_path / "missing"))
    assert proc.returncode == 1
    assert "cannot run" in proc.stderr and proc.stdout == ""


# ------------------------------------------------------------------------ cluster size
def _max_executors(**overrides):
    norm = ok(config(**overrides))
    return int(norm["settings"]["spark.dynamicAllocation.maxExecutors"])


def test_cluster_size_from_play_hosts_when_nothing_is_set():
    assert _max_executors(spark_rapids_cluster_nodes=None, __play_hosts_count=4) == 32


def test_cluster_group_counts_the_group_not_the_play():
    # a run limited to one host of a 16-node group still sizes for 16 nodes
    assert _max_executors(spark_rapids_cluster_nodes=None, spark_rapids_cluster_group="dgx_h100",
                          __cluster_group_size=16, __play_hosts_count=1, __limit="dgx-h100-03") == 128


def test_cluster_nodes_wins_over_the_group():
    assert _max_executors(spark_rapids_cluster_nodes=2, spark_rapids_cluster_group="dgx_h100",
                          __cluster_group_size=16) == 16


def test_limited_run_without_cluster_size_is_refused():
    result = validate(config(spark_rapids_cluster_nodes=None, __play_hosts_count=1, __limit="dgx-h100-03"))
    assert len(result.errors) == 1
    assert "spark_rapids_cluster_nodes" in result.errors[0]
    assert "--limit dgx-h100-03" in result.errors[0]
    assert "spark_rapids_cluster_group" in result.errors[0]


@pytest.mark.parametrize("size, allowed", [(None, "a group in this inventory"), (0, "at least one host")])
def test_unknown_or_empty_cluster_group_is_refused(size, allowed):
    result = validate(config(spark_rapids_cluster_nodes=None, spark_rapids_cluster_group="dgx_h1000",
                             __cluster_group_size=size))
    assert len(result.errors) == 1
    assert "spark_rapids_cluster_group" in result.errors[0] and "dgx_h1000" in result.errors[0]
    assert allowed in result.errors[0]


# --------------------------------------------------------------------------- shared type helpers
@pytest.mark.parametrize("value", ["8", " 8 ", "+8", 8.0, "8.0"])
def test_hardware_overrides_read_as_the_argument_specs_read_them(value):
    sizing = ok(config(spark_rapids_gpus_per_node=value))["sizing"]
    assert sizing["gpus_per_node"] == 8


@pytest.mark.parametrize("value", [True, "0", "-8", 8.5, "8 GPUs"])
def test_hardware_overrides_refuse_what_is_no_positive_integer(value):
    errors = validate(config(spark_rapids_gpus_per_node=value)).errors
    assert errors[0] == ("spark_rapids_gpus_per_node: invalid value %r; allowed: a positive whole number, "
                         "or null to use the GPU facts" % (value,))


@pytest.mark.parametrize("variable", ["spark_rapids_plugin_enabled", "spark_rapids_install"])
def test_switches_stay_yaml_booleans(variable):
    errors = validate(config(**{variable: "yes"})).errors
    assert errors == ["%s: invalid value 'yes'; allowed: true or false" % variable]
