#!/usr/bin/env python3
"""Rolling driver upgrade benchmark on N simulated nodes: time per batch, total, reboot share.

Starts N simulated DGX A100 nodes (driver 550.163.01 installed from the nodes' stand-in CUDA
repository), runs ``playbooks/driver_upgrade.yml`` with ``nvidia_driver_branch=580`` in batches
of N/B hosts through plain ``ansible-playbook`` (the shipped ansible.cfg, the collection's
mitogen strategy when mitogen is installed), and reads each task's per-host start and end from
Ansible's ``ansible.posix.json`` callback. Prints, per batch: wall time, time in the reboot
(the role's ``Reboot to load the driver`` task, which returns when the node's boot is over; the
slowest host of the batch)
and its share; then the totals. Figures, not a pass/fail test.

    .venv/bin/python benchmarks/rolling_upgrade_bench.py --nodes 16 --batches 4 [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from dgxops.sim.fleet import SimFleet, parse_layout  # noqa: E402

# the role's reboot task: shutdown, the node's whole boot, and its test command waiting for
# `systemctl is-system-running` (the reboot module returns only when the boot is over)
REBOOT_TASKS = ("Reboot to load the driver",)


def _ts(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def analyse(report):
    """Per batch (a play of the upgrade): wall seconds, reboot seconds (slowest host), hosts."""
    batches = []
    for play in report["plays"]:
        if "rolling batches" not in play["play"]["name"]:
            continue
        starts, ends, reboot_by_host = [], [], {}
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                dur = res.get("duration") or task["task"].get("duration") or {}
                if not dur.get("start") or not dur.get("end"):
                    continue
                s, e = _ts(dur["start"]), _ts(dur["end"])
                starts.append(s)
                ends.append(e)
                if any(name in task["task"]["name"] for name in REBOOT_TASKS):
                    reboot_by_host[host] = reboot_by_host.get(host, 0.0) + (e - s)
        if not starts:
            continue
        batches.append({"hosts": sorted({h for t in play["tasks"] for h in t["hosts"]}),
                        "wall_s": round(max(ends) - min(starts), 1),
                        "reboot_s": round(max(reboot_by_host.values()) if reboot_by_host else 0.0, 1)})
    return batches


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--fleet", default="bench-roll")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", action="store_true", help="leave the fleet running")
    args = ap.parse_args(argv)
    per_batch = max(1, args.nodes // args.batches)
    fleet = SimFleet(args.fleet)
    fleet.down()
    t0 = time.monotonic()
    fleet.up(parse_layout("dgx-a100-80gb=%d" % args.nodes, fleet=args.fleet))
    up_s = time.monotonic() - t0
    tmp = tempfile.mkdtemp(prefix="dgxops-roll-bench-")
    inventory = fleet.write_inventory(Path(tmp) / "hosts.yml")
    os.symlink(os.path.join(ROOT, "inventories", "simulated", "group_vars"), os.path.join(tmp, "group_vars"))
    venv_bin = os.path.dirname(sys.executable)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), PATH=venv_bin + os.pathsep + os.environ["PATH"],
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    try:
        import mitogen  # noqa: F401
        env["ANSIBLE_STRATEGY"] = "dgxops.fleet.mitogen_linear"
    except ImportError:
        pass
    t1 = time.monotonic()
    proc = subprocess.run([os.path.join(venv_bin, "ansible-playbook"), "-i", str(inventory), "playbooks/driver_upgrade.yml",
                           "-e", json.dumps({"nvidia_driver_branch": "580", "dgxops_serial": per_batch})],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    total_s = time.monotonic() - t1
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-2000:])
        raise SystemExit("the upgrade failed (rc=%d)" % proc.returncode)
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    with open(os.path.join(tmp, "callback.json"), "w") as fh:
        json.dump(report, fh)
    batches = analyse(report)
    if not args.keep:
        fleet.down()
    out = {"nodes": args.nodes, "batch_size": per_batch, "fleet_up_s": round(up_s, 1), "total_s": round(total_s, 1),
           "batches": batches, "strategy": env.get("ANSIBLE_STRATEGY", "linear"), "cpus": os.cpu_count(),
           "date": datetime.date.today().isoformat()}
    reboot_total = sum(b["reboot_s"] for b in batches)
    batch_total = sum(b["wall_s"] for b in batches)
    out["reboot_share"] = round(reboot_total / batch_total, 3) if batch_total else None
    print("rolling upgrade 550 -> 580: %d nodes in %d batches of %d (%s, %d CPUs)" % (
        args.nodes, len(batches), per_batch, out["strategy"], os.cpu_count()))
    print("%-6s %-8s %-10s %-10s %s" % ("batch", "hosts", "wall (s)", "reboot (s)", "reboot share"))
    for i, b in enumerate(batches, 1):
        print("%-6d %-8d %-10.1f %-10.1f %.0f%%" % (i, len(b["hosts"]), b["wall_s"], b["reboot_s"],
                                                   100.0 * b["reboot_s"] / b["wall_s"] if b["wall_s"] else 0))
    print("total: %.1f s for the playbook (facts and validation included), %.1f s in batches, reboot wait %.1f s (%.0f%%); "
          "fleet up %.1f s" % (total_s, batch_total, reboot_total, 100.0 * (out["reboot_share"] or 0), up_s))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
