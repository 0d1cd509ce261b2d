"""validate_monitoring: what the monitoring role refuses before any host changes, and what it renders."""

import pytest

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_monitoring import validate

BASE = {
    "monitoring_listen_address": "127.0.0.1",
    "monitoring_node_exporter_enabled": True,
    "monitoring_node_exporter_binary": "/usr/bin/prometheus-node-exporter",
    "monitoring_node_exporter_port": 9100,
    "monitoring_node_exporter_extra_args": [],
    "monitoring_textfile_enabled": True,
    "monitoring_textfile_dir": "/var/lib/prometheus/node-exporter",
    "monitoring_textfile_interval_seconds": 60,
    "monitoring_nvidia_smi": "/usr/bin/nvidia-smi",
    "monitoring_declared_driver_version": "",
    "monitoring_declared_power_limit_watts": None,
    "monitoring_mig_layout_path": "/etc/dgxops/mig/layout.json",
    "monitoring_dcgm_enabled": True,
    "monitoring_dcgm_version": "1:4.2.3-1",
    "monitoring_dcgm_packages": ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary"],
    "monitoring_dcgm_exporter_package": "datacenter-gpu-manager-exporter",
    "monitoring_dcgm_exporter_version": "4.2.3-4.1.3-1",
    "monitoring_dcgm_exporter_binary": "/usr/bin/dcgm-exporter",
    "monitoring_dcgm_exporter_port": 9400,
    "monitoring_dcgm_exporter_interval_ms": 10000,
    "monitoring_dcgm_repo_manage": False,
    "monitoring_dcgm_repo_url": "",
    "monitoring_dcgm_repo_trusted": False,
    "monitoring_dcgm_repo_key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
    "monitoring_prometheus_server": "",
    "monitoring_prometheus_server_is_self": True,
    "monitoring_prometheus_server_known": True,
    "monitoring_prometheus_config_dir": "/etc/prometheus/dgxops",
    "monitoring_scrape_address": "",
    "monitoring_scrape_interval": "15s",
    "inventory_address": "10.0.0.11",
}


def run(**over):
    return validate(dict(BASE, **over))


def test_defaults_render_loopback_exporters_and_pins():
    r = run()
    assert r.errors == []
    n = r.normalized
    assert n["node_exporter_args"] == ["--web.listen-address=127.0.0.1:9100",
                                       "--collector.textfile.directory=/var/lib/prometheus/node-exporter"]
    assert n["dcgm_exporter_args"] == ["-a", "127.0.0.1:9400", "-c", "10000", "-f", "/etc/dgxops/monitoring/dcgm-counters.csv",
                                       "-r", "localhost:5555"]
    assert n["dcgm_pins"] == ["datacenter-gpu-manager-4-core=1:4.2.3-1", "datacenter-gpu-manager-4-proprietary=1:4.2.3-1",
                              "datacenter-gpu-manager-exporter=4.2.3-4.1.3-1"]
    assert n["node_exporter_target"] == "127.0.0.1:9100"
    assert n["declared_power_limit_watts"] is None


def test_wildcard_listen_scrapes_the_inventory_address():
    n = run(monitoring_listen_address="0.0.0.0").normalized
    assert n["dcgm_exporter_listen"] == "0.0.0.0:9400"
    assert n["dcgm_exporter_target"] == "10.0.0.11:9400"


def test_ipv6_addresses_are_bracketed():
    n = run(monitoring_listen_address="::1").normalized
    assert n["node_exporter_listen"] == "[::1]:9100"


def test_loopback_with_a_remote_prometheus_is_refused():
    r = run(monitoring_prometheus_server="prom1", monitoring_prometheus_server_is_self=False)
    assert len(r.errors) == 1
    assert r.errors[0].startswith("monitoring_listen_address: invalid value '127.0.0.1'")
    assert "prom1" in r.errors[0]
    assert run(monitoring_prometheus_server="prom1", monitoring_prometheus_server_is_self=False,
               monitoring_listen_address="10.0.0.11").errors == []


def test_unknown_prometheus_server_is_refused():
    r = run(monitoring_prometheus_server="nosuchhost", monitoring_prometheus_server_known=False)
    assert any(e.startswith("monitoring_prometheus_server: invalid value 'nosuchhost'") for e in r.errors)


@pytest.mark.parametrize("over, variable", [
    ({"monitoring_listen_address": "localhost"}, "monitoring_listen_address"),
    ({"monitoring_node_exporter_port": 70000}, "monitoring_node_exporter_port"),
    ({"monitoring_node_exporter_port": True}, "monitoring_node_exporter_port"),
    ({"monitoring_dcgm_exporter_port": 9100}, "monitoring_dcgm_exporter_port"),
    ({"monitoring_dcgm_version": ""}, "monitoring_dcgm_version"),
    ({"monitoring_dcgm_exporter_version": "latest"}, "monitoring_dcgm_exporter_version"),
    ({"monitoring_dcgm_packages": ["Bad_Name"]}, "monitoring_dcgm_packages"),
    ({"monitoring_textfile_interval_seconds": 5}, "monitoring_textfile_interval_seconds"),
    ({"monitoring_textfile_dir": "relative/dir"}, "monitoring_textfile_dir"),
    ({"monitoring_scrape_interval": "15 seconds"}, "monitoring_scrape_interval"),
    ({"monitoring_declared_power_limit_watts": 5000}, "monitoring_declared_power_limit_watts"),
    ({"monitoring_declared_driver_version": "latest"}, "monitoring_declared_driver_version"),
    ({"monitoring_node_exporter_extra_args": ["--web.listen-address=:9100"]}, "monitoring_node_exporter_extra_args"),
    ({"monitoring_node_exporter_extra_args": ["--collector.systemd; rm -rf /"]}, "monitoring_node_exporter_extra_args"),
    ({"monitoring_dcgm_exporter_interval_ms": 50}, "monitoring_dcgm_exporter_interval_ms"),
    ({"monitoring_scrape_address": "bad host"}, "monitoring_scrape_address"),
])
def test_bad_values_name_the_variable(over, variable):
    r = run(**over)
    assert r.errors, over
    assert r.errors[0].startswith(variable + ": invalid value"), r.errors
    assert "allowed:" in r.errors[0]


def test_textfile_needs_the_node_exporter():
    r = run(monitoring_node_exporter_enabled=False)
    assert r.errors == ["monitoring_textfile_enabled: invalid value True; allowed: false when "
                        "monitoring_node_exporter_enabled is false (nothing would read the textfile)"]
    assert run(monitoring_node_exporter_enabled=False, monitoring_textfile_enabled=False).errors == []


def test_dcgm_disabled_needs_no_versions():
    r = run(monitoring_dcgm_enabled=False, monitoring_dcgm_version="", monitoring_dcgm_exporter_version="")
    assert r.errors == [] and r.normalized["dcgm_pins"] == []


def test_extra_args_are_appended():
    n = run(monitoring_node_exporter_extra_args=["--collector.systemd", "--no-collector.wifi"]).normalized
    assert n["node_exporter_args"][-2:] == ["--collector.systemd", "--no-collector.wifi"]


def test_repository_rules():
    ok = run(monitoring_dcgm_repo_manage=True, monitoring_dcgm_repo_url="file:/srv/repo/", monitoring_dcgm_repo_trusted=True)
    assert ok.errors == [] and ok.normalized["repo_trusted"] is True
    r = run(monitoring_dcgm_repo_manage=True, monitoring_dcgm_repo_url="https://mirror.example/cuda/", monitoring_dcgm_repo_trusted=True)
    assert r.errors[0].startswith("monitoring_dcgm_repo_trusted: invalid value True")
    r = run(monitoring_dcgm_repo_manage=True, monitoring_dcgm_repo_url="https://mirror.example/cuda")
    assert r.errors[0].startswith("monitoring_dcgm_repo_url: invalid value")
    r = run(monitoring_dcgm_repo_manage=True, monitoring_dcgm_repo_url="https://mirror.example/cuda/",
            monitoring_dcgm_repo_key_fingerprint="3bf863cc")
    assert r.errors[0].startswith("monitoring_dcgm_repo_key_fingerprint: invalid value '3bf863cc'")
    fpr = run(monitoring_dcgm_repo_manage=True, monitoring_dcgm_repo_url="https://m.example/c/",
              monitoring_dcgm_repo_key_fingerprint="eb69 3b30 35cd 5710 e231 e123 a4b4 6996 3bf8 63cc")
    assert fpr.errors == [] and fpr.normalized["repo_key_fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"


def test_declared_values_are_normalised():
    n = run(monitoring_declared_power_limit_watts="300", monitoring_declared_driver_version=" 580.95.05 ").normalized
    assert n["declared_power_limit_watts"] == 300.0
    assert n["declared_driver_version"] == "580.95.05"
    assert run(monitoring_declared_power_limit_watts="None").normalized["declared_power_limit_watts"] is None


@pytest.mark.parametrize("off", [False, "false", "no", "off", "n", "0", 0])
def test_switches_read_as_the_roles_bool_filter_reads_them(off):
    """dcgm off as the role's `monitoring_dcgm_enabled | bool` sees it: no DCGM versions needed."""
    r = run(monitoring_dcgm_enabled=off, monitoring_dcgm_version="", monitoring_dcgm_exporter_version="")
    assert r.errors == [] and r.normalized["dcgm_pins"] == []


@pytest.mark.parametrize("on", [True, "true", "True", "yes", "on", "y", "1", 1])
def test_switches_on_in_every_spelling_the_role_reads_as_on(on):
    r = run(monitoring_dcgm_enabled=on, monitoring_dcgm_version="")
    assert [e.split(":")[0] for e in r.errors] == ["monitoring_dcgm_version"]


@pytest.mark.parametrize("port", ["9100", " 9100 ", "+9100", 9100.0])
def test_ports_read_as_the_argument_specs_read_them(port):
    r = run(monitoring_node_exporter_port=port)
    assert r.errors == [] and r.normalized["node_exporter_target"] == "127.0.0.1:9100"


@pytest.mark.parametrize("port", [True, 9100.5, "9100.5", "http", None, 0])
def test_bad_ports_are_refused_with_the_range(port):
    assert run(monitoring_node_exporter_port=port).errors == [
        "monitoring_node_exporter_port: invalid value %r; allowed: an integer from 1 to 65535" % (port,)]
