"""monitoring against upstream DCGM: the exporter runs on the node's host engine (one host engine per
node), and the field list uses only current DCGM field names."""
import os
import re
import shlex

import jinja2
import yaml

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_monitoring import validate

from test_validate_monitoring import BASE

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "monitoring")
# deprecated DCGM fields (NVIDIA/DCGM dcgmlib/dcgm_fields.h, read 2026-12-03) -> what replaces them
DEPRECATED_FIELDS = {
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "DCGM_FI_PROF_PCIE_RX_BYTES",
}


def _dropin():
    norm = validate(dict(BASE)).normalized
    with open(os.path.join(ROLE, "defaults", "main.yml")) as fh:
        defaults = yaml.safe_load(fh)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "# " + text
    env.filters["quote"] = shlex.quote
    with open(os.path.join(ROLE, "templates", "dcgm-exporter.dropin.conf.j2")) as fh:
        return env.from_string(fh.read()).render(
            dict(defaults, ansible_managed="managed", __monitoring_config=norm, __monitoring_counters_file="/x.csv"))


def test_exporter_uses_the_nodes_host_engine():
    text = _dropin()
    exec_start = [line for line in text.splitlines() if line.startswith("ExecStart=") and line != "ExecStart="]
    argv = shlex.split(exec_start[0][len("ExecStart="):])
    assert argv[argv.index("-r") + 1] == "localhost:5555"


def test_exporter_unit_is_bound_to_the_host_engine_unit():
    text = _dropin()
    for key in ("After", "Requires", "PartOf"):
        assert re.search(r"^%s=nvidia-dcgm\.service$" % key, text, re.M), key


def test_field_list_uses_current_dcgm_names():
    with open(os.path.join(ROLE, "files", "dcgm-counters.csv")) as fh:
        fields = [line.split(",")[0].strip() for line in fh if line.strip() and not line.startswith("#")]
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in fields
    assert [f for f in fields if f in DEPRECATED_FIELDS] == []


def test_textfile_timer_gets_a_systemd_time_span_for_every_accepted_interval():
    """The validator reads the interval as the argument spec's type: int does (60.0 and 6e1 are
    60); the timer must get the number systemd parses, not the text as written."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["comment"] = lambda text: "# " + text
    with open(os.path.join(ROLE, "templates", "dgxops-textfile.timer.j2")) as fh:
        template = env.from_string(fh.read())
    for value in (60, "60", "60.0", 60.0, "6e1"):
        assert not validate(dict(BASE, monitoring_textfile_interval_seconds=value)).errors, value
        text = template.render(ansible_managed="managed", monitoring_textfile_interval_seconds=value)
        assert "OnUnitActiveSec=60\n" in text, (value, text)
