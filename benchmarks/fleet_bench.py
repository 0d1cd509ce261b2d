#!/usr/bin/env python3
"""Fleet benchmark: how long site.yml takes on N simulated nodes, and how close an idempotent
rerun gets to the floor of the same number of trivial tasks.

For each N (default 1 4 16 32) it starts a fleet of simulated nodes, then times, with the
shipped setup (ansible.cfg + the mitogen strategy the dgxops wrapper selects when mitogen is
installed):
  converge    first run of the playbook (the fleet is fresh)
  rerun       second run (idempotent: changed=0 expected)
  floor       the issue's no-op floor: a playbook of as many trivial tasks as the rerun ran on
              each host (ok, changed and skipped all count), each an ansible.builtin.ping
              through the same connection, strategy and config
  mirror floor  a stricter floor that mirrors the rerun task for task: a task that ran on the
              node becomes a ping, a controller-side one (set_fact, include_*, validation,
              assert) a set_fact or an include of an empty file, and a skipped one a skipped
              debug. Controller-side and skipped tasks cost less than a ping, so this floor is
              lower, and rerun/mirror floor is what the roles' work adds over Ansible's own cost
              for the same number and kind of tasks
For the rerun and the mirror floor it also splits the machine's CPU time by place: the
controller's (ansible-playbook and what it starts), the node containers', and the rest (the
docker daemon relaying docker exec); this machine is controller and fleet at once, and on a
real fleet each node's share runs on that node.
With --per-task it also times every task of one more rerun and of the mirror floor
(ansible.posix.profile_tasks) and prints, task by task, what the rerun's task costs over its
mirror: where the rerun's time above the floor goes.
And for comparison the rerun and the floor with the plain fallback (ansible.cfg, linear
strategy), and the rerun with Ansible's defaults (an empty config: no pipelining, 5 forks,
linear). It prints the figures and ratios and writes them to a JSON file. Run on demand (not
part of the tests):

    .venv/bin/python benchmarks/fleet_bench.py --sizes 1 4 16 --playbook site.yml
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dgxops.runner import strategy_env  # noqa: E402
from dgxops.sim.fleet import SimFleet, parse_layout  # noqa: E402


# actions that run on the controller only (no round trip to the node)
CONTROLLER_ACTIONS = {
    "set_fact", "include_tasks", "include_role", "import_tasks", "import_role", "include_vars",
    "validate_argument_spec", "debug", "assert", "fail", "meta", "add_host", "group_by", "set_stats",
    "dgxops.fleet.validate", "validate",
}
INCLUDES = {"include_tasks", "include_role"}


def _short(action: str) -> str:
    return action[len("ansible.builtin."):] if action.startswith("ansible.builtin.") else action


def task_mix(json_stdout: str) -> list[str]:
    """Per-task kinds ('remote', 'controller', 'include', 'skipped') of the first host, in order."""
    data = json.loads(json_stdout[json_stdout.index("{"):])
    kinds: list[str] = []
    first_host = None
    for play in data["plays"]:
        for task in play["tasks"]:
            if not task["hosts"]:
                continue
            if first_host is None:
                first_host = sorted(task["hosts"])[0]
            result = task["hosts"].get(first_host)
            if result is None:
                continue
            action = _short(result.get("action") or "")
            if result.get("skipped"):
                kinds.append("skipped")
            elif action in INCLUDES:
                kinds.append("include")
            elif action in CONTROLLER_ACTIONS:
                kinds.append("controller")
            else:
                kinds.append("remote")
    return kinds


class CpuProbe:
    """Where a run's CPU time went on this machine, which is controller and fleet at once.

    controller: ansible-playbook and everything it started on this side (its workers, the mitogen
    multiplexer, the docker CLI clients), from the children's rusage; nodes: the node containers'
    cgroups (cpuacct.usage on cgroup v1, cpu.stat usage_usec on v2), where the modules, the
    nvidia-smi fakes and the node-side Python run; other: the rest of the machine's busy time
    (/proc/stat), mostly dockerd, containerd and the container shims relaying docker exec.
    On a real fleet each node's share runs on that node's own CPUs, beside the others."""

    def __init__(self, names: list[str]):
        self.paths = []
        for name in names:
            cid = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True,
                                 check=False).stdout.strip()
            for cand in ("/sys/fs/cgroup/cpuacct/docker/%s/cpuacct.usage" % cid,
                         "/sys/fs/cgroup/cpu,cpuacct/docker/%s/cpuacct.usage" % cid,
                         "/sys/fs/cgroup/system.slice/docker-%s.scope/cpu.stat" % cid,
                         "/sys/fs/cgroup/docker/%s/cpu.stat" % cid):
                if cid and os.path.exists(cand):
                    self.paths.append(cand)
                    break

    def _nodes(self) -> float | None:
        if not self.paths:
            return None
        total = 0.0
        for path in self.paths:
            text = Path(path).read_text()
            if path.endswith("cpuacct.usage"):
                total += int(text) / 1e9
            else:
                total += int(re.search(r"^usage_usec (\d+)", text, re.M).group(1)) / 1e6
        return total

    @staticmethod
    def _busy() -> float:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _children() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    def snapshot(self) -> tuple:
        return self._children(), self._nodes(), self._busy()

    @staticmethod
    def delta(before: tuple, after: tuple) -> dict:
        controller = after[0] - before[0]
        nodes = None if before[1] is None else after[1] - before[1]
        busy = after[2] - before[2]
        return {"controller_cpu_s": round(controller, 2), "nodes_cpu_s": None if nodes is None else round(nodes, 2),
                "other_cpu_s": None if nodes is None else round(max(busy - controller - nodes, 0.0), 2),
                "busy_cpu_s": round(busy, 2)}


def ansible_playbook(
    playbook: str, inventory: Path, config: Path, extra_env: dict | None = None, limit: str | None = None,
    extra_vars: list[str] | None = None, cpu: tuple[CpuProbe, dict] | None = None,
) -> tuple[float, dict, str]:
    """Run a playbook with the JSON stdout callback; (seconds, recap, stdout).

    Timed runs pass ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default in extra_env: the JSON
    callback keeps every result in memory and would slow the run it measures. With cpu=(probe,
    into), the run's CPU time by place is stored in the dict `into`."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / ".collections") + os.pathsep + env.get("ANSIBLE_COLLECTIONS_PATH", "")
    env["ANSIBLE_ROLES_PATH"] = str(ROOT / "roles")
    env["ANSIBLE_CONFIG"] = str(config)
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    env.update(extra_env or {})
    before = cpu[0].snapshot() if cpu else None
    start = time.monotonic()
    argv = ["ansible-playbook", "-i", str(inventory), playbook] + (["--limit", limit] if limit else [])
    for value in extra_vars or []:
        argv += ["-e", value]
    proc = subprocess.run(argv, cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    if cpu:
        cpu[1].update(CpuProbe.delta(before, cpu[0].snapshot()))
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
        raise SystemExit("%s failed (rc %d)" % (playbook, proc.returncode))
    if env["ANSIBLE_STDOUT_CALLBACK"] != "ansible.posix.json":
        recap = {}
        for line in proc.stdout.splitlines():
            if " : ok=" in line:
                host, _sep, rest = line.partition(" : ")
                recap[host.strip()] = {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
        return elapsed, recap, proc.stdout
    return elapsed, json.loads(proc.stdout[proc.stdout.index("{") :])["stats"], proc.stdout


def ping_floor_playbook(tasks_per_host: int, path: Path) -> Path:
    lines = ["- name: Ping floor", "  hosts: dgx", "  gather_facts: false", "  become: true", "  tasks:"]
    for i in range(tasks_per_host):
        lines += ["    - name: Trivial task %d" % i, "      ansible.builtin.ping:"]
    path.write_text("\n".join(lines) + "\n")
    return path


def floor_playbook(kinds: list[str], path: Path) -> Path:
    """A playbook of trivial tasks of the same kinds, in the same order, as `kinds`."""
    empty = path.with_name("floor-empty.yml")
    empty.write_text("---\n[]\n")
    lines = ["- name: No-op floor", "  hosts: dgx", "  gather_facts: false", "  become: true", "  tasks:"]
    for i, kind in enumerate(kinds):
        lines.append("    - name: Trivial task %d" % i)
        if kind == "remote":
            lines.append("      ansible.builtin.ping:")
        elif kind == "controller":
            lines += ["      ansible.builtin.set_fact:", "        __floor_%d: true" % i]
        elif kind == "include":
            lines.append("      ansible.builtin.include_tasks: %s" % empty.name)
        else:
            lines += ["      ansible.builtin.debug:", "        msg: skipped", "      when: false"]
    path.write_text("\n".join(lines) + "\n")
    return path


def per_task_times(stdout: str) -> list[tuple[str, float]]:
    """(task name, seconds) in run order from ansible.posix.profile_tasks' recap (sort order none)."""
    recap = stdout[stdout.index("TASKS RECAP"):] if "TASKS RECAP" in stdout else ""
    return [(name.strip(), float(sec)) for name, sec in re.findall(r"^(.*?) -+ (\d+\.\d+)s$", recap, re.M)]


def per_task_excess(rerun: list[tuple[str, float]], mirror: list[tuple[str, float]], kinds: list[str]) -> list[dict]:
    """Each rerun task beside its mirror task: name, kind, seconds, mirror seconds, excess."""
    rows = []
    for (name, sec), (_mname, msec), kind in zip(rerun, mirror, kinds):
        rows.append({"task": name, "kind": kind, "s": sec, "mirror_s": msec, "excess_s": round(sec - msec, 2)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--playbook", default="site.yml")
    parser.add_argument("--model", default="dgx-h100")
    parser.add_argument("--skip-defaults", action="store_true", help="skip the slow runs with Ansible defaults")
    parser.add_argument("--skip-plain", action="store_true", help="skip the runs with the plain linear fallback")
    parser.add_argument("--defaults-converge", action="store_true",
                        help="also time a first converge with Ansible defaults (on a fresh fleet)")
    parser.add_argument("--strategy", default="auto", choices=["auto", "linear", "mitogen"],
                        help="the shipped strategy (auto: mitogen when installed, as the dgxops wrapper does)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VARS",
                        help="passed to every run of the playbook as ansible-playbook -e (e.g. "
                        "'dgxops_enable_driver=false' to measure without an area); repeatable")
    parser.add_argument("--per-task", action="store_true",
                        help="also time each task of a rerun and of the mirror floor and print the excess per task")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "fleet_bench.json"))
    args = parser.parse_args()

    results = []
    shipped = ROOT / "ansible.cfg"
    with tempfile.TemporaryDirectory(prefix="dgxops-bench-") as tmp:
        empty_cfg = Path(tmp) / "ansible-defaults.cfg"
        empty_cfg.write_text("# Ansible's own defaults: no pipelining, 5 forks, linear strategy\n[defaults]\n")
        for n in args.sizes:
            fleet = SimFleet("bench")
            fleet.down()
            try:
                layout = parse_layout("%s=%d" % (args.model, n), fleet="bench")
                t0 = time.monotonic()
                nodes = fleet.up(layout)
                start_s = time.monotonic() - t0
                probe = CpuProbe([node.name for node in nodes])
                cpu_rerun, cpu_mirror = {}, {}
                inv = fleet.write_inventory(Path(tmp) / ("inv-%d.yml" % n))
                # the simulated inventory's group_vars (e.g. storage paths) apply to the bench fleet too
                group_vars = ROOT / "inventories" / "simulated" / "group_vars"
                if group_vars.is_dir():
                    link = Path(tmp) / "group_vars"
                    if not link.exists():
                        link.symlink_to(group_vars)
                fast = dict(strategy_env(args.strategy), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
                plain = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
                row = {"nodes": n, "strategy": fast.get("ANSIBLE_STRATEGY", "linear"), "start_s": round(start_s, 1)}
                converge, _, _ = ansible_playbook(args.playbook, inv, shipped, fast, extra_vars=args.extra_vars)
                rerun, recap, _ = ansible_playbook(args.playbook, inv, shipped, fast, extra_vars=args.extra_vars,
                                                   cpu=(probe, cpu_rerun))
                # the kind of each task the rerun ran, from one more (untimed) run on one node
                _, _, out = ansible_playbook(args.playbook, inv, shipped, dict(fast, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"),
                                             limit=sorted(recap)[0], extra_vars=args.extra_vars)
                kinds = task_mix(out)
                row.update({"converge_s": round(converge, 1), "rerun_s": round(rerun, 1),
                            "rerun_changed": sum(r.get("changed", 0) for r in recap.values()),
                            "tasks_per_host": len(kinds),
                            "task_kinds": {k: kinds.count(k) for k in ("remote", "controller", "include", "skipped")}})
                mirror_pb = str(floor_playbook(kinds, Path(tmp) / "mirror-floor.yml"))
                mirror, _, _ = ansible_playbook(mirror_pb, inv, shipped, fast, cpu=(probe, cpu_mirror))
                tasks = max(sum(r.get(k, 0) for k in ("ok", "changed", "failed", "skipped")) for r in recap.values())
                floor_pb = str(ping_floor_playbook(tasks, Path(tmp) / "floor.yml"))
                floor, _, _ = ansible_playbook(floor_pb, inv, shipped, fast)
                row["cpu"] = {"rerun": cpu_rerun, "mirror_floor": cpu_mirror}
                if cpu_mirror.get("controller_cpu_s"):
                    row["rerun_over_mirror_floor_controller_cpu"] = round(
                        cpu_rerun["controller_cpu_s"] / cpu_mirror["controller_cpu_s"], 2)
                print("CPU seconds by place (rerun / mirror floor): %s" % json.dumps(row["cpu"]), flush=True)
                row.update({"floor_tasks": tasks, "floor_s": round(floor, 1), "rerun_over_floor": round(rerun / floor, 2),
                            "mirror_floor_s": round(mirror, 1), "rerun_over_mirror_floor": round(rerun / mirror, 2)})
                if args.per_task:
                    prof = dict(fast, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
                                PROFILE_TASKS_TASK_OUTPUT_LIMIT="1000", PROFILE_TASKS_SORT_ORDER="none")
                    _, _, out_rerun = ansible_playbook(args.playbook, inv, shipped, prof, extra_vars=args.extra_vars)
                    _, _, out_mirror = ansible_playbook(mirror_pb, inv, shipped, prof)
                    rows = per_task_excess(per_task_times(out_rerun), per_task_times(out_mirror), kinds)
                    row["per_task"] = rows
                    print("%6s %6s %6s  %-10s %s" % ("rerun", "mirror", "excess", "kind", "task"))
                    for r in sorted(rows, key=lambda r: -r["excess_s"]):
                        print("%6.2f %6.2f %+6.2f  %-10s %s" % (r["s"], r["mirror_s"], r["excess_s"], r["kind"], r["task"][:100]))
                    print("sum of the excess: %.1f s" % sum(r["excess_s"] for r in rows), flush=True)
                if not args.skip_plain:
                    rerun_plain, _, _ = ansible_playbook(args.playbook, inv, shipped, plain, extra_vars=args.extra_vars)
                    floor_plain, _, _ = ansible_playbook(floor_pb, inv, shipped, plain)
                    mirror_plain, _, _ = ansible_playbook(mirror_pb, inv, shipped, plain)
                    row.update({"plain_rerun_s": round(rerun_plain, 1), "plain_floor_s": round(floor_plain, 1),
                                "plain_rerun_over_floor": round(rerun_plain / floor_plain, 2),
                                "plain_mirror_floor_s": round(mirror_plain, 1),
                                "plain_rerun_over_mirror_floor": round(rerun_plain / mirror_plain, 2)})
                if not args.skip_defaults:
                    defaults, _, _ = ansible_playbook(args.playbook, inv, empty_cfg, plain, extra_vars=args.extra_vars)
                    row.update({"defaults_rerun_s": round(defaults, 1),
                                "defaults_over_shipped": round(defaults / rerun, 2)})
                    if args.defaults_converge:
                        fleet.down()
                        fleet.up(layout)
                        fleet.write_inventory(inv)
                        d_converge, _, _ = ansible_playbook(args.playbook, inv, empty_cfg, plain, extra_vars=args.extra_vars)
                        row.update({"defaults_converge_s": round(d_converge, 1),
                                    "defaults_converge_over_shipped": round(d_converge / converge, 2)})
                results.append(row)
                print(json.dumps(dict((k, v) for k, v in row.items() if k != "per_task")), flush=True)
            finally:
                fleet.down()

    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    Path(args.output).write_text(json.dumps({"machine": machine, "playbook": args.playbook, "extra_vars": args.extra_vars,
                                             "results": results}, indent=2))
    print()
    cols = [("nodes", "nodes", "%d"), ("converge_s", "converge", "%.1f"), ("rerun_s", "rerun", "%.1f"),
            ("rerun_changed", "changed", "%d"), ("floor_s", "floor", "%.1f"), ("rerun_over_floor", "rerun/floor", "%.2f"),
            ("mirror_floor_s", "mirror flr", "%.1f"), ("rerun_over_mirror_floor", "rerun/mirror", "%.2f"),
            ("rerun_over_mirror_floor_controller_cpu", "ctl cpu r/m", "%.2f"),
            ("plain_rerun_s", "plain rerun", "%.1f"), ("plain_floor_s", "plain floor", "%.1f"),
            ("plain_rerun_over_floor", "plain r/f", "%.2f"), ("plain_rerun_over_mirror_floor", "plain r/m", "%.2f"), ("defaults_rerun_s", "defaults", "%.1f"),
            ("defaults_over_shipped", "def/ship", "%.2f"), ("defaults_converge_s", "def conv", "%.1f"),
            ("defaults_converge_over_shipped", "defconv/ship", "%.2f")]
    print(" ".join("%12s" % title for _key, title, _fmt in cols))
    for r in results:
        print(" ".join("%12s" % ((fmt % r[key]) if r.get(key) is not None else "-") for key, _title, fmt in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
