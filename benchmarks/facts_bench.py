#!/usr/bin/env python3
"""Time dgxops.fleet.nvidia_smi_facts against bare nvidia-smi calls (queries only).

Usage (on a GPU node, ansible-core importable, the checkout's .collections on PYTHONPATH):

    PYTHONPATH=.collections python3 benchmarks/facts_bench.py --repeat 30 [--json out.json]

Prints median/min/max milliseconds of:
  bare-index       nvidia-smi --query-gpu=index --format=csv,noheader
  bare-same        nvidia-smi with exactly the module's default query
  gather-smi       the module's default subset, in process (the work the module does
                   after Python has started), backend nvidia-smi
  gather-nvml      the same through NVML (nvidia-ml-py), when importable
  module-process   the whole module as Ansible runs it (new Python process + imports),
                   backend nvidia-smi and backend auto
and the ratios gather-smi / bare-same and gather-smi / bare-index.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from ansible.module_utils import basic
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi as smi
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P


def stats(samples):
    ms = [s * 1000.0 for s in samples]
    return {"median_ms": round(statistics.median(ms), 1), "min_ms": round(min(ms), 1),
            "max_ms": round(max(ms), 1), "n": len(ms)}


def time_argv(argv, repeat, env=None):
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        samples.append(time.perf_counter() - start)
    return samples


def make_module():
    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": {}}).encode()  # pylint: disable=protected-access
    if hasattr(basic, "_ANSIBLE_PROFILE"):
        basic._ANSIBLE_PROFILE = "legacy"  # pylint: disable=protected-access
    return basic.AnsibleModule(argument_spec={}, supports_check_mode=True)


def time_gather(module, backend, repeat):
    samples, facts = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        facts = smi.gather(module, {"min", "gpus"}, backend=backend)
        samples.append(time.perf_counter() - start)
    return samples, facts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", help="write all figures and the facts returned here")
    args = parser.parse_args()
    env = dict(os.environ, LC_ALL="C", LANG="C")
    fields = ",".join(P.FIELDS_GPUS)
    out = {"repeat": args.repeat, "fields": fields}

    # warm-up (first NVML init after idle is slower)
    time_argv(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], 3, env)
    out["bare-index"] = stats(time_argv(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], args.repeat, env))
    out["bare-same"] = stats(time_argv(["nvidia-smi", "--query-gpu=" + fields, "--format=csv,nounits"], args.repeat, env))
    module = make_module()
    samples, facts = time_gather(module, "nvidia-smi", args.repeat)
    out["gather-smi"] = stats(samples)
    out["facts-smi"] = facts
    if smi.import_pynvml() is not None:
        samples, facts_nvml = time_gather(module, "nvml", args.repeat)
        out["gather-nvml"] = stats(samples)
        out["facts-nvml"] = facts_nvml
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("nvidia-smi", "auto"):
            argsfile = os.path.join(tmp, "args-%s.json" % backend)
            with open(argsfile, "w") as handle:
                json.dump({"ANSIBLE_MODULE_ARGS": {"backend": backend}}, handle)
            argv = [sys.executable, "-m", "ansible_collections.dgxops.fleet.plugins.modules.nvidia_smi_facts", argsfile]
            out["module-process-%s" % backend] = stats(time_argv(argv, max(5, args.repeat // 3), env))
    out["ratio gather-smi/bare-same"] = round(out["gather-smi"]["median_ms"] / out["bare-same"]["median_ms"], 3)
    out["ratio gather-smi/bare-index"] = round(out["gather-smi"]["median_ms"] / out["bare-index"]["median_ms"], 3)
    if "gather-nvml" in out:
        out["ratio gather-nvml/bare-index"] = round(out["gather-nvml"]["median_ms"] / out["bare-index"]["median_ms"], 3)
    for key in sorted(k for k in out if k.startswith(("bare", "gather", "module"))):
        s = out[key]
        print("%-28s median %7.1f ms  min %7.1f  max %7.1f  (n=%d)" % (key, s["median_ms"], s["min_ms"], s["max_ms"], s["n"]))
    for key in sorted(k for k in out if k.startswith("ratio")):
        print("%-28s %.3f" % (key, out[key]))
    print("commands in the default subset:", [c["argv"][-2:] for c in out["facts-smi"]["collection"]["commands"]])
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
