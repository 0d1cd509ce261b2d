"""The ``dgxops`` command line.

    dgxops image [--force]                 build (or reuse) the simulated node image
    dgxops sim up [--layout L | --node NAME=MODEL ...] [--fleet F] [--inventory PATH]
    dgxops sim ls [--fleet F] [--json]
    dgxops sim exec NODE -- ARGV...        run a command inside a simulated node
    dgxops sim down [--fleet F]            remove exactly the containers the fleet started
    dgxops run PLAYBOOK [-i INV] [--check] [--diff] [--limit L] [--tags T] [-e K=V|@file]
                                           run a playbook through ansible-runner, with progress
                                           and a per-host summary
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dgxops.sim import fleet as simfleet


def _specs(args) -> list[simfleet.NodeSpec]:
    if args.node:
        specs = []
        for item in args.node:
            name, sep, model = item.partition("=")
            if not sep or model not in simfleet.MODELS:
                raise SystemExit("--node %r: use NAME=MODEL with MODEL one of %s" % (item, ", ".join(simfleet.MODELS)))
            specs.append(simfleet.NodeSpec(name, model, args.driver or simfleet.MODELS[model][1]))
        return specs
    try:
        return simfleet.parse_layout(args.layout, args.fleet, args.driver)
    except ValueError as exc:
        raise SystemExit("--layout: %s" % exc) from None


def _print_nodes(fleet: simfleet.SimFleet, nodes, as_json: bool) -> None:
    if as_json:
        print(json.dumps([n.__dict__ for n in nodes], indent=2))
        return
    if not nodes:
        print("fleet %s: no nodes" % fleet.name)
        return
    print("fleet %s: %d node(s)" % (fleet.name, len(nodes)))
    print("  %-24s %-15s %-12s %s" % ("NODE", "MODEL", "DRIVER", "GPUS (nvidia-smi -L inside the node)"))
    for node in nodes:
        proc = fleet.exec(node.name, "nvidia-smi", "-L")
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("GPU ")]
        gpus = "%d x %s" % (len(lines), lines[0].split(": ", 1)[1].split(" (UUID")[0]) if lines else (
            "nvidia-smi rc=%d: %s" % (proc.returncode, (proc.stdout + proc.stderr).strip().splitlines()[:1]))
        print("  %-24s %-15s %-12s %s" % (node.name, node.model, node.driver, gpus))


def cmd_image(args) -> int:
    from dgxops.sim.image import ensure_image

    print(ensure_image(force=args.force))
    return 0


def cmd_sim(args) -> int:
    fleet = simfleet.SimFleet(args.fleet)
    if args.action == "up":
        nodes = fleet.up(_specs(args))
        if args.inventory:
            fleet.write_inventory(Path(args.inventory))
        _print_nodes(fleet, nodes, args.json)
    elif args.action == "ls":
        _print_nodes(fleet, fleet.load(), args.json)
    elif args.action == "down":
        removed = fleet.down()
        print("fleet %s: removed %d node(s)%s" % (fleet.name, len(removed), (": " + ", ".join(removed)) if removed else ""))
    elif args.action == "inventory":
        import yaml

        sys.stdout.write(yaml.safe_dump(fleet.inventory(), sort_keys=True))
    elif args.action == "exec":
        proc = fleet.exec(args.target, *args.argv)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        return proc.returncode
    return 0


def _extravars(items) -> dict:
    import yaml

    out: dict = {}
    for item in items or []:
        if item.startswith("@"):
            with open(item[1:]) as fh:
                out.update(yaml.safe_load(fh) or {})
        elif item.lstrip().startswith("{"):
            out.update(json.loads(item))
        else:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit("-e %r: use KEY=VALUE, a JSON object or @file" % item)
            out[key] = yaml.safe_load(value)
    return out


def cmd_run(args) -> int:
    from dgxops.runner import PlaybookRun, print_progress, run_playbook

    spec = PlaybookRun(
        playbook=args.playbook, inventory=args.inventory, extravars=_extravars(args.extra_vars),
        limit=args.limit, tags=args.tags, skip_tags=args.skip_tags, check=args.check,
        diff=args.diff, forks=args.forks, verbosity=args.verbose,
    )
    result = run_playbook(spec, progress=None if args.quiet else print_progress)
    print()
    print(result.summary())
    return 0 if result.ok else (result.rc or 1)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgxops", description="Provision and tune DGX fleets with the dgxops.fleet collection.")
    sub = parser.add_subparsers(dest="command", required=True)

    p_image = sub.add_parser("image", help="build (or reuse) the simulated DGX node image")
    p_image.add_argument("--force", action="store_true")
    p_image.set_defaults(func=cmd_image)

    p_sim = sub.add_parser("sim", help="simulated DGX nodes (Docker containers with a fake nvidia-smi)")
    p_sim.add_argument("action", choices=["up", "ls", "down", "inventory", "exec"])
    p_sim.add_argument("target", nargs="?", help="node name (exec)")
    p_sim.add_argument("argv", nargs="*", help="command to run (exec)")
    p_sim.add_argument("--fleet", default=simfleet.DEFAULT_FLEET, help="fleet name (default %(default)s)")
    p_sim.add_argument("--layout", default=simfleet.DEFAULT_LAYOUT,
                       help="MODEL=COUNT,... (default %(default)s); models: " + ", ".join(simfleet.MODELS))
    p_sim.add_argument("--node", action="append", help="NAME=MODEL, repeatable (instead of --layout)")
    p_sim.add_argument("--driver", help="driver version for every node (default: per model)")
    p_sim.add_argument("--inventory", help="write an Ansible inventory for the fleet to this path")
    p_sim.add_argument("--json", action="store_true", help="machine-readable output")
    p_sim.set_defaults(func=cmd_sim)

    p_run = sub.add_parser("run", help="run a playbook through ansible-runner with progress and a summary")
    p_run.add_argument("playbook")
    p_run.add_argument("-i", "--inventory", action="append")
    p_run.add_argument("-e", "--extra-vars", action="append")
    p_run.add_argument("-l", "--limit")
    p_run.add_argument("-t", "--tags")
    p_run.add_argument("--skip-tags")
    p_run.add_argument("-C", "--check", action="store_true")
    p_run.add_argument("-D", "--diff", action="store_true")
    p_run.add_argument("-f", "--forks", type=int)
    p_run.add_argument("-v", "--verbose", action="count", default=0)
    p_run.add_argument("-q", "--quiet", action="store_true", help="no progress, only the summary")
    p_run.set_defaults(func=cmd_run)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (RuntimeError, ValueError) as exc:
        print("dgxops: error: %s" % exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
