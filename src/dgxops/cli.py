"""The ``dgxops`` command line.

    dgxops image [--force]                 build (or reuse) the simulated node image
    dgxops sim up [--layout L | --node NAME=MODEL ...] [--fleet F] [--inventory PATH]
    dgxops sim ls [--fleet F] [--json]
    dgxops sim exec NODE -- ARGV...        run a command inside a simulated node
    dgxops sim down [--fleet F]            remove exactly the containers the fleet started
    dgxops run PLAYBOOK [ansible-playbook options] [-- more ansible-playbook arguments]
                                           run a playbook (path or FQCN, e.g. dgxops.fleet.site)
                                           through ansible-runner, with progress and a per-host
                                           summary; ansible-playbook's options keep their spelling
                                           and meaning (-e as Ansible parses it, vault, become,
                                           -u, --private-key, -c, -v...); the run's artifacts stay
                                           in --artifact-dir (default ~/.cache/dgxops/runs)
    dgxops check [PLAYBOOK] [-i INV]       check + diff: what would change, changing nothing
    dgxops facts [-i INV]                  fleet GPU table (nodes x GPUs)
    dgxops doctor [-i INV]                 the driver doctor on every node
    dgxops consistency [-i INV] [--strict] [--save FILE]   outliers per group (exit 5 with --strict)
    dgxops report [-i INV] [--format md|html] [--output FILE] [--run LABEL=RESULT.json|ARTIFACT_DIR ...] [--consistency FILE]
    dgxops advise --prometheus URL | --metrics-file FILE [--json]   findings and fixes per host

Every command takes --json for machine-readable output. Exit codes: 0 success; 1 a task
failed; 2 bad usage; 3 a host was unreachable (and none failed); 4 environment error (no
Docker, no image, no ansible-playbook); with `check --detailed-exitcode`, 2 means changes are pending.
"""

from __future__ import annotations

import argparse
import json
import os
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
    elif args.action in ("ls", "status"):
        _print_nodes(fleet, fleet.load(), args.json)
    elif args.action == "down":
        removed = fleet.down()
        if args.json:
            print(json.dumps({"fleet": fleet.name, "removed": removed}))
        else:
            print("fleet %s: removed %d node(s)%s" % (fleet.name, len(removed), (": " + ", ".join(removed)) if removed else ""))
    elif args.action == "inventory":
        import yaml

        sys.stdout.write(yaml.safe_dump(fleet.inventory(), sort_keys=True))
    return 0


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_ENV = 0, 1, 2, 3, 4
EXIT_INCONSISTENT = 5  # dgxops consistency --strict: a node differs from its group


def _exit_code(result) -> int:
    if result.ok:
        return EXIT_OK
    if result.failures and all(f.unreachable for f in result.failures):
        return EXIT_UNREACHABLE
    return EXIT_FAILED


def _builtin_playbook(name: str) -> str:
    """One of the collection's playbooks: the checkout's file when dgxops runs from a checkout,
    else the installed collection's (FQCN)."""
    from dgxops.runner import ROOT

    local = ROOT / "playbooks" / ("%s.yml" % name)
    return str(local) if local.is_file() and (ROOT / "galaxy.yml").is_file() else "dgxops.fleet.%s" % name


# Prompts ansible-playbook shows for -k/-K/-J; ansible-runner answers them with what the user typed.
PASSWORD_PROMPTS = {
    "ask_pass": ("SSH password: ", r"^SSH password:\s*?$"),
    "ask_become_pass": ("BECOME password: ", r"^BECOME password.*:\s*?$"),
    "ask_vault_pass": ("Vault password: ", r"^Vault password.*:\s*?$"),
}


def _passwords(args) -> dict:
    import getpass

    answers = {}
    for dest, (prompt, pattern) in PASSWORD_PROMPTS.items():
        if getattr(args, dest, False):
            answers[pattern] = getpass.getpass(prompt)
    return answers


def _spec(args, playbook: str, check: bool = False, diff: bool = False):
    from dgxops.runner import PlaybookRun

    return PlaybookRun(
        playbook=playbook, inventory=args.inventory, extra_vars=list(args.extra_vars or []),
        limit=args.limit, tags=args.tags, skip_tags=args.skip_tags,
        check=check or args.check, diff=diff or args.diff, forks=args.forks, verbosity=args.verbose,
        strategy=args.strategy or os.environ.get("DGXOPS_STRATEGY", "auto"),
        options=_passthrough_argv(args), passwords=_passwords(args),
        artifact_dir=args.artifact_dir, keep_runs=args.keep_runs, project_config=args.project_config,
        task_timeout=getattr(args, "task_timeout", None),
    )


def _run(args, playbook: str, check: bool = False, diff: bool = False):
    from dgxops.runner import ProgressPrinter, run_playbook

    spec = _spec(args, playbook, check=check, diff=diff)
    # -v..-vvvv (and the listing options) show Ansible's own output, as ansible-playbook would
    stream = not args.json and (args.verbose > 0 or any(getattr(args, d, False) for d in LISTING_OPTIONS))
    quiet = args.json or args.quiet or stream
    return run_playbook(spec, progress=None if quiet else ProgressPrinter(), stream_output=stream)


# A frozen node fails its task after this many seconds instead of hanging the run (docs/reliability.md).
# Longer than any task the roles run by default (the driver's reboot waits at most 900 s; the MIG
# reboot task carries its own, longer, timeout).
DEFAULT_TASK_TIMEOUT = 1200


def add_task_timeout(parser):
    parser.add_argument("--task-timeout", type=int, default=DEFAULT_TASK_TIMEOUT, metavar="SECONDS",
                        help="fail a task on a host that has not answered after SECONDS (a frozen node is "
                             "reported and the others go on; default %d, 0: no limit)" % DEFAULT_TASK_TIMEOUT)


def cmd_run(args) -> int:
    result = _run(args, args.playbook, check=args.check, diff=args.diff)
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(result.as_dict(), indent=2, default=str))
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
    else:
        print()
        print(result.summary())
    return _exit_code(result)


def cmd_check(args) -> int:
    # default: the collection's site playbook (this checkout's, or the installed collection's)
    result = _run(args, args.playbook or _builtin_playbook("site"), check=True, diff=True)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
    else:
        print()
        if result.changed_tasks:
            print("would change:")
            for host, task in result.changed_tasks:
                print("  %-28s %s" % (host, task))
        else:
            print("nothing would change")
        print(result.summary())
    code = _exit_code(result)
    if code == EXIT_OK and args.detailed_exitcode and result.changed:
        return 2
    return code


def cmd_facts(args) -> int:
    from dgxops.report import gpu_rows, gpu_table

    result = _run(args, _builtin_playbook("facts"))
    if args.json:
        print(json.dumps({"hosts": {h: f.get("nvidia_smi") for h, f in sorted(result.facts.items())},
                          "rows": [dict(r, gpu=r["gpu"]) for r in gpu_rows(result.facts)],
                          "run": {"status": result.status, "rc": result.rc,
                                  "failures": [f.__dict__ for f in result.failures]}}, indent=2, default=str))
    else:
        print()
        print(gpu_table(result.facts))
        if not result.ok:
            print()
            print(result.summary())
    return _exit_code(result)


def doctor_verdicts(result) -> dict:
    """Per host: the doctor's verdict (status, cause, fix, attention), or why there is none."""
    verdicts = {}
    for host in sorted(result.hosts):
        found = (result.facts.get(host) or {}).get("dgxops_doctor")
        if isinstance(found, dict):
            verdicts[host] = found
            continue
        failure = next((f for f in result.failures if f.host == host), None)
        if failure is not None and failure.unreachable:
            verdicts[host] = {"status": "unreachable", "cause": failure.msg.strip() or "the host did not answer",
                              "fix": "Check that the node is up and reachable (ssh/docker), then run the doctor again.",
                              "check": None, "attention": []}
        else:
            verdicts[host] = {"status": "unknown", "cause": failure.msg.strip() if failure else "no verdict",
                              "fix": "Run `dgxops doctor -v` to see the failing task.", "check": None, "attention": []}
    return verdicts


def format_doctor(verdicts: dict) -> str:
    lines = []
    for host, v in verdicts.items():
        lines.append("%s: %s" % (host, str(v.get("status", "unknown")).upper()))
        if v.get("cause"):
            lines.append("    cause: %s" % v["cause"])
        if v.get("fix"):
            lines.append("    fix: %s" % v["fix"])
        for item in v.get("attention") or []:
            lines.append("    %s %s: %s" % (str(item.get("status", "")).upper(), item.get("check"), item.get("message")))
    return "\n".join(lines)


def cmd_doctor(args) -> int:
    result = _run(args, _builtin_playbook("doctor"))
    verdicts = doctor_verdicts(result)
    if args.json:
        data = result.as_dict()
        data["verdicts"] = verdicts
        print(json.dumps(data, indent=2, default=str))
    else:
        print()
        print(format_doctor(verdicts))
        print()
        print(result.summary())
    return _exit_code(result)


def report_extra_sections(args, result) -> list:
    """Sections other parts of dgxops add to the report (a list of dgxops.report.Section)."""
    from dgxops.report import consistency_section

    sections = []
    if getattr(args, "consistency", None):
        with open(args.consistency) as fh:
            sections.append(consistency_section(json.load(fh)))
    return sections


def cmd_report(args) -> int:
    from dgxops.report import html_report, markdown_report

    from dgxops.runner import load_result

    runs = []
    for item in args.run or []:
        label, sep, path = item.partition("=")
        if not sep:
            raise SystemExit("--run %r: use LABEL=RESULT.json (dgxops run --save) or LABEL=ARTIFACT_DIR (a kept run)" % item)
        runs.append((label, load_result(path).as_dict()))
    result = _run(args, _builtin_playbook("facts"))
    sections = report_extra_sections(args, result)
    text = markdown_report(result.facts, runs, sections=sections)
    if args.html:
        Path(args.html).write_text(html_report(result.facts, runs, sections=sections))
    if args.format == "html":
        text = html_report(result.facts, runs, sections=sections)
    if args.output:
        Path(args.output).write_text(text)
    if args.json:
        print(json.dumps({"format": args.format, "output": args.output, "hosts": sorted(result.facts),
                          "report": None if args.output else text}, indent=2))
    elif not args.output:
        print(text)
    else:
        print("report written to %s" % args.output)
    return _exit_code(result)


def cmd_consistency(args) -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="dgxops-consistency-") as tmp:
        out = os.path.join(tmp, "consistency.json")
        args.extra_vars = list(args.extra_vars or []) + [json.dumps({"dgxops_consistency_report": out})]
        result = _run(args, _builtin_playbook("consistency"))
        data = json.loads(Path(out).read_text()) if os.path.exists(out) else None
    if data is None:
        print(result.summary(), file=sys.stderr)
        return _exit_code(result) or EXIT_FAILED
    if args.save:
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(data, indent=2))
    if args.json:
        print(json.dumps(dict(data, run={"status": result.status, "rc": result.rc}), indent=2, default=str))
    else:
        if not args.quiet:
            print()
        print("\n".join(data.get("text") or []))
    code = _exit_code(result)
    if code == EXIT_OK and args.strict and not data.get("consistent"):
        return EXIT_INCONSISTENT
    return code


def cmd_advise(args) -> int:
    from dgxops import advise

    if args.emit_rules:
        sys.stdout.write(advise.rules_yaml())
        return EXIT_OK
    if bool(args.prometheus) == bool(args.metrics_file):
        print("dgxops advise: give one of --prometheus URL or --metrics-file FILE", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = (advise.advise_prometheus(args.prometheus, timeout=args.timeout) if args.prometheus
                  else advise.advise_metrics_file(args.metrics_file, default_host=args.host))
    except (advise.AdviseError, ValueError) as exc:
        print("dgxops advise: %s" % exc, file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, ValueError) or "loopback" in str(exc) else EXIT_ENV
    print(json.dumps(result.as_dict(), indent=2) if args.json else result.text())
    order = list(advise.SEVERITIES)
    worst = result.worst()
    if args.fail_on != "never" and worst is not None and order.index(worst) >= order.index(args.fail_on):
        return EXIT_FAILED
    return EXIT_OK


# ansible-playbook's options that make sense through ansible-runner, with ansible-playbook's own
# spelling (ansible-core 2.19-2.21 `ansible-playbook --help`). They are handed to ansible-playbook
# unchanged, in the order given; -i, -e, -l, -t, --skip-tags, -f, -C, -D and -v are handled by
# name because the wrapper reads them too. Not offered: --step (interactive, needs a terminal
# that ansible-runner does not give), --version/--help (dgxops's own).
# (flags, kind): "flag" (no value), "value" (one value), "append" (repeatable value)
PASSTHROUGH_OPTIONS = [
    (("-u", "--user"), "value"),
    (("--private-key", "--key-file"), "value"),
    (("-c", "--connection"), "value"),
    (("-T", "--timeout"), "value"),
    (("--ssh-common-args",), "value"),
    (("--sftp-extra-args",), "value"),
    (("--scp-extra-args",), "value"),
    (("--ssh-extra-args",), "value"),
    (("--connection-password-file", "--conn-pass-file"), "value"),
    (("-b", "--become"), "flag"),
    (("--become-method",), "value"),
    (("--become-user",), "value"),
    (("--become-password-file", "--become-pass-file"), "value"),
    (("--vault-id",), "append"),
    (("--vault-password-file", "--vault-pass-file"), "append"),
    (("-M", "--module-path"), "append"),
    (("--flush-cache",), "flag"),
    (("--force-handlers",), "flag"),
    (("--start-at-task",), "value"),
    (("--list-hosts",), "flag"),
    (("--list-tasks",), "flag"),
    (("--list-tags",), "flag"),
    (("--syntax-check",), "flag"),
]
# these print a listing instead of running: their output is the result
LISTING_OPTIONS = ("list_hosts", "list_tasks", "list_tags", "syntax_check")


def _dest(flags) -> str:
    return [f for f in flags if f.startswith("--")][0][2:].replace("-", "_")


def _passthrough_argv(args) -> list[str]:
    """The pass-through options as ansible-playbook arguments, then everything after `--`."""
    argv = ["--" + dest.replace("_", "-") for dest in PASSWORD_PROMPTS if getattr(args, dest, False)]
    for flags, kind in PASSTHROUGH_OPTIONS:
        value = getattr(args, "pt_" + _dest(flags), None)
        flag = "--" + _dest(flags).replace("_", "-")  # ansible-playbook's long spelling
        if kind == "flag" and value:
            argv.append(flag)
        elif kind == "value" and value is not None:
            argv += [flag, value]
        elif kind == "append":
            for item in value or []:
                argv += [flag, item]
    return argv + list(getattr(args, "passthrough", []) or [])


def add_playbook_options(p, playbook: str | None = None) -> None:
    """Options shared by the commands that run a playbook: ansible-playbook's, then dgxops's.
    ``playbook``: "PLAYBOOK" (required), a default playbook (optional argument), or None."""
    if playbook == "PLAYBOOK":
        p.add_argument("playbook", help="a playbook path (relative to the current directory) or FQCN (dgxops.fleet.site)")
    elif playbook:
        p.add_argument("playbook", nargs="?", default=None, help="default: %s" % playbook)
    add_ansible_playbook_options(p)
    add_run_options(p)


def add_ansible_playbook_options(p) -> None:
    g = p.add_argument_group("ansible-playbook options (same spelling and meaning; after `--`, anything else)")
    g.add_argument("-i", "--inventory", "--inventory-file", action="append",
                   help="inventory (default: the one your ansible.cfg names)")
    g.add_argument("-e", "--extra-vars", action="append", metavar="EXTRA_VARS",
                   help="KEY=VALUE ..., YAML/JSON, or @FILE (vault-encrypted too), parsed by Ansible")
    g.add_argument("-l", "--limit")
    g.add_argument("-t", "--tags")
    g.add_argument("--skip-tags")
    g.add_argument("-f", "--forks", type=int)
    g.add_argument("-C", "--check", action="store_true")
    g.add_argument("-D", "--diff", action="store_true")
    g.add_argument("-v", "--verbose", action="count", default=0,
                   help="-v..-vvvv: Ansible's own output at that level instead of the progress lines")
    g.add_argument("-k", "--ask-pass", action="store_true", dest="ask_pass")
    g.add_argument("-K", "--ask-become-pass", action="store_true", dest="ask_become_pass")
    g.add_argument("-J", "--ask-vault-password", "--ask-vault-pass", action="store_true", dest="ask_vault_pass")
    for flags, kind in PASSTHROUGH_OPTIONS:
        dest = "pt_" + _dest(flags)
        if kind == "flag":
            g.add_argument(*flags, dest=dest, action="store_true")
        else:
            g.add_argument(*flags, dest=dest, metavar=_dest(flags).upper(), action="append" if kind == "append" else "store")


def add_run_options(p) -> None:
    from dgxops.runner import DEFAULT_KEEP_RUNS

    g = p.add_argument_group("dgxops options")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress, only the summary")
    g.add_argument("--json", action="store_true", help="machine-readable output")
    g.add_argument("--strategy", choices=["auto", "linear", "mitogen"],
                   help="auto (default, or $DGXOPS_STRATEGY): dgxops.fleet.mitogen_linear when mitogen is installed, else linear")
    g.add_argument("--artifact-dir", help="keep the run's ansible-runner artifacts here (default ~/.cache/dgxops/runs)")
    g.add_argument("--keep-runs", type=int, default=DEFAULT_KEEP_RUNS,
                   help="runs kept in the artifact directory, oldest removed first; 0 keeps all (default %(default)s)")
    g.add_argument("--project-config", action="store_true",
                   help="use this checkout's ansible.cfg instead of the one Ansible finds ($ANSIBLE_CONFIG, ./ansible.cfg, ...)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgxops", description="Provision and tune DGX fleets with the dgxops.fleet collection.")
    sub = parser.add_subparsers(dest="command", required=True)

    p_image = sub.add_parser("image", help="build (or reuse) the simulated DGX node image")
    p_image.add_argument("--force", action="store_true")
    p_image.set_defaults(func=cmd_image)

    p_sim = sub.add_parser("sim", help="simulated DGX nodes (Docker containers with a fake nvidia-smi)")
    p_sim.add_argument("action", choices=["up", "ls", "status", "down", "inventory", "exec"],
                       help="exec: dgxops sim exec NODE COMMAND [ARG...]")
    p_sim.add_argument("--fleet", default=simfleet.DEFAULT_FLEET, help="fleet name (default %(default)s)")
    p_sim.add_argument("--layout", default=simfleet.DEFAULT_LAYOUT,
                       help="MODEL=COUNT,... (default %(default)s); models: " + ", ".join(simfleet.MODELS))
    p_sim.add_argument("--node", action="append", help="NAME=MODEL, repeatable (instead of --layout)")
    p_sim.add_argument("--driver", help="driver version for every node (default: per model)")
    p_sim.add_argument("--inventory", help="write an Ansible inventory for the fleet to this path")
    p_sim.add_argument("--json", action="store_true", help="machine-readable output")
    p_sim.set_defaults(func=cmd_sim)

    p_run = sub.add_parser("run", help="run a playbook through ansible-runner with progress and a summary")
    add_playbook_options(p_run, "PLAYBOOK")
    p_run.add_argument("--save", help="also write the JSON result to this file (for `dgxops report --run`)")
    add_task_timeout(p_run)
    p_run.set_defaults(func=cmd_run)

    p_check = sub.add_parser("check", help="check + diff: print what would change, change nothing")
    add_playbook_options(p_check, "dgxops.fleet.site")
    add_task_timeout(p_check)
    p_check.add_argument("--detailed-exitcode", action="store_true", help="exit 2 when changes are pending")
    p_check.set_defaults(func=cmd_check)

    p_facts = sub.add_parser("facts", help="fleet GPU table: nodes x GPUs")
    add_playbook_options(p_facts)
    p_facts.set_defaults(func=cmd_facts)

    p_doctor = sub.add_parser("doctor", help="driver doctor (guide 000 section 5.1) on every node")
    add_playbook_options(p_doctor)
    p_doctor.set_defaults(func=cmd_doctor)

    p_report = sub.add_parser("report", help="fleet report (Markdown or HTML)")
    add_playbook_options(p_report)
    p_report.add_argument("--format", choices=["md", "html"], default="md")
    p_report.add_argument("--output", "-o")
    p_report.add_argument("--html", help="also write the report as a self-contained HTML page to this file")
    p_report.add_argument("--run", action="append",
                          help="LABEL=RESULT.json (dgxops run --save/--json) or LABEL=ARTIFACT_DIR (a kept run), shown in the report")
    p_report.add_argument("--consistency", help="CONSISTENCY.json from `dgxops consistency --save`, shown in the report")
    p_report.set_defaults(func=cmd_report)

    p_cons = sub.add_parser("consistency", help="fleet consistency: driver, CUDA, NCCL, kernel, GPUs, VBIOS, topology, "
                                                "MIG layout and managed files compared per group")
    add_playbook_options(p_cons)
    p_cons.add_argument("--strict", action="store_true", help="exit 5 when a node differs from its group")
    p_cons.add_argument("--save", help="also write the result as JSON (for `dgxops report --consistency`)")
    p_cons.set_defaults(func=cmd_consistency)

    p_advise = sub.add_parser("advise", help="bottleneck advisor: findings and fixes per host from Prometheus or a metrics file")
    p_advise.add_argument("--prometheus", help="Prometheus base URL on the loopback, e.g. http://127.0.0.1:9090")
    p_advise.add_argument("--metrics-file", help="one scrape of an exporter (Prometheus text format)")
    p_advise.add_argument("--host", help="host name for series without a host/Hostname label (--metrics-file)")
    p_advise.add_argument("--timeout", type=float, default=10.0, help="seconds per Prometheus query (default %(default)s)")
    p_advise.add_argument("--fail-on", choices=["never", "info", "warning", "critical"], default="never",
                          help="exit 1 when a finding of this severity or worse exists (default %(default)s)")
    p_advise.add_argument("--emit-rules", action="store_true", help="print the Prometheus rules file and exit")
    p_advise.add_argument("--json", action="store_true", help="machine-readable output")
    p_advise.set_defaults(func=cmd_advise)
    return parser


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["sim", "exec"]:
        # everything after the node name belongs to the command run inside the node
        rest = argv[2:]
        fleet_name = simfleet.DEFAULT_FLEET
        if len(rest) >= 2 and rest[0] == "--fleet":
            fleet_name, rest = rest[1], rest[2:]
        if rest[:1] == ["--"]:
            rest = rest[1:]
        if len(rest) < 2:
            print("usage: dgxops sim exec [--fleet F] NODE COMMAND [ARG...]", file=sys.stderr)
            return EXIT_USAGE
        proc = simfleet.SimFleet(fleet_name).exec(rest[0], *rest[1:])
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        return proc.returncode
    passthrough: list[str] = []
    if "--" in argv:  # the rest goes to ansible-playbook unchanged
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    if passthrough and not hasattr(args, "verbose"):
        build_parser().error("`--` passes arguments to ansible-playbook: only commands that run a playbook take it")
    args.passthrough = passthrough
    try:
        return args.func(args)
    except (RuntimeError, ValueError, OSError) as exc:
        print("dgxops: error: %s" % exc, file=sys.stderr)
        return EXIT_ENV


if __name__ == "__main__":
    sys.exit(main())
