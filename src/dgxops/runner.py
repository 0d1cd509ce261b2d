"""A thin wrapper over ansible-runner: one place builds the runner arguments.

Modelled on ansible-navigator's ``runner/base.py``: every run gets a fresh private data
directory (ansible-runner silently reuses inventory/extravars/env written into an old one),
an explicit environment (the venv's ``bin`` first on PATH, the strategy), and an event handler
that turns runner events into :class:`Progress` callbacks. The result is a :class:`RunResult`
with per-host counts and the failures, ready for a summary.

It behaves like ``ansible-playbook`` run from the caller's directory:

* paths (playbook, inventory, ``@file`` extra vars) are relative to the current directory, and
  a playbook may be a collection's FQCN (``dgxops.fleet.site``);
* Ansible finds its configuration itself (``$ANSIBLE_CONFIG``, ``./ansible.cfg``,
  ``~/.ansible.cfg``, ``/etc/ansible/ansible.cfg``); ``project_config=True`` picks this
  checkout's ``ansible.cfg`` instead;
* facts go to the fact cache the configuration names (ansible-runner's own default, a cache
  inside each run's artifacts, is switched off); with no cache configured at all, the wrapper
  uses a shared jsonfile cache under ``~/.cache/dgxops/facts``, so per-area playbooks run after
  site.yml find the GPU facts, as with this checkout's ansible.cfg;
* ``extra_vars`` and ``options`` reach ansible-playbook exactly as written (``-e mode=0644`` stays
  the string Ansible makes of it, ``-e @vault.yml`` is decrypted by Ansible);
* each run's artifacts (events, stdout, the command) are kept under ``artifact_dir``
  (default ``~/.cache/dgxops/runs``, the newest ``keep_runs``), and :func:`load_result` reads
  them back.

    from dgxops.runner import PlaybookRun, run_playbook
    result = run_playbook(PlaybookRun("site.yml", inventory="inventories/simulated/hosts.yml"))
    print(result.summary())
"""

from __future__ import annotations

import configparser
import datetime
import glob
import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]  # the checkout, when the package runs from one (src/dgxops/runner.py)
PROJECT_CONFIG = ROOT / "ansible.cfg"  # this checkout's controller settings (absent in an installed package)

HOST_STATS = ("ok", "changed", "failures", "dark", "skipped", "rescued", "ignored")
RESULT_FILE = "dgxops-result.json"  # the RunResult, written beside ansible-runner's artifacts
DEFAULT_KEEP_RUNS = 20
FACT_CACHE_TIMEOUT = 3600  # seconds, as this checkout's ansible.cfg


class AnsibleNotFound(RuntimeError):
    """ansible-playbook is not on the run's PATH (an environment error, exit 4 in the CLI)."""


def cache_home() -> Path:
    """Where dgxops keeps state a user may look at: ``$DGXOPS_STATE_DIR`` or ``$XDG_CACHE_HOME/dgxops``."""
    return Path(os.environ.get("DGXOPS_STATE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dgxops"))


def default_artifact_dir() -> Path:
    return cache_home() / "runs"


def default_fact_cache() -> Path:
    return cache_home() / "facts"


@dataclass
class PlaybookRun:
    """What to run. Relative paths are relative to ``cwd`` (default: the current directory)."""

    playbook: str  # a path, or a collection playbook's FQCN (dgxops.fleet.site)
    inventory: str | list[str] | None = None
    extravars: dict = field(default_factory=dict)  # Python values, passed as JSON after extra_vars
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
    # -e arguments exactly as a user writes them for ansible-playbook (KEY=VALUE ..., JSON,
    # YAML, @file): Ansible parses them itself
    extra_vars: list[str] = field(default_factory=list)
    # further ansible-playbook arguments, passed unchanged (--vault-password-file F, -u USER, ...)
    options: list[str] = field(default_factory=list)
    # prompt regex -> answer, for -k/-K/-J (ansible-runner answers the prompts)
    passwords: dict[str, str] = field(default_factory=dict)
    artifact_dir: str | None = None  # None: default_artifact_dir()
    keep_runs: int = DEFAULT_KEEP_RUNS  # artifact directories kept in artifact_dir (0: all)
    project_config: bool = False  # use this checkout's ansible.cfg instead of the one Ansible finds
    cwd: str | None = None  # None: os.getcwd()


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
    artifact_dir: str | None = None  # where this run's artifacts are kept
    facts: dict[str, dict] = field(default_factory=dict)  # ansible_facts returned per host
    diffs: list[dict] = field(default_factory=list)  # {"host", "task", "diff"} in check/diff runs
    strategy: str = "linear"  # the strategy plugin the run used

    def as_dict(self) -> dict:
        return {
            "status": self.status, "rc": self.rc, "ok": self.ok, "hosts": self.hosts,
            "changed": self.changed, "strategy": self.strategy,
            "failures": [f.__dict__ for f in self.failures],
            "changed_tasks": [{"host": h, "task": t} for h, t in self.changed_tasks],
            "diffs": self.diffs, "facts": self.facts, "artifact_dir": self.artifact_dir,
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
        if self.artifact_dir:
            lines.append("artifacts: %s" % self.artifact_dir)
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


def strategy_env(strategy: str, collection_found: bool = True) -> dict[str, str]:
    """Environment that selects the strategy. Always explicit: ansible-runner starts from the
    caller's environment, where an ANSIBLE_STRATEGY could otherwise pick another one.
    ``collection_found``: whether the run's Ansible can load dgxops.fleet (the strategy lives
    there); "auto" falls back to linear when it cannot."""
    if strategy not in ("auto", "linear", "mitogen"):
        raise ValueError("strategy must be auto, linear or mitogen, got %r" % (strategy,))
    if strategy == "linear" or (strategy == "auto" and not collection_found):
        return {"ANSIBLE_STRATEGY": "linear"}
    if not mitogen_installed():
        if strategy == "mitogen":
            raise ValueError("strategy mitogen asked for, but mitogen is not installed (pip install mitogen)")
        return {"ANSIBLE_STRATEGY": "linear"}
    return {"ANSIBLE_STRATEGY": MITOGEN_STRATEGY}


def config_file(cwd: str, environ: dict | None = None) -> str | None:
    """The ansible.cfg ansible-playbook will read when started in ``cwd`` (Ansible's own search order)."""
    environ = os.environ if environ is None else environ
    candidates = []
    if environ.get("ANSIBLE_CONFIG"):
        path = os.path.expanduser(environ["ANSIBLE_CONFIG"])
        candidates.append(os.path.join(path, "ansible.cfg") if os.path.isdir(path) else path)
    candidates += [os.path.join(cwd, "ansible.cfg"), os.path.expanduser("~/.ansible.cfg"), "/etc/ansible/ansible.cfg"]
    for path in candidates:
        if os.path.isfile(path):
            return os.path.abspath(path)
    return None


def _read_config(cfg: str | None) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"), strict=False)
    if cfg:
        try:
            parser.read(cfg)
        except configparser.Error:
            pass
    return parser


def collection_found(cfg: str | None, environ: dict) -> bool:
    """Whether Ansible, with this configuration and environment, finds the dgxops.fleet collection
    (collections_path from $ANSIBLE_COLLECTIONS_PATH or the config, Ansible's defaults, and the
    Python path, as ansible-core searches them)."""
    raw = environ.get("ANSIBLE_COLLECTIONS_PATH") or environ.get("ANSIBLE_COLLECTIONS_PATHS")
    base = os.path.dirname(cfg) if cfg else os.getcwd()
    if not raw:
        parser = _read_config(cfg)
        for key in ("collections_path", "collections_paths"):
            if parser.has_option("defaults", key):
                raw = parser.get("defaults", key)
                break
    paths = (raw or "~/.ansible/collections:/usr/share/ansible/collections").split(os.pathsep)
    paths = [os.path.join(base, os.path.expanduser(p)) for p in paths if p] + [p for p in sys.path if p]
    return any(os.path.isdir(os.path.join(p, "ansible_collections", "dgxops", "fleet", "plugins")) for p in paths)


def _configured_fact_cache(cfg: str | None, environ: dict) -> bool:
    if environ.get("ANSIBLE_CACHE_PLUGIN"):
        return True
    return _read_config(cfg).has_option("defaults", "fact_caching")


def _env(spec: PlaybookRun, cwd: str) -> dict[str, str]:
    """What the run's environment must hold. ansible-runner starts from the caller's environment
    (HOME, DOCKER_HOST, a user's ANSIBLE_* settings come through) and lays these over it."""
    venv_bin = Path(sys.executable).parent
    env = {
        "PATH": os.pathsep.join([str(venv_bin), os.environ.get("PATH", "/usr/bin:/bin")]),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    if spec.project_config:
        if not PROJECT_CONFIG.is_file():
            raise ValueError("--project-config: no ansible.cfg at %s (an installed dgxops has none; use your own)" % PROJECT_CONFIG)
        env["ANSIBLE_CONFIG"] = str(PROJECT_CONFIG)
    environ = dict(os.environ, **env)
    cfg = config_file(cwd, environ)
    if not _configured_fact_cache(cfg, environ):
        env.update({"ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(default_fact_cache()),
                    "ANSIBLE_CACHE_PLUGIN_TIMEOUT": str(FACT_CACHE_TIMEOUT)})
    env.update(strategy_env(spec.strategy, collection_found(cfg, environ)))
    return env


FQCN_PLAYBOOK = re.compile(r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\.[A-Za-z0-9_.]+$")


def _ident(playbook: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(playbook))[:40]
    return "%s-%s-%s" % (datetime.datetime.now().strftime("%Y%m%dT%H%M%S"), name, uuid.uuid4().hex[:6])


RUN_DIR_NAME = re.compile(r"^\d{8}T\d{6}-.+-[0-9a-f]{6}$")  # what _ident names a run's artifact directory


def prune_runs(artifact_dir: str | os.PathLike, keep: int) -> list[Path]:
    """Keep the newest ``keep`` runs in ``artifact_dir`` (0: keep all); returns what was removed.

    Only directories that dgxops runs left there are candidates: named as :func:`_ident` names
    them, with ansible-runner's ``command`` file or ``job_events/`` inside. Anything else in the
    directory stays. (ansible-runner's own ``rotate_artifacts`` removes every entry of the
    directory, oldest first: with ``--artifact-dir .`` it deleted the user's own directories and
    stopped the run on the first plain file.)"""
    if keep < 1:
        return []
    base = Path(artifact_dir)
    runs = [p for p in base.iterdir() if RUN_DIR_NAME.match(p.name) and p.is_dir() and not p.is_symlink()
            and ((p / "command").is_file() or (p / "job_events").is_dir())]
    runs.sort(key=lambda p: (p.name[:15], p.stat().st_mtime))  # the name's timestamp, then the time it was last written
    removed = runs[:-keep] if len(runs) > keep else []
    for p in removed:
        shutil.rmtree(p, ignore_errors=True)
    return removed


def task_timeout_env(seconds: int | None) -> dict[str, str]:
    """ANSIBLE_TASK_TIMEOUT for a per-task limit in seconds (None: leave ansible.cfg's)."""
    if seconds is None:
        return {}
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise ValueError("task_timeout must be a whole number of seconds >= 0 (0: no limit), got %r" % (seconds,))
    return {"ANSIBLE_TASK_TIMEOUT": str(seconds)}


def build_runner_kwargs(spec: PlaybookRun, private_data_dir: str) -> dict:
    """The one place that turns a PlaybookRun into ansible-runner arguments."""
    cwd = os.path.abspath(spec.cwd or os.getcwd())

    def resolve(path: str) -> str:
        return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))

    def resolve_playbook(playbook: str) -> str:
        if not playbook.strip():
            raise ValueError("playbook: give a path or a collection playbook (dgxops.fleet.site)")
        local = resolve(playbook)
        if os.path.exists(local) or not FQCN_PLAYBOOK.match(playbook):
            return local
        return playbook  # a collection playbook: ansible-playbook resolves namespace.collection.name

    def resolve_inventory(source: str) -> str:
        # "a,b," is a host list, not a path; an empty entry would name the directory itself, whose
        # executables Ansible would run as inventory scripts
        if not source.strip():
            raise ValueError("inventory: an empty entry names no inventory (give a file, a directory or host1,host2,)")
        return source if "," in source else resolve(source)

    cmdline = list(spec.options)
    if spec.check:
        cmdline.append("--check")
    if spec.diff:
        cmdline.append("--diff")
    for item in spec.extra_vars:
        cmdline += ["-e", item]
    artifact_base = Path(spec.artifact_dir).expanduser() if spec.artifact_dir else default_artifact_dir()
    kwargs = {
        "private_data_dir": private_data_dir,
        "project_dir": cwd,
        "playbook": resolve_playbook(spec.playbook),
        "envvars": _env(spec, cwd),
        "extravars": dict(spec.extravars) or None,
        "quiet": True,
        "artifact_dir": str(artifact_base.resolve()),
        "ident": _ident(spec.playbook),
        "rotate_artifacts": 0,  # dgxops rotates its own runs only (prune_runs): runner's rotation empties the whole directory
        # facts go where the configuration says (see _env), not into each run's artifacts
        "fact_cache_type": "configured",
        "json_mode": False,
        "verbosity": spec.verbosity or None,
        "passwords": dict(spec.passwords) or None,
        "skip_tags": spec.skip_tags,
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
        kwargs["cmdline"] = shlex.join(cmdline)
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


def _stats_hosts(stats: dict) -> dict[str, dict[str, int]]:
    hosts: dict[str, dict[str, int]] = {}
    for key in HOST_STATS:
        for host, count in (stats.get(key) or {}).items():
            hosts.setdefault(host, {k: 0 for k in HOST_STATS})[key] = count
    return hosts


def run_playbook(spec: PlaybookRun, progress: Callable[[Progress], None] | None = None,
                 stream_output: bool = False) -> RunResult:
    """Run one playbook synchronously and return its result.

    ``stream_output``: print Ansible's own output as it comes (at ``spec.verbosity``), as
    ansible-playbook does; otherwise only ``progress`` sees the run. The run's artifacts stay in
    ``RunResult.artifact_dir`` with the result as ``dgxops-result.json``."""
    import ansible_runner  # imported here: the simulator imports dgxops without it

    private = tempfile.mkdtemp(prefix="dgxops-run-")
    collector = _Collector(progress)
    try:
        kwargs = build_runner_kwargs(spec, private)
        kwargs["quiet"] = not stream_output
        if shutil.which("ansible-playbook", path=kwargs["envvars"]["PATH"]) is None:
            raise AnsibleNotFound("ansible-playbook not found on PATH (%s): install ansible-core (pip install ansible-core), "
                                  "or run the dgxops of the environment that has it" % kwargs["envvars"]["PATH"])
        Path(kwargs["artifact_dir"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        runner = ansible_runner.run(event_handler=collector, **kwargs)
        if progress:
            progress(Progress("end", ""))
        hosts = _stats_hosts(runner.stats or {})
        if runner.rc == 127 or (runner.status == "failed" and not hosts and not collector.failures):
            stdout = runner.stdout.read() if hasattr(runner.stdout, "read") else ""
            collector.failures.append(Failure("localhost", "ansible-playbook", stdout.strip()[-2000:]))
        result = RunResult(runner.status, runner.rc, hosts, collector.failures, collector.changed,
                           artifact_dir=runner.config.artifact_dir,
                           facts=collector.facts, diffs=collector.diffs,
                           strategy=kwargs["envvars"]["ANSIBLE_STRATEGY"])
        Path(result.artifact_dir, RESULT_FILE).write_text(json.dumps(result.as_dict(), indent=2, default=str))
        prune_runs(kwargs["artifact_dir"], spec.keep_runs)
        return result
    finally:
        shutil.rmtree(private, ignore_errors=True)


def load_result(path: str | os.PathLike) -> RunResult:
    """A run read back: a ``dgxops run --save``/``--json`` file, or an artifact directory that
    ansible-runner wrote (its events are replayed, so any kept run can be inspected)."""
    path = Path(path)
    if path.is_file():
        data = json.loads(path.read_text())
        return RunResult(data["status"], data["rc"], data["hosts"], [Failure(**f) for f in data["failures"]],
                         [(c["host"], c["task"]) for c in data.get("changed_tasks", [])],
                         artifact_dir=data.get("artifact_dir"), facts=data.get("facts", {}),
                         diffs=data.get("diffs", []), strategy=data.get("strategy", "unknown"))
    events_dir = path / "job_events"
    if not events_dir.is_dir():
        raise ValueError("%s: neither a result file nor an ansible-runner artifact directory (no job_events/)" % path)
    collector = _Collector(None)
    stats: dict = {}
    events = []
    for name in glob.glob(str(events_dir / "*.json")):
        with open(name) as fh:
            events.append(json.load(fh))
    for event in sorted(events, key=lambda e: e.get("counter", 0)):
        collector(event)
        if event.get("event") == "playbook_on_stats":
            stats = event.get("event_data") or {}

    def read(name, default):
        f = path / name
        return f.read_text().strip() if f.is_file() else default

    strategy = "unknown"
    command = path / "command"
    if command.is_file():
        strategy = json.loads(command.read_text()).get("env", {}).get("ANSIBLE_STRATEGY", "unknown")
    return RunResult(read("status", "unknown"), int(read("rc", "-1")), _stats_hosts(stats), collector.failures,
                     collector.changed, artifact_dir=str(path), facts=collector.facts, diffs=collector.diffs,
                     strategy=strategy)


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

