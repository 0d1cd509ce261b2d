"""The spark_rapids discovery script's code (module_utils/gpu_discovery.py) on real nvidia-smi captures."""

import os
import sys

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import gpu_discovery as D
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_nvidia_smi_parse import device, section  # noqa: E402

H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200_MIG = "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
H200 = "linux-x86_64__nvidia-h200__590.48.01.txt"


def query_of(name):
    """The discovery query (index,uuid,mig.mode.current, csv,noheader) cut from the capture's full --query-gpu."""
    cmd, body = section(name, "nvidia-smi --query-gpu=")
    fields = cmd.split("=", 1)[1].split(" ", 1)[0].split(",")
    parsed = P.parse_csv(body, fields, header=True)
    assert parsed["rows"] and not parsed["errors"]
    return "".join(", ".join(row[f] for f in D.QUERY_FIELDS) + "\n" for row in parsed["rows"])


def listing_of(name):
    return section(name, "nvidia-smi -L")[1]


def test_whole_gpu_is_addressed_by_index():
    found, warnings = D.devices(query_of(H200), listing_of(H200))
    assert [(d["address"], d["mig"]) for d in found] == [("0", False)]
    assert warnings == []


@pytest.mark.parametrize("name,profiles", [
    (H100_MIG, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
    (H200_MIG, ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]),
])
def test_mig_gpu_contributes_its_mig_devices_as_ordinals(name, profiles):
    found, _warnings = D.devices(query_of(name), listing_of(name))
    assert [d["profile"] for d in found] == profiles
    assert [d["address"] for d in found] == [str(i) for i in range(len(profiles))]
    assert all(d["uuid"].startswith("MIG-") for d in found)
    by_uuid, _w = D.devices(query_of(name), listing_of(name), mig_address="uuid")
    assert [d["address"] for d in by_uuid] == [d["uuid"] for d in found]


def test_own_h200_capture_list():
    body, _rc = device("list.txt")
    query = "0, GPU-04873e0c-4559-0cdc-493c-07b122c2d475, Disabled\n"
    found, _w = D.devices(query, body)
    assert [(d["address"], d["uuid"]) for d in found] == [("0", "GPU-04873e0c-4559-0cdc-493c-07b122c2d475")]


def test_mig_gpu_without_devices_is_skipped_with_a_warning_and_none_at_all_is_an_error():
    listing = listing_of(H100_MIG).split("\n  MIG", 1)[0] + "\n"  # the GPU line only
    with pytest.raises(D.DiscoveryError, match="no usable GPU or MIG device found"):
        D.devices(query_of(H100_MIG), listing)
    query = query_of(H100_MIG) + "1, GPU-11111111-2222-3333-4444-555555555555, Disabled\n"
    found, warnings = D.devices(query, listing)
    assert [d["address"] for d in found] == ["1"]
    assert warnings == ["GPU 0 is in MIG mode but has no MIG devices; skipped"]


def test_unreadable_query_is_an_error():
    with pytest.raises(D.DiscoveryError, match="unexpected nvidia-smi --query-gpu output"):
        D.devices("0, GPU-x\n", "")


@pytest.mark.parametrize("name,needed", [(H200, False), (H100_MIG, True), (H200_MIG, True)])
def test_listing_is_needed_only_with_a_gpu_in_mig_mode(name, needed):
    query = query_of(name)
    assert D.needs_listing(query) is needed
    if not needed:
        # what the script does then: the same devices without nvidia-smi -L
        assert D.devices(query, "") == D.devices(query, listing_of(name))


@pytest.mark.parametrize("query", [
    "",  # no GPU: devices() reports it
    "0, GPU-x\n",  # unreadable: devices() reports it
    "0, GPU-04873e0c-4559-0cdc-493c-07b122c2d475, [N/A]\n1, GPU-11111111-2222-3333-4444-555555555555, Enabled\n",
])
def test_listing_is_read_when_the_query_cannot_rule_it_out(query):
    assert D.needs_listing(query) is True


def test_gpus_without_mig_support_need_no_listing():
    # an L40S reports [N/A] for mig.mode.current: it has no MIG devices to list
    assert D.needs_listing("0, GPU-04873e0c-4559-0cdc-493c-07b122c2d475, [N/A]\n") is False
