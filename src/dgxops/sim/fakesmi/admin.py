"""`dgxops-sim`: initialise, reboot, fault-inject and inspect a simulated DGX node."""
import argparse
import json
import os
import re
import subprocess
import sys

from . import boot as bootmod
from .models import MODELS
from .state import Store, StateError, new_state, reboot, state_path, validate_model_driver

# driver-load-fails and no-boot act at the next boot (dgxops-sim boot); the others at once
FAULTS = ("driver-not-loaded", "gpu-lost", "unknown-error", "hang", "busy", "driver-load-fails", "no-boot")
FAULT_KEYS = {"driver-not-loaded": "driver_not_loaded", "gpu-lost": "gpu_lost", "unknown-error": "unknown_error",
              "hang": "hang", "driver-load-fails": "driver_load_fails", "no-boot": "no_boot"}
REPO = "/srv/dgxops-cuda-repo"
REPO_SOURCE = "/etc/apt/sources.list.d/dgxops-sim-init.sources"


def default_flavour(driver):
    """What NVIDIA installs by default: the open modules from R560, proprietary before."""
    return "open" if int(str(driver).split(".")[0]) >= 560 else "proprietary"


def node_layout(os_release="/etc/os-release"):
    """The repository layout NVIDIA ships for this node's distribution: debian12 or ubuntu."""
    try:
        with open(os_release) as fh:
            ids = dict(line.rstrip("\n").split("=", 1) for line in fh if "=" in line)
    except OSError:
        return "ubuntu"
    return "debian12" if ids.get("ID", "").strip('"') == "debian" else "ubuntu"


def driver_package_specs(driver, flavour, layout):
    """apt-get install arguments (name=version) of the driver set, as NVIDIA's guide installs it."""
    from ..aptrepo import DEBIAN_REV, DRIVER_REV, debian12_closure  # pylint: disable=import-outside-toplevel
    branch = str(driver).split(".")[0]
    if layout == "debian12":
        # compute-only (NVIDIA's guide: nvidia-driver-cuda + the kernel-module flavour), every
        # package of the release named: its exact-version dependencies are not the newest release
        kernel = "nvidia-kernel-open-dkms" if flavour == "open" else "nvidia-kernel-dkms"
        return ["%s=%s-%s" % (name, driver, DEBIAN_REV) for name in debian12_closure(["nvidia-driver-cuda", kernel])]
    return ["nvidia-driver-%s%s=%s-%s" % (branch, "-open" if flavour == "open" else "", driver, DRIVER_REV)]


# the driver's packages in either of NVIDIA's layouts (not the container toolkit's)
DRIVER_PACKAGE = re.compile(r"^(?!nvidia-container)((lib)?nvidia-.*|libcuda1|firmware-nvidia-gsp|cuda-drivers.*)$")


def install_driver_packages(driver, flavour, layout=None):
    """Install the driver set from the image's repository (default: the node distribution's layout)."""
    layout = layout or node_layout()
    specs = driver_package_specs(driver, flavour, layout)
    with open(REPO_SOURCE, "w") as fh:
        fh.write("Types: deb\nURIs: file:%s/%s/\nSuites: /\nTrusted: yes\n" % (REPO, layout))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
    # re-initialising a node is a fresh install: the driver packages it has (either layout's
    # names, held or not) go first, as they would on a re-imaged node
    listed = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\\n"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, check=False).stdout
    old = sorted(name for name, status in (line.split() for line in listed.splitlines() if len(line.split()) == 2)
                 if status[1:2] == "i" and DRIVER_PACKAGE.match(name))
    purge = [["apt-get", "purge", "-y", "-qq", "--allow-change-held-packages"] + old] if old else []
    try:
        for argv in purge + [["apt-get", "update", "-qq", "-o", "Dir::Etc::sourcelist=" + REPO_SOURCE,
                      "-o", "Dir::Etc::sourceparts=-", "-o", "APT::Get::List-Cleanup=0"],
                     ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + specs
                     + ["linux-headers-%s" % os.uname().release]]:
            proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False)
            if proc.returncode != 0:
                raise StateError("%s failed (rc=%d): %s" % (" ".join(argv), proc.returncode, proc.stdout.strip()[-800:]))
    finally:
        os.unlink(REPO_SOURCE)


def _gpu_index(state, gpu):
    n = len(state["gpus"])
    if gpu is None:
        return None
    if not 0 <= gpu < n:
        raise StateError("--gpu %d: this %s node has GPUs 0-%d" % (gpu, state["model"], n - 1))
    return gpu


def add_process(state, gpu, name="python3", used_mib=1024, pid=None):
    if pid is None:
        pid = state.get("next_pid", 4100)
        state["next_pid"] = pid + 1
    proc = {"pid": pid, "gpu": gpu, "name": name, "used_mib": used_mib}
    state["processes"].append(proc)
    return proc


def cmd_init(args):
    no_driver = args.driver == "none"
    try:
        validate_model_driver(args.model, "580.95.05" if no_driver else args.driver)
    except StateError as exc:
        raise SystemExit("dgxops-sim: %s" % exc) from None
    flavour = args.flavour or (None if no_driver else default_flavour(args.driver))
    with Store(write=True, create=False) as st:
        if st.state is not None and not args.force:
            s = st.state
            if s["model"] == args.model and s["driver"] == args.driver:
                print("unchanged: %s with driver %s" % (s["model"], s["driver"]))
                return 0
            raise SystemExit("dgxops-sim: node is already %s with driver %s; use --force to re-initialise"
                             % (s["model"], s["driver"]))
    # packages only inside a simulated node: never apt-get on a developer's machine
    packages = bootmod.on_node() and (args.packages == "yes" or (args.packages == "auto" and os.path.isdir(REPO)))
    if packages and not no_driver:
        install_driver_packages(args.driver, flavour, None if args.layout == "auto" else args.layout)
    with Store(write=True, create=False) as st:
        st.state = new_state(args.model, "580.95.05" if no_driver else args.driver)
        st.state["flavour"] = flavour
        if not packages and not no_driver:
            # no repository: the driver counts as built into the image (unit tests, old images)
            st.state["preloaded_driver"] = args.driver
        st.save()
    summary = bootmod.boot(real=args.real_boot, first=True)
    print("initialised %s with driver %s (%s; %d GPU%s) in %s" % (
        args.model, summary.get("driver") or "none loaded", "packages" if packages else "built in",
        len(st.state["gpus"]), "s" if len(st.state["gpus"]) > 1 else "", state_path()))
    return 0


def cmd_boot(args):
    summary = bootmod.boot(real=True)
    print(json.dumps(summary, sort_keys=True))
    return 0


def cmd_secure_boot(args):
    with Store(write=True) as st:
        fw = st.state.setdefault("firmware", {})
        if args.sb_cmd in ("on", "off"):
            fw["secure_boot"] = args.sb_cmd == "on"
        elif args.sb_cmd == "enroll-mok":
            fw["mok_enrolled"] = True
        elif args.sb_cmd == "no-efi":
            fw["efi"] = False
        st.save()
        print(json.dumps(fw, sort_keys=True))
    bootmod.publish_efivar(st.state, real=True)
    return 0


def cmd_reset(args):
    with Store(write=True) as st:
        reboot(st.state)
        st.save()
    print("rebooted: non-persistent GPU settings are back to their defaults")
    return 0


def cmd_factory_reset(args):
    with Store(write=True) as st:
        s = st.state
        st.state = new_state(s["model"], s["driver"], seed=s.get("seed"))
        st.save()
    print("factory state restored for %s with driver %s" % (st.state["model"], st.state["driver"]))
    return 0


def cmd_fault(args):
    with Store(write=True) as st:
        s = st.state
        faults = s.setdefault("faults", {})
        if args.fault_cmd == "set":
            gpu = _gpu_index(s, args.gpu)
            if args.name == "driver-not-loaded":
                faults["driver_not_loaded"] = True
            elif args.name == "gpu-lost":
                lost = faults.setdefault("gpu_lost", [])
                idx = 0 if gpu is None else gpu
                if idx not in lost:
                    lost.append(idx)
            elif args.name == "unknown-error":
                if not args.field:
                    raise SystemExit("dgxops-sim: fault unknown-error needs --field F (a --query-gpu field)")
                entry = {"gpu": gpu, "field": args.field}
                if entry not in faults.setdefault("unknown_error", []):
                    faults["unknown_error"].append(entry)
            elif args.name == "hang":
                faults["hang"] = {"gpu": gpu}
            elif args.name == "busy":
                idx = 0 if gpu is None else gpu
                busy = faults.setdefault("busy", {})
                if str(idx) not in busy:
                    proc = add_process(s, idx, name="/usr/bin/python3", used_mib=2048)
                    busy[str(idx)] = proc["pid"]
            elif args.name in ("driver-load-fails", "no-boot"):
                faults[FAULT_KEYS[args.name]] = True
        else:
            names = [args.name] if args.name else list(FAULTS)
            for name in names:
                if name == "busy":
                    pids = set(faults.pop("busy", {}).values())
                    s["processes"] = [p for p in s["processes"] if p["pid"] not in pids]
                else:
                    faults.pop(FAULT_KEYS[name], None)
        st.save()
    print(json.dumps(faults, sort_keys=True))
    return 0


def cmd_process(args):
    with Store(write=True) as st:
        s = st.state
        if args.proc_cmd == "add":
            gpu = _gpu_index(s, args.gpu if args.gpu is not None else 0)
            proc = add_process(s, gpu, name=args.name, used_mib=args.used_mib, pid=args.pid)
            print(json.dumps(proc, sort_keys=True))
        else:
            before = len(s["processes"])
            s["processes"] = [p for p in s["processes"] if args.pid is not None and p["pid"] != args.pid]
            busy = s.get("faults", {}).get("busy", {})
            for k, v in list(busy.items()):
                if args.pid is None or v == args.pid:
                    del busy[k]
            print("removed %d process(es)" % (before - len(s["processes"])))
        st.save()
    return 0


def cmd_show(args):
    with Store(write=False) as st:
        print(json.dumps(st.state, indent=2, sort_keys=True))
    return 0


def build_parser():
    p = argparse.ArgumentParser(prog="dgxops-sim", description="Manage a simulated DGX node (fake nvidia-smi).")
    sub = p.add_subparsers(dest="cmd")
    sub.required = True
    i = sub.add_parser("init", help="create the node state")
    i.add_argument("--model", required=True, choices=sorted(MODELS))
    i.add_argument("--driver", required=True, help="driver version, e.g. 580.95.05, or none (no driver installed)")
    i.add_argument("--flavour", choices=("open", "proprietary"), help="kernel modules (default: open from R560)")
    i.add_argument("--packages", choices=("auto", "yes", "no"), default="auto",
                   help="install the driver packages from %s (auto: when the image has it)" % REPO)
    i.add_argument("--layout", choices=("auto", "debian12", "ubuntu"), default="auto",
                   help="which of NVIDIA's repository layouts to install from (auto: the node distribution's;"
                        " ubuntu carries the legacy branch 470, which NVIDIA's debian12 repository never had)")
    i.add_argument("--force", action="store_true", help="replace an existing state")
    i.add_argument("--no-real-boot", dest="real_boot", action="store_false", help=argparse.SUPPRESS)
    i.set_defaults(func=cmd_init)
    sub.add_parser("boot", help="what the node does at boot (dgxops-sim-boot.service runs it)").set_defaults(func=cmd_boot)
    sb = sub.add_parser("secure-boot", help="the node's firmware: Secure Boot on/off, enrol a MOK key, no EFI")
    sb.add_argument("sb_cmd", choices=("on", "off", "enroll-mok", "no-efi"))
    sb.set_defaults(func=cmd_secure_boot)
    sub.add_parser("reset", help="reboot: non-persistent settings go back to defaults").set_defaults(func=cmd_reset)
    sub.add_parser("factory-reset", help="all settings back to factory state").set_defaults(func=cmd_factory_reset)
    f = sub.add_parser("fault", help="inject or clear faults")
    fs = f.add_subparsers(dest="fault_cmd")
    fs.required = True
    fset = fs.add_parser("set")
    fset.add_argument("name", choices=FAULTS)
    fset.add_argument("--gpu", type=int)
    fset.add_argument("--field")
    fclr = fs.add_parser("clear")
    fclr.add_argument("name", nargs="?", choices=FAULTS)
    f.set_defaults(func=cmd_fault)
    pr = sub.add_parser("process", help="add or remove a fake compute process")
    ps = pr.add_subparsers(dest="proc_cmd")
    ps.required = True
    pa = ps.add_parser("add")
    pa.add_argument("--gpu", type=int, default=0)
    pa.add_argument("--name", default="python3")
    pa.add_argument("--used-mib", type=int, default=1024)
    pa.add_argument("--pid", type=int)
    prm = ps.add_parser("remove")
    prm.add_argument("--pid", type=int, help="without --pid: remove all")
    pr.set_defaults(func=cmd_process)
    sub.add_parser("show", help="print the state as JSON").set_defaults(func=cmd_show)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except StateError as exc:
        sys.stderr.write("dgxops-sim: %s\n" % exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
