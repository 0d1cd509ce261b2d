"""Fleet views built from the facts module's output and run results: the GPU table and the
fleet report (Markdown, or a self-contained HTML page rendered by a Jinja2 template).

A report is a list of :class:`Section` (hosts, the node x GPU grid, GPUs, each run's changes,
drift), built once by :func:`report_sections` and rendered as Markdown or HTML. Other parts of
dgxops add their own sections (e.g. consistency outliers) by passing ``sections=[Section(...)]``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
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
    """``6 x 1g.10gb, 1 x 2g.20gb`` from the facts module's ``gpus[].mig_instances`` (parsed
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
RUN_HEADER = ["host", "ok", "changed", "unreachable", "failed", "skipped"]


@dataclass
class Section:
    """One part of the report: a heading, then optional text, a table and a list.
    Cells are strings; the HTML page marks known good/bad values (see :func:`cell_class`)."""

    title: str
    text: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    lists: list[tuple[str, list[str]]] = field(default_factory=list)  # (title, items); `x` marks code
    kind: str = "table"  # table | grid (node x GPU) | run | drift; a hint for the page's layout

    @property
    def anchor(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.title.lower()).strip("-")


def _gpu_grid(facts_by_host: dict[str, dict]) -> Section:
    """Nodes as rows, GPU indexes as columns: model, memory, power and MIG at a glance."""
    width = max([len((f or {}).get("nvidia_smi", {}).get("gpus") or []) for f in facts_by_host.values()] or [0])
    rows = []
    for host in sorted(facts_by_host):
        smi = (facts_by_host[host] or {}).get("nvidia_smi") or {}
        gpus = {g.get("index"): g for g in smi.get("gpus") or []}
        if not gpus:
            health = smi.get("health") or {}
            rows.append([host] + ([health.get("reason") or "no GPU facts"] + ["-"] * (width - 1) if width else []))
            continue
        cells = [host]
        for i in range(width):
            g = gpus.get(i)
            if g is None:
                cells.append("-")
                continue
            mem = g.get("memory_total_mib")
            bits = [str(g.get("name") or "?").replace("NVIDIA ", ""),
                    ("%d GiB" % round(mem / 1024)) if isinstance(mem, (int, float)) else "unified memory",
                    "%s W" % _fmt(g.get("power_limit_w"))]
            if g.get("mig_mode_current") == "Enabled":
                bits.append("MIG " + (_mig_instances(g) or "on"))
            cells.append(" / ".join(bits))
        rows.append(cells)
    return Section("Nodes x GPUs", columns=["node"] + ["GPU %d" % i for i in range(width)], rows=rows, kind="grid")


def _run_section(label: str, run: dict) -> Section:
    sec = Section("Run: %s" % label, kind="run",
                  text="status %s, rc %s, %d change(s), %d failure(s)" % (run["status"], run["rc"], run["changed"], len(run["failures"])),
                  columns=list(RUN_HEADER),
                  rows=[[h, str(s.get("ok", 0)), str(s.get("changed", 0)), str(s.get("dark", 0)), str(s.get("failures", 0)),
                         str(s.get("skipped", 0))] for h, s in sorted(run["hosts"].items())])
    if run["failures"]:
        sec.lists.append(("Failures:", ["`%s` %s: %s" % (f["host"], f["task"], (f["msg"] or "").strip().splitlines()[0] if f["msg"] else "")
                                        for f in run["failures"]]))
    if run.get("changed_tasks"):
        by_task: dict[str, list[str]] = {}
        for c in run["changed_tasks"]:
            by_task.setdefault(c["task"], []).append(c["host"])
        sec.lists.append(("Changes (task: hosts):",
                          ["%s: %s" % (task, ", ".join("`%s`" % h for h in sorted(hosts))) for task, hosts in by_task.items()]))
    return sec


def _drift_section(runs) -> Section | None:
    """What differs from the declared state: the diffs of check/diff runs, per host and task."""
    rows = []
    for label, run in runs:
        for d in run.get("diffs") or []:
            diffs = d["diff"] if isinstance(d["diff"], list) else [d["diff"]]
            for one in diffs:
                if not isinstance(one, dict):
                    continue
                # the destination: template/copy name it in before_header and put the rendered
                # temporary source in after_header (a path under ~/.ansible/tmp that says nothing)
                where = one.get("before_header") or one.get("after_header") or ""
                before, after = one.get("before"), one.get("after")
                what = _short(before) + " -> " + _short(after) if (before is not None or after is not None) else ""
                rows.append([d["host"], d["task"], str(where), what, label])
    if not rows:
        return None
    return Section("Drift", kind="drift", text="Differences from the declared state found by check/diff runs.",
                   columns=["host", "task", "where", "before -> after", "run"], rows=rows)


def _short(value, limit: int = 60) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def consistency_section(result: dict) -> Section:
    """The fleet consistency result (``dgxops consistency --save``) as a report section."""
    rows = []
    for group, g in sorted((result.get("groups") or {}).items()):
        ref = g.get("reference") or {}
        rows.append([group, str(len(g.get("hosts") or [])), _fmt(ref.get("driver_version")), _fmt(ref.get("driver_flavour")),
                     _fmt(ref.get("cuda_version")), _fmt(ref.get("nccl_version")), _fmt(ref.get("kernel")),
                     _fmt(ref.get("mig_layout")), ", ".join(sorted(g.get("outliers") or {})) or "none"])
    sec = Section("Consistency", columns=["group", "nodes", "driver", "flavour", "CUDA", "NCCL", "kernel", "MIG", "outliers"],
                  rows=rows, text="consistent" if result.get("consistent") else
                  "%d node(s) differ from their group" % result.get("outlier_count", 0))
    items = []
    for group, g in sorted((result.get("groups") or {}).items()):
        for host, fields in sorted((g.get("outliers") or {}).items()):
            for fname, d in sorted(fields.items()):
                what = ", ".join(d.get("differs") or []) if fname == "files" else "%s (group: %s)" % (
                    _fmt(d.get("value")), _fmt(d.get("expected")))
                items.append("`%s` (%s): %s %s" % (host, group, d.get("title", fname), what))
    if items:
        sec.lists.append(("Outliers:", items))
    return sec


def report_sections(facts_by_host: dict[str, dict], runs: Iterable[tuple[str, dict]] = (),
                    sections: Iterable[Section] = ()) -> list[Section]:
    """The report's sections in order; ``sections`` (e.g. consistency outliers) go after the runs."""
    runs = list(runs)
    out = [Section("Hosts", columns=list(HOST_HEADER), rows=_host_summary(facts_by_host)), _gpu_grid(facts_by_host)]
    gpu_header = ["host"] + [t for _k, t in GPU_COLUMNS] + ["MIG instances"]
    gpu_cells = []
    for row in gpu_rows(facts_by_host):
        gpu = row["gpu"] or {}
        gpu_cells.append([row["host"]] + [_fmt(gpu.get(k)) for k, _t in GPU_COLUMNS] + [_fmt(row.get("mig_instances"))])
    out.append(Section("GPUs", columns=gpu_header, rows=gpu_cells))
    out += [_run_section(label, run) for label, run in runs]
    drift = _drift_section(runs)
    if drift:
        out.append(drift)
    out += list(sections)
    return out


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def markdown_report(facts_by_host: dict[str, dict], runs: Iterable[tuple[str, dict]] = (), title: str = "DGX fleet report",
                    sections: Iterable[Section] = ()) -> str:
    """``runs``: (label, RunResult.as_dict()) pairs, e.g. first converge and idempotent rerun."""
    md = ["# %s" % title, "", "Generated %s for %d host(s)." % (_now(), len(facts_by_host)), ""]
    for sec in report_sections(facts_by_host, runs, sections):
        md += ["## %s" % sec.title, ""]
        if sec.text:
            md += [sec.text, ""]
        if sec.columns:
            md += [_md_table(sec.columns, sec.rows), ""]
        for list_title, items in sec.lists:
            md += [list_title, ""] + ["- " + i for i in items] + [""]
    return "\n".join(md)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(c):
        return str(c).replace("|", "\\|")
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def html_report(facts_by_host: dict[str, dict], runs: Iterable[tuple[str, dict]] = (), title: str = "DGX fleet report",
                sections: Iterable[Section] = ()) -> str:
    """A self-contained HTML page (no external resources), from the template templates/report.html.j2."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("dgxops", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]), trim_blocks=True, lstrip_blocks=True)
    env.filters["cell_class"] = cell_class
    env.filters["code"] = _code_spans
    secs = report_sections(facts_by_host, runs, sections)
    hosts = len(facts_by_host)
    unhealthy = sum(1 for f in facts_by_host.values()
                    if not (((f or {}).get("nvidia_smi") or {}).get("health") or {}).get("ok", False))
    gpus = sum(len(((f or {}).get("nvidia_smi") or {}).get("gpus") or []) for f in facts_by_host.values())
    return env.get_template("report.html.j2").render(title=title, generated=_now(), sections=secs,
                                                     summary={"hosts": hosts, "gpus": gpus, "unhealthy": unhealthy})


def _code_spans(text: str):
    """`x` -> <code>x</code>, everything else escaped."""
    import markupsafe

    parts = str(text).split("`")
    return markupsafe.Markup("").join(markupsafe.Markup("<code>%s</code>") % p if i % 2 else markupsafe.escape(p)
                                      for i, p in enumerate(parts))


def cell_class(cell: str) -> str:
    if cell in ("ok",):
        return "good"
    if cell.startswith(("driver", "gpu lost", "no GPU", "unknown")) or cell == "FAILED":
        return "bad"
    return ""
