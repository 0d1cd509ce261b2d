"""Verify the facts scenario on simulated DGX H100 and DGX Spark nodes (testinfra, docker
backend): GPU facts read through dgxops.fleet.nvidia_smi_facts itself, and the driver doctor's
verdict on an injected "driver not loaded" fault (cleared again after)."""

import re

import pytest


def name_of(host):
    return host.backend.get_hostname()


def gpu_facts(host, subset="default"):
    result = host.ansible("dgxops.fleet.nvidia_smi_facts", "gather_subset=%s" % subset, check=False)
    assert not result.get("failed"), result
    return result["ansible_facts"]["nvidia_smi"]


def test_h100_facts_with_mig_and_topology(host):
    if name_of(host) != "facts-h100":
        pytest.skip("DGX H100 only")
    facts = gpu_facts(host, "default,mig,topology")
    assert facts["gpu_count"] == 8
    assert facts["model_family"] == "h100"
    assert facts["mig_capable"] and facts["nvswitch"] and not facts["unified_memory"]
    assert {g["name"] for g in facts["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    assert len(facts["topology"]["nvlink_pairs"]) == 28
    assert facts["topology"]["nvlink_pairs"][0] == {"a": 0, "b": 1, "links": 18}
    assert [p["name"] for p in facts["gpus"][0]["mig_profiles"] if p["id"] == 19] == ["1g.10gb"]
    assert facts["health"]["ok"]


def test_cuda_version_read_through_libcuda_without_a_process(host):
    """As on a real node: libcuda.so.1 (the driver package's, here the simulator's stand-in)
    answers cuDriverGetVersion, so the default facts run one nvidia-smi, not two."""
    if name_of(host) != "facts-h100":
        pytest.skip("DGX H100 only")
    facts = gpu_facts(host)
    assert (facts["cuda_version"], facts["cuda_version_source"]) == ("13.0", "libcuda")
    argvs = [c["argv"] for c in facts["collection"]["commands"]]
    assert len(argvs) == 1 and argvs[0][-2].startswith("--query-gpu="), argvs
    link = host.file("/usr/lib/%s-linux-gnu/libcuda.so.1" % host.check_output("uname -m"))
    assert link.is_symlink and link.linked_to.endswith("/libcuda.so.%s" % facts["driver_version"])
    # nvidia-smi's own header agrees with what libcuda answered
    assert re.search(r"CUDA (UMD )?Version: 13\.0 ", host.check_output("nvidia-smi"))


def test_spark_facts_report_unified_memory(host):
    if name_of(host) != "facts-spark":
        pytest.skip("DGX Spark only")
    facts = gpu_facts(host, "default,mig,topology")
    assert facts["gpu_count"] == 1
    assert facts["model_family"] == "gb10"
    assert facts["unified_memory"] and not facts["mig_capable"]
    assert facts["gpus"][0]["memory_total_mib"] is None


def test_doctor_names_the_cause_when_the_driver_is_not_loaded(host):
    if name_of(host) != "facts-h100":
        pytest.skip("DGX H100 only")
    host.run_expect([0], "dgxops-sim fault set driver-not-loaded")
    try:
        doctor = host.ansible("dgxops.fleet.nvidia_driver_doctor", check=False)
        broken = host.ansible("dgxops.fleet.nvidia_smi_facts", check=False)
    finally:
        host.run_expect([0], "dgxops-sim fault clear")
    assert doctor["verdict"]["status"] == "broken"
    assert doctor["verdict"]["check"] == "kernel_module"
    assert doctor["verdict"]["fix"]
    assert not broken.get("failed"), broken
    assert broken["ansible_facts"]["nvidia_smi"]["health"]["ok"] is False
    assert broken["ansible_facts"]["nvidia_smi"]["health"]["code"] == "driver_not_loaded"
    assert gpu_facts(host)["health"]["ok"]  # the fault is cleared
