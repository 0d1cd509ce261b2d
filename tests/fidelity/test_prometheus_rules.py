"""The advisor's rules against real consumers: promtool (Debian's `prometheus` package) and a real
Prometheus on 127.0.0.1 scraping a small exporter that serves DCGM-format metrics built from the
simulator's state. Every process is started under `timeout` and stops by itself.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from dgxops import advise

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES_FILE = os.path.join(ROOT, "roles", "monitoring", "files", "dgxops-gpu.rules.yml")
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")

pytestmark = [pytest.mark.consumer,
              pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")]

SCOPE_LABELS = {"job": "dcgm", "instance": "{host}:9400", "host": "{host}", "Hostname": "{host}"}
GPU_LABELS = {"gpu": "0", "UUID": "GPU-0000", "modelName": "NVIDIA H100 80GB HBM3", "device": "nvidia0"}
NODE_LABELS = {"job": "node", "instance": "{host}:9100", "host": "{host}"}


def _labels(host, node=False, extra=None):
    base = dict(NODE_LABELS) if node else dict(SCOPE_LABELS, **GPU_LABELS)
    out = {k: v.format(host=host) for k, v in base.items()}
    out.update(extra or {})
    return out


def _series(name, labels, values):
    return {"series": "%s{%s}" % (name, ",".join('%s="%s"' % kv for kv in sorted(labels.items()))),
            "values": values}


# rule -> (eval_time, {metric: firing values}, {metric: non-firing values}, value the alert carries,
#          node-level?, extra labels)
# Series are sampled every minute (interval 1m), 31 samples.
CASES = {
    "DgxGpuMemoryBandwidthBound": ("15m",
        {"DCGM_FI_PROF_SM_ACTIVE": "0.4x30", "DCGM_FI_PROF_DRAM_ACTIVE": "0.9x30"},
        # bandwidth high but SM at exactly the 60 % threshold: not memory-bound
        {"DCGM_FI_PROF_SM_ACTIVE": "0.6x30", "DCGM_FI_PROF_DRAM_ACTIVE": "0.9x30"}, 0.9, False, {}),
    "DgxGpuPcieRxSaturated": ("15m",
        {"DCGM_FI_PROF_PCIE_RX_BYTES": "30e9x30", "DCGM_FI_DEV_PCIE_LINK_GEN": "4x30", "DCGM_FI_DEV_PCIE_LINK_WIDTH": "16x30"},
        # the same rate on a Gen5 x16 link is under half of it
        {"DCGM_FI_PROF_PCIE_RX_BYTES": "30e9x30", "DCGM_FI_DEV_PCIE_LINK_GEN": "5x30", "DCGM_FI_DEV_PCIE_LINK_WIDTH": "16x30"},
        30e9 / (16 * (1e9 * 128 / 130) * 2 ** (4 - 3)), False, {}),
    "DgxGpuUnderutilised": ("20m",
        {"DCGM_FI_DEV_GPU_UTIL": "50x30", "DCGM_FI_DEV_FB_USED": "40000x30"},
        # idle GPU with no memory held: nobody is running, nothing to advise
        {"DCGM_FI_DEV_GPU_UTIL": "50x30", "DCGM_FI_DEV_FB_USED": "0x30"}, 50, False, {}),
    "DgxGpuThermalThrottling": ("10m",
        {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "64x30"},   # hw_thermal_slowdown
        {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "4x30"}, 64, False, {}),   # sw_power_cap only
    "DgxGpuHardwareSlowdown": ("5m",
        {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "136x30"},  # hw_slowdown + hw_power_brake
        {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "96x30"}, 136, False, {}),  # thermal bits only
    "DgxGpuPowerCapped": ("20m",
        {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "5x30"},    # gpu_idle + sw_power_cap
        {"DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "1x30"}, 5, False, {}),
    "DgxGpuXidFatal": ("5m",
        {"DCGM_FI_DEV_XID_ERRORS": "79x30"},
        {"DCGM_FI_DEV_XID_ERRORS": "13x30"}, 79, False, {}),
    "DgxGpuXidError": ("5m",
        {"DCGM_FI_DEV_XID_ERRORS": "13x30"},
        {"DCGM_FI_DEV_XID_ERRORS": "0x30"}, 13, False, {}),
    "DgxGpuEccDoubleBit": ("5m",
        {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "2x30"},
        {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "0x30"}, 2, False, {}),
    "DgxGpuRowRemapFailure": ("5m",
        {"DCGM_FI_DEV_ROW_REMAP_FAILURE": "1x30"},
        {"DCGM_FI_DEV_ROW_REMAP_FAILURE": "0x30"}, 1, False, {}),
    "DgxGpuRowRemapPending": ("5m",
        {"DCGM_FI_DEV_ROW_REMAP_PENDING": "1x30"},
        {"DCGM_FI_DEV_ROW_REMAP_PENDING": "0x30"}, 1, False, {}),
    "DgxGpuNvlinkErrors": ("15m",
        {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "0+5x30"},
        # a high but constant count (errors long ago): no increase in the last 10 minutes
        {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "500x30"}, 50, False, {}),
    "DgxGpuNvlinkRecoveryErrors": ("15m",
        {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "0+1x30"},
        {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "3x30"}, 10, False, {}),
    "DgxNodeIoWaitHigh": ("20m",
        {'node_cpu_seconds_total': "0+30x30"},   # 0.5 s of iowait per second
        {'node_cpu_seconds_total': "0+3x30"}, 0.5, True, {"cpu": "0", "mode": "iowait"}),
    "DgxopsConfigDrift": ("40m",
        {"dgxops_drift": "1x45"},
        {"dgxops_drift": "0x45"}, 1, True, {"item": "power_limit", "gpu": "0", "detail": "declared 500 W, actual 700 W"}),
    "DgxopsTextfileStale": ("25m",
        {"dgxops_collector_last_success_timestamp_seconds": "0x30"},       # last success at t=0
        {"dgxops_collector_last_success_timestamp_seconds": "0+60x30"},    # succeeds every minute
        1500, True, {}),
}


def _expected_labels(rule, host, node, extra):
    labels = _labels(host, node, extra)
    for dropped in ("cpu", "mode"):            # aggregated away by the iowait recording rule
        if rule.name == "DgxNodeIoWaitHigh":
            labels.pop(dropped, None)
    labels.update({"alertname": rule.name, "severity": rule.severity, "dgxops_scope": rule.scope})
    return labels


def _promtool_tests():
    tests = []
    for rule in advise.RULES:
        eval_time, firing, quiet, value, node, extra = CASES[rule.name]
        series = []
        for host, metrics in (("bad-node", firing), ("good-node", quiet)):
            for metric, values in metrics.items():
                series.append(_series(metric, _labels(host, node, extra), values))
        exp_labels = _expected_labels(rule, "bad-node", node, extra)
        annotations = {"summary": advise.render(rule.summary, exp_labels, value), "fix": rule.fix, "source": rule.source}
        tests.append({
            "name": rule.name,
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                # before `for:` has elapsed nothing fires (rules with for: 0m fire at once)
                {"eval_time": "0m",
                 "alertname": rule.name,
                 "exp_alerts": [] if rule.for_ != "0m" else ([] if rule.name in ("DgxGpuNvlinkErrors", "DgxGpuNvlinkRecoveryErrors")
                                                            else [{"exp_labels": exp_labels, "exp_annotations": annotations}])},
                {"eval_time": eval_time, "alertname": rule.name,
                 "exp_alerts": [{"exp_labels": exp_labels, "exp_annotations": annotations}]},
            ],
        })
    return tests


def test_cases_cover_every_rule():
    assert sorted(CASES) == sorted(r.name for r in advise.RULES)


def test_rules_file_is_the_generated_one():
    with open(RULES_FILE) as fh:
        assert fh.read() == advise.rules_yaml(), "regenerate: dgxops advise --emit-rules > %s" % RULES_FILE


def test_promtool_check_rules():
    proc = subprocess.run([PROMTOOL, "check", "rules", RULES_FILE], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(advise.RECORDING) + len(advise.RULES)
    assert "SUCCESS: %d rules found" % n in proc.stdout


def test_promtool_test_rules(tmp_path):
    test_file = tmp_path / "dgxops-gpu.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [RULES_FILE], "evaluation_interval": "1m",
                                         "tests": _promtool_tests()}, sort_keys=False))
    proc = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules_catches_a_wrong_expectation(tmp_path):
    """The harness can fail: expecting the healthy host to fire makes promtool report it."""
    tests = _promtool_tests()[:1]
    wrong = dict(tests[0]["alert_rule_test"][1]["exp_alerts"][0])
    wrong["exp_labels"] = dict(wrong["exp_labels"], host="good-node", instance="good-node:9400", Hostname="good-node")
    tests[0]["alert_rule_test"][1]["exp_alerts"] = [wrong]
    test_file = tmp_path / "wrong.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [RULES_FILE], "evaluation_interval": "1m", "tests": tests}))
    proc = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "good-node" in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# A real Prometheus on the loopback
# ---------------------------------------------------------------------------------------------

EXPORTER = r'''
import http.server, json, os, subprocess, sys, threading

hosts = json.loads(sys.argv[1])   # [{"host": ..., "port": ..., "state_dir": ..., "profile": {...}}]
src = sys.argv[2]


def gpus(state_dir):
    env = dict(os.environ, DGXOPS_SIM_STATE_DIR=state_dir, PYTHONPATH=src, LC_ALL="C")
    out = subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi",
                          "--query-gpu=index,uuid,name,pci.bus_id,driver_version", "--format=csv,noheader"],
                         env=env, capture_output=True, text=True, timeout=30, check=True).stdout
    return [[f.strip() for f in line.split(",")] for line in out.strip().splitlines()]


def render(h):
    lines = []
    for index, uuid, name, bus, driver in gpus(h["state_dir"]):
        labels = 'gpu="%s",UUID="%s",pci_bus_id="%s",device="nvidia%s",modelName="%s",Hostname="%s",DCGM_FI_DRIVER_VERSION="%s"' % (
            index, uuid, bus, index, name, h["host"], driver)
        for metric, value in sorted(h["profile"].items()):
            lines.append("%s{%s} %s" % (metric, labels, value))
    return "\n".join(lines) + "\n"


def serve(h):
    body = render(h).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", h["port"]), Handler).serve_forever()


for h in hosts:
    threading.Thread(target=serve, args=(h,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
'''

MEMBOUND = {"DCGM_FI_PROF_SM_ACTIVE": 0.40, "DCGM_FI_PROF_DRAM_ACTIVE": 0.90, "DCGM_FI_DEV_GPU_UTIL": 97,
            "DCGM_FI_DEV_FB_USED": 60000, "DCGM_FI_PROF_PCIE_RX_BYTES": 2.0e9, "DCGM_FI_PROF_PCIE_TX_BYTES": 1.0e9,
            "DCGM_FI_DEV_PCIE_LINK_GEN": 5, "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0,
            "DCGM_FI_DEV_XID_ERRORS": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0, "DCGM_FI_DEV_POWER_USAGE": 610.5}
HEALTHY = dict(MEMBOUND, DCGM_FI_PROF_SM_ACTIVE=0.85, DCGM_FI_PROF_DRAM_ACTIVE=0.50)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init_sim(state_dir, model):
    env = dict(os.environ, DGXOPS_SIM_STATE_DIR=str(state_dir), PYTHONPATH=os.path.join(ROOT, "src"))
    subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi.admin", "init", "--model", model, "--driver", "580.95.05"],
                   env=env, check=True, capture_output=True, timeout=30)


def _prom_query(port, q):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": q}))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as resp:
        return json.loads(resp.read())["data"]["result"]


@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed")
def test_advise_against_real_prometheus(tmp_path):
    for name, model in (("mem", "dgx-h100"), ("ok", "dgx-a100-80gb")):
        _init_sim(tmp_path / name, model)
    ports = {"exp_mem": _free_port(), "exp_ok": _free_port(), "prom": _free_port()}
    hosts = [{"host": "dgx-membound", "port": ports["exp_mem"], "state_dir": str(tmp_path / "mem"), "profile": MEMBOUND},
             {"host": "dgx-healthy", "port": ports["exp_ok"], "state_dir": str(tmp_path / "ok"), "profile": HEALTHY}]
    (tmp_path / "exporter.py").write_text(EXPORTER)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [RULES_FILE],
        "scrape_configs": [{"job_name": "dcgm", "static_configs": [
            {"targets": ["127.0.0.1:%d" % h["port"]], "labels": {"host": h["host"]}} for h in hosts]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    exporter = subprocess.Popen(["timeout", "120", sys.executable, str(tmp_path / "exporter.py"), json.dumps(hosts),
                                 os.path.join(ROOT, "src")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    prom = subprocess.Popen(["timeout", "120", PROMETHEUS, "--config.file=%s" % (tmp_path / "prometheus.yml"),
                             "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % ports["prom"]],
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "w"))
    try:
        assert exporter.stdout.readline().strip() == "ready", exporter.stderr.read()
        deadline = time.time() + 60
        ready = False
        while time.time() < deadline and not ready:
            time.sleep(1)
            try:
                counts = _prom_query(ports["prom"], "count_over_time(DCGM_FI_PROF_SM_ACTIVE[1m])")
                rec = _prom_query(ports["prom"], "dgxops:gpu_sm_active:avg5m")
            except OSError:
                continue
            ready = len(counts) == 16 and min(float(c["value"][1]) for c in counts) >= 3 and len(rec) == 16
        assert ready, "Prometheus did not scrape both hosts in 60 s:\n" + (tmp_path / "prometheus.log").read_text()[-3000:]

        started = time.time()
        proc = subprocess.run([sys.executable, "-m", "dgxops.cli", "advise", "--prometheus",
                               "http://127.0.0.1:%d" % ports["prom"], "--json"],
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src")))
        elapsed = time.time() - started
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert sorted(out["hosts"]) == ["dgx-healthy", "dgx-membound"]
        assert out["hosts"]["dgx-healthy"] == []
        bad = out["hosts"]["dgx-membound"]
        assert [f["rule"] for f in bad] == ["DgxGpuMemoryBandwidthBound"] * 8   # one per H100 GPU
        assert sorted(f["gpu"] for f in bad) == [str(i) for i in range(8)]
        first = bad[0]
        assert first["message"] == ("GPU 0 on dgx-membound is memory-bandwidth bound (memory bandwidth 90% busy, "
                                    "SM activity below 60%)")
        assert first["metrics"] == {"sm_active": [0.4, "ratio"], "dram_active": [0.9, "ratio"]}
        assert "Optimise the data access pattern" in first["fix"]
        assert first["uuid"].startswith("GPU-")
        assert out["summary"] == {"info": 0, "warning": 8, "critical": 0}
        print("advise against Prometheus: %.2f s" % elapsed)

        # every dashboard query is valid PromQL for this Prometheus, and the SM panel has data
        for panel in _dashboard()["panels"]:
            for target in panel["targets"]:
                result = _prom_query(ports["prom"], target["expr"].replace("$host", ".*"))
                if target["expr"].startswith("dgxops:gpu_sm_active:avg5m"):
                    assert len(result) == 16

        # the same scrape through the file mode gives the same findings
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        text = ""
        for h in hosts:
            with opener.open("http://127.0.0.1:%d/metrics" % h["port"], timeout=5) as resp:
                text += resp.read().decode()
        offline = advise.advise_metrics_text(text)
        assert {h: [(f.rule, f.gpu) for f in fs] for h, fs in offline.hosts.items()} == \
               {h: [(f["rule"], f["gpu"]) for f in fs] for h, fs in out["hosts"].items()}
    finally:
        for p in (prom, exporter):
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


# ---------------------------------------------------------------------------------------------
# Grafana dashboard
# ---------------------------------------------------------------------------------------------

DASHBOARD = os.path.join(ROOT, "roles", "monitoring", "files", "dgxops-gpu-dashboard.json")
COUNTERS = os.path.join(ROOT, "roles", "monitoring", "files", "dcgm-counters.csv")
COLLECTOR = os.path.join(ROOT, "roles", "monitoring", "files", "dgxops-textfile-collector.py")
# node exporter metrics the rules and the dashboard read (Debian's prometheus-node-exporter 1.5)
NODE_METRICS = {"node_cpu_seconds_total"}


def _dashboard():
    with open(DASHBOARD) as fh:
        return json.load(fh)


def _provided():
    with open(COUNTERS) as fh:
        dcgm = {line.split(",")[0].strip() for line in fh if line.strip() and not line.startswith("#")}
    with open(COLLECTOR) as fh:
        collector = set(re.findall(r'\b(dgxops_[a-z_]+)\b', fh.read()))
    return dcgm, collector


def test_dashboard_structure_and_metrics():
    dash = _dashboard()
    assert dash["uid"] == "dgxops-gpu" and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"] for p in dash["panels"])
    for needed in ("SM activity", "Memory bandwidth", "PCIe", "NVLink", "I/O wait", "Power"):
        assert needed in titles
    dcgm, collector = _provided()
    known = dcgm | collector | NODE_METRICS | set(advise.RECORDING) | {"ALERTS"}
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for p in ("x", "y", "w", "h"):
            assert isinstance(panel["gridPos"][p], int)
        for target in panel["targets"]:
            names = set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*(?::[A-Za-z0-9_]+)+|(?:DCGM_FI|dgxops|node)_[A-Za-z0-9_]+|ALERTS)\b",
                                   re.sub(r"\{[^}]*\}", "", target["expr"])))
            assert names, target["expr"]
            assert names <= known, (panel["title"], names - known)


def test_rules_read_only_exported_metrics():
    dcgm, collector = _provided()
    used = advise.metrics_used()
    assert {m for m in used if m.startswith("DCGM_FI_")} <= dcgm
    assert {m for m in used if m.startswith("dgxops_")} <= collector
    assert {m for m in used if m.startswith("node_")} <= NODE_METRICS


# ---------------------------------------------------------------------------------------------
# Textfile collector: real output on the simulator, linted by `promtool check metrics`
# ---------------------------------------------------------------------------------------------

def test_textfile_collector_on_the_simulator(tmp_path):
    _init_sim(tmp_path / "sim", "dgx-a100-80gb")
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nDGXOPS_SIM_STATE_DIR=%s PYTHONPATH=%s exec %s -m dgxops.sim.fakesmi \"$@\"\n"
                   % (tmp_path / "sim", os.path.join(ROOT, "src"), sys.executable))
    smi.chmod(0o755)
    layout = tmp_path / "layout.json"
    layout.write_text(json.dumps({"managed_by": "dgxops.fleet.mig", "gpus": [
        {"index": 0, "uuid": "x", "mig": True, "instances": [{"profile": "3g.40gb", "compute_instances": 1}] * 2}]}))
    declared = tmp_path / "declared.json"
    declared.write_text(json.dumps({"driver_version": "550", "power_limit_watts": 400.0, "mig_layout_path": str(layout)}))
    out = tmp_path / "dgxops.prom"
    proc = subprocess.run([sys.executable, COLLECTOR, "--declared", str(declared), "--output", str(out),
                           "--nvidia-smi", str(smi), "--lib", os.path.join(ROOT, "plugins", "module_utils")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    samples = advise.parse_metrics_text(text)
    drift = sorted((lb["item"], lb["gpu"], lb["detail"]) for n, lb, _ in samples if n == "dgxops_drift")
    # power matches (400 W on an A100), the driver is 580 not 550, GPU 0 should be in MIG mode
    assert drift == [("driver_version", "", "declared 550, running 580.95.05"),
                     ("mig_mode", "0", "declared Enabled, current Disabled")]
    assert [v for n, lb, v in samples if n == "dgxops_gpu_mig_devices_declared"] == [2.0]
    assert len([1 for n, _, _ in samples if n == "dgxops_gpu_power_enforced_limit_watts"]) == 8


def _rule(name):
    return [r for r in advise.RULES if r.name == name][0]


def test_xid_alerts_fire_on_a_new_xid_and_clear_when_it_is_old(tmp_path):
    """DCGM_FI_DEV_XID_ERRORS keeps its last value until the driver reloads: an XID at minute 5 must
    alert then and stop alerting once it is older than the window, not fire for ever; an application
    XID (13) is a warning, never the hardware alert; a series that starts with an XID alerts too."""
    def alert(name, host, value):
        rule = _rule(name)
        labels = _expected_labels(rule, host, False, {})
        return {"exp_labels": labels,
                "exp_annotations": {"summary": advise.render(rule.summary, labels, value), "fix": rule.fix,
                                    "source": rule.source}}
    series = [_series("DCGM_FI_DEV_XID_ERRORS", _labels("hw-node"), "0x4 79x60"),      # XID 79 at minute 5
              _series("DCGM_FI_DEV_XID_ERRORS", _labels("app-node"), "0x4 13x60"),     # XID 13 at minute 5
              _series("DCGM_FI_DEV_XID_ERRORS", _labels("new-node"), "48x60")]         # new series with 48
    checks = [
        ("10m", "DgxGpuXidFatal", [alert("DgxGpuXidFatal", "hw-node", 79), alert("DgxGpuXidFatal", "new-node", 48)]),
        ("10m", "DgxGpuXidError", [alert("DgxGpuXidError", "app-node", 13)]),
        ("30m", "DgxGpuXidFatal", []),      # the XID is 25 minutes old: cleared
        ("30m", "DgxGpuXidError", []),
        ("0m", "DgxGpuXidFatal", [alert("DgxGpuXidFatal", "new-node", 48)]),
        ("20m", "DgxGpuXidFatal", []),
    ]
    test = {"name": "xid-clears", "interval": "1m", "input_series": series,
            "alert_rule_test": [{"eval_time": t, "alertname": n, "exp_alerts": a} for t, n, a in checks]}
    test_file = tmp_path / "xid.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [RULES_FILE], "evaluation_interval": "1m",
                                         "tests": [test]}, sort_keys=False))
    proc = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]


def test_clock_rules_fire_on_the_deprecated_field_name_too(tmp_path):
    """An older exporter still emits DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (a deprecated alias of
    DCGM_FI_DEV_CLOCKS_EVENT_REASONS in dcgm_fields.h): the thermal rule must fire on it as well."""
    rule = _rule("DgxGpuThermalThrottling")
    old = dict(_labels("old-node"))
    new = dict(_labels("new-node"))
    series = [_series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", old, "64x30"),
              _series("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", new, "64x30")]
    alerts = []
    for host in ("new-node", "old-node"):
        labels = _expected_labels(rule, host, False, {})
        alerts.append({"exp_labels": labels, "exp_annotations": {
            "summary": advise.render(rule.summary, labels, 64), "fix": rule.fix, "source": rule.source}})
    test = {"name": "clock-alias", "interval": "1m", "input_series": series,
            "alert_rule_test": [{"eval_time": "10m", "alertname": rule.name, "exp_alerts": alerts}]}
    test_file = tmp_path / "alias.test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [RULES_FILE], "evaluation_interval": "1m",
                                         "tests": [test]}, sort_keys=False))
    proc = subprocess.run([PROMTOOL, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
