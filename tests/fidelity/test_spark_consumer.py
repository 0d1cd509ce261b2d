"""Real consumer: Spark (pyspark from PyPI, local mode, Java 17) loads the
spark-defaults.conf rendered by the spark_rapids role's real template.

One ansible-playbook run renders the file into a temp SPARK_CONF_DIR on
localhost; one JVM then starts a SparkSession on it and:

* every rendered key reads back unchanged through
  spark.sparkContext.getConf() -- except the keys naming classes from the
  RAPIDS jar (spark.plugins, spark.shuffle.manager), which the test JVM
  cannot load.  Those are handled explicitly, never dropped: the test proves
  the jar is absent (Class.forName fails), reads them back from what
  spark-submit itself parsed from the file (the JVM system properties), and
  only then overrides them for the session;
* Spark's own byte-string parser (JavaUtils.byteStringAsBytes) accepts every
  size the role wrote;
* a small write-then-read SQL query runs (forces the lazy spark.sql.* checks).
"""
import grp
import json
import os
import pwd
import shutil
import subprocess
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
PLAYBOOK_BIN = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")

pyspark = pytest.importorskip("pyspark")
if shutil.which("java") is None:  # pragma: no cover - environment guard
    pytest.skip("java is not installed", allow_module_level=True)

# The guides' settings (guide 000 section 2.2 and 5.2, guide 001 sections 2.2 and 4.1), as a user
# would write them, plus values that exercise the escaping rules.
GUIDE_SETTINGS = {
    "spark.executor.resource.gpu.amount": 1,
    "spark.rapids.sql.enabled": True,
    "spark.rapids.memory.gpu.pooling.enabled": True,   # translated to spark.rapids.memory.gpu.pool
    "spark.sql.files.maxPartitionBytes": "256m",
    "spark.executor.memoryOverhead": "4g",
    "spark.executor.extraJavaOptions": "-XX:MaxDirectMemorySize=8g",
    "spark.rapids.sql.concurrentGpuTasks": 2,
    "spark.locality.wait": "0s",
    # escaping: backslashes, an empty value, a leading '=' and ':' (Properties would eat them), unicode
    "spark.executorEnv.DGXOPS_WINPATH": "C:\\tmp\\new\\u0041",
    "spark.executorEnv.UCX_ERROR_SIGNALS": "",
    "spark.executorEnv.DGXOPS_EQ": "=a=b",
    "spark.executorEnv.DGXOPS_COLON": ":x",
    "spark.executorEnv.DGXOPS_UTF8": "Grüße",
}

# Keys that Spark's local mode cannot honour (no executor resources): removed from the session only
# after the test has read them back from what spark-submit parsed.
LOCAL_MODE_KEYS = ["spark.task.resource.gpu.amount"]

SESSION_SCRIPT = textwrap.dedent(r'''
    import json, os, sys
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    expected = json.load(open(sys.argv[1]))
    jar_keys = json.load(open(sys.argv[2]))
    local_only = json.load(open(sys.argv[5]))
    discovery = sys.argv[6]
    # SparkConf(loadDefaults=True) holds what spark-submit parsed from $SPARK_CONF_DIR/spark-defaults.conf.
    SparkContext._ensure_initialized()  # launches the JVM through spark-submit (the one JVM start)
    conf = SparkConf()
    jvm = SparkContext._jvm
    assert conf._jconf is not None
    report = {"parsed": {k: conf.get(k, None) for k in expected}, "readback": {}, "sysprops": {},
              "class_missing": {}, "bytes": {}, "query": None, "removed": sorted(jar_keys + local_only)}
    for key in jar_keys:
        report["sysprops"][key] = jvm.java.lang.System.getProperty(key)
        cls = expected[key].split(",")[0]
        try:
            jvm.java.lang.Class.forName(cls)
            report["class_missing"][cls] = False
        except Exception:
            report["class_missing"][cls] = True
    # Explicitly removed for this local JVM only (asserted above / by the test): classes from the RAPIDS
    # jar, which is not on this JVM's classpath, and the task GPU request, which local mode cannot
    # schedule (its single executor offers no resources).
    for key in jar_keys + local_only:
        conf._jconf.remove(key)
    # Let the driver discover GPUs with the role's own discovery script (fake nvidia-smi behind it).
    conf.set("spark.driver.resource.gpu.amount", "1").set("spark.driver.resource.gpu.discoveryScript", discovery)
    conf.setMaster("local[1]").setAppName("dgxops-spark-consumer")
    sc = SparkContext(conf=conf)
    spark = SparkSession(sc)
    report["spark_version"] = spark.version
    # pyspark's getConf() re-reads the defaults spark-submit loaded; the JVM context's own conf is what
    # the running context uses (there the removed keys must be absent).
    pyconf = sc.getConf()
    report["getconf"] = {key: pyconf.get(key, None) for key in expected}
    running = sc._jsc.sc().getConf()
    for key in expected:
        report["readback"][key] = running.get(key) if running.contains(key) else None
    report["gpu_addresses"] = list(sc.resources["gpu"].addresses)
    ju = jvm.org.apache.spark.network.util.JavaUtils
    for key in json.load(open(sys.argv[3])):
        report["bytes"][key] = ju.byteStringAsBytes(expected[key])
    out = os.path.join(sys.argv[4], "t.parquet")
    spark.range(0, 1000).selectExpr("id % 7 AS k", "id AS v").write.mode("overwrite").parquet(out)
    rows = spark.read.parquet(out).groupBy("k").count().orderBy("k").collect()
    report["query"] = [[r["k"], r["count"]] for r in rows]
    spark.stop()
    print("REPORT " + json.dumps(report))
''')


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spark_consumer")
    # Rendered for Spark 4.0.0, the newest release spark-rapids 25.08 ships a shim for (the role refuses
    # 4.1+); the keys are read back by the pyspark in .venv (4.3), whose parser is the same.
    spark_version = "4.0.0"
    extra_vars = {
        "ansible_python_interpreter": VENV_PY,
        "spark_rapids_spark_home": str(tmp / "spark"),
        "spark_rapids_conf_owner": pwd.getpwuid(os.getuid()).pw_name,
        "spark_rapids_conf_group": grp.getgrgid(os.getgid()).gr_name,
        "spark_rapids_discovery_script_path": str(tmp / "bin" / "gpu-discovery"),
        "spark_rapids_discovery_check": True,
        "spark_rapids_nvidia_smi_path": str(tmp / "bin" / "nvidia-smi"),
        "spark_rapids_discovery_python": VENV_PY,
        "spark_rapids_backup": False,
        "spark_rapids_spark_version": spark_version,
        "spark_rapids_plugin_version": "25.08.0",
        # A DGX A100 80GB node, without the facts module.
        "spark_rapids_gpus_per_node": 8,
        "spark_rapids_gpu_memory_mib": 81920,
        "spark_rapids_cpus_per_node": 256,
        "spark_rapids_host_memory_mib": 1048576,
        "spark_rapids_cluster_nodes": 2,
        "spark_rapids_settings": GUIDE_SETTINGS,
    }
    (tmp / "bin").mkdir()
    # A simulated DGX A100 80GB behind a fake nvidia-smi (dgxops.sim.fakesmi) for the discovery script.
    sim = tmp / "sim"
    sim.mkdir()
    sim_env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), DGXOPS_SIM_STATE_DIR=str(sim))
    subprocess.run([VENV_PY, "-m", "dgxops.sim.fakesmi.admin", "init", "--model", "dgx-a100-80gb",
                    "--driver", "580.95.05"], env=sim_env, check=True, capture_output=True, timeout=60)
    smi = tmp / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\nPYTHONPATH=%s DGXOPS_SIM_STATE_DIR=%s exec %s -m dgxops.sim.fakesmi \"$@\"\n"
                   % (os.path.join(ROOT, "src"), sim, VENV_PY))
    smi.chmod(0o755)
    (tmp / "vars.json").write_text(json.dumps(extra_vars))
    play = tmp / "play.yml"
    play.write_text(textwrap.dedent("""\
        - name: Render the spark_rapids configuration on localhost
          hosts: localhost
          gather_facts: false
          connection: local
          roles:
            - role: dgxops.fleet.spark_rapids
          post_tasks:
            - name: Save the validated settings
              ansible.builtin.copy:
                content: "{{ __spark_rapids_config | to_nice_json }}"
                dest: "%s"
                mode: "0644"
        """ % (tmp / "normalized.json")))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([PLAYBOOK_BIN, "-i", "localhost,", str(play), "-e", "@%s" % (tmp / "vars.json")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    normalized = json.loads((tmp / "normalized.json").read_text())
    conf_file = tmp / "spark" / "conf" / "spark-defaults.conf"
    return {"tmp": tmp, "conf_dir": conf_file.parent, "conf_file": conf_file, "normalized": normalized,
            "playbook_output": proc.stdout, "discovery_script": str(tmp / "bin" / "gpu-discovery")}


@pytest.fixture(scope="module")
def report(rendered):
    tmp = rendered["tmp"]
    settings = rendered["normalized"]["settings"]
    jar_keys = [k for k in rendered["normalized"]["jar_classes"]]
    byte_keys = [k for k in settings if k in (
        "spark.executor.memory", "spark.executor.memoryOverhead", "spark.rapids.memory.pinnedPool.size",
        "spark.sql.files.maxPartitionBytes")]
    (tmp / "expected.json").write_text(json.dumps(settings))
    (tmp / "jar_keys.json").write_text(json.dumps(jar_keys))
    (tmp / "byte_keys.json").write_text(json.dumps(byte_keys))
    (tmp / "session.py").write_text(SESSION_SCRIPT)
    (tmp / "local_only.json").write_text(json.dumps(LOCAL_MODE_KEYS))
    env = dict(os.environ, SPARK_CONF_DIR=str(rendered["conf_dir"]), PYSPARK_PYTHON=VENV_PY,
               PYSPARK_DRIVER_PYTHON=VENV_PY)
    env.pop("SPARK_HOME", None)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    proc = subprocess.run([VENV_PY, str(tmp / "session.py"), str(tmp / "expected.json"), str(tmp / "jar_keys.json"),
                           str(tmp / "byte_keys.json"), str(tmp), str(tmp / "local_only.json"),
                           rendered["discovery_script"]],
                          env=env, capture_output=True, text=True, timeout=420)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-4000:] + proc.stderr[-8000:]
    return json.loads(lines[-1][len("REPORT "):])


def test_rendered_file_has_guide_settings_and_sizing(rendered):
    text = rendered["conf_file"].read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    keys = [line.split(" ", 1)[0] for line in lines]
    assert keys == sorted(keys) and len(keys) == len(set(keys))
    assert "spark.executor.memory 98g" in lines            # 80 GiB x 1.2 + 2
    assert "spark.executor.memoryOverhead 4g" in lines     # the guide's value, kept as the user's override
    assert "spark.rapids.memory.gpu.pool ASYNC" in lines   # translated from pooling.enabled=true (>= 25.04)
    assert not any(k == "spark.rapids.memory.gpu.pooling.enabled" for k in keys)
    assert "spark.executorEnv.UCX_ERROR_SIGNALS" in lines  # empty value: bare key, no quotes
    assert "spark.executorEnv.DGXOPS_WINPATH C:\\\\tmp\\\\new\\\\u0041" in lines
    assert "spark.executorEnv.DGXOPS_EQ \\=a=b" in lines
    assert '"' not in text.replace('"key value"', "")


# A running SparkContext (Spark >= 3.3) prepends its own JVM module options (JavaModuleOptions:
# -XX:+IgnoreUnrecognizedVMOptions --add-opens=...) to extraJavaOptions.  That is Spark's doing, not a
# parse difference: the test checks the rendered options are the unchanged tail after Spark's prefix.
JVM_OPTION_KEYS = {"spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions"}


def _strip_spark_module_options(value, rendered):
    if value is None or value == rendered:
        return value
    assert value.endswith(" " + rendered), value
    prefix = value[: -len(rendered) - 1]
    assert "-XX:+IgnoreUnrecognizedVMOptions" in prefix and "--add-opens=" in prefix, prefix
    return rendered


def test_every_key_reads_back_unchanged(rendered, report):
    settings = rendered["normalized"]["settings"]
    jar_keys = set(rendered["normalized"]["jar_classes"])
    assert jar_keys == {"spark.plugins", "spark.shuffle.manager"}
    assert len(settings) >= 25
    # Every key, as spark-submit parsed the file, and through spark.sparkContext.getConf().
    assert {k: report["parsed"][k] for k in settings} == settings
    for source in ("getconf", "readback"):
        for key in JVM_OPTION_KEYS & set(settings):
            report[source][key] = _strip_spark_module_options(report[source][key], settings[key])
    assert {k: report["getconf"][k] for k in settings} == settings
    # And in the running SparkContext, for every key not removed for local mode.
    assert report["removed"] == sorted(jar_keys | set(LOCAL_MODE_KEYS))
    removed = set(report["removed"])
    assert {k: report["readback"][k] for k in removed} == {k: None for k in removed}
    mismatches = {k: (v, report["readback"][k]) for k, v in settings.items()
                  if k not in removed and report["readback"][k] != v}
    assert mismatches == {}
    # The user's values, exactly as given (booleans/ints rendered the way Spark spells them).
    assert report["readback"]["spark.executorEnv.DGXOPS_WINPATH"] == "C:\\tmp\\new\\u0041"
    assert report["readback"]["spark.executorEnv.UCX_ERROR_SIGNALS"] == ""
    assert report["readback"]["spark.executorEnv.DGXOPS_EQ"] == "=a=b"
    assert report["readback"]["spark.executorEnv.DGXOPS_COLON"] == ":x"
    assert report["readback"]["spark.executorEnv.DGXOPS_UTF8"] == "Grüße"
    assert report["readback"]["spark.rapids.sql.enabled"] == "true"
    assert report["readback"]["spark.executor.memory"] == "98g"


def test_jar_keys_parsed_by_spark_submit_and_jar_really_absent(rendered, report):
    settings = rendered["normalized"]["settings"]
    for key in rendered["normalized"]["jar_classes"]:
        assert report["sysprops"][key] == settings[key]
    assert report["class_missing"] == {"com.nvidia.spark.SQLPlugin": True,
                                       settings["spark.shuffle.manager"]: True}


def test_spark_accepts_the_discovery_script_output(report):
    assert report["gpu_addresses"] == [str(i) for i in range(8)]


def test_sizes_parse_with_sparks_own_parser(report):
    assert report["bytes"]["spark.executor.memory"] == 98 * 1024 ** 3
    assert report["bytes"]["spark.sql.files.maxPartitionBytes"] == 256 * 1024 ** 2
    assert report["bytes"]["spark.rapids.memory.pinnedPool.size"] == 4 * 1024 ** 3


def test_query_runs(report):
    assert report["spark_version"] == pyspark.__version__.split("+")[0]
    assert report["query"] == [[k, len([i for i in range(1000) if i % 7 == k])] for k in range(7)]
