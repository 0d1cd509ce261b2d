#!/usr/bin/env python3
"""Fleet benchmark: how long site.yml takes on N simulated nodes, and how close an idempotent
rerun gets to the floor of the same number of trivial tasks.

For each N (default 1 4 16 32) it starts a fleet of simulated nodes, then times, with the
shipped setup (ansible.cfg + the mitogen strategy the dgxops wrapper selects when mitogen is
installed):
  converge    first run of the playbook (the fleet is fresh)
  rerun       second run (idempotent: changed=0 expected)
  floor       a playbook with as many trivial tasks (ansible.builtin.ping) per host as the
              rerun executed, through the same connection, strategy and config
and for comparison the rerun and the floor with the plain fallback (ansible.cfg, linear
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dgxops.runner import strategy_env  # noqa: E402
from dgxops.sim.fleet import SimFleet, parse_layout  # noqa: E402


def ansible_playbook(playbook: str, inventory: Path, config: Path, extra_env: dict | None = None) -> tuple[float, dict]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_COLLECTIONS_PATH"] = str(ROOT / ".collections") + os.pathsep + env.get("ANSIBLE_COLLECTIONS_PATH", "")
    env["ANSIBLE_ROLES_PATH"] = str(ROOT / "roles")
    env["ANSIBLE_CONFIG"] = str(config)
    env.update(extra_env or {})
    start = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), playbook], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    recap = {}
    for line in proc.stdout.splitlines():
        if " : ok=" in line:
            host, _sep, rest = line.partition(" : ")
            recap[host.strip()] = {k: int(v) for k, v in (kv.split("=") for kv in rest.split())}
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-2000:])
        raise SystemExit("%s failed (rc %d)" % (playbook, proc.returncode))
    return elapsed, recap


def floor_playbook(tasks_per_host: int, path: Path) -> Path:
    lines = ["- name: No-op floor", "  hosts: dgx", "  gather_facts: false", "  become: true", "  tasks:"]
    for i in range(tasks_per_host):
        lines += ["    - name: Trivial task %d" % i, "      ansible.builtin.ping:"]
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--playbook", default="site.yml")
    parser.add_argument("--model", default="dgx-h100")
    parser.add_argument("--skip-defaults", action="store_true", help="skip the slow run with Ansible defaults")
    parser.add_argument("--strategy", default="auto", choices=["auto", "linear", "mitogen"],
                        help="the shipped strategy (auto: mitogen when installed, as the dgxops wrapper does)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "fleet_bench.json"))
    args = parser.parse_args()

    results = []
    shipped = ROOT / "ansible.cfg"
    with tempfile.TemporaryDirectory(prefix="dgxops-bench-") as tmp:
        for n in args.sizes:
            fleet = SimFleet("bench")
            fleet.down()
            try:
                t0 = time.monotonic()
                fleet.up(parse_layout("%s=%d" % (args.model, n), fleet="bench"))
                start_s = time.monotonic() - t0
                inv = fleet.write_inventory(Path(tmp) / ("inv-%d.yml" % n))
                # the simulated inventory's group_vars (e.g. storage paths) apply to the bench fleet too
                group_vars = ROOT / "inventories" / "simulated" / "group_vars"
                if group_vars.is_dir():
                    link = Path(tmp) / "group_vars"
                    if not link.exists():
                        link.symlink_to(group_vars)
                fast = strategy_env(args.strategy)
                converge, _ = ansible_playbook(args.playbook, inv, shipped, fast)
                rerun, recap = ansible_playbook(args.playbook, inv, shipped, fast)
                changed = sum(r.get("changed", 0) for r in recap.values())
                per_host = max(r.get("ok", 0) + r.get("changed", 0) + r.get("failed", 0) for r in recap.values())
                floor_pb = str(floor_playbook(per_host, Path(tmp) / "floor.yml"))
                floor, _ = ansible_playbook(floor_pb, inv, shipped, fast)
                rerun_plain, _ = ansible_playbook(args.playbook, inv, shipped)
                floor_plain, _ = ansible_playbook(floor_pb, inv, shipped)
                defaults = None
                if not args.skip_defaults:
                    empty = Path(tmp) / "ansible-defaults.cfg"
                    empty.write_text("# Ansible's own defaults: no pipelining, 5 forks, linear strategy\n[defaults]\n")
                    defaults, _ = ansible_playbook(args.playbook, inv, empty)
                row = {"nodes": n, "strategy": fast.get("ANSIBLE_STRATEGY", "linear"), "start_s": round(start_s, 1),
                       "converge_s": round(converge, 1), "rerun_s": round(rerun, 1), "rerun_changed": changed,
                       "tasks_per_host": per_host, "floor_s": round(floor, 1), "rerun_over_floor": round(rerun / floor, 2),
                       "plain_rerun_s": round(rerun_plain, 1), "plain_floor_s": round(floor_plain, 1),
                       "plain_rerun_over_floor": round(rerun_plain / floor_plain, 2),
                       "defaults_rerun_s": round(defaults, 1) if defaults else None,
                       "defaults_over_shipped": round(defaults / rerun, 2) if defaults else None}
                results.append(row)
                print(json.dumps(row), flush=True)
            finally:
                fleet.down()

    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    Path(args.output).write_text(json.dumps({"machine": machine, "playbook": args.playbook, "results": results}, indent=2))
    print()
    print("%6s %9s %7s %8s %7s %12s | %11s %11s %12s | %10s %9s" % (
        "nodes", "converge", "rerun", "changed", "floor", "rerun/floor", "plain rerun", "plain floor", "rerun/floor",
        "defaults", "def/ship"))
    for r in results:
        print("%6d %8.1fs %6.1fs %8d %6.1fs %12.2f | %10.1fs %10.1fs %12.2f | %10s %9s" % (
            r["nodes"], r["converge_s"], r["rerun_s"], r["rerun_changed"], r["floor_s"], r["rerun_over_floor"],
            r["plain_rerun_s"], r["plain_floor_s"], r["plain_rerun_over_floor"],
            ("%.1fs" % r["defaults_rerun_s"]) if r["defaults_rerun_s"] else "-",
            ("%.2f" % r["defaults_over_shipped"]) if r["defaults_over_shipped"] else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
