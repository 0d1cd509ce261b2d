"""Fleet views built from the facts module's output and run results: the GPU table and the
fleet report (Markdown or self-contained HTML)."""

from __future__ import annotations

import datetime
import html
from typing import Iterable

GPU_COLUMNS = (
    ("index", "GPU"), ("name", "model"), ("memory_total_mib", "memory MiB"),
    ("power_limit_w", "power W"), ("power_max_limit_w", "max W"),
    ("persistence_mode", "persistence"), ("mig_mode_current", "MIG"),
)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return ("%.0f" % value) if value.is_integer() else ("%.2f" % value)
    return str(value)


def gpu_rows(facts_by_host: dict[str, dict]) -> list[dict]:
    """One row per (host, GPU), plus one row for a host whose GPUs could not be read."""
    rows = []
    for host in sorted(facts_by_host):
        smi = (facts_by_host[host] or {}).get("nvidia_smi") or {}
        health = smi.get("health") or {}
        gpus = smi.get("gpus") or []
        if not gpus:
            rows.append({"host": host, "driver": smi.get("driver_version"), "gpu": None,
                         "health": "ok" if health.get("ok") else (health.get("reason") or "no GPU facts")})
            continue
        for gpu in gpus:
            row = {"host": host, "driver": smi.get("driver_version"), "gpu": gpu,
                   "health": "ok" if health.get("ok", True) else (health.get("reason") or "unhealthy")}
            instances = _mig_instances(gpu)
            row["mig_instances"] = instances
            rows.append(row)
    return rows


def _mig_instances(gpu: dict) -> str | None:
    """``2 x 3g.40gb, 1 x 1g.10gb`` from the facts module's ``gpus[].mig_instances`` (parsed
    ``nvidia-smi mig -lgi`` rows: name, profile_id, instance_id, placement)."""
    instances = gpu.get("mig_instances") if isinstance(gpu, dict) else None
    if not instances:
        return None
    counts: dict[str, int] = {}
    for inst in instances:
        name = str(inst.get("name") or "profile %s" % inst.get("profile_id"))
        counts[name] = counts.get(name, 0) + 1
    return ", ".join("%d x %s" % (c, n) for n, c in sorted(counts.items()))


def gpu_table(facts_by_host: dict[str, dict]) -> str:
    header = ["host", "driver"] + [title for _key, title in GPU_COLUMNS] + ["MIG instances", "health"]
    lines = []
    for row in gpu_rows(facts_by_host):
        gpu = row["gpu"] or {}
        cells = [row["host"], _fmt(row["driver"])] + [_fmt(gpu.get(k)) for k, _t in GPU_COLUMNS] + [
            _fmt(row.get("mig_instances")), row["health"]]
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) if lines else len(h) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(cells, widths)) for cells in lines]
    return "\n".join(out)


def _host_summary(facts_by_host: dict[str, dict]) -> list[list[str]]:
    rows = []
    for host in sorted(facts_by_host):
        smi = (facts_by_host[host] or {}).get("nvidia_smi") or {}
        health = smi.get("health") or {}
        rows.append([host, _fmt(smi.get("model_family")), _fmt(smi.get("gpu_count")), _fmt(smi.get("driver_version")),
                     _fmt(smi.get("kernel_module_flavour")), _fmt(smi.get("nvswitch")), _fmt(smi.get("mig_capable")),
                     "ok" if health.get("ok", False) else (health.get("reason") or "unknown")])
    return rows


HOST_HEADER = ["host", "family", "GPUs", "driver", "kernel module", "NVSwitch", "MIG capable", "health"]


def consistency_section(result: dict) -> list[str]:
    """Markdown lines for a fleet consistency result (``dgxops consistency --save``)."""
    md = ["## Consistency", "", "**%s**" % ("consistent" if result.get("consistent") else
                                          "%d node(s) differ from their group" % result.get("outlier_count", 0)), ""]
    rows = []
    for group, g in sorted((result.get("groups") or {}).items()):
        ref = g.get("reference") or {}
        rows.append([group, str(len(g.get("hosts") or [])), _fmt(ref.get("driver_version")), _fmt(ref.get("driver_flavour")),
                     _fmt(ref.get("cuda_version")), _fmt(ref.get("nccl_version")), _fmt(ref.get("kernel")),
                     _fmt(ref.get("mig_layout")), ", ".join(sorted(g.get("outliers") or {})) or "none"])
    md += [_md_table(["group", "nodes", "driver", "flavour", "CUDA", "NCCL", "kernel", "MIG", "outliers"], rows), ""]
    out = []
    for group, g in sorted((result.get("groups") or {}).items()):
        for host, fields in sorted((g.get("outliers") or {}).items()):
            for field, d in sorted(fields.items()):
                what = ", ".join(d.get("differs") or []) if field == "files" else "%s (group: %s)" % (
                    _fmt(d.get("value")), _fmt(d.get("expected")))
                out.append([host, group, d.get("title", field), what])
    if out:
        md += [_md_table(["host", "group", "differs in", "value"], out), ""]
    return md


def markdown_report(facts_by_host: dict[str, dict], runs: Iterable[tuple[str, dict]] = (), title: str = "DGX fleet report",
                    consistency: dict | None = None) -> str:
    """``runs``: (label, RunResult.as_dict()) pairs, e.g. first converge and idempotent rerun."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md = ["# %s" % title, "", "Generated %s for %d host(s)." % (now, len(facts_by_host)), ""]
    md += ["## Hosts", "", _md_table(HOST_HEADER, _host_summary(facts_by_host)), ""]
    gpu_header = ["host"] + [t for _k, t in GPU_COLUMNS] + ["MIG instances"]
    gpu_cells = []
    for row in gpu_rows(facts_by_host):
        gpu = row["gpu"] or {}
        gpu_cells.append([row["host"]] + [_fmt(gpu.get(k)) for k, _t in GPU_COLUMNS] + [_fmt(row.get("mig_instances"))])
    md += ["## GPUs", "", _md_table(gpu_header, gpu_cells), ""]
    if consistency:
        md += consistency_section(consistency)
    for label, run in runs:
        md += ["## Run: %s" % label, "",
               "status **%s**, rc %s, %d change(s), %d failure(s)" % (run["status"], run["rc"], run["changed"], len(run["failures"])), ""]
        md.append(_md_table(["host", "ok", "changed", "unreachable", "failed", "skipped"], [
            [h, str(s.get("ok", 0)), str(s.get("changed", 0)), str(s.get("dark", 0)), str(s.get("failures", 0)), str(s.get("skipped", 0))]
            for h, s in sorted(run["hosts"].items())]))
        if run["failures"]:
            md += ["", "Failures:", ""]
            md += ["- `%s` %s: %s" % (f["host"], f["task"], (f["msg"] or "").strip().splitlines()[0] if f["msg"] else "")
                   for f in run["failures"]]
        if run.get("changed_tasks"):
            by_task: dict[str, list[str]] = {}
            for c in run["changed_tasks"]:
                by_task.setdefault(c["task"], []).append(c["host"])
            md += ["", "Changes (task: hosts):", ""]
            md += ["- %s: %s" % (task, ", ".join("`%s`" % h for h in sorted(hosts))) for task, hosts in by_task.items()]
        md.append("")
    return "\n".join(md)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(c):
        return str(c).replace("|", "\\|")
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def html_report(markdown: str) -> str:
    """A self-contained HTML page from the Markdown report (tables, headings, lists)."""
    body = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("# "):
            body.append("<h1>%s</h1>" % html.escape(line[2:]))
        elif line.startswith("## "):
            body.append("<h2>%s</h2>" % html.escape(line[3:]))
        elif line.startswith("| "):
            table = []
            while i < len(lines) and lines[i].startswith("|"):
                table.append(lines[i])
                i += 1
            cells = [[c.strip().replace("\\|", "|") for c in row.strip("|").split(" | ")] for row in table if not row.startswith("|---")]
            head, rows = cells[0], cells[1:]
            body.append("<table><thead><tr>%s</tr></thead><tbody>%s</tbody></table>" % (
                "".join("<th>%s</th>" % html.escape(h) for h in head),
                "".join("<tr>%s</tr>" % "".join('<td class="%s">%s</td>' % (_cls(c), html.escape(c)) for c in r) for r in rows)))
            continue
        elif line.startswith("- "):
            body.append("<li>%s</li>" % html.escape(line[2:]))
        elif line.strip():
            body.append("<p>%s</p>" % html.escape(line).replace("**", ""))
        i += 1
    style = ("body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}"
             "th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}th{background:#76b900;color:#fff}"
             "td.bad{background:#fdd}td.good{background:#dfd}")
    return "<!doctype html><html><head><meta charset='utf-8'><title>DGX fleet report</title><style>%s</style></head><body>%s</body></html>" % (
        style, "\n".join(body))


def _cls(cell: str) -> str:
    if cell in ("ok",):
        return "good"
    if cell.startswith(("driver", "gpu lost", "no GPU", "unknown")) or cell == "FAILED":
        return "bad"
    return ""
