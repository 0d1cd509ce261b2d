# -*- coding: utf-8 -*-
"""Tenant CPU/memory placement from GPU affinity (validate_tenant_gpu_affinity, validate_tenant_isolation)."""

import os

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as nsp
from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_tenant_gpu_affinity as vga
from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_tenant_isolation as vti

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def facts_from_topo(text):
    """The gpus rows the facts module builds from `nvidia-smi topo -m` (cpu_affinity, numa_node)."""
    topo = nsp.parse_topo(text)
    return [{"index": int(label[3:]), "cpu_affinity": topo["cpu_affinity"][label],
             "numa_node": topo["numa_affinity"][label]} for label in topo["gpus"]]


@pytest.fixture(scope="module")
def a100_facts():
    """The simulator's DGX A100 topology (GPU pairs on NUMA nodes 3, 1, 7, 5)."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from dgxops.sim.fakesmi import render, state
    return facts_from_topo(render.topo_matrix(state.new_state("dgx-a100-80gb", "550.163.01", seed="t")))


def tenants(*specs):
    res = vti.validate({"tenant_isolation_tenants": list(specs)})
    assert res.ok, res.errors
    return res.normalized["tenants"]


def test_cpu_list_helpers():
    assert vga.expand("0-3,8, 10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert vga.compact({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert vga.compact(set(range(0, 56)) | set(range(112, 168)) | set(range(56, 112)) | set(range(168, 224))) == "0-223"
    with pytest.raises(ValueError):
        vga.expand("3-1")


def test_placement_from_the_facts_of_a_dgx_a100(a100_facts):
    res = vga.validate({"tenants": tenants({"name": "alpha", "gpus": [0, 1]}, {"name": "beta", "gpus": [5, 2]},
                                           {"name": "plain", "cpu_quota": "100%"}),
                        "gpu_facts": a100_facts, "host": "dgx1"})
    assert res.ok, res.errors
    assert res.normalized["source"] == "ansible_facts.nvidia_smi.gpus"
    assert res.normalized["tenants"] == {
        "alpha": {"gpus": [0, 1], "allowed_cpus": "48-63,176-191", "allowed_memory_nodes": "3",
                  "properties": ["AllowedCPUs=48-63,176-191", "AllowedMemoryNodes=3"]},
        "beta": {"gpus": [2, 5], "allowed_cpus": "16-31,112-127,144-159,240-255", "allowed_memory_nodes": "1,7",
                 "properties": ["AllowedCPUs=16-31,112-127,144-159,240-255", "AllowedMemoryNodes=1,7"]},
    }


def test_override_wins_and_a_missing_numa_node_warns(a100_facts):
    override = [{"index": 0, "cpu_affinity": "0-3", "numa_node": 0}, {"index": 1, "cpu_affinity": "4-7", "numa_node": None}]
    res = vga.validate({"tenants": tenants({"name": "alpha", "gpus": [0, 1]}), "gpu_facts": a100_facts,
                        "tenant_isolation_gpu_affinity": override})
    assert res.ok, res.errors
    assert res.normalized["tenants"]["alpha"]["properties"] == ["AllowedCPUs=0-7", "AllowedMemoryNodes=0"]
    assert res.normalized["source"] == "tenant_isolation_gpu_affinity"
    assert any("no NUMA node for GPU(s) 1" in w for w in res.warnings)


@pytest.mark.parametrize("config, message", [
    ({"gpu_facts": []},
     "tenant_isolation_tenants[alpha].gpus: invalid value [0, 9]; allowed: GPU indexes whose CPU/NUMA affinity is known, "
     "but dgx1 has none: run dgxops.fleet.nvidia_smi_facts with gather_subset [default, topology]"),
    # facts without the topology subset carry no affinity: the same error
    ({"gpu_facts": [{"index": 0, "uuid": "GPU-x"}]}, "but dgx1 has none"),
    ({"gpu_facts": "A100"}, "but dgx1 has none"),
    ({"tenant_isolation_gpu_affinity": [{"index": 0, "cpu_affinity": "0-3", "numa_node": 0}]},
     "tenant_isolation_tenants[alpha].gpus: invalid value [9]; allowed: GPU indexes of dgx1 (from tenant_isolation_gpu_affinity): 0"),
    ({"tenant_isolation_gpu_affinity": [{"index": 0, "cpu_affinity": "zero", "numa_node": 0}]},
     "tenant_isolation_gpu_affinity[0].cpu_affinity: invalid value 'zero'; allowed: a CPU list such as 0-55,112-167"),
    ({"tenant_isolation_gpu_affinity": [{"index": "0", "cpu_affinity": "0", "numa_node": 0}]},
     "tenant_isolation_gpu_affinity[0].index: invalid value '0'; allowed: a GPU index"),
    ({"tenant_isolation_gpu_affinity": [{"index": 0, "cpu_affinity": "N/A", "numa_node": 0},
                                        {"index": 9, "cpu_affinity": "1", "numa_node": 0}]},
     "tenant_isolation_tenants[alpha].gpus: invalid value [0]; allowed: GPUs with a CPU affinity"),
])
def test_errors_name_the_variable_value_and_allowed(config, message):
    res = vga.validate(dict(config, tenants=tenants({"name": "alpha", "gpus": [9, 0]}), host="dgx1"))
    assert any(message in e for e in res.errors), res.errors


@pytest.mark.parametrize("tenant, message", [
    ({"name": "a", "gpus": [0], "numa_nodes": [0]}, "tenant_isolation_tenants[a].gpus: invalid value [0]; allowed: either gpus or numa_nodes, not both"),
    ({"name": "a", "gpus": [0], "allowed_cpus": "0-3"}, "allowed: either gpus or allowed_cpus, not both"),
    ({"name": "a", "gpus": [0], "allowed_memory_nodes": "0"}, "allowed: either gpus or allowed_memory_nodes, not both"),
    ({"name": "a", "gpus": []}, "tenant_isolation_tenants[a].gpus: invalid value []; allowed: a non-empty list of GPU indexes"),
    ({"name": "a", "gpus": "0-3"}, "tenant_isolation_tenants[a].gpus: invalid value '0-3'; allowed: a non-empty list"),
    ({"name": "a", "gpus": [True]}, "tenant_isolation_tenants[a].gpus: invalid value [True]"),
])
def test_tenant_gpus_key_is_validated(tenant, message):
    res = vti.validate({"tenant_isolation_tenants": [tenant]})
    assert message in res.errors[0] if res.errors else False, res.errors


def test_gpus_need_cgroup_v2_and_are_normalised():
    (tenant,) = tenants({"name": "a", "gpus": [3, 1, 3]})
    assert tenant["gpus"] == [1, 3]
    assert tenant["v2_only"] == ["gpus"]
    assert tenant["properties"] == []


def test_the_simulated_dgx_models_have_real_affinities():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "src"))
    from dgxops.sim.fakesmi import render, state
    h100 = facts_from_topo(render.topo_matrix(state.new_state("dgx-h100", "580.95.05", seed="t")))
    assert [(g["cpu_affinity"], g["numa_node"]) for g in h100] == [("0-55,112-167", 0)] * 4 + [("56-111,168-223", 1)] * 4
