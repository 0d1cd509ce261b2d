"""Verify dgxops.fleet.monitoring on a simulated DGX A100 (testinfra, docker backend)."""

import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "src"))

from dgxops import advise  # noqa: E402

CONFIG_DIR = "/etc/prometheus/dgxops"


def fetch(host, port):
    cmd = host.run("python3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("
                   "\"http://127.0.0.1:%d/metrics\", timeout=10).read().decode())'" % port)
    assert cmd.rc == 0, cmd.stderr
    return cmd.stdout


def test_dcgm_pinned_and_held(host):
    for name in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary"):
        assert host.package(name).version == "1:4.4.1-1"   # 1:4.4.2-1 is newer in the repository
    assert host.package("datacenter-gpu-manager-exporter").version == "4.4.1-4.5.2-1"
    holds = host.run("apt-mark showhold").stdout.split()
    assert sorted(holds) == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary",
                             "datacenter-gpu-manager-exporter"]
    source = host.file("/etc/apt/sources.list.d/dgxops-monitoring-dcgm.sources").content_string
    assert "URIs: file:/srv/dgxops-monitoring-repo/nvidia/" in source and "Trusted: yes" in source


def test_services_run_bound_to_loopback(host):
    for unit in ("nvidia-dcgm", "nvidia-dcgm-exporter", "prometheus-node-exporter", "dgxops-textfile.timer"):
        assert host.run("systemctl is-active %s" % unit).stdout.strip() == "active", unit
        assert host.run("systemctl is-enabled %s" % unit).stdout.strip() == "enabled", unit
    # -r: on the node's host engine (nvidia-dcgm), not an embedded second one
    assert host.file("/run/dcgm-exporter.args").content_string.split() == [
        "-a", "127.0.0.1:9400", "-c", "1000", "-f", "/etc/dgxops/monitoring/dcgm-counters.csv",
        "-r", "localhost:5555"]
    assert host.file("/run/prometheus-node-exporter.args").content_string.split() == [
        "--web.listen-address=127.0.0.1:9100", "--collector.textfile.directory=/var/lib/prometheus/node-exporter"]
    # listening on 127.0.0.1 only: /proc/net/tcp shows 0100007F:<port> in LISTEN (0A)
    tcp = host.file("/proc/net/tcp").content_string
    listening = {line.split()[1] for line in tcp.splitlines()[1:] if line.split()[3] == "0A"}
    assert "0100007F:24B8" in listening and "0100007F:238C" in listening   # 9400, 9100
    assert not any(addr.startswith("00000000:") and addr.endswith((":24B8", ":238C")) for addr in listening)


def test_dcgm_exporter_serves_the_advisor_fields(host):
    text = fetch(host, 9400)
    samples = advise.parse_metrics_text(text)
    names = {n for n, _, _ in samples}
    needed = {m for m in advise.metrics_used() if m.startswith("DCGM_FI_")}
    assert needed <= names, needed - names
    gpus = {lb["gpu"] for n, lb, _ in samples if n == "DCGM_FI_PROF_SM_ACTIVE"}
    assert gpus == {str(i) for i in range(8)}   # DGX A100: 8 GPUs from the simulator
    assert {lb["modelName"] for n, lb, _ in samples} == {"NVIDIA A100-SXM4-80GB"}


def test_textfile_publishes_facts_and_drift(host):
    text = fetch(host, 9100)
    samples = advise.parse_metrics_text(text)
    by_name = {}
    for name, labels, value in samples:
        by_name.setdefault(name, []).append((labels, value))
    assert by_name["dgxops_collector_up"] == [({}, 1.0)]
    # the simulated DGX A100 runs its model's default driver, 550.163.01; 580.95.05 is declared
    assert by_name["dgxops_driver_info"][0][0] == {"version": "550.163.01", "declared": "580.95.05"}
    assert sorted(v for _, v in by_name["dgxops_gpu_power_enforced_limit_watts"]) == [400.0] * 8
    assert sorted(v for _, v in by_name["dgxops_gpu_power_limit_declared_watts"]) == [300.0] * 8
    drift = sorted((lb["item"], lb["gpu"], lb["detail"]) for lb, _ in by_name["dgxops_drift"])
    assert drift == [("driver_version", "", "declared 580.95.05, running 550.163.01")] + [
        ("power_limit", str(i), "declared 300 W, enforced 400 W") for i in range(8)]
    assert by_name["dgxops_drift_items"] == [({}, 9.0)]
    assert sorted(v for _, v in by_name["dgxops_gpu_mig_mode"]) == [0.0] * 8
    # the advisor turns the scrape into drift findings for this host
    result = advise.advise_metrics_text(text, default_host="mon-a100")
    assert [f.rule for f in result.hosts["mon-a100"]] == ["DgxopsConfigDrift"] * 9
    assert "DgxNodeIoWaitHigh" in [n["rule"] for n in result.not_evaluated]


def test_server_files(host):
    dcgm = json.loads(host.file(CONFIG_DIR + "/targets/mon-a100.dcgm.json").content_string)
    node = json.loads(host.file(CONFIG_DIR + "/targets/mon-a100.node.json").content_string)
    assert dcgm == [{"targets": ["127.0.0.1:9400"], "labels": {"host": "mon-a100"}}]
    assert node == [{"targets": ["127.0.0.1:9100"], "labels": {"host": "mon-a100"}}]
    scrape = host.file(CONFIG_DIR + "/dgxops-scrape.yml").content_string
    assert CONFIG_DIR + "/targets/*.dcgm.json" in scrape and "scrape_interval: 15s" in scrape
    with open(os.path.join(ROOT, "roles", "monitoring", "files", "dgxops-gpu.rules.yml")) as fh:
        assert host.file(CONFIG_DIR + "/rules/dgxops-gpu.rules.yml").content_string == fh.read()
    dash = json.loads(host.file(CONFIG_DIR + "/dashboards/dgxops-gpu.json").content_string)
    assert dash["uid"] == "dgxops-gpu"


def test_collector_survives_a_failing_nvidia_smi(host):
    """A broken nvidia-smi leaves dgxops_collector_up 0 and the last success time."""
    before = fetch(host, 9100)
    last = [v for n, _, v in advise.parse_metrics_text(before) if n == "dgxops_collector_last_success_timestamp_seconds"]
    run = host.run("/usr/bin/python3 /usr/local/libexec/dgxops/dgxops-textfile-collector --declared /etc/dgxops/monitoring/declared.json "
                   "--output /var/lib/prometheus/node-exporter/dgxops.prom --nvidia-smi /bin/false")
    assert run.rc == 1 and "exited 1" in run.stderr
    after = advise.parse_metrics_text(fetch(host, 9100))
    assert ("dgxops_collector_up", {}, 0.0) in after
    assert [v for n, _, v in after if n == "dgxops_collector_last_success_timestamp_seconds"] == last
    assert host.run("systemctl start dgxops-textfile.service").rc == 0
    assert ("dgxops_collector_up", {}, 1.0) in advise.parse_metrics_text(fetch(host, 9100))


def test_dcgm_exporter_follows_the_host_engine(host):
    """The exporter uses nvidia-dcgm's host engine: stopping nvidia-dcgm stops it (PartOf), starting
    the exporter starts nvidia-dcgm (Requires)."""
    try:
        host.run_test("systemctl stop nvidia-dcgm.service")
        assert host.run("systemctl is-active nvidia-dcgm-exporter").stdout.strip() != "active"
        host.run_test("systemctl start nvidia-dcgm-exporter.service")
        assert host.run("systemctl is-active nvidia-dcgm").stdout.strip() == "active"
    finally:
        host.run("systemctl start nvidia-dcgm.service nvidia-dcgm-exporter.service")
    assert host.run("systemctl is-active nvidia-dcgm-exporter").stdout.strip() == "active"
