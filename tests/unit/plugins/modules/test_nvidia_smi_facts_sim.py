# -*- coding: utf-8 -*-
"""nvidia_smi_facts and nvidia_driver_doctor against the simulated nodes (no Docker).

A tiny ``nvidia-smi`` wrapper on PATH execs ``python -m dgxops.sim.fakesmi`` with the
node state in a temp dir; the modules run through the real ``run_command`` and the
real coreutils ``timeout``.  The simulator is the oracle: nothing here imports it.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible.module_utils import basic
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_driver_doctor, nvidia_smi_facts

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SRC = os.path.join(ROOT, "src")

pytestmark = pytest.mark.skipif(
    not os.path.isfile(os.path.join(SRC, "dgxops", "sim", "fakesmi", "__main__.py")),
    reason="simulator package dgxops.sim.fakesmi is absent (src/dgxops/sim/fakesmi/__main__.py)")

DRIVER = "580.95.05"


class Done(Exception):
    pass


@pytest.fixture
def node(tmp_path, monkeypatch):
    """Returns init(model, driver) -> admin(*args); nvidia-smi on PATH is the simulator."""
    state = tmp_path / "state"
    state.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "nvidia-smi"
    wrapper.write_text("#!/bin/sh\nexec %s -m dgxops.sim.fakesmi \"$@\"\n" % sys.executable)
    wrapper.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("DGXOPS_SIM_STATE_DIR", str(state))
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ["PATH"])

    def admin(*args):
        return subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi.admin"] + list(args), check=True,
                              capture_output=True, text=True, timeout=60).stdout

    def init(model, driver=DRIVER):
        admin("init", "--model", model, "--driver", driver)
        return admin
    init.wrapper = str(wrapper)
    return init


def run_module(monkeypatch, mod, args):
    def exit_json(self, **kwargs):
        raise Done(kwargs)

    def fail_json(self, **kwargs):
        kwargs["failed"] = True
        raise Done(kwargs)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    try:
        mod.main()
    except Done as exc:
        return exc.args[0]
    raise AssertionError("module did not exit")


def facts_of(monkeypatch, args):
    res = run_module(monkeypatch, nvidia_smi_facts, dict({"backend": "nvidia-smi"}, **args))
    return res, res["ansible_facts"]["nvidia_smi"]


EXPECT = {
    "dgx-a100-40gb": dict(count=8, family="a100", name="NVIDIA A100-SXM4-40GB", mem=40960, pmin=100.0, pmax=400.0,
                          mig=True, unified=False, nvswitch=True, link=12, p19="1g.5gb", p0="7g.40gb"),
    "dgx-a100-80gb": dict(count=8, family="a100", name="NVIDIA A100-SXM4-80GB", mem=81920, pmin=100.0, pmax=400.0,
                          mig=True, unified=False, nvswitch=True, link=12, p19="1g.10gb", p0="7g.80gb"),
    "dgx-h100": dict(count=8, family="h100", name="NVIDIA H100 80GB HBM3", mem=81559, pmin=200.0, pmax=700.0,
                     mig=True, unified=False, nvswitch=True, link=18, p19="1g.10gb", p0="7g.80gb"),
    "dgx-h200": dict(count=8, family="h200", name="NVIDIA H200", mem=143771, pmin=200.0, pmax=700.0,
                     mig=True, unified=False, nvswitch=True, link=18, p19="1g.18gb", p0="7g.141gb"),
    "dgx-spark": dict(count=1, family="gb10", name="NVIDIA GB10", mem=None, pmin=None, pmax=None,
                      mig=False, unified=True, nvswitch=False, link=None, p19=None, p0=None),
}


@pytest.mark.parametrize("model", sorted(EXPECT))
def test_every_model_all_subsets(node, monkeypatch, model):
    node(model)
    exp = EXPECT[model]
    res, facts = facts_of(monkeypatch, {"gather_subset": ["all"], "expected_gpu_count": exp["count"]})
    assert "failed" not in res and res["changed"] is False
    assert facts["health"]["ok"] is True, facts["health"]
    assert facts["gpu_count"] == exp["count"]
    assert facts["model_family"] == exp["family"]
    assert facts["driver_version"] == DRIVER and facts["driver_branch"] == 580
    assert facts["cuda_version"] == "13.0"
    assert facts["mig_capable"] is exp["mig"]
    assert facts["unified_memory"] is exp["unified"]
    assert facts["nvswitch"] is exp["nvswitch"]
    gpu = facts["gpus"][0]
    assert gpu["name"] == exp["name"]
    assert gpu["memory_total_mib"] == exp["mem"]
    assert gpu["power_min_limit_w"] == exp["pmin"] and gpu["power_max_limit_w"] == exp["pmax"]
    assert sorted(g["index"] for g in facts["gpus"]) == list(range(exp["count"]))
    assert len({g["uuid"] for g in facts["gpus"]}) == exp["count"]
    pairs = facts["topology"]["nvlink_pairs"]
    if exp["link"]:
        assert len(pairs) == exp["count"] * (exp["count"] - 1) // 2
        assert {p["links"] for p in pairs} == {exp["link"]}
        assert gpu["nvlink_peers"] == {i: exp["link"] for i in range(1, 8)}
        profiles = {p["id"]: p["name"] for p in gpu["mig_profiles"]}
        assert profiles[19] == exp["p19"] and profiles[0] == exp["p0"]
        assert len(gpu["mig_placements"]) == 7
    else:
        assert pairs == []
        assert gpu["mig_profiles"] == []
        assert gpu["unavailable"]["memory_total_mib"] in ("not_available", "not_supported")


def test_dgx_h100_must_show(node, monkeypatch):
    """Issue #4: 8 GPUs, NVLink pairs from the topology, MIG capable, the H100 profiles."""
    node("dgx-h100")
    _res, facts = facts_of(monkeypatch, {"gather_subset": ["default", "topology", "mig"]})
    assert facts["gpu_count"] == 8
    assert facts["mig_capable"] is True
    assert len(facts["topology"]["nvlink_pairs"]) == 28
    assert facts["topology"]["nvlink_pairs"][0] == {"a": 0, "b": 1, "links": 18}
    assert facts["topology"]["numa_affinity"]["GPU4"] == 1
    profiles = [(p["id"], p["name"], p["instances_total"], p["sm"]) for p in facts["gpus"][7]["mig_profiles"]]
    assert profiles == [(19, "1g.10gb", 7, 16), (20, "1g.10gb+me", 1, 16), (15, "1g.20gb", 4, 26),
                        (14, "2g.20gb", 3, 32), (9, "3g.40gb", 2, 60), (5, "4g.40gb", 1, 64), (0, "7g.80gb", 1, 132)]


def test_default_subset_is_one_nvidia_smi_process_on_sim(node, monkeypatch):
    node("dgx-h200")
    _res, facts = facts_of(monkeypatch, {})
    cmds = facts["collection"]["commands"]
    smi_calls = [c for c in cmds if not c["argv"][-1] == "--version"]
    assert len(smi_calls) == 1 and smi_calls[0]["argv"][-2].startswith("--query-gpu=")
    # no libcuda on this machine: the CUDA version costs one extra --version call
    assert facts["cuda_version_source"] in ("libcuda", "nvidia-smi --version")
    assert facts["gpus"][0]["pci_bus_id"].startswith("00000000:")


def test_mig_enabled_instances_and_devices(node, monkeypatch):
    admin = node("dgx-h100")
    subprocess.run(["nvidia-smi", "-i", "0", "-mig", "1"], check=True, capture_output=True, timeout=60)
    subprocess.run(["nvidia-smi", "mig", "-i", "0", "-cgi", "9,14", "-C"], check=True, capture_output=True, timeout=60)
    assert admin  # the node exists
    _res, facts = facts_of(monkeypatch, {"gather_subset": ["default", "mig"]})
    gpu0 = facts["gpus"][0]
    assert gpu0["mig_mode_current"] == "Enabled"
    assert facts["mig_enabled"] is True
    assert sorted(i["name"] for i in gpu0["mig_instances"]) == ["2g.20gb", "3g.40gb"]
    assert sorted(d["profile"] for d in gpu0["mig_devices"]) == ["2g.20gb", "3g.40gb"]
    assert facts["gpus"][1]["mig_instances"] == []


@pytest.mark.parametrize("fault,code,rc", [("driver-not-loaded", "driver_not_loaded", 9), ("gpu-lost", "gpu_lost", 15)])
def test_faults_report_health_without_failing(node, monkeypatch, fault, code, rc):
    admin = node("dgx-h100")
    admin("fault", "set", fault)
    res, facts = facts_of(monkeypatch, {"gather_subset": ["all"]})
    assert "failed" not in res
    assert facts["health"]["ok"] is False
    assert facts["health"]["code"] == code
    assert facts["health"]["rc"] == rc
    assert facts["health"]["fix"]
    res, _facts = facts_of(monkeypatch, {"require_gpus": True})
    assert res["failed"] is True and res["rc"] == rc
    assert "Fix:" in res["msg"]


def test_hang_is_killed_by_the_timeout(node, monkeypatch):
    admin = node("dgx-h100")
    admin("fault", "set", "hang")
    res, facts = facts_of(monkeypatch, {"timeout": 2})
    assert "failed" not in res
    assert facts["health"]["code"] == "timeout"
    assert facts["health"]["rc"] in (124, 137)
    assert facts["collection"]["duration_ms"] < 15000


def test_doctor_names_cause_and_fix_when_driver_not_loaded(node, monkeypatch, tmp_path):
    """Issue #4 must-show: the doctor names the cause and the fix instead of a stack trace."""
    admin = node("dgx-h100")
    admin("fault", "set", "driver-not-loaded")
    proc = tmp_path / "proc"
    (proc / "driver").mkdir(parents=True)
    (proc / "modules").write_text("ext4 1015808 1 - Live 0x0000000000000000\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    log = tmp_path / "kern.log"
    log.write_text("[    2.1] nvidia: module verification failed: signature and/or required key missing\n")
    res = run_module(monkeypatch, nvidia_driver_doctor, {
        "proc_root": str(proc), "dev_root": str(dev), "modules_root": str(tmp_path / "modules"),
        "sys_root": str(tmp_path / "sys"), "kernel_log": str(log), "timeout": 20})
    assert "failed" not in res
    verdict = res["verdict"]
    assert verdict["status"] == "broken"
    assert verdict["check"] == "kernel_module"
    assert "nvidia kernel module is not loaded and none is built for kernel" in verdict["cause"]
    assert "exit 9" in verdict["cause"]
    assert "linux-headers-" in verdict["fix"] and "modprobe nvidia" in verdict["fix"]
    by = {f["check"]: f for f in res["findings"]}
    assert by["nvidia_smi"]["status"] == "fail"
    assert any("couldn't communicate with the NVIDIA driver" in e for e in by["nvidia_smi"]["evidence"])
    assert by["device_nodes"]["status"] == "fail"


def test_doctor_healthy_sim_node_in_a_container_like_root(node, monkeypatch, tmp_path):
    """nvidia-smi answers but /proc/modules has no nvidia (a container): warnings, not a broken verdict."""
    node("dgx-h200")
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "modules").write_text("")
    log = tmp_path / "kern.log"
    log.write_text("")
    res = run_module(monkeypatch, nvidia_driver_doctor, {
        "proc_root": str(proc), "dev_root": str(tmp_path), "modules_root": str(tmp_path),
        "sys_root": str(tmp_path), "kernel_log": str(log), "expected_gpu_count": 8})
    by = {f["check"]: f for f in res["findings"]}
    assert by["nvidia_smi"]["status"] == "ok" and "8 GPU(s) (h200)" in by["nvidia_smi"]["message"]
    assert by["kernel_module"]["status"] == "warn"
    assert by["device_nodes"]["status"] == "warn"
    assert by["fabric_manager"]["status"] == "skip"  # switches not visible here: fabric state only
    assert res["verdict"]["status"] == "degraded"


@pytest.mark.skipif(shutil.which("ansible", path=os.path.join(ROOT, ".venv", "bin")) is None,
                    reason="ansible CLI not installed in .venv")
def test_ansible_adhoc_on_simulated_h100(node, tmp_path):
    """End to end: `ansible localhost -m dgxops.fleet.nvidia_smi_facts` with the checkout's ansible.cfg."""
    node("dgx-h100")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), LC_ALL="C.UTF-8",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "at"), ANSIBLE_HOME=str(tmp_path / "ah"),
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", "dgxops.fleet.nvidia_smi_facts",
         "-a", "gather_subset=default,topology backend=nvidia-smi", "--check"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    facts = result["ansible_facts"]["nvidia_smi"]
    assert result["changed"] is False
    assert facts["gpu_count"] == 8 and facts["model_family"] == "h100"
    assert len(facts["topology"]["nvlink_pairs"]) == 28
