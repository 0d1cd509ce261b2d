"""`nvidia-smi` command line of the simulator: parsing, dispatch, setters, exit codes."""
import os
import re
import sys
import time

from . import mig as migmod
from . import render
from .fieldtable import UNITS
from .models import MODELS
from .state import Store, apply_gpu_reset
from .values import (apply_unknown_error_faults, branch_of, gpu_processes, timestamp_now, unit_of,
                     valid_fields, values)

# exit codes (nvidia-smi(1) RETURN VALUE)
RC_OK, RC_ARG, RC_NOT_SUPPORTED, RC_PERM, RC_NOT_FOUND, RC_DRIVER, RC_LOST, RC_OTHER = 0, 2, 3, 4, 6, 9, 15, 255

DRIVER_MSG = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
              "Make sure that the latest NVIDIA driver is installed and running.\n")
TERMINATE = "Terminating early due to previous errors.\n"
# NVML_ERROR_LIB_RM_VERSION_MISMATCH (nvml.h: 18); nvidia-smi exits with it
RC_MISMATCH = 18
MISMATCH_MSG = "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: %s\n"
WARN = "Treating as warning and moving on.\n"
DONE = "All done.\n"
BAD_COMBO = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"

SETTERS = {
    "-pm": "pm", "--persistence-mode": "pm", "-pl": "pl", "--power-limit": "pl",
    "-ac": "ac", "--applications-clocks": "ac", "-lgc": "lgc", "--lock-gpu-clocks": "lgc",
    "--auto-boost-default": "abd", "-c": "c", "--compute-mode": "c", "-e": "e", "--ecc-config": "e",
    "-mig": "mig", "--multi-instance-gpu": "mig", "-acp": "acp", "--application-clock-permissions": "acp",
}
FLAG_SETTERS = {"-rac": "rac", "--reset-applications-clocks": "rac", "-rgc": "rgc",
                "--reset-gpu-clocks": "rgc", "-r": "r", "--gpu-reset": "r"}


class Out(object):
    def __init__(self):
        self.out = []
        self.err = []

    def p(self, s):
        self.out.append(s)

    def e(self, s):
        self.err.append(s)


class Usage(Exception):
    def __init__(self, msg, rc=RC_ARG):
        Exception.__init__(self, msg)
        self.msg = msg
        self.rc = rc


def _unknown_option(opt):
    return Usage("ERROR: Option %s is not recognized. Please run 'nvidia-smi -h'.\n\n" % opt, RC_OTHER)


def parse(argv):
    """Return dict of options. nvidia-smi accepts `-x V`, `--long=V` and `--long V`."""
    opts = {"setters": [], "sub": None}
    args = list(argv)
    if args and args[0] in ("mig", "topo"):
        opts["sub"] = args.pop(0)
    i = 0

    def value(tok):
        nonlocal i
        if "=" in tok and tok.startswith("--"):
            return tok.split("=", 1)[1]
        if "=" in tok and tok.split("=", 1)[0] in SETTERS:
            return tok.split("=", 1)[1]
        if i + 1 >= len(args):
            raise Usage("Option %s requires an argument. Please run 'nvidia-smi -h'.\n\n" % tok, RC_ARG)
        i += 1
        return args[i]

    while i < len(args):
        tok = args[i]
        name = tok.split("=", 1)[0] if tok.startswith("-") else tok
        if name in ("-h", "--help"):
            opts["help"] = True
        elif name == "--version":
            opts["version"] = True
        elif name in ("-L", "--list-gpus"):
            opts["list"] = True
        elif name in ("-q", "--query"):
            opts["query"] = True
        elif name in ("-x", "--xml-format"):
            opts["xml"] = True
        elif name in ("-d", "--display"):
            opts["display"] = [d.strip().upper() for d in value(tok).split(",") if d.strip()]
        elif name in ("-i", "--id"):
            opts["id"] = value(tok)
        elif name == "--query-gpu":
            opts["query_gpu"] = value(tok)
        elif name == "--query-compute-apps":
            opts["query_apps"] = value(tok)
        elif name == "--format":
            opts["format"] = value(tok)
        elif name == "--help-query-gpu":
            opts["help_query_gpu"] = True
        elif name in ("-m", "--matrix") and opts["sub"] == "topo":
            opts["matrix"] = True
        elif opts["sub"] == "mig" and name in ("-lgip", "-lgipp", "-lgi", "-lci", "-lcip", "-dci", "-dgi",
                                               "--list-gpu-instance-profiles", "--list-gpu-instances",
                                               "--list-compute-instances", "--destroy-compute-instance",
                                               "--destroy-gpu-instance", "--list-compute-instance-profiles"):
            long_map = {"--list-gpu-instance-profiles": "-lgip", "--list-gpu-instances": "-lgi",
                        "--list-compute-instances": "-lci", "--destroy-compute-instance": "-dci",
                        "--destroy-gpu-instance": "-dgi", "--list-compute-instance-profiles": "-lcip"}
            act = long_map.get(name, name)
            opts["mig_action"] = act
            if act in ("-dci", "-dgi") and "=" in tok:
                opts["mig_arg"] = tok.split("=", 1)[1]
        elif opts["sub"] == "mig" and name in ("-cgi", "--create-gpu-instance", "-cci",
                                               "--create-compute-instance"):
            opts["mig_action"] = "-cgi" if name in ("-cgi", "--create-gpu-instance") else "-cci"
            nxt = args[i + 1] if i + 1 < len(args) else None
            if "=" in tok:
                opts["mig_arg"] = tok.split("=", 1)[1]
            elif nxt is not None and not nxt.startswith("-"):
                opts["mig_arg"] = nxt
                i += 1
        elif opts["sub"] == "mig" and name in ("-C", "--default-compute-instance"):
            opts["mig_C"] = True
        elif opts["sub"] == "mig" and name in ("-gi", "--gpu-instance-id"):
            opts["gi"] = value(tok)
        elif opts["sub"] == "mig" and name in ("-ci", "--compute-instance-id"):
            opts["ci"] = value(tok)
        elif name in SETTERS:
            opts["setters"].append((SETTERS[name], value(tok)))
        elif name in FLAG_SETTERS:
            opts["setters"].append((FLAG_SETTERS[name], None))
        else:
            raise _unknown_option(tok)
        i += 1
    return opts


# ---------------------------------------------------------------------------- selection


def _norm_bus(s):
    s = s.strip().upper()
    parts = s.split(":")
    if len(parts) == 2:
        parts = ["0"] + parts
    if len(parts) != 3:
        return None
    return "%08X:%s:%s" % (int(parts[0], 16), parts[1].zfill(2), parts[2])


def select(state, spec):
    """GPUs named by -i (index, UUID, PCI bus id, serial, comma list); all when spec is None."""
    gpus = state["gpus"]
    if spec is None:
        return list(gpus)
    found = []
    for tok in spec.split(","):
        tok = tok.strip()
        hit = None
        if tok.isdigit() and len(tok) < 6:
            idx = int(tok)
            hit = next((g for g in gpus if g["index"] == idx), None)
        elif tok.upper().startswith("GPU-"):
            hit = next((g for g in gpus if g["uuid"].lower() == tok.lower()), None)
        elif ":" in tok:
            try:
                b = _norm_bus(tok)
            except ValueError:
                b = None
            hit = next((g for g in gpus if g["bus_id"].upper() == b), None)
        else:
            hit = next((g for g in gpus if g["serial"] == tok), None)
        if hit is not None and hit not in found:
            found.append(hit)
    return found


def lost_msg(g):
    return ("Unable to determine the device handle for GPU %s: GPU is lost.  "
            "Reboot the system to recover this GPU\n" % g["bus_id"][4:])


def is_lost(state, g):
    return g["index"] in state.get("faults", {}).get("gpu_lost", [])


# ---------------------------------------------------------------------------- read commands


def _format_opts(fmt):
    if fmt is None:
        return {"noheader": False, "nounits": False}
    mods = [x.strip() for x in fmt.split(",")]
    if "csv" not in mods or any(x not in ("csv", "noheader", "nounits") for x in mods):
        raise Usage("Format modifier is not recognized.\n", RC_ARG)
    return {"noheader": "noheader" in mods, "nounits": "nounits" in mods}


def _strip_unit(val, unit):
    if unit and val.endswith(" " + unit):
        return val[:-len(unit) - 1]
    return val


def query_gpu(state, o, opts):
    b = branch_of(state)
    names, aliases = valid_fields(b)
    valid = set(names)
    fields = [f.strip() for f in opts["query_gpu"].split(",") if f.strip()]
    canon = []
    for f in fields:
        c = aliases.get(f, f)
        if c not in valid:
            o.p('Field "%s" is not a valid field to query.\n\n' % f)
            return RC_ARG
        canon.append(c)
    fmt = _format_opts(opts.get("format"))
    gpus = select(state, opts.get("id"))
    if not gpus:
        o.p("No devices were found\n")
        return RC_NOT_FOUND
    if not fmt["noheader"]:
        hdr = []
        for c in canon:
            u = unit_of(c)
            hdr.append("%s [%s]" % (c, u) if u else c)
        o.p(", ".join(hdr) + "\n")
    rc = RC_OK
    for g in gpus:
        if is_lost(state, g):
            o.p(lost_msg(g))
            rc = RC_LOST
            continue
        v = apply_unknown_error_faults(state, g, values(state, g))
        row = []
        for c in canon:
            key = c.replace("clocks_throttle_reasons", "clocks_event_reasons")
            val = v.get(key, "[N/A]")
            if fmt["nounits"]:
                val = _strip_unit(val, unit_of(c))
            row.append(val)
        o.p(", ".join(row) + "\n")
    return rc


APPS_FIELDS = ("timestamp", "gpu_name", "gpu_bus_id", "gpu_serial", "gpu_uuid", "pid", "process_name",
               "used_gpu_memory")
APPS_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory"}


def query_apps(state, o, opts):
    fields = [f.strip() for f in opts["query_apps"].split(",") if f.strip()]
    canon = []
    for f in fields:
        c = APPS_ALIASES.get(f, f)
        if c not in APPS_FIELDS:
            o.p('Field "%s" is not a valid field to query.\n\n' % f)
            return RC_ARG
        canon.append(c)
    fmt = _format_opts(opts.get("format"))
    gpus = select(state, opts.get("id"))
    if not gpus:
        o.p("No devices were found\n")
        return RC_NOT_FOUND
    if not fmt["noheader"]:
        o.p(", ".join(c + " [MiB]" if c == "used_gpu_memory" else c for c in canon) + "\n")
    m = MODELS[state["model"]]
    ts = timestamp_now()
    for g in gpus:
        for p in gpu_processes(state, g):
            vals = {"timestamp": ts, "gpu_name": m["gpu_name"], "gpu_bus_id": g["bus_id"],
                    "gpu_serial": g["serial"], "gpu_uuid": g["uuid"], "pid": str(p["pid"]),
                    "process_name": p.get("name", "python3"),
                    "used_gpu_memory": ("%d" if fmt["nounits"] else "%d MiB") % p.get("used_mib", 0)}
            o.p(", ".join(vals[c] for c in canon) + "\n")
    return RC_OK


def help_query_gpu(state, o):
    names, aliases = valid_fields(branch_of(state))
    rev = {}
    for a, c in aliases.items():
        rev.setdefault(c, []).append(a)
    o.p('List of valid properties to query for the switch "--query-gpu":\n\n')
    for n in names:
        al = rev.get(n)
        o.p('"%s"%s\n%s\n\n' % (n, (' or "%s"' % al[0]) if al else "",
                                 "Unit: %s." % UNITS[n] if n in UNITS else "See nvidia-smi(1)."))
    return RC_OK


HELP = """NVIDIA System Management Interface -- v{driver} (dgxops simulator, model {model})

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -q,   --query               Display GPU or Unit info.
    -x,   --xml-format          Produce XML output.
    -d,   --display=            Display only selected information: MEMORY, UTILIZATION, ECC,
                                TEMPERATURE, POWER, CLOCK, COMPUTE, PIDS, PERFORMANCE, SUPPORTED_CLOCKS
    -i,   --id=                 Target a specific GPU (index, UUID, PCI bus id or serial; comma list).
    --query-gpu=                Information about GPU. Call --help-query-gpu for more info.
    --query-compute-apps=       List of currently active compute processes.
    --format=                   csv[,noheader][,nounits]
    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED
    -e,   --ecc-config=         Toggle ECC support: 0/DISABLED, 1/ENABLED
    -c,   --compute-mode=       Set MODE for compute applications:
                                0/DEFAULT, 1/EXCLUSIVE_THREAD (DEPRECATED),
                                2/PROHIBITED, 3/EXCLUSIVE_PROCESS
    -r    --gpu-reset           Trigger reset of the GPU.
    -ac   --applications-clocks= Specifies <memory,graphics> clocks as a pair (e.g. 2000,800).
    -rac  --reset-applications-clocks Resets the applications clocks to the default values.
    -lgc  --lock-gpu-clocks=    Specifies <minGpuClock,maxGpuClock> clocks as a pair (e.g. 1500,1500).
    -rgc  --reset-gpu-clocks    Resets the Gpu clocks to the default values.
    -pl   --power-limit=        Specifies maximum power management limit in watts.
    -mig  --multi-instance-gpu= Enable or disable Multi Instance GPU: 0/DISABLED, 1/ENABLED
          --auto-boost-default= Set the default auto boost policy to 0/DISABLED or 1/ENABLED
    topo -m                     Display the GPU topology matrix.
    mig -lgip|-lgipp|-lgi|-lci|-lcip|-cgi|-cci|-dci|-dgi  MIG management.
"""


# ---------------------------------------------------------------------------- setters


def _need_root(euid):
    return euid != 0


def _perm_fail(o, msg):
    o.p(msg + ": Insufficient Permissions\n")
    o.p(TERMINATE)
    return RC_PERM


def _check_lost(state, o, gpus):
    for g in gpus:
        if is_lost(state, g):
            o.p(lost_msg(g))
            return RC_LOST
    return None


def _bool_arg(val, words=("DISABLED", "ENABLED")):
    v = str(val).strip().upper()
    if v in ("0", words[0]):
        return False
    if v in ("1", words[1]):
        return True
    raise Usage(BAD_COMBO)


def set_pm(state, o, gpus, val, euid):
    on = _bool_arg(val)
    b = branch_of(state)
    word = "Enabled" if on else "Disabled"
    for g in gpus:
        if g["persistence_mode"] == on:
            o.p("Persistence mode is already %s for GPU %s.\n" % (word, g["bus_id"]))
            continue
        if _need_root(euid):
            return _perm_fail(o, "Unable to set persistence mode for GPU %s" % g["bus_id"])
        g["persistence_mode"] = on
        o.p("%s %spersistence mode for GPU %s.\n" % (word, "Legacy " if b >= 580 else "", g["bus_id"]))
    o.p(DONE)
    return RC_OK


def set_pl(state, o, gpus, val, euid):
    m = MODELS[state["model"]]
    b = branch_of(state)
    try:
        watts = float(val)
    except ValueError:
        raise Usage(BAD_COMBO) from None
    for g in gpus:
        if m["power_max"] is None:
            scope = " in current scope" if b >= 570 else ""
            o.p("Changing power management limit is not supported%s for GPU: %s.\n" % (scope, g["bus_id"]))
            o.p(WARN)
            continue
        if _need_root(euid):
            return _perm_fail(o, "Failed to set power management limit for GPU %s" % g["bus_id"])
        if not m["power_min"] <= watts <= m["power_max"]:
            o.p("Provided power limit %.2f W is not a valid power limit which should be between %.2f W and "
                "%.2f W for GPU %s\n" % (watts, m["power_min"], m["power_max"], g["bus_id"]))
            o.p(TERMINATE)
            return RC_ARG
        old = g["power_limit"]
        g["power_limit"] = round(watts, 2)
        o.p("Power limit for GPU %s was set to %.2f W from %.2f W.\n" % (g["bus_id"], watts, old))
    o.p(DONE)
    return RC_OK


def _pair(val):
    parts = str(val).split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise Usage(BAD_COMBO)
    return int(parts[0]), int(parts[1])


def set_ac(state, o, gpus, val, euid):
    from .models import supported_clocks
    mem, gr = _pair(val)
    b = branch_of(state)
    for g in gpus:
        if b >= 590:
            o.p("Setting applications clocks is not supported for GPU %s.\n" % g["bus_id"])
            o.p(WARN)
            continue
        if _need_root(euid):
            return _perm_fail(o, "Failed to set applications clocks for GPU %s" % g["bus_id"])
        ok = any(mem == mm and gr in grs for mm, grs in supported_clocks(state["model"]))
        if not ok:
            o.p('Specified clock combination "(MEM %d, SM %d)" is not supported for GPU %s. Run '
                "'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock combinations\n"
                % (mem, gr, g["bus_id"]))
            o.p(WARN)
            continue
        g["app_clocks"] = [mem, gr]
        o.p('Applications clocks set to "(MEM %d, SM %d)" for GPU %s\n' % (mem, gr, g["bus_id"]))
    o.p(DONE)
    return RC_OK


def set_rac(state, o, gpus, val, euid):
    for g in gpus:
        if _need_root(euid):
            return _perm_fail(o, "Failed to reset applications clocks for GPU %s" % g["bus_id"])
        g["app_clocks"] = None
    o.p(DONE)
    return RC_OK


def set_lgc(state, o, gpus, val, euid):
    parts = str(val).split(",")
    if len(parts) == 1:
        parts = parts * 2
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise Usage(BAD_COMBO)
    lo, hi = int(parts[0]), int(parts[1])
    if lo > hi:
        raise Usage(BAD_COMBO)
    for g in gpus:
        if _need_root(euid):
            o.p("The current user does not have permission to change clocks for GPU %s.\n" % g["bus_id"])
            o.p(TERMINATE)
            return RC_PERM
        g["locked_clocks"] = [lo, hi]
        o.p('GPU clocks set to "(gpuClkMin %d, gpuClkMax %d)" for GPU %s\n' % (lo, hi, g["bus_id"]))
    o.p(DONE)
    return RC_OK


def set_rgc(state, o, gpus, val, euid):
    for g in gpus:
        if _need_root(euid):
            o.p("The current user does not have permission to change clocks for GPU %s.\n" % g["bus_id"])
            o.p(TERMINATE)
            return RC_PERM
        g["locked_clocks"] = None
    o.p(DONE)
    return RC_OK


def set_abd(state, o, gpus, val, euid):
    _bool_arg(val)
    for g in gpus:
        if _need_root(euid):
            return _perm_fail(o, "Unable to set default auto boosted clocks for GPU %s" % g["bus_id"])
        o.p("Enabling/disabling default auto boosted clocks is not supported for GPU: %s.\n" % g["bus_id"])
        o.p(WARN)
    o.p(DONE)
    return RC_OK


COMPUTE_MODES = {"0": "Default", "DEFAULT": "Default", "2": "Prohibited", "PROHIBITED": "Prohibited",
                 "3": "Exclusive_Process", "EXCLUSIVE_PROCESS": "Exclusive_Process"}


def set_c(state, o, gpus, val, euid):
    key = str(val).strip().upper()
    if key not in COMPUTE_MODES:
        raise Usage(BAD_COMBO)
    mode = COMPUTE_MODES[key]
    for g in gpus:
        if _need_root(euid):
            return _perm_fail(o, "Unable to set compute mode for GPU %s" % g["bus_id"])
        g["compute_mode"] = mode
        o.p("Set compute mode to %s for GPU %s.\n" % (mode.upper(), g["bus_id"]))
    o.p(DONE)
    return RC_OK


def set_e(state, o, gpus, val, euid):
    on = _bool_arg(val)
    m = MODELS[state["model"]]
    for g in gpus:
        if not m["ecc"]:
            o.p("Unable to %s ECC support for GPU %s: Not Supported\n" % ("enable" if on else "disable", g["bus_id"]))
            o.p(WARN)
            continue
        if _need_root(euid):
            return _perm_fail(o, "Unable to set the ECC mode for GPU %s" % g["bus_id"])
        g["ecc_pending"] = on
        o.p("%s ECC support for GPU %s.\n" % ("Enabled" if on else "Disabled", g["bus_id"]))
    o.p(DONE)
    return RC_OK


def set_mig(state, o, gpus, val, euid):
    on = _bool_arg(val)
    m = MODELS[state["model"]]
    verb = "enable" if on else "disable"
    word = "Enabled" if on else "Disabled"
    rc = RC_OK
    for g in gpus:
        bus = g["bus_id"]
        if not m["mig"]:
            o.p("Unable to %s MIG Mode for GPU %s: Not Supported\n" % (verb, bus))
            o.p(WARN)
            continue
        if _need_root(euid):
            return _perm_fail(o, "Unable to %s MIG Mode for GPU %s" % (verb, bus))
        if not on and g["gpu_instances"]:
            o.p("Unable to disable MIG Mode for GPU %s: In use by another client\n" % bus)
            o.p(TERMINATE)
            return RC_OTHER
        busy = bool(gpu_processes(state, g))
        if not g["persistence_mode"]:
            o.p("Warning: persistence mode is disabled on device %s. See the Known Issues section of the "
                "nvidia-smi(1) man page for more information. Run with [--help | -h] switch to get more "
                "information on how to enable persistence mode.\n\n" % bus)
        if m["ampere_mig"]:
            # Ampere: the mode is stored and needs a GPU reset; on an NVSwitch system the driver
            # cannot reset one GPU by itself, so the change stays pending.
            g["mig_pending"] = on
            if g["mig_current"] == on:
                o.p("%s MIG Mode for GPU %s\n" % (word, bus))
            elif busy:
                o.p("Warning: MIG mode is in pending %s state for GPU %s:In use by another client\n"
                    "%s is currently being used by one or more other processes (e.g. CUDA application or a "
                    "monitoring application such as another instance of nvidia-smi). Please first kill all "
                    "processes using the device and retry the command or reboot the system to make MIG mode "
                    "effective.\n" % (verb, bus, bus))
            else:
                o.p("Warning: MIG mode is in pending %s state for GPU %s:Not Supported\n"
                    "Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU %s\n"
                    % (verb, bus, bus))
        else:
            if busy and g["mig_current"] != on:
                o.p("Unable to %s MIG Mode for GPU %s: In use by another client\n" % (verb, bus))
                o.p(TERMINATE)
                return RC_OTHER
            g["mig_current"] = g["mig_pending"] = on
            o.p("%s MIG Mode for GPU %s\n" % (word, bus))
    o.p(DONE)
    return rc


def set_r(state, o, gpus, val, euid, all_selected):
    for g in gpus:
        if _need_root(euid):
            return _perm_fail(o, "Unable to reset GPU %s" % g["bus_id"])
    busy = [g for g in gpus if gpu_processes(state, g)]
    if busy:
        g = busy[0]
        o.p("Unable to reset GPU %s because it's being used by some other process (e.g. CUDA application, "
            "graphics application like X server, monitoring application like other instance of nvidia-smi). "
            "Please first kill all processes using this GPU and all compute applications running in the "
            "system.\n" % g["bus_id"])
        return RC_OTHER
    for g in gpus:
        apply_gpu_reset(state, g)
        o.p("GPU %s was successfully reset.\n" % g["bus_id"])
    o.p(DONE)
    return RC_OK


def set_acp(state, o, gpus, val, euid):
    if branch_of(state) >= 510:
        raise _unknown_option("-acp")
    restricted = _bool_arg(val, ("UNRESTRICTED", "RESTRICTED"))
    for g in gpus:
        if _need_root(euid):
            return _perm_fail(o, "Unable to set applications clocks permissions for GPU %s" % g["bus_id"])
        o.p("Applications clocks commands have been set to %s for GPU %s\n" % (
            "RESTRICTED" if restricted else "UNRESTRICTED", g["bus_id"][4:]))
    o.p(DONE)
    return RC_OK


SETTER_FUNCS = {"pm": set_pm, "pl": set_pl, "ac": set_ac, "rac": set_rac, "lgc": set_lgc, "rgc": set_rgc,
                "abd": set_abd, "c": set_c, "e": set_e, "mig": set_mig, "acp": set_acp}


# ---------------------------------------------------------------------------- mig subcommand


def _mig_gpus(state, o, opts, need_enabled=True):
    gpus = select(state, opts.get("id"))
    if not gpus:
        o.p("No devices were found\n")
        return None, RC_NOT_FOUND
    m = MODELS[state["model"]]
    if not m["mig"]:
        o.p("No MIG-supported devices found.\n")
        return None, RC_OK
    if need_enabled:
        gpus = [g for g in gpus if g["mig_current"]]
        if not gpus:
            o.p("No MIG-enabled devices found.\n")
            return None, RC_OK
    return gpus, None


def _ids(spec):
    if spec is None:
        return None
    out = []
    for t in str(spec).split(","):
        t = t.strip()
        if not t.isdigit():
            raise Usage(BAD_COMBO)
        out.append(int(t))
    return out


def mig_cmd(state, o, opts, euid):
    act = opts.get("mig_action")
    if act is None:
        raise Usage(BAD_COMBO)
    b = branch_of(state)
    if act in ("-lgip", "-lgipp"):
        gpus, rc = _mig_gpus(state, o, opts, need_enabled=b < 550)
        if gpus is None:
            return rc
        o.p(render.lgip(state, gpus) if act == "-lgip" else render.lgipp(state, gpus))
        return RC_OK
    gpus, rc = _mig_gpus(state, o, opts)
    if gpus is None:
        return rc
    lost = _check_lost(state, o, gpus)
    if lost:
        return lost
    if act == "-lgi":
        t = render.lgi(state, gpus)
        if t is None:
            o.p("No GPU instances found: Not Found\n")
            return RC_NOT_FOUND
        o.p(t)
        return RC_OK
    if act in ("-lci", "-lcip"):
        gi_filter = _ids(opts.get("gi"))
        t = (render.lci if act == "-lci" else render.lcip)(state, gpus, gi_filter)
        if t is None:
            if act == "-lci" and not any(g["gpu_instances"] for g in gpus):
                o.p("No GPU instances found: Not Found\n")
            else:
                o.p("No compute instances found: Not Found\n" if act == "-lci"
                    else "No GPU instances found: Not Found\n")
            return RC_NOT_FOUND
        o.p(t)
        return RC_OK
    if act == "-cgi":
        return mig_cgi(state, o, gpus, opts, euid)
    if act == "-cci":
        return mig_cci(state, o, gpus, opts, euid)
    if act == "-dci":
        return mig_dci(state, o, gpus, opts, euid)
    if act == "-dgi":
        return mig_dgi(state, o, gpus, opts, euid)
    raise Usage(BAD_COMBO)


def mig_cgi(state, o, gpus, opts, euid):
    spec = opts.get("mig_arg")
    if not spec:
        raise Usage(BAD_COMBO)
    requests = []
    for tok in spec.split(","):
        name, _, placement = tok.partition(":")
        prof = migmod.resolve_gi_profile(state, name)
        if prof is None:
            o.p("Unable to create a GPU instance on GPU %d using profile %s: Invalid Argument\n"
                % (gpus[0]["index"], name))
            o.p("Failed to create GPU instances: Invalid Argument\n")
            return RC_ARG
        if placement and not placement.isdigit():
            raise Usage(BAD_COMBO)
        requests.append((prof, int(placement) if placement else None, name))
    rc = RC_OK
    for g in gpus:
        for prof, start, name in requests:
            if _need_root(euid):
                o.p("Unable to create a GPU instance on GPU %2d using profile %s: Insufficient Permissions\n"
                    % (g["index"], name))
                o.p("Failed to create GPU instances: Insufficient Permissions\n")
                return RC_PERM
            try:
                gi = migmod.create_gi(state, g, prof, start)
            except migmod.MigError as exc:
                o.p("Unable to create a GPU instance on GPU %2d using profile %s: %s\n" % (g["index"], name, exc.reason))
                o.p("Failed to create GPU instances: %s\n" % exc.reason)
                return RC_ARG if exc.reason == "Invalid Argument" else RC_OTHER
            o.p("Successfully created GPU instance ID %2d on GPU %2d using profile MIG %s (ID %2d)\n"
                % (gi["id"], g["index"], prof["name"], prof["id"]))
            if opts.get("mig_C"):
                ci = migmod.create_ci(state, g, gi, migmod.ci_profile_id(state, prof, prof["g"]))
                o.p("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d using profile "
                    "MIG %s (ID %2d)\n" % (ci["id"], g["index"], gi["id"], migmod.ci_name(state, gi, ci),
                                           ci["profile"]))
    return rc


def _target_gis(g, opts):
    want = _ids(opts.get("gi"))
    if want is None:
        return list(g["gpu_instances"])
    return [gi for gi in g["gpu_instances"] if gi["id"] in want]


def mig_cci(state, o, gpus, opts, euid):
    spec = opts.get("mig_arg")
    for g in gpus:
        targets = _target_gis(g, opts)
        if not targets:
            o.p("No GPU instances found: Not Found\n")
            return RC_NOT_FOUND
        for gi in targets:
            prof = migmod.profiles(state)[gi["profile"]]
            tokens = spec.split(",") if spec else [str(migmod.ci_profile_id(state, prof, prof["g"]))]
            for tok in tokens:
                tok = tok.strip()
                pid = None
                if tok.isdigit():
                    pid = int(tok)
                else:
                    for cand, _, nm in migmod.ci_profiles_for(state, gi):
                        if nm.lower() == re.sub(r"^mig\s+", "", tok.lower()):
                            pid = cand
                if _need_root(euid):
                    o.p("Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile %s: "
                        "Insufficient Permissions\n" % (g["index"], gi["id"], tok))
                    o.p("Failed to create compute instances: Insufficient Permissions\n")
                    return RC_PERM
                try:
                    if pid is None:
                        raise migmod.MigError("Invalid Argument")
                    ci = migmod.create_ci(state, g, gi, pid)
                except migmod.MigError as exc:
                    o.p("Unable to create a compute instance on GPU %2d GPU instance ID %2d using profile %s: %s\n"
                        % (g["index"], gi["id"], tok, exc.reason))
                    o.p("Failed to create compute instances: %s\n" % exc.reason)
                    return RC_ARG if exc.reason == "Invalid Argument" else RC_OTHER
                o.p("Successfully created compute instance ID %2d on GPU %2d GPU instance ID %2d using profile "
                    "MIG %s (ID %2d)\n" % (ci["id"], g["index"], gi["id"], migmod.ci_name(state, gi, ci),
                                           ci["profile"]))
    return RC_OK


def mig_dci(state, o, gpus, opts, euid):
    want_ci = _ids(opts.get("ci"))
    done = 0
    for g in gpus:
        for gi in _target_gis(g, opts):
            for ci in list(gi["compute_instances"]):
                if want_ci is not None and ci["id"] not in want_ci:
                    continue
                if _need_root(euid):
                    o.p("Unable to destroy compute instance ID %2d from GPU %2d GPU instance ID %2d: "
                        "Insufficient Permissions\n" % (ci["id"], g["index"], gi["id"]))
                    o.p("Failed to destroy compute instances: Insufficient Permissions\n")
                    return RC_PERM
                gi["compute_instances"].remove(ci)
                done += 1
                o.p("Successfully destroyed compute instance ID %2d from GPU %2d GPU instance ID %2d\n"
                    % (ci["id"], g["index"], gi["id"]))
    if not done:
        o.p("No compute instances found: Not Found\n")
        return RC_NOT_FOUND
    return RC_OK


def mig_dgi(state, o, gpus, opts, euid):
    done = 0
    for g in gpus:
        for gi in _target_gis(g, opts):
            if _need_root(euid):
                o.p("Unable to destroy GPU instance ID %2d from GPU %2d: Insufficient Permissions\n"
                    % (gi["id"], g["index"]))
                o.p("Failed to destroy GPU instances: Insufficient Permissions\n")
                return RC_PERM
            if gi["compute_instances"]:
                o.p("Unable to destroy GPU instance ID %2d from GPU %2d: In use by another client\n"
                    % (gi["id"], g["index"]))
                o.p("Failed to destroy GPU instances: In use by another client\n")
                return RC_OTHER
            g["gpu_instances"].remove(gi)
            done += 1
            o.p("Successfully destroyed GPU instance ID %2d from GPU %2d\n" % (gi["id"], g["index"]))
    if not done:
        o.p("No GPU instances found: Not Found\n")
        return RC_NOT_FOUND
    return RC_OK


# ---------------------------------------------------------------------------- dispatch


def _hang_if_faulted(state, gpus_touched):
    hang = state.get("faults", {}).get("hang")
    if not hang:
        return
    target = hang.get("gpu") if isinstance(hang, dict) else None
    if target is None or any(g["index"] == target for g in gpus_touched):
        while True:  # like a wedged driver call: only a signal (the caller's timeout) ends it
            time.sleep(3600)


def run(argv, euid, o):
    try:
        opts = parse(argv)
    except Usage as exc:
        o.p(exc.msg)
        return exc.rc
    if opts.get("help"):
        with Store(write=False) as st:
            o.p(HELP.format(driver=st.state["driver"], model=st.state["model"]))
        return RC_OK
    writing = bool(opts["setters"]) or opts.get("mig_action") in ("-cgi", "-cci", "-dci", "-dgi")
    with Store(write=writing) as st:
        state = st.state
        faults = state.get("faults", {})
        if faults.get("driver_not_loaded") or state.get("driver_loaded") is False:
            o.p(DRIVER_MSG)
            o.e(DRIVER_MSG)
            return RC_DRIVER
        from .boot import library_versions  # only here: it loads subprocess

        libs = library_versions()
        if libs and state["driver"] not in libs:
            # new user-space driver installed, old kernel module still loaded (before the reboot)
            o.p(MISMATCH_MSG % ".".join(libs[-1].split(".")[:2]))
            return RC_MISMATCH
        spec = opts.get("id")
        touched = select(state, spec)
        _hang_if_faulted(state, touched if spec else state["gpus"])
        try:
            rc = _dispatch(state, o, opts, euid)
        except Usage as exc:
            o.p(exc.msg)
            return exc.rc
        if writing and rc in (RC_OK, RC_OTHER, RC_ARG):
            st.save()
        return rc


def _dispatch(state, o, opts, euid):
    if opts.get("version"):
        o.p(render.version_text(state))
        return RC_OK
    if opts.get("help_query_gpu"):
        return help_query_gpu(state, o)
    if opts["sub"] == "topo":
        if opts.get("id") is not None:
            o.p("The -i command line argument must be used in conjunction with -n or -p.\n\n")
            return RC_OTHER
        if not opts.get("matrix"):
            raise Usage(BAD_COMBO)
        o.p(render.topo_matrix(state))
        return RC_OK
    if opts["sub"] == "mig":
        return mig_cmd(state, o, opts, euid)
    if opts.get("list"):
        if opts.get("id") is not None:
            o.p("ERROR: Option -i is not valid for this command. Please run 'nvidia-smi -h' for help.\n\n")
            return RC_ARG
        gpus = state["gpus"]
        rc = _check_lost(state, o, gpus)
        if rc:
            return rc
        o.p(render.list_gpus(state, gpus))
        return RC_OK
    if opts.get("query_gpu") is not None:
        return query_gpu(state, o, opts)
    if opts.get("query_apps") is not None:
        return query_apps(state, o, opts)
    gpus = select(state, opts.get("id"))
    if not gpus:
        o.p("No devices were found\n")
        return RC_NOT_FOUND
    if opts["setters"]:
        rc = _check_lost(state, o, gpus)
        if rc:
            return rc
        result = RC_OK
        for name, val in opts["setters"]:
            if name == "r":
                result = set_r(state, o, gpus, val, euid, opts.get("id") is None)
            else:
                result = SETTER_FUNCS[name](state, o, gpus, val, euid)
            if result != RC_OK:
                return result
        return result
    if opts.get("query"):
        if opts.get("xml") and opts.get("display"):
            o.p("Invalid combination of input arguments: --display/-d flags can not be combined with "
                "-x/--xml-format flags.\n")
            return RC_ARG
        rc = _check_lost(state, o, gpus)
        if rc:
            return rc
        if opts.get("display"):
            bad = [d for d in opts["display"] if d not in render.DISPLAY_SECTIONS]
            if bad:
                raise Usage(BAD_COMBO)
        o.p(render.query_xml(state, gpus) if opts.get("xml") else render.query_text(state, gpus,
                                                                                   opts.get("display")))
        return RC_OK
    if opts.get("xml") or opts.get("display"):
        raise Usage(BAD_COMBO)
    rc = _check_lost(state, o, gpus)
    if rc:
        return rc
    o.p(render.banner(state, gpus))
    return RC_OK


def main(argv=None, euid=None):
    """Entry point: behave like `nvidia-smi ARGV`; returns the exit code."""
    if argv is None:
        argv = sys.argv[1:]
    if euid is None:
        euid = os.geteuid()
    o = Out()
    rc = run(list(argv), euid, o)
    try:
        sys.stdout.write("".join(o.out))
        sys.stdout.flush()
        if o.err:
            sys.stderr.write("".join(o.err))
            sys.stderr.flush()
    except BrokenPipeError:
        pass
    return rc
