"""Verify spark_rapids on simulated DGX A100 80GB and H200 nodes (testinfra, docker backend)."""

import json
import os
import re
import subprocess

# nvidia-smi memory.total: A100-SXM4-80GB 81920 MiB -> 80 GiB -> ceil(80 x 1.2) + 2 = 98g;
# H200 143771 MiB -> 140 GiB -> ceil(140 x 1.2) + 2 = 170g.
EXPECTED = {
    "spark-a100-80gb": {"spark.executor.memory": "98g", "spark.executor.memoryOverhead": "14g",
                        "spark.rapids.sql.concurrentGpuTasks": "4"},
    "spark-h200": {"spark.executor.memory": "170g", "spark.executor.memoryOverhead": "21g",
                   "spark.rapids.sql.concurrentGpuTasks": "4"},
    # DGX Spark: 128 GiB shared; 16 GiB for the OS, 56 GiB RAPIDS pool (allocFraction 56/128),
    # heap 44g + overhead 4g pinned + 8g direct = 56 GiB: every byte counted once.
    "spark-gb10": {"spark.executor.memory": "44g", "spark.executor.memoryOverhead": "12g",
                   "spark.rapids.memory.gpu.allocFraction": "0.4375",
                   "spark.rapids.memory.gpu.maxAllocFraction": "0.4375",
                   "spark.rapids.sql.concurrentGpuTasks": "4"},
}
GPUS = {"spark-a100-80gb": 8, "spark-h200": 8, "spark-gb10": 1}


def _conf(host):
    text = host.file("/opt/spark/conf/spark-defaults.conf").content_string
    pairs = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            assert key not in pairs
            pairs[key] = value
    return pairs


def test_executor_memory_follows_gpu_memory(host):
    name = host.backend.get_hostname()
    conf = _conf(host)
    for key, value in EXPECTED[name].items():
        assert conf[key] == value, (key, conf[key])
    assert conf["spark.executor.resource.gpu.amount"] == "1"
    assert conf["spark.worker.resource.gpu.amount"] == str(GPUS[name])
    assert conf["spark.executor.cores"] == "16"
    assert conf["spark.task.resource.gpu.amount"] == "0.0625"
    assert conf["spark.rapids.memory.gpu.pool"] == "ASYNC"
    assert "spark.rapids.memory.gpu.pooling.enabled" not in conf
    assert conf["spark.shuffle.manager"] == "com.nvidia.spark.rapids.spark351.RapidsShuffleManager"


# converge.yml's spark_rapids_settings: the spark-rapids keys of issue #20 item 7, passed through as given
UPSTREAM_KEYS = {"spark.rapids.memory.host.offHeapLimit.enabled": "true",
                 "spark.rapids.memory.host.spillStorageSize": "-1",
                 "spark.rapids.sql.maxConcurrentGpuTasks": "8",
                 "spark.rapids.filecache.enabled": "true",
                 "spark.rapids.sql.metrics.level": "moderate"}


def test_upstream_keys_are_rendered(host):
    conf = _conf(host)
    for key, value in UPSTREAM_KEYS.items():
        assert conf.get(key) == value, (key, conf.get(key))
    size = "16g" if host.backend.get_hostname() == "spark-gb10" else "64g"
    assert conf.get("spark.rapids.memory.host.offHeapLimit.size") == size


def test_file_mode_and_owner(host):
    conf = host.file("/opt/spark/conf/spark-defaults.conf")
    assert conf.user == "root" and conf.mode == 0o644


def test_discovery_script_lists_the_gpus(host):
    out = host.check_output("/usr/local/bin/dgxops-spark-gpu-discovery")
    assert json.loads(out) == {"name": "gpu", "addresses": [str(i) for i in range(GPUS[host.backend.get_hostname()])]}


def _converge(host, *args):
    playbook = os.path.join(os.path.dirname(__file__), "..", "converge.yml")
    proc = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], playbook, "--limit",
         host.backend.get_hostname()] + list(args),
        capture_output=True, text=True, env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"), check=False,
    )
    return proc.returncode, " ".join(re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr).split())


def test_misspelled_key_fails_before_changes(host):
    before = host.file("/opt/spark/conf/spark-defaults.conf").content_string
    extra = {"spark_rapids_settings": {"spark.rapids.sql.enable": True}}
    rc, text = _converge(host, "-e", json.dumps(extra))
    assert rc != 0
    # YAML result output wraps long lines: compare on normalised text.
    text = text.replace("''", "'")
    assert "spark_rapids_settings['spark.rapids.sql.enable']" in text, text[-3000:]
    assert "did you mean spark.rapids.sql.enabled" in text, text[-3000:]
    assert re.search(r"changed=0 ", text), text[-3000:]
    assert host.file("/opt/spark/conf/spark-defaults.conf").content_string == before


def test_limited_run_keeps_the_cluster_size(host):
    # the two DGX nodes form one cluster (2 x 8 GPUs), the DGX Spark its own (1 GPU)
    conf = host.file("/opt/spark/conf/spark-defaults.conf").content_string
    expected = 1 if GPUS[host.backend.get_hostname()] == 1 else 16
    assert "spark.dynamicAllocation.maxExecutors %d" % expected in conf.splitlines()
    rc, text = _converge(host, "--check", "--diff")
    assert rc == 0, text[-3000:]
    assert re.search(r"changed=0 ", text), text[-3000:]


def test_limited_run_without_cluster_size_is_refused(host):
    before = host.file("/opt/spark/conf/spark-defaults.conf").content_string
    rc, text = _converge(host, "-e", json.dumps({"spark_rapids_cluster_group": None, "spark_rapids_cluster_nodes": None}))
    assert rc != 0
    assert "spark_rapids_cluster_nodes" in text and "--limit %s" % host.backend.get_hostname() in text, text[-3000:]
    assert host.file("/opt/spark/conf/spark-defaults.conf").content_string == before


def test_spark_version_without_a_shim_fails_before_changes(host):
    """spark-rapids 25.08 ships no Spark 4.1 shim: refused, with the supported versions, nothing changed."""
    before = host.file("/opt/spark/conf/spark-defaults.conf").content_string
    rc, text = _converge(host, "-e", json.dumps({"spark_rapids_spark_version": "4.1.0"}))
    assert rc != 0
    assert "spark_rapids_spark_version" in text and "3.5.6, 4.0.0" in text, text[-3000:]
    assert re.search(r"changed=0 ", text), text[-3000:]
    assert host.file("/opt/spark/conf/spark-defaults.conf").content_string == before


def test_max_concurrent_gpu_tasks_needs_a_plugin_that_has_it(host):
    """spark.rapids.sql.maxConcurrentGpuTasks came with spark-rapids 25.06: refused on 24.12, nothing changed."""
    before = host.file("/opt/spark/conf/spark-defaults.conf").content_string
    rc, text = _converge(host, "-e", json.dumps({"spark_rapids_plugin_version": "24.12.0"}))
    assert rc != 0
    text = text.replace("''", "'")
    assert "spark.rapids.sql.maxConcurrentGpuTasks" in text and "needs spark-rapids >= 25.06" in text, text[-3000:]
    assert re.search(r"changed=0 ", text), text[-3000:]
    assert host.file("/opt/spark/conf/spark-defaults.conf").content_string == before
