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
