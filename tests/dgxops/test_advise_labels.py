"""dgxops.advise reads the host from dcgm-exporter's `Hostname` label and from the renamed `hostname`."""
import pytest

from dgxops import advise


@pytest.mark.parametrize("label", ["Hostname", "hostname"])
def test_host_label_old_and_renamed(label):
    labels = 'gpu="0",UUID="GPU-x",modelName="NVIDIA H100 80GB HBM3",%s="node-7"' % label
    text = ("DCGM_FI_DEV_XID_ERRORS{%s} 79\nDCGM_FI_DEV_GPU_UTIL{%s} 98\nDCGM_FI_DEV_FB_USED{%s} 100\n"
            % (labels, labels, labels))
    result = advise.advise_metrics_text(text)
    assert list(result.hosts) == ["node-7"]
    assert [f.rule for f in result.hosts["node-7"]] == ["DgxGpuXidFatal"]


def test_host_of_prefers_the_scrape_host_then_either_dcgm_label():
    assert advise.host_of({"host": "a", "hostname": "b"}) == "a"
    assert advise.host_of({"hostname": "b", "instance": "c:9400"}) == "b"
    assert advise.host_of({"Hostname": "d", "instance": "c:9400"}) == "d"


@pytest.mark.parametrize("name", ["DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"])
def test_clocks_event_reasons_under_the_current_and_the_deprecated_name(name):
    labels = 'gpu="0",UUID="GPU-x",Hostname="node-7"'
    text = "%s{%s} 64\n" % (name, labels)   # 0x40: hardware thermal slowdown
    result = advise.advise_metrics_text(text)
    assert [f.rule for f in result.hosts["node-7"]] == ["DgxGpuThermalThrottling"]


def test_rules_read_the_deprecated_clock_field_only_through_the_recording_rule():
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" in advise.RECORDING["dgxops:gpu_clocks_event_reasons"]
    for rule in advise.RULES:
        assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in rule.expr
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in advise.metrics_used()


def test_counter_families_keep_the_names_the_exporter_served():
    # dcgm-exporter declares its *_TOTAL fields as counters; prometheus_client's parser renames
    # such samples to NAME_total, which hid every counter from the rules.
    labels = 'gpu="0",UUID="GPU-x",Hostname="node-7"'
    text = ("# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Total number of double-bit volatile ECC errors.\n"
            "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{%s} 2\n"
            "# TYPE node_cpu_seconds_total counter\n"
            'node_cpu_seconds_total{cpu="0"} 5\n' % labels)
    names = [name for name, _, _ in advise.parse_metrics_text(text)]
    assert names == ["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "node_cpu_seconds_total"]
    result = advise.advise_metrics_text(text)
    assert [f.rule for f in result.hosts["node-7"]] == ["DgxGpuEccDoubleBit"]


def test_a_bad_line_is_named():
    with pytest.raises(ValueError, match="line 2 is not a Prometheus sample"):
        advise.parse_metrics_text('up 1\nbad{ 2\n')
