# Run by dgxops-textfile.service as `/usr/bin/python3 <this file>` (no shebang: the unit names the interpreter).
# Managed by Ansible: dgxops.fleet.monitoring. Local changes are overwritten.
"""Publish what dgxops declared and what the node really runs, for the node exporter's textfile
collector: driver version, power limits (declared vs enforced), SM clocks, MIG layout (declared
vs actual devices), and one ``dgxops_drift`` series per difference.

Usage: dgxops-textfile-collector --declared FILE --output FILE [--nvidia-smi PATH] [--timeout S] [--lib DIR]

Writes OUTPUT atomically (temporary file + rename in the same directory) so the node exporter
never reads half a file. Standard library only (Python 3.9+): nvidia-smi's output is read by the
collection's nvidia_smi_parse.py, which the monitoring role copies to DIR (--lib). Exit 0 when nvidia-smi answered,
1 when it did not (the file then says dgxops_collector_up 0 and keeps the last success time).
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

FIELDS = ["index", "uuid", "name", "driver_version", "power.limit", "power.default_limit",
          "enforced.power.limit", "power.draw", "clocks.sm", "clocks.max.sm", "mig.mode.current"]
LIB_DIR = "/usr/local/lib/dgxops-monitoring"


def esc(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def num(value):
    if value is None or isinstance(value, (int, float)):
        return value  # None: [N/A], [Not Supported]
    try:
        return float(value.strip())
    except ValueError:
        return None


def run(argv, timeout):
    env = dict(os.environ, LC_ALL="C", LANG="C")
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(argv), proc.returncode, (proc.stderr or proc.stdout).strip()[:300]))
    return proc.stdout


def read_gpus(smi, timeout, parse):
    """(GPUs keyed by query field, {gpu index: MIG devices}) through ``parse`` (nvidia_smi_parse)."""
    out = run([smi, "--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits"], timeout)
    parsed, errors = parse.gpus_from_query(out, FIELDS, header=False)
    if errors:
        raise RuntimeError("unexpected nvidia-smi output: %s" % "; ".join(errors))
    gpus = []
    for gpu in parsed:
        row = {}
        for field in FIELDS:
            row[field] = gpu[parse.convert_field(field, "")[0]]
        row["index"] = str(row["index"])
        gpus.append(row)
    mig = {}
    for gpu in parse.parse_list(run([smi, "-L"], timeout)):
        mig[str(gpu["index"])] = len(gpu["mig_devices"])
    return gpus, mig


def declared_mig(declared):
    """{gpu index: (mig enabled, devices)} from the mig role's layout (copied into declared)."""
    out = {}
    for gpu in (declared.get("mig_layout") or {}).get("gpus", []):
        devices = 0
        for gi in gpu.get("instances", []):
            ci = gi.get("compute_instances", 1)
            devices += len(ci) if isinstance(ci, list) else int(ci)
        out[str(gpu.get("index"))] = (bool(gpu.get("mig")), devices)
    return out


def metrics(declared, gpus, mig, now):
    lines = []
    drift = []

    def metric(name, help_text, kind, samples):
        if not samples:
            return
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s %s" % (name, kind))
        for labels, value in samples:
            lab = ",".join('%s="%s"' % (k, esc(v)) for k, v in labels)
            lines.append("%s{%s} %s" % (name, lab, repr(float(value))) if lab else "%s %s" % (name, repr(float(value))))

    driver = (gpus[0]["driver_version"] or "") if gpus else ""
    want_driver = declared.get("driver_version") or ""
    metric("dgxops_driver_info", "Installed NVIDIA driver and the version dgxops declared.", "gauge",
           [((("version", driver), ("declared", want_driver)), 1)])
    if want_driver and driver and not (driver == want_driver or driver.startswith(want_driver + ".")):
        drift.append(("driver_version", "", "declared %s, running %s" % (want_driver, driver)))

    want_power = declared.get("power_limit_watts")
    want_mig = declared_mig(declared)
    per_gpu = {k: [] for k in ("limit", "declared", "default", "enforced", "draw", "sm", "smmax", "mig", "migdev", "migdecl")}
    for g in gpus:
        idx = g["index"]
        lab = (("gpu", idx), ("UUID", g["uuid"]))
        for key, field in (("limit", "power.limit"), ("default", "power.default_limit"),
                           ("enforced", "enforced.power.limit"), ("draw", "power.draw"),
                           ("sm", "clocks.sm"), ("smmax", "clocks.max.sm")):
            v = num(g[field])
            if v is not None:
                per_gpu[key].append((lab, v))
        enforced = num(g["enforced.power.limit"])
        if want_power is not None:
            per_gpu["declared"].append((lab, float(want_power)))
            if enforced is not None and abs(enforced - float(want_power)) >= 1:
                drift.append(("power_limit", idx, "declared %g W, enforced %g W" % (float(want_power), enforced)))
        mode = g["mig.mode.current"] or "[N/A]"
        if mode in ("Enabled", "Disabled"):
            per_gpu["mig"].append((lab, 1 if mode == "Enabled" else 0))
            per_gpu["migdev"].append((lab, mig.get(idx, 0)))
        if idx in want_mig:
            want_on, want_devices = want_mig[idx]
            per_gpu["migdecl"].append((lab, want_devices))
            if (mode == "Enabled") != want_on:
                drift.append(("mig_mode", idx, "declared %s, current %s" % ("Enabled" if want_on else "Disabled", mode)))
            elif want_on and mig.get(idx, 0) != want_devices:
                drift.append(("mig_devices", idx, "declared %d, present %d" % (want_devices, mig.get(idx, 0))))

    metric("dgxops_gpu_power_limit_watts", "Software power limit (nvidia-smi power.limit).", "gauge", per_gpu["limit"])
    metric("dgxops_gpu_power_limit_declared_watts", "Power limit dgxops declared (gpu_tuning).", "gauge", per_gpu["declared"])
    metric("dgxops_gpu_power_default_limit_watts", "Default power limit of the GPU.", "gauge", per_gpu["default"])
    metric("dgxops_gpu_power_enforced_limit_watts", "Enforced power limit (lowest of all limiters).", "gauge", per_gpu["enforced"])
    metric("dgxops_gpu_power_draw_watts", "Power draw.", "gauge", per_gpu["draw"])
    metric("dgxops_gpu_sm_clock_mhz", "Current SM clock.", "gauge", per_gpu["sm"])
    metric("dgxops_gpu_sm_clock_max_mhz", "Maximum SM clock.", "gauge", per_gpu["smmax"])
    metric("dgxops_gpu_mig_mode", "MIG mode (1 enabled, 0 disabled).", "gauge", per_gpu["mig"])
    metric("dgxops_gpu_mig_devices", "MIG devices present (nvidia-smi -L).", "gauge", per_gpu["migdev"])
    metric("dgxops_gpu_mig_devices_declared", "MIG devices in the layout the mig role applied.", "gauge", per_gpu["migdecl"])
    metric("dgxops_drift", "1 per setting that differs from what dgxops declared.", "gauge",
           [((("item", item), ("gpu", gpu), ("detail", detail)), 1) for item, gpu, detail in drift])
    metric("dgxops_drift_items", "Number of settings that differ from what dgxops declared.", "gauge", [((), len(drift))])
    return lines


def write_atomic(path, text):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".dgxops-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def last_success(path):
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith("dgxops_collector_last_success_timestamp_seconds "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--declared", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--lib", default=LIB_DIR, help="directory of the copied nvidia_smi_parse.py")
    args = parser.parse_args(argv)
    try:
        with open(args.declared) as fh:
            declared = json.load(fh)
    except (OSError, ValueError) as exc:
        declared, declared_error = {}, str(exc)
    else:
        declared_error = None
        layout = declared.get("mig_layout_path")
        if layout and os.path.exists(layout):
            with open(layout) as fh:
                declared["mig_layout"] = json.load(fh)
    now = time.time()
    error = None
    try:
        sys.path.insert(0, args.lib)
        try:
            parse = importlib.import_module("nvidia_smi_parse")
        except ImportError as exc:
            raise RuntimeError("cannot load nvidia_smi_parse from %s: %s" % (args.lib, exc)) from None
        gpus, mig = read_gpus(args.nvidia_smi, args.timeout, parse)
        lines = metrics(declared, gpus, mig, now)
        success = now
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        error = str(exc)
        lines = []
        success = last_success(args.output)
    head = ["# Managed by dgxops.fleet.monitoring (dgxops-textfile-collector).",
            "# HELP dgxops_collector_up 1 when nvidia-smi answered on the last run.",
            "# TYPE dgxops_collector_up gauge",
            "dgxops_collector_up %d" % (0 if error else 1),
            "# HELP dgxops_collector_declared_ok 1 when the declared-state file was readable.",
            "# TYPE dgxops_collector_declared_ok gauge",
            "dgxops_collector_declared_ok %d" % (0 if declared_error else 1)]
    if success is not None:
        head += ["# HELP dgxops_collector_last_success_timestamp_seconds Unix time of the last successful run.",
                 "# TYPE dgxops_collector_last_success_timestamp_seconds gauge",
                 "dgxops_collector_last_success_timestamp_seconds %s" % repr(float(success))]
    write_atomic(args.output, "\n".join(head + lines) + "\n")
    if error:
        print("dgxops-textfile-collector: %s" % error, file=sys.stderr)
        return 1
    if declared_error:
        print("dgxops-textfile-collector: declared state unreadable: %s" % declared_error, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
