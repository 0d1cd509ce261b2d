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
    page = report.html_report(md)
    assert page.startswith("<!doctype html>")
    assert "<th>host</th>" in page and "<td class=\"bad\">driver not loaded</td>" in page
    assert page.count("<table>") == 3
