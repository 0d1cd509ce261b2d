"""Fleet table and report rendering from facts shaped like the facts module's output.

The MIG shape (``gpus[].mig_instances``: parsed ``nvidia-smi mig -lgi`` rows) is the one
tests/unit/plugins/modules/test_nvidia_smi_facts.py::test_all_subsets_mig_capture pins on a real
capture; tests/fleet checks the column against the module's output on a simulated node."""

from dgxops import report

FACTS = {
    "node-b": {"nvidia_smi": {"driver_version": "580.95.05", "model_family": "h100", "gpu_count": 2,
                              "kernel_module_flavour": "open", "nvswitch": True, "mig_capable": True,
                              "health": {"ok": True, "reason": None},
                              "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
                                        "power_limit_w": 700.0, "power_max_limit_w": 700.0, "persistence_mode": True,
                                        "mig_mode_current": "Enabled",
                                        "mig_instances": [{"name": "1g.10gb", "profile_id": 19, "instance_id": 7 + i,
                                                           "placement_start": i, "placement_size": 1} for i in range(6)]
                                        + [{"name": "2g.20gb", "profile_id": 14, "instance_id": 3,
                                            "placement_start": 6, "placement_size": 2}]},
                                       {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
                                        "power_limit_w": 500.0, "power_max_limit_w": 700.0, "persistence_mode": False,
                                        "mig_mode_current": "Disabled", "mig_instances": []}]}},
    "node-a": {"nvidia_smi": {"driver_version": None, "gpus": [],
                              "health": {"ok": False, "reason": "driver not loaded"}}},
}


def test_gpu_rows_one_per_gpu_and_one_for_a_broken_host():
    rows = report.gpu_rows(FACTS)
    assert [(r["host"], (r["gpu"] or {}).get("index")) for r in rows] == [("node-a", None), ("node-b", 0), ("node-b", 1)]
    assert rows[0]["health"] == "driver not loaded"
    assert rows[1]["mig_instances"] == "6 x 1g.10gb, 1 x 2g.20gb"
    assert rows[2]["mig_instances"] is None


def test_gpu_table_text():
    lines = report.gpu_table(FACTS).splitlines()
    assert lines[0].split()[:3] == ["host", "driver", "GPU"]
    assert lines[1].startswith("node-a") and lines[1].rstrip().endswith("driver not loaded")
    cells = lines[2].split()
    assert cells[:3] == ["node-b", "580.95.05", "0"]
    assert "700" in cells and "on" in cells and "Enabled" in cells
    assert "500" in lines[3].split() and "off" in lines[3].split()


def test_markdown_and_html_report():
    run = {"status": "successful", "rc": 0, "changed": 0, "failures": [], "changed_tasks": [],
           "hosts": {"node-b": {"ok": 5, "changed": 0, "dark": 0, "failures": 0, "skipped": 1}}}
    md = report.markdown_report(FACTS, [("idempotent rerun", run)])
    assert md.startswith("# DGX fleet report")
    assert "| node-b | h100 | 2 | 580.95.05 | open | on | on | ok |" in md
    assert "| node-a | - | - | - | - | - | - | driver not loaded |" in md
    assert "## Run: idempotent rerun" in md and "| node-b | 5 | 0 | 0 | 0 | 1 |" in md
    page = report.html_report(FACTS, [("idempotent rerun", run)])
    assert page.startswith("<!doctype html>")
    assert "<th>host</th>" in page and "<td class=\"bad\">driver not loaded</td>" in page
    # hosts, the node x GPU grid, GPUs, the run
    assert page.count("<table") == 4 and '<table class="grid">' in page
    assert "<td class=\"\">H100 80GB HBM3 / 80 GiB / 700 W / MIG 6 x 1g.10gb, 1 x 2g.20gb</td>" in page


def test_html_is_rendered_from_data_not_reparsed_markdown():
    """Values that Markdown would mangle (pipes, asterisks, markup) arrive in the page as written, escaped."""
    facts = {"node|<b>x</b>": {"nvidia_smi": {"driver_version": "580**1", "gpus": [], "health": {"ok": False, "reason": "a | b"}}}}
    run = {"status": "failed", "rc": 2, "changed": 1, "hosts": {"node|<b>x</b>": {"ok": 1, "changed": 1}},
           "failures": [{"host": "node|<b>x</b>", "task": "T", "msg": "it <broke> | here", "unreachable": False}],
           "changed_tasks": [{"host": "node|<b>x</b>", "task": "Render"}],
           "diffs": [{"host": "node|<b>x</b>", "task": "Render", "diff": {"after_header": "/etc/nccl.conf", "before": "A=1", "after": "A=2"}}]}
    page = report.html_report(facts, [("check", run)])
    assert "<b>x</b>" not in page and "node|&lt;b&gt;x&lt;/b&gt;" in page
    assert "580**1" in page and "a | b" in page and "it &lt;broke&gt; | here" in page
    assert "<code>node|&lt;b&gt;x&lt;/b&gt;</code>" in page  # the failure list marks the host as code
    assert 'id="drift"' in page and "/etc/nccl.conf" in page and "A=1 -&gt; A=2" in page


def test_drift_names_the_destination_not_the_rendered_temporary_source():
    """ansible.builtin.template's diff: before_header is the destination, after_header the rendered
    source in the controller's temporary directory (seen in the demo's report)."""
    run = {"status": "successful", "rc": 0, "changed": 1, "hosts": {"n": {"ok": 1, "changed": 1}}, "failures": [],
           "changed_tasks": [{"host": "n", "task": "Render spark-defaults.conf"}],
           "diffs": [{"host": "n", "task": "Render spark-defaults.conf", "diff": [
               {"before_header": "/opt/spark/conf/spark-defaults.conf", "before": "",
                "after_header": "/root/.ansible/tmp/ansible-local-1/tmpx/spark-defaults.conf.j2", "after": "a b"}]}]}
    md = report.markdown_report({}, [("converge", run)])
    assert "/opt/spark/conf/spark-defaults.conf" in md
    assert "ansible-local" not in md


def test_extra_sections_are_rendered_in_both_formats():
    extra = report.Section("Consistency outliers", text="Settings that differ from the group's majority.",
                           columns=["host", "setting", "value", "majority"], rows=[["node-b", "power_limit_w", "500", "700"]])
    md = report.markdown_report(FACTS, sections=[extra])
    assert "## Consistency outliers" in md and "| node-b | power_limit_w | 500 | 700 |" in md
    page = report.html_report(FACTS, sections=[extra])
    assert '<section id="consistency-outliers"' in page and "<td class=\"\">power_limit_w</td>" in page
    assert '<a href="#consistency-outliers">' in page


def test_node_by_gpu_grid_has_one_column_per_gpu_index():
    (grid,) = [s for s in report.report_sections(FACTS) if s.kind == "grid"]
    assert grid.columns == ["node", "GPU 0", "GPU 1"]
    assert grid.rows[0] == ["node-a", "driver not loaded", "-"]  # a node without GPU facts spans the same columns
    assert grid.rows[1][0] == "node-b" and grid.rows[1][2] == "H100 80GB HBM3 / 80 GiB / 500 W"


def test_consistency_section_names_the_outliers():
    result = {"consistent": False, "outlier_count": 1, "groups": {"dgx_h100": {
        "hosts": ["a", "b", "c"], "reference": {"driver_version": "580.95.05", "driver_flavour": "open", "mig_layout": "off"},
        "outliers": {"b": {"driver_version": {"title": "driver version", "value": "580.82.07", "expected": "580.95.05"},
                           "files": {"title": "managed files", "value": None, "expected": None, "differs": ["/etc/nccl.conf"]}}}}}}
    sec = report.consistency_section(result)
    md = report.markdown_report(FACTS, [], sections=[sec])
    assert "## Consistency" in md and "1 node(s) differ from their group" in md
    assert "| dgx_h100 | 3 | 580.95.05 | open |" in md
    assert "`b` (dgx_h100): driver version 580.82.07 (group: 580.95.05)" in md
    assert "`b` (dgx_h100): managed files /etc/nccl.conf" in md
