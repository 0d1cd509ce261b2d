"""A thin wrapper over ansible-runner: one place builds the runner arguments.

Modelled on ansible-navigator's ``runner/base.py``: every run gets a fresh private data
directory (ansible-runner silently reuses inventory/extravars/env written into an old one),
an explicit environment (the venv's ``bin`` first on PATH, this checkout's ``ansible.cfg``),
and an event handler that turns runner events into :class:`Progress` callbacks. The result
is a :class:`RunResult` with per-host counts and the failures, ready for a summary.

    from dgxops.runner import PlaybookRun, run_playbook
    result = run_playbook(PlaybookRun("site.yml", inventory="inventories/simulated/hosts.yml"))
    print(result.summary())
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]  # the checkout (src/dgxops/runner.py)

HOST_STATS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")


@dataclass
class PlaybookRun:
    """What to run. Paths are relative to the checkout unless absolute."""

    playbook: str
    inventory: str | list[str] | None = None
    extravars: dict = field(default_factory=dict)
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    diff: bool = False
    forks: int | None = None
    verbosity: int = 0
    timeout: int | None = None  # seconds for the whole run
    # seconds one task may take on one host before Ansible gives up on it (ANSIBLE_TASK_TIMEOUT;
    # a frozen node then fails that task instead of hanging the run). None: ansible.cfg's (off).
    task_timeout: int | None = None
    # "auto": dgxops.fleet.mitogen_linear when mitogen is installed (BENCHMARKS.md), else
    # Ansible's linear; "linear" or "mitogen" force one.
    strategy: str = "auto"


@dataclass
class Failure:
    host: str
    task: str
    msg: str
    unreachable: bool = False


@dataclass
class RunResult:
    status: str  # successful, failed, timeout, canceled
    rc: int
    hosts: dict[str, dict[str, int]]
    failures: list[Failure]
    changed_tasks: list[tuple[str, str]]  # (host, task)
    artifact_dir: str | None = None
    facts: dict[str, dict] = field(default_factory=dict)  # ansible_facts returned per host
    diffs: list[dict] = field(default_factory=list)  # {"host", "task", "diff"} in check/diff runs
    strategy: str = "linear"  # the strategy plugin the run used

    def as_dict(self) -> dict:
        return {
            "status": self.status, "rc": self.rc, "ok": self.ok, "hosts": self.hosts,
            "changed": self.changed, "strategy": self.strategy,
            "failures": [f.__dict__ for f in self.failures],
            "changed_tasks": [{"host": h, "task": t} for h, t in self.changed_tasks],
            "diffs": self.diffs, "facts": self.facts,
        }

    @property
    def ok(self) -> bool:
        return self.status == "successful" and self.rc == 0

    @property
    def changed(self) -> int:
        return sum(h.get("changed", 0) for h in self.hosts.values())

    def summary(self) -> str:
        lines = ["%-28s %5s %8s %11s %7s %8s" % ("HOST", "ok", "changed", "unreachable", "failed", "skipped")]
        for host in sorted(self.hosts):
            s = self.hosts[host]
            lines.append("%-28s %5d %8d %11d %7d %8d" % (
                host, s.get("ok", 0), s.get("changed", 0), s.get("dark", 0), s.get("failures", 0), s.get("skipped", 0)))
        if self.failures:
            lines.append("")
            lines.append("failures:")
            for f in self.failures:
                first = (f.msg or "").strip().splitlines()[:6]
                lines.append("  %s | %s%s" % (f.host, f.task, " (unreachable)" if f.unreachable else ""))
                lines.extend("      " + ln for ln in first)
        lines.append("")
        verdict = "OK" if self.ok else "FAILED"
        lines.append("%s: status=%s rc=%d, %d host(s), %d change(s), %d failure(s); strategy %s" % (
            verdict, self.status, self.rc, len(self.hosts), self.changed, len(self.failures), self.strategy))
        return "\n".join(lines)


@dataclass
class Progress:
    """One thing worth telling a person while a run goes on."""

    kind: str  # play, task, ok, changed, failed, unreachable, skipped, end
    text: str
    host: str | None = None


def mitogen_installed() -> bool:
    """Whether the mitogen package is importable (located only: never imported into this process's Ansible)."""
    return importlib.util.find_spec("ansible_mitogen") is not None


# Mitogen's linear strategy without its CPU pinning on small controllers (see the plugin's docs).
MITOGEN_STRATEGY = "dgxops.fleet.mitogen_linear"


def strategy_env(strategy: str) -> dict[str, str]:
    """Environment that selects the strategy. Always explicit: ansible-runner starts from the
    caller's environment, where an ANSIBLE_STRATEGY could otherwise pick another one."""
    if strategy not in ("auto", "linear", "mitogen"):
        raise ValueError("strategy must be auto, linear or mitogen, got %r" % (strategy,))
    if strategy == "linear":
        return {"ANSIBLE_STRATEGY": "linear"}
    if not mitogen_installed():
        if strategy == "mitogen":
            raise ValueError("strategy mitogen asked for, but mitogen is not installed (pip install mitogen)")
        return {"ANSIBLE_STRATEGY": "linear"}
    return {"ANSIBLE_STRATEGY": MITOGEN_STRATEGY}


def _env(strategy: str = "linear") -> dict[str, str]:
    """What the run's environment must hold. ansible-runner starts from the caller's environment
    (HOME, DOCKER_HOST, a user's ANSIBLE_* settings come through) and lays these over it."""
    venv_bin = Path(sys.executable).parent
    env = {
        "PATH": os.pathsep.join([str(venv_bin), os.environ.get("PATH", "/usr/bin:/bin")]),
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    env.update(strategy_env(strategy))
    return env


def task_timeout_env(seconds: int | None) -> dict[str, str]:
    """ANSIBLE_TASK_TIMEOUT for a per-task limit in seconds (None: leave ansible.cfg's)."""
    if seconds is None:
        return {}
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise ValueError("task_timeout must be a whole number of seconds >= 0 (0: no limit), got %r" % (seconds,))
    return {"ANSIBLE_TASK_TIMEOUT": str(seconds)}


def build_runner_kwargs(spec: PlaybookRun, private_data_dir: str) -> dict:
    """The one place that turns a PlaybookRun into ansible-runner arguments."""
    def resolve(path: str) -> str:
        return path if os.path.isabs(path) else str(ROOT / path)

    def resolve_inventory(source: str) -> str:
        # "a,b," is a host list, not a path; an empty entry would name the checkout itself, whose
        # executables Ansible would run as inventory scripts
        if not source.strip():
            raise ValueError("inventory: an empty entry names no inventory (give a file, a directory or host1,host2,)")
        return source if "," in source else resolve(source)

    cmdline = []
    if spec.check:
        cmdline.append("--check")
    if spec.diff:
        cmdline.append("--diff")
    if spec.skip_tags:
        cmdline += ["--skip-tags", spec.skip_tags]
    kwargs = {
        "private_data_dir": private_data_dir,
        "project_dir": str(ROOT),
        "playbook": resolve(spec.playbook),
        "envvars": _env(spec.strategy),
        "extravars": dict(spec.extravars),
        "quiet": True,
        "rotate_artifacts": 1,
        "json_mode": False,
        "verbosity": spec.verbosity or None,
    }
    if spec.inventory:
        inv = [spec.inventory] if isinstance(spec.inventory, str) else list(spec.inventory)
        kwargs["inventory"] = [resolve_inventory(i) for i in inv]
    if spec.limit:
        kwargs["limit"] = spec.limit
    if spec.tags:
        kwargs["tags"] = spec.tags
    if spec.forks:
        kwargs["forks"] = spec.forks
    if spec.timeout:
        kwargs["timeout"] = spec.timeout
    kwargs["envvars"].update(task_timeout_env(spec.task_timeout))
    if cmdline:
        kwargs["cmdline"] = " ".join(cmdline)
    return {k: v for k, v in kwargs.items() if v is not None}


class _Collector:
    """Event handler: progress callbacks plus what the summary needs."""

    def __init__(self, progress: Callable[[Progress], None] | None):
        self.progress = progress
        self.failures: list[Failure] = []
        self.changed: list[tuple[str, str]] = []
        self.facts: dict[str, dict] = {}
        self.diffs: list[dict] = []

    def _emit(self, kind, text, host=None):
        if self.progress:
            self.progress(Progress(kind, text, host))

    def __call__(self, event: dict) -> bool:
        name = event.get("event")
        data = event.get("event_data", {})
        host = data.get("host")
        task = data.get("task") or ""
        res = data.get("res") or {}
        if name == "playbook_on_play_start":
            self._emit("play", data.get("play", ""))
        elif name == "playbook_on_task_start":
            self._emit("task", task)
        elif name == "runner_on_ok":
            if isinstance(res.get("ansible_facts"), dict):
                self.facts.setdefault(host, {}).update(res["ansible_facts"])
            if res.get("diff") and res.get("changed"):
                self.diffs.append({"host": host, "task": task, "diff": res["diff"]})
            if res.get("changed"):
                self.changed.append((host, task))
                self._emit("changed", task, host)
            else:
                self._emit("ok", task, host)
        elif name == "runner_on_failed" and not data.get("ignore_errors"):
            text = _failure_text(res)
            if _TASK_TIMED_OUT.match(text):
                # ansible-core's task timeout: the host did not answer in time (frozen, overloaded)
                self.failures.append(Failure(host, task, "%s: the host did not answer in time (frozen or overloaded "
                                             "node?); the other hosts went on" % text.strip(), unreachable=True))
                self._emit("unreachable", task, host)
                return True
            self.failures.append(Failure(host, task, text))
            self._emit("failed", task, host)
        elif name == "runner_on_unreachable":
            self.failures.append(Failure(host, task, res.get("msg", ""), unreachable=True))
            self._emit("unreachable", task, host)
        elif name == "runner_on_skipped":
            self._emit("skipped", task, host)
        return True  # keep the event on disk (rotated)


_TASK_TIMED_OUT = re.compile(r"^(Task failed: )?(The task action timed out|Timed out) after \d+ second")


def _failure_text(res: dict) -> str:
    msg = res.get("msg") or ""
    if not isinstance(msg, str):
        msg = repr(msg)
    for key in ("stderr", "module_stderr"):
        if res.get(key):
            msg += "\n" + str(res[key]).strip()
    return msg


def run_playbook(spec: PlaybookRun, progress: Callable[[Progress], None] | None = None,
                 keep_artifacts: bool = False) -> RunResult:
    """Run one playbook synchronously and return its result."""
    import ansible_runner  # imported here: the simulator imports dgxops without it

    private = tempfile.mkdtemp(prefix="dgxops-run-")
    collector = _Collector(progress)
    try:
        kwargs = build_runner_kwargs(spec, private)
        runner = ansible_runner.run(event_handler=collector, **kwargs)
        if progress:
            progress(Progress("end", ""))
        stats = runner.stats or {}
        hosts: dict[str, dict[str, int]] = {}
        for key in HOST_STATS:
            for host, count in (stats.get(key) or {}).items():
                hosts.setdefault(host, {k: 0 for k in HOST_STATS})[key] = count
        if runner.rc == 127 or (runner.status == "failed" and not hosts and not collector.failures):
            stdout = runner.stdout.read() if hasattr(runner.stdout, "read") else ""
            collector.failures.append(Failure("localhost", "ansible-playbook", stdout.strip()[-2000:]))
        return RunResult(runner.status, runner.rc, hosts, collector.failures, collector.changed,
                         artifact_dir=runner.config.artifact_dir if keep_artifacts else None,
                         facts=collector.facts, diffs=collector.diffs,
                         strategy=kwargs["envvars"]["ANSIBLE_STRATEGY"])
    finally:
        if not keep_artifacts:
            shutil.rmtree(private, ignore_errors=True)


class ProgressPrinter:
    """Compact progress for terminals and CI logs: one line per task when it is done, with
    how many hosts answered and how; every change, failure and unreachable host by name."""

    MARKS = {"ok": ".", "changed": "c", "skipped": "s", "failed": "F", "unreachable": "U"}

    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.task = None
        self.counts: dict[str, int] = {}
        self.notable: list[str] = []
        self.number = 0

    def _flush(self):
        if self.task is None:
            return
        bar = "".join(self.MARKS[k] * v for k, v in self.counts.items())
        summary = " ".join("%s=%d" % (k, v) for k, v in self.counts.items() if v)
        self.stream.write("  [%3d] %-58s %-12s %s\n" % (self.number, self.task[:58], bar[:12], summary or "no hosts"))
        for line in self.notable:
            self.stream.write("        %s\n" % line)
        self.stream.flush()
        self.task = None

    def __call__(self, event: Progress) -> None:
        if event.kind == "play":
            self._flush()
            self.stream.write("\nPLAY %s\n" % event.text)
        elif event.kind == "task":
            self._flush()
            self.number += 1
            self.task, self.counts, self.notable = event.text, {k: 0 for k in self.MARKS}, []
        elif event.kind in self.MARKS:
            self.counts[event.kind] = self.counts.get(event.kind, 0) + 1
            if event.kind in ("changed", "failed", "unreachable"):
                self.notable.append("%s: %s" % (event.kind, event.host))
        elif event.kind == "end":
            self._flush()

