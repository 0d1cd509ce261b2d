"""dgxops.advise: the file mode, the template rendering, the loopback guard and the CLI."""

import json

import pytest

from dgxops import advise, cli

LABELS = 'gpu="{gpu}",UUID="GPU-{host}-{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}"'


def scrape(host, gpus=2, **values):
    lines = ["# HELP DCGM_FI_PROF_SM_ACTIVE x", "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge"]
    for gpu in range(gpus):
        for metric, value in values.items():
            lines.append("%s{%s} %s" % (metric, LABELS.format(host=host, gpu=gpu), value))
    return "\n".join(lines) + "\n"


HEALTHY = dict(DCGM_FI_PROF_SM_ACTIVE=0.85, DCGM_FI_PROF_DRAM_ACTIVE=0.5, DCGM_FI_DEV_GPU_UTIL=98,
               DCGM_FI_DEV_FB_USED=60000, DCGM_FI_PROF_PCIE_RX_BYTES=2e9, DCGM_FI_DEV_PCIE_LINK_GEN=5,
               DCGM_FI_DEV_PCIE_LINK_WIDTH=16, DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0, DCGM_FI_DEV_XID_ERRORS=0)


def rules_of(result, host):
    return [(f.rule, f.gpu) for f in result.hosts[host]]


def test_memory_bound_host_gets_the_guide_advice_and_healthy_host_nothing():
    text = scrape("a", **dict(HEALTHY, DCGM_FI_PROF_SM_ACTIVE=0.4, DCGM_FI_PROF_DRAM_ACTIVE=0.9)) + scrape("b", **HEALTHY)
    result = advise.advise_metrics_text(text)
    assert rules_of(result, "a") == [("DgxGpuMemoryBandwidthBound", "0"), ("DgxGpuMemoryBandwidthBound", "1")]
    assert result.hosts["b"] == []
    f = result.hosts["a"][0]
    assert f.message == "GPU 0 on a is memory-bandwidth bound (memory bandwidth 90% busy, SM activity below 60%)"
    assert f.metrics == {"sm_active": (0.4, "ratio"), "dram_active": (0.9, "ratio")}
    assert f.severity == "warning" and f.uuid == "GPU-a-0"
    assert "b: no findings" in result.text()
    assert "[warning] DgxGpuMemoryBandwidthBound" in result.text()


@pytest.mark.parametrize("sm, dram, fires", [(0.59, 0.81, True), (0.6, 0.9, False), (0.4, 0.8, False), (0.1, 1.0, True)])
def test_memory_bound_thresholds_are_strict(sm, dram, fires):
    text = scrape("a", gpus=1, **dict(HEALTHY, DCGM_FI_PROF_SM_ACTIVE=sm, DCGM_FI_PROF_DRAM_ACTIVE=dram))
    assert (rules_of(advise.advise_metrics_text(text), "a") == [("DgxGpuMemoryBandwidthBound", "0")]) is fires


def test_pcie_saturation_uses_the_negotiated_link():
    # 30 GB/s is 95 % of Gen4 x16 (31.5 GB/s) but 48 % of Gen5 x16
    gen4 = scrape("a", gpus=1, **dict(HEALTHY, DCGM_FI_PROF_PCIE_RX_BYTES=30e9, DCGM_FI_DEV_PCIE_LINK_GEN=4))
    gen5 = scrape("a", gpus=1, **dict(HEALTHY, DCGM_FI_PROF_PCIE_RX_BYTES=30e9, DCGM_FI_DEV_PCIE_LINK_GEN=5))
    r4 = advise.advise_metrics_text(gen4)
    assert rules_of(r4, "a") == [("DgxGpuPcieRxSaturated", "0")]
    assert "95.21% of the link" in r4.hosts["a"][0].message
    assert "GPUDirect RDMA" in r4.hosts["a"][0].fix
    assert rules_of(advise.advise_metrics_text(gen5), "a") == []


def test_clock_event_xid_and_ecc_rules():
    text = (scrape("t", gpus=1, **dict(HEALTHY, DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x40 | 0x4))
            + scrape("x", gpus=1, **dict(HEALTHY, DCGM_FI_DEV_XID_ERRORS=79, DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=3))
            + scrape("y", gpus=1, **dict(HEALTHY, DCGM_FI_DEV_XID_ERRORS=13)))
    r = advise.advise_metrics_text(text)
    assert rules_of(r, "t") == [("DgxGpuThermalThrottling", "0"), ("DgxGpuPowerCapped", "0")]
    assert r.hosts["t"][0].metrics["clocks_event_reasons"] == (68.0, "mask")
    assert "0x44 (sw_power_cap, hw_thermal_slowdown)" in r.text()
    assert rules_of(r, "x") == [("DgxGpuEccDoubleBit", "0"), ("DgxGpuXidFatal", "0")]   # critical first, by name
    xid = [f for f in r.hosts["x"] if f.rule == "DgxGpuXidFatal"][0]
    assert xid.message == "GPU 0 on x reported XID 79: GPU has fallen off the bus"
    assert rules_of(r, "y") == [("DgxGpuXidError", "0")]
    assert r.worst() == "critical"


def test_underutilisation_needs_held_memory():
    busy = scrape("a", gpus=1, **dict(HEALTHY, DCGM_FI_DEV_GPU_UTIL=50))
    idle = scrape("a", gpus=1, **dict(HEALTHY, DCGM_FI_DEV_GPU_UTIL=50, DCGM_FI_DEV_FB_USED=0))
    assert rules_of(advise.advise_metrics_text(busy), "a") == [("DgxGpuUnderutilised", "0")]
    assert rules_of(advise.advise_metrics_text(idle), "a") == []


def test_rate_rules_are_reported_as_not_evaluated_from_a_file():
    r = advise.advise_metrics_text(scrape("a", **HEALTHY))
    assert [n["rule"] for n in r.not_evaluated] == ["DgxNodeIoWaitHigh"]
    assert "DgxNodeIoWaitHigh" not in r.evaluated


def test_drift_series_from_the_textfile_collector():
    text = ('dgxops_drift{item="power_limit",gpu="3",detail="declared 300 W, enforced 400 W"} 1\n'
            'dgxops_drift_items 1\n')
    r = advise.advise_metrics_text(text, default_host="node7")
    assert [(f.rule, f.message) for f in r.hosts["node7"]] == [
        ("DgxopsConfigDrift", "node7: power_limit differs from what dgxops declared (GPU 3: declared 300 W, enforced 400 W)")]


def test_parse_rejects_garbage():
    with pytest.raises(ValueError, match="line 2"):
        advise.parse_metrics_text("ok 1\nthis is not a sample\n")
    assert advise.parse_metrics_text('m{a="x\\"y"} +Inf 123\n') == [("m", {"a": 'x"y'}, float("inf"))]


@pytest.mark.parametrize("value, text", [(0.4, "40%"), (0.95214, "95.21%"), (1.0, "100%"), (0.0, "0%")])
def test_humanize_percentage(value, text):
    assert advise.humanize_percentage(value) == text


@pytest.mark.parametrize("value, text", [(50, "50"), (1500, "1.5k"), (3e10, "30G"), (0.005, "5m"), (0, "0")])
def test_humanize(value, text):
    assert advise.humanize(value) == text


@pytest.mark.parametrize("value, text", [(79.0, "79"), (0.4, "0.4"), (1e21, "1e+21"), (1500.5, "1500.5")])
def test_go_float(value, text):
    assert advise._go_float(value) == text


@pytest.mark.parametrize("url", ["http://10.0.0.5:9090", "http://prometheus.example:9090", "ftp://127.0.0.1/", "127.0.0.1:9090"])
def test_only_loopback_urls(url):
    with pytest.raises(advise.AdviseError):
        advise.check_loopback(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9090/", "http://localhost:9090", "http://[::1]:9090", "https://127.0.0.2"])
def test_loopback_urls_pass(url):
    assert advise.check_loopback(url) == url.rstrip("/")


def test_expand_inlines_recording_rules():
    expr = advise.expand("dgxops:gpu_pcie_rx:ratio_avg5m > 0.9")
    assert "dgxops:" not in expr
    assert expr.startswith("(avg_over_time(DCGM_FI_PROF_PCIE_RX_BYTES[5m]) / (DCGM_FI_DEV_PCIE_LINK_WIDTH")


def test_cli_metrics_file_json_and_fail_on(tmp_path, capsys):
    path = tmp_path / "scrape.prom"
    path.write_text(scrape("a", gpus=1, **dict(HEALTHY, DCGM_FI_PROF_SM_ACTIVE=0.4, DCGM_FI_PROF_DRAM_ACTIVE=0.9)))
    assert cli.main(["advise", "--metrics-file", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [f["rule"] for f in out["hosts"]["a"]] == ["DgxGpuMemoryBandwidthBound"]
    assert out["summary"] == {"info": 0, "warning": 1, "critical": 0}
    assert cli.main(["advise", "--metrics-file", str(path), "--fail-on", "warning"]) == 1
    assert cli.main(["advise", "--metrics-file", str(path), "--fail-on", "critical"]) == 0


def test_cli_usage_errors(capsys):
    assert cli.main(["advise"]) == 2
    assert cli.main(["advise", "--prometheus", "http://10.1.2.3:9090"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_cli_unreachable_prometheus_is_an_environment_error(capsys):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli.main(["advise", "--prometheus", "http://127.0.0.1:%d" % port, "--timeout", "2"]) == 4
    assert "cannot reach Prometheus" in capsys.readouterr().err


def test_metrics_file_keeps_non_ascii_label_values(tmp_path):
    """UTF-8 label values (a host named by its site, a GPU model string) come back as written,
    with Prometheus escapes decoded: the hand-written parser mangled them (unicode_escape on UTF-8)."""
    text = ('# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",Hostname="nœud-münchen-1",modelName="NVIDIA H100 «SXM»",'
            'note="a\\\\b \\"q\\" \\n"} 12\n')
    samples = advise.parse_metrics_text(text)
    assert samples == [("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": "GPU-1", "Hostname": "nœud-münchen-1",
                                                 "modelName": "NVIDIA H100 «SXM»", "note": 'a\\b "q" \n'}, 12.0)]
    path = tmp_path / "scrape.prom"
    path.write_text(text, encoding="utf-8")
    result = advise.advise_metrics_file(str(path))
    assert "nœud-münchen-1" in result.as_dict()["hosts"]
