"""Fleet consistency: reference per group, outliers with what differs (plugin_utils + filter + module helpers)."""

import copy

from ansible_collections.dgxops.fleet.plugins.filter.consistency import consistency_record, fleet_consistency
from ansible_collections.dgxops.fleet.plugins.modules import node_fingerprint
from ansible_collections.dgxops.fleet.plugins.plugin_utils import consistency as C

FACTS = {"kernel": "6.8.0-45-generic",
         "nvidia_smi": {"driver_version": "580.95.05", "kernel_module_flavour": "open", "cuda_version": "13.0",
                        "gpu_count": 2, "health": {"ok": True},
                        "gpus": [{"index": i, "name": "NVIDIA H100 80GB HBM3", "vbios_version": "96.00.99.00.01",
                                  "mig_mode_current": "Disabled", "mig_instances": []} for i in range(2)]}}
FP = {"kernel": "6.8.0-45-generic", "nccl_version": "2.27.7", "topology_signature": "abc",
      "files": {"/etc/nccl.conf": "1" * 64}}


def node(**changes):
    facts, fp = copy.deepcopy(FACTS), copy.deepcopy(FP)
    for key, value in changes.items():
        if key in ("driver_version", "kernel_module_flavour", "cuda_version"):
            facts["nvidia_smi"][key] = value
        elif key == "mig":
            facts["nvidia_smi"]["gpus"][0].update(mig_mode_current="Enabled", mig_instances=value)
        else:
            fp[key] = value
    return {"facts": facts, "fingerprint": fp, "group": "dgx_h100"}


def test_identical_nodes_are_consistent():
    result = fleet_consistency({"a": node(), "b": node(), "c": node()})
    assert result["consistent"] and result["outlier_count"] == 0
    assert result["text"][0].startswith("CONSISTENT: 3 node(s) in 1 group(s)")


def test_the_minority_is_the_outlier_with_what_differs():
    nodes = {"a": node(), "b": node(driver_version="580.82.07", nccl_version="2.26.2"), "c": node(),
             "d": node(files={"/etc/nccl.conf": "2" * 64})}
    result = fleet_consistency(nodes)
    out = result["groups"]["dgx_h100"]["outliers"]
    assert sorted(out) == ["b", "d"] and result["outlier_count"] == 2
    assert out["b"]["driver_version"] == {"title": "driver version", "value": "580.82.07", "expected": "580.95.05"}
    assert out["b"]["nccl_version"]["value"] == "2.26.2"
    assert out["d"]["files"]["differs"] == ["/etc/nccl.conf"]
    text = "\n".join(result["text"])
    assert "INCONSISTENT: 2 of 4" in text and "b: driver version is 580.82.07, the group has 580.95.05" in text
    assert "d: managed files differ: /etc/nccl.conf" in text


def test_groups_are_compared_separately():
    other = node(driver_version="550.163.01", kernel_module_flavour="proprietary")
    other["group"] = "dgx_a100"
    result = fleet_consistency({"a": node(), "b": node(), "x": other})
    assert result["consistent"] and set(result["groups"]) == {"dgx_h100", "dgx_a100"}


def test_mig_layout_is_compared_in_a_compact_form():
    inst = [{"name": "1g.10gb", "profile_id": 19}] * 7
    rec = C.node_record(node(mig=inst)["facts"], FP)
    assert rec["mig_layout"] == "GPU 0: 7 x 1g.10gb"
    result = fleet_consistency({"a": node(), "b": node(), "m": node(mig=inst)})
    assert list(result["groups"]["dgx_h100"]["outliers"]) == ["m"]


def test_record_group_defaults_to_the_smallest_group():
    hv = {"group_names": ["dgx", "dgx_h100", "simulated"], "ansible_facts": FACTS,
          "__dgxops_fingerprint": {"fingerprint": FP}}
    groups = {"dgx": ["a", "b", "c"], "dgx_h100": ["a"], "simulated": ["a", "b", "c"]}
    assert consistency_record(hv, groups)["group"] == "dgx_h100"
    assert consistency_record(dict(hv, dgxops_consistency_group="pool-1"), groups)["group"] == "pool-1"


def test_topology_signature_ignores_the_legend_and_spacing():
    matrix = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-55\nGPU1\tNV18\t X \t0-55\n\nLegend:\n  X    = Self\n"
    spaced = matrix.replace("\t", "   ") + "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    assert node_fingerprint.topology_signature(matrix) == node_fingerprint.topology_signature(spaced)
    assert node_fingerprint.topology_signature(matrix) != node_fingerprint.topology_signature(matrix.replace("NV18", "NV12"))
    assert node_fingerprint.topology_signature("Legend:\n") is None


def test_nccl_library_is_found_by_its_file_name(tmp_path):
    (tmp_path / "libnccl.so.2").write_text("")
    (tmp_path / "libnccl.so.2.27.7").write_text("")
    assert node_fingerprint.find_nccl([str(tmp_path / "missing"), str(tmp_path)]) == ("2.27.7", str(tmp_path / "libnccl.so.2.27.7"))
    assert node_fingerprint.find_nccl([str(tmp_path / "missing")]) == (None, None)
