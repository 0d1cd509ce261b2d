"""mig_profiles: the controller's per-model MIG tables, checked against a real capture and the simulator."""

import os

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_layout as ml
from ansible_collections.dgxops.fleet.plugins.plugin_utils import mig_profiles
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as nsp
from dgxops.sim.fakesmi import models as sim_models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
CAPTURE = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "device-h200")


def test_h200_table_equals_the_real_capture():
    with open(os.path.join(CAPTURE, "mig-lgip.txt")) as f:
        lgip = nsp.parse_mig_lgip(f.read())
    with open(os.path.join(CAPTURE, "mig-lgipp.txt")) as f:
        lgipp = nsp.parse_mig_lgipp(f.read())
    assert lgip and lgipp
    assert mig_profiles.table("h200") == ml.profile_table(lgip, lgipp, 0)


@pytest.mark.parametrize("model, sim_table", [
    ("a100-40gb", sim_models.MIG_A100_40), ("a100-80gb", sim_models.MIG_A100_80),
    ("h100", sim_models.MIG_H100), ("h200", sim_models.MIG_H200)])
def test_tables_match_the_simulator(model, sim_table):
    ours = mig_profiles.table(model)
    theirs = {pid: {"name": p["name"], "max": p["max"], "starts": list(p["placements"]), "size": p["mem_slots"]}
              for pid, p in sim_table.items()}
    assert {pid: {k: p[k] for k in ("name", "max", "starts", "size")} for pid, p in ours.items()} == theirs


@pytest.mark.parametrize("family, mib, key", [
    ("a100", 40960, "a100-40gb"), ("a100", 81920, "a100-80gb"), ("h100", 81559, "h100"),
    ("h200", 143771, "h200"), ("gb10", None, None), (None, None, None)])
def test_model_key(family, mib, key):
    assert mig_profiles.model_key(family, mib) == key


def test_table_from_facts_prefers_the_gpu_rows():
    gpu = {"index": 3, "mig_profiles": [{"name": "1g.10gb", "id": 19, "instances_total": 7}],
           "mig_placements": [{"profile_id": 19, "starts": [0, 1], "size": 1}]}
    assert mig_profiles.table_from_facts(gpu) == {
        19: {"id": 19, "name": "1g.10gb", "max": 7, "starts": [0, 1], "size": 1, "slices": 1}}
    assert mig_profiles.table_from_facts({"index": 0, "mig_profiles": [], "mig_placements": []}) is None
