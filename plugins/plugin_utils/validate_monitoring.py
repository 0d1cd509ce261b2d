# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the ``dgxops.fleet.monitoring`` role's variables.

What it catches before any host changes:

* exporters bound to the loopback while another host's Prometheus is meant to scrape them (the
  targets would be written and every scrape would fail), or both exporters on one port;
* DCGM without an exact version (apt would install whatever is newest and fleets drift apart);
* a trusted (unsigned) apt source that is not a local ``file:/`` repository;
* node exporter flags that fight the role's own (listen address, textfile directory);
* intervals and durations Prometheus or systemd would refuse or misread.

``normalized`` holds what the role renders: the argv of both exporters, the pinned package
specs, the declared driver/power values and the scrape address.

Standard library and ansible-core only (runs on the controller).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_int, check_distribution, is_bool, to_bool

_DEB_VERSION_RE = re.compile(r"^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$")
# The node's DCGM host engine (nv-hostengine of nvidia-dcgm.service listens on localhost:5555).
DCGM_HOSTENGINE = "localhost:5555"
_PKG_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_DRIVER_RE = re.compile(r"^[0-9]{3}(\.[0-9]{1,3}(\.[0-9]{1,3})?)?$")
_FPR_RE = re.compile(r"^[0-9A-F]{40}$")
_DURATION_RE = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_FLAG_RE = re.compile(r"^--[a-z0-9][a-z0-9._-]*(=.*)?$")
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
# node exporter flags the role sets itself
_OWNED_FLAGS = ("--web.listen-address", "--collector.textfile.directory", "--web.config.file")


def _abs_path(result, name, value):
    if not isinstance(value, str) or not value.startswith("/") or any(c in value for c in " \t\n'\"\\"):
        result.error(name, value, "an absolute path without spaces or quotes")
        return False
    return True


def _ip(value):
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        return None


def _url_host(address, port):
    ip = _ip(address)
    if ip is not None and ip.version == 6:
        return "[%s]:%d" % (address, port)
    return "%s:%d" % (address, port)


def validate(config):
    result = ValidationResult()
    norm = result.normalized
    get = config.get
    check_distribution(result, config, get("__monitoring_supported"))

    # --- listen address and ports ----------------------------------------------------------
    listen = str(get("monitoring_listen_address", "127.0.0.1")).strip()
    ip = _ip(listen)
    if ip is None:
        result.error("monitoring_listen_address", listen,
                     "an IP address literal (127.0.0.1, ::1, the node's management address, 0.0.0.0 or ::)")
    node_on = to_bool(get("monitoring_node_exporter_enabled", True))
    dcgm_on = to_bool(get("monitoring_dcgm_enabled", True))
    textfile_on = to_bool(get("monitoring_textfile_enabled", True))
    node_port = as_int("monitoring_node_exporter_port", get("monitoring_node_exporter_port", 9100), result, 1, 65535)
    dcgm_port = as_int("monitoring_dcgm_exporter_port", get("monitoring_dcgm_exporter_port", 9400), result, 1, 65535)
    if node_on and dcgm_on and node_port is not None and node_port == dcgm_port:
        result.error_text("monitoring_dcgm_exporter_port: invalid value %r; allowed: a port other than "
                          "monitoring_node_exporter_port (%d), both exporters listen on %s"
                          % (dcgm_port, node_port, listen))

    server = str(get("monitoring_prometheus_server", "") or "")
    if server and not to_bool(get("monitoring_prometheus_server_known", True)):
        result.error("monitoring_prometheus_server", server, "an inventory host name, or \"\" for no server files")
    if ip is not None and ip.is_loopback and server and not to_bool(get("monitoring_prometheus_server_is_self", True)):
        result.error_text(
            "monitoring_listen_address: invalid value %r; allowed: an address %s can reach (the node's "
            "management address, or 0.0.0.0 behind a firewall), because monitoring_prometheus_server is %r "
            "and a loopback exporter can only be scraped from the node itself" % (listen, server, server))

    scrape = str(get("monitoring_scrape_address", "") or "").strip()
    if scrape and not (_ip(scrape) or _HOST_RE.match(scrape)):
        result.error("monitoring_scrape_address", scrape, "an IP address or a host name, or \"\" to derive it")
    if not scrape:
        if ip is not None and not ip.is_unspecified:
            scrape = listen
        else:
            scrape = str(get("inventory_address", "") or "")
    norm["scrape_address"] = scrape
    norm["listen_address"] = listen
    if node_port is not None:
        norm["node_exporter_target"] = _url_host(scrape, node_port)
        norm["node_exporter_listen"] = _url_host(listen, node_port)
    if dcgm_port is not None:
        norm["dcgm_exporter_target"] = _url_host(scrape, dcgm_port)
        norm["dcgm_exporter_listen"] = _url_host(listen, dcgm_port)

    interval = str(get("monitoring_scrape_interval", "15s"))
    if not _DURATION_RE.match(interval):
        result.error("monitoring_scrape_interval", interval, "a Prometheus duration such as 15s, 1m or 1m30s")
    norm["scrape_interval"] = interval

    # --- node exporter and textfile collector ----------------------------------------------
    textfile_dir = get("monitoring_textfile_dir", "/var/lib/prometheus/node-exporter")
    if node_on:
        _abs_path(result, "monitoring_node_exporter_binary", get("monitoring_node_exporter_binary"))
        _abs_path(result, "monitoring_textfile_dir", textfile_dir)
        extra = get("monitoring_node_exporter_extra_args", []) or []
        args = ["--web.listen-address=%s" % norm.get("node_exporter_listen", ""),
                "--collector.textfile.directory=%s" % textfile_dir]
        if not isinstance(extra, list):
            result.error("monitoring_node_exporter_extra_args", extra, "a list of --flag or --flag=value strings")
            extra = []
        for flag in extra:
            if not isinstance(flag, str) or not _FLAG_RE.match(flag) or any(c in flag for c in " \t\n'\"\\$%"):
                result.error("monitoring_node_exporter_extra_args", flag,
                             "--flag or --flag=value without spaces, quotes, $ or %")
            elif flag.split("=", 1)[0] in _OWNED_FLAGS:
                result.error("monitoring_node_exporter_extra_args", flag,
                             "flags other than %s (set by the role from monitoring_listen_address, "
                             "monitoring_node_exporter_port and monitoring_textfile_dir)" % ", ".join(_OWNED_FLAGS))
            else:
                args.append(flag)
        norm["node_exporter_args"] = args
    if textfile_on:
        if not node_on:
            result.error_text("monitoring_textfile_enabled: invalid value True; allowed: false when "
                              "monitoring_node_exporter_enabled is false (nothing would read the textfile)")
        _abs_path(result, "monitoring_nvidia_smi", get("monitoring_nvidia_smi"))
        _abs_path(result, "monitoring_mig_layout_path", get("monitoring_mig_layout_path"))
        as_int("monitoring_textfile_interval_seconds", get("monitoring_textfile_interval_seconds", 60), result, 10, 86400)

    driver = get("monitoring_declared_driver_version")
    driver = "" if driver is None else str(driver).strip()
    if driver and not _DRIVER_RE.match(driver):
        result.error("monitoring_declared_driver_version", driver,
                     "a driver branch (580) or version (580.95.05), or \"\" for no comparison")
    norm["declared_driver_version"] = driver

    power = get("monitoring_declared_power_limit_watts")
    if isinstance(power, str) and power.strip() in ("", "None", "none", "null"):
        power = None
    if power is not None:
        try:
            if is_bool(power):
                raise ValueError
            power = float(power)
            if not 1 <= power <= 2000:
                raise ValueError
        except (TypeError, ValueError):
            result.error("monitoring_declared_power_limit_watts", power, "null or watts from 1 to 2000")
            power = None
    norm["declared_power_limit_watts"] = power

    # --- DCGM --------------------------------------------------------------------------------
    if dcgm_on:
        pins = []
        for var, value in (("monitoring_dcgm_version", get("monitoring_dcgm_version", "")),
                           ("monitoring_dcgm_exporter_version", get("monitoring_dcgm_exporter_version", ""))):
            value = "" if value is None else str(value).strip()
            if not _DEB_VERSION_RE.match(value):
                result.error(var, value, "the exact Debian version of the package as `apt-cache policy` shows it "
                             "(e.g. 1:4.2.3-1), required with monitoring_dcgm_enabled; or set "
                             "monitoring_dcgm_enabled: false")
        packages = get("monitoring_dcgm_packages", []) or []
        if not isinstance(packages, list) or not packages:
            result.error("monitoring_dcgm_packages", packages, "a non-empty list of package names")
            packages = []
        for name in packages + [get("monitoring_dcgm_exporter_package", "")]:
            if not isinstance(name, str) or not _PKG_RE.match(name):
                result.error("monitoring_dcgm_packages" if name in packages else "monitoring_dcgm_exporter_package",
                             name, "a Debian package name (lower case, digits, + - .)")
        if result.ok:
            pins = ["%s=%s" % (p, str(get("monitoring_dcgm_version")).strip()) for p in packages]
            pins.append("%s=%s" % (get("monitoring_dcgm_exporter_package"), str(get("monitoring_dcgm_exporter_version")).strip()))
        norm["dcgm_pins"] = pins
        norm["dcgm_package_names"] = list(packages) + [get("monitoring_dcgm_exporter_package", "")]
        _abs_path(result, "monitoring_dcgm_exporter_binary", get("monitoring_dcgm_exporter_binary"))
        interval_ms = as_int("monitoring_dcgm_exporter_interval_ms", get("monitoring_dcgm_exporter_interval_ms", 10000),
                             result, 100, 3600000)
        # -r: use the node's DCGM host engine (nvidia-dcgm, port 5555) instead of starting an embedded
        # one beside it: two host engines fight over the profiling metrics, a system-wide lock before
        # Hopper, so dcgmi profiling and Nsight Compute would fail (dcgm-exporter README, read 2026-12-03:
        # "-r, --remote-hostengine-info ... Connect to remote hostengine at <HOST>:<PORT>").
        norm["dcgm_exporter_args"] = ["-a", norm.get("dcgm_exporter_listen", ""), "-c", str(interval_ms),
                                      "-f", "/etc/dgxops/monitoring/dcgm-counters.csv",
                                      "-r", DCGM_HOSTENGINE]

        if to_bool(get("monitoring_dcgm_repo_manage", False)):
            url = str(get("monitoring_dcgm_repo_url", "") or "")
            trusted = to_bool(get("monitoring_dcgm_repo_trusted", False))
            if not re.match(r"^(https://|http://|file:/)[^\s]+/$", url):
                result.error("monitoring_dcgm_repo_url", url,
                             "the flat repository URL ending in / (https://.../ or file:/path/), required with "
                             "monitoring_dcgm_repo_manage")
            elif trusted and not url.startswith("file:/"):
                result.error("monitoring_dcgm_repo_trusted", True,
                             "true only for a local file:/ repository (%s would be installed unsigned)" % url)
            fpr = str(get("monitoring_dcgm_repo_key_fingerprint", "") or "").replace(" ", "").upper()
            if not trusted and not _FPR_RE.match(fpr):
                result.error("monitoring_dcgm_repo_key_fingerprint", get("monitoring_dcgm_repo_key_fingerprint"),
                             "the 40 hex digit fingerprint of the repository's signing key")
            norm["repo_trusted"] = trusted
            norm["repo_key_fingerprint"] = fpr
    else:
        norm["dcgm_pins"] = []

    config_dir = get("monitoring_prometheus_config_dir", "/etc/prometheus/dgxops")
    if server:
        _abs_path(result, "monitoring_prometheus_config_dir", config_dir)
    return result
