# -*- coding: utf-8 -*-
"""Parsers of plugins/module_utils/nvidia_smi_parse.py on every real capture.

Public captures: tests/fixtures/nvidia-smi/public/*.txt (nvidia_gpu_exporter; each
``# $ nvidia-smi ...`` section holds exact output).  Own captures from the lent H200:
tests/fixtures/nvidia-smi/device-h200/*.txt (``# $ cmd`` first line, ``# rc=N`` last).
"""

import glob
import os

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
PUBLIC = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "public")
DEVICE = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "device-h200")


def sections(name):
    """[(command, body)] of an exporter capture, in file order."""
    out = []
    lines = open(os.path.join(PUBLIC, name)).read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("# $ "):
            cmd = lines[i][4:].rstrip()
            i += 1
            if i < len(lines) and lines[i].startswith("####"):
                i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("####"):
                body.append(lines[i])
                i += 1
            out.append((cmd, "\n".join(body)))
        else:
            i += 1
    return out


def section(name, cmd_prefix, nth=0):
    hits = [(c, b) for c, b in sections(name) if c == cmd_prefix or c.startswith(cmd_prefix + " ") or (cmd_prefix.endswith("=") and c.startswith(cmd_prefix))]
    return hits[nth]


def device(name):
    """Body of an own H200 capture and its exit code."""
    text = open(os.path.join(DEVICE, name)).read()
    body = text.split("\n", 1)[1]
    body, _sep, rc = body.rpartition("\n# rc=")
    return body, int(rc.strip())


CAPTURES = {
    "linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt": {
        "name": "NVIDIA GeForce RTX 2080 SUPER", "bus": "00000000:0C:00.0", "driver": "610.57.04",
        "cuda": "13.3", "memory": 8192, "limit": 250.0, "min": 105.0, "max": 350.0, "mig": None,
        "persistence": False, "family": "geforce", "max_gr": 2145, "max_mem": 7751, "cc": "7.5",
        "fabric": None, "ecc": None, "cpus": "0-23",
    },
    "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt": {
        "name": "NVIDIA H100 80GB HBM3", "bus": "00000000:00:09.0", "driver": "590.48.01",
        "cuda": "13.1", "memory": 81559, "limit": 700.0, "min": 200.0, "max": 700.0, "mig": "Disabled",
        "persistence": True, "family": "h100", "max_gr": 1980, "max_mem": 2619, "cc": "9.0",
        "fabric": "Completed", "ecc": "Enabled", "cpus": "0-19",
    },
    "linux-x86_64__nvidia-h100-mig__590.48.01.txt": {
        "name": "NVIDIA H100 80GB HBM3", "bus": "00000000:00:09.0", "driver": "590.48.01",
        "cuda": "13.1", "memory": 81559, "limit": 700.0, "min": 200.0, "max": 700.0, "mig": "Enabled",
        "persistence": True, "family": "h100", "max_gr": 1980, "max_mem": 2619, "cc": "9.0",
        "fabric": "Completed", "ecc": "Enabled", "cpus": "0-19",
    },
    "linux-x86_64__nvidia-h200-mig__590.48.01.txt": {
        "name": "NVIDIA H200", "bus": "00000000:83:00.0", "driver": "590.48.01",
        "cuda": "13.1", "memory": 143771, "limit": 700.0, "min": 200.0, "max": 700.0, "mig": "Enabled",
        "persistence": True, "family": "h200", "max_gr": 1980, "max_mem": 3201, "cc": "9.0",
        "fabric": "Completed", "ecc": "Enabled", "cpus": "0-23",
    },
    "linux-x86_64__nvidia-h200__590.48.01.txt": {
        "name": "NVIDIA H200", "bus": "00000000:83:00.0", "driver": "590.48.01",
        "cuda": "13.1", "memory": 143771, "limit": 700.0, "min": 200.0, "max": 700.0, "mig": "Disabled",
        "persistence": True, "family": "h200", "max_gr": 1980, "max_mem": 3201, "cc": "9.0",
        "fabric": "Completed", "ecc": "Enabled", "cpus": "0-23",
    },
    "linux-x86_64__nvidia-l40s__595.80.txt": {
        "name": "NVIDIA L40S", "bus": "00000000:01:00.0", "driver": "595.80",
        "cuda": "13.2", "memory": 46068, "limit": 350.0, "min": 100.0, "max": 350.0, "mig": None,
        "persistence": False, "family": "l40s", "max_gr": 2520, "max_mem": 9001, "cc": "8.9",
        "fabric": None, "ecc": "Enabled", "cpus": "0-7",
    },
}


def test_every_public_capture_is_covered():
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(PUBLIC, "*.txt")))
    assert names == sorted(CAPTURES)


# ---------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CAPTURES))
@pytest.mark.parametrize("phase", [0, 1])  # idle, load
def test_query_gpu_csv_on_capture(name, phase):
    exp = CAPTURES[name]
    cmd, body = section(name, "nvidia-smi --query-gpu=", phase)
    fields = cmd.split("=", 1)[1].split(" --format")[0].split(",")
    assert len(fields) > 200  # the exporter asks for every field the driver knows
    gpus, errors = P.gpus_from_query(body, fields)
    assert errors == []
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu["index"] == 0
    assert gpu["name"] == exp["name"]
    assert gpu["uuid"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert gpu["pci_bus_id"] == exp["bus"]
    assert gpu["driver_version"] == exp["driver"]
    assert gpu["memory_total_mib"] == exp["memory"]
    assert gpu["power_limit_w"] == exp["limit"]
    assert gpu["power_enforced_limit_w"] == exp["limit"]
    assert gpu["power_default_limit_w"] == exp["limit"]
    assert gpu["power_min_limit_w"] == exp["min"]
    assert gpu["power_max_limit_w"] == exp["max"]
    assert gpu["persistence_mode"] is exp["persistence"]
    assert gpu["mig_mode_current"] == exp["mig"]
    assert gpu["mig_mode_pending"] == exp["mig"]
    assert gpu["ecc_mode_current"] == exp["ecc"]
    assert gpu["compute_capability"] == exp["cc"]
    assert gpu["clocks_max_graphics_mhz"] == exp["max_gr"]
    assert gpu["clocks_max_memory_mhz"] == exp["max_mem"]
    assert gpu["fabric_state"] == exp["fabric"]
    assert gpu["recovery_action"] == "None"
    assert gpu["compute_mode"] == "Default"
    # R590+ deprecate application clocks: null with the reason, never a crash.
    assert gpu["clocks_applications_graphics_mhz"] is None
    assert gpu["unavailable"]["clocks_applications_graphics_mhz"] == "deprecated"
    if exp["mig"] is None:
        assert gpu["unavailable"]["mig_mode_current"] == "not_available"
    assert P.model_family(gpu["name"]) == exp["family"]
    assert isinstance(gpu["temperature_c"], int) and 20 <= gpu["temperature_c"] <= 90


def test_query_gpu_610_has_kmd_version_and_deprecated_power_management():
    cmd, body = section("linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt", "nvidia-smi --query-gpu=")
    fields = cmd.split("=", 1)[1].split(" --format")[0].split(",")
    parsed = P.parse_csv(body, fields)
    row = parsed["rows"][0]
    assert row["kmd_version"] == "610.57.04"
    assert row["power.management"] == "[Requested functionality has been deprecated]"
    assert parsed["units"]["power.limit"] == "W"
    assert parsed["units"]["memory.total"] == "MiB"
    assert parsed["units"]["bbx.time_run"] == "seconds"
    assert "temperature.gpu" not in parsed["units"]
    assert row["platform.chassis_serial_number"] == ""  # an empty cell, as the reference notes say
    assert P.unavailable_reason(row["platform.chassis_serial_number"]) == "empty"


def test_device_h200_default_query_matches_nvidia_smi():
    fields = open(os.path.join(DEVICE, "default_fields.txt")).read().strip().split(",")
    for capture in ("query-default.txt", "query-default-units.txt"):
        body, rc = device(capture)
        assert rc == 0
        gpus, errors = P.gpus_from_query(body, fields)
        assert errors == []
        gpu = gpus[0]
        assert gpu["uuid"] == "GPU-04873e0c-4559-0cdc-493c-07b122c2d475"
        assert gpu["name"] == "NVIDIA H200"
        assert gpu["pci_bus_id"] == "00000000:00:06.0"
        assert gpu["pci_device_id"] == "0x233510DE"
        assert gpu["memory_total_mib"] == 143771
        assert (gpu["power_min_limit_w"], gpu["power_max_limit_w"]) == (200.0, 700.0)
        assert gpu["power_limit_w"] == 700.0
        assert gpu["mig_mode_current"] == "Disabled" and gpu["mig_mode_pending"] == "Disabled"
        assert gpu["driver_version"] == "580.159.04"
        assert gpu["persistence_mode"] is True
        assert gpu["clocks_applications_graphics_mhz"] == 1980  # R580 still reports them
        assert gpu["clocks_max_memory_mhz"] == 3201
        # bare N/A (no brackets) for fabric state on this VM
        assert gpu["fabric_state"] is None
        assert gpu["unavailable"]["fabric_state"] == "not_available"
        assert gpu["remapped_rows_pending"] is False
        assert gpu["ecc_errors_uncorrected_volatile"] == 0


def test_module_default_fields_are_a_prefix_of_the_captured_query():
    captured = open(os.path.join(DEVICE, "default_fields.txt")).read().strip().split(",")
    assert set(P.FIELDS_GPUS) <= set(captured)
    assert set(P.FIELDS_CLOCKS) <= set(captured)
    assert set(P.FIELDS_HEALTH) <= set(captured)


def test_csv_rejects_rows_with_wrong_cell_count():
    text = "index, name\n0, NVIDIA H100\n1, NVIDIA, H100\n"
    parsed = P.parse_csv(text, ["index", "name"])
    assert [r["index"] for r in parsed["rows"]] == ["0"]
    assert len(parsed["errors"]) == 1 and "3 cells, expected 2" in parsed["errors"][0]


def test_csv_header_column_mismatch_is_an_error():
    parsed = P.parse_csv("index, name, uuid\n0, a, b\n", ["index", "name"])
    assert parsed["rows"] == []
    assert "header has 3 columns" in parsed["errors"][0]


def test_csv_free_text_column_keeps_commas():
    fields = ["gpu_uuid", "pid", "process_name", "used_gpu_memory"]
    text = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\nGPU-1, 42, python train.py --a 1, --b 2, 1024\n"
    parsed = P.parse_csv(text, fields, free_text_col=2)
    assert parsed["errors"] == []
    assert parsed["rows"][0]["process_name"] == "python train.py --a 1, --b 2"
    assert parsed["rows"][0]["used_gpu_memory"] == "1024"


def test_compute_apps_on_load_capture():
    cmd, body = section("linux-x86_64__nvidia-h200__590.48.01.txt", "nvidia-smi --query-compute-apps=", 1)
    fields = cmd.split("=", 1)[1].split(" --format")[0].split(",")
    parsed = P.parse_csv(body, fields, free_text_col=fields.index("process_name"))
    assert [(r["pid"], r["process_name"]) for r in parsed["rows"]] == [
        ("10291", "/root/tools/memhog"), ("10293", "/root/tools/memhog"), ("10309", "./gpu_burn")]
    assert P.parse_number(parsed["rows"][2]["used_gpu_memory"], int) == (28234, "MiB", None)


@pytest.mark.parametrize("raw,reason", [
    ("[N/A]", "not_available"), ("N/A", "not_available"), ("[Not Supported]", "not_supported"),
    ("[Unknown Error]", "unknown_error"), ("[Requested functionality has been deprecated]", "deprecated"),
    ("Requested functionality has been deprecated", "deprecated"), ("", "empty"), ("  ", "empty"),
    ("[Insufficient Permissions]", "insufficient_permissions"), ("[GPU is lost]", "gpu_lost"),
    ("[Some New Marker]", "some_new_marker"), ("700.00 W", None), ("Enabled", None), ("None", None),
])
def test_unavailable_markers(raw, reason):
    assert P.unavailable_reason(raw) == reason


def test_numbers_and_modes():
    assert P.parse_number("700.00 W") == (700.0, "W", None)
    assert P.parse_number("143771 MiB", int) == (143771, "MiB", None)
    assert P.parse_number("[Not Supported]") == (None, None, "not_supported")
    assert P.parse_number("Default") == (None, None, "unparsable")
    assert P.parse_enabled("Enabled") == (True, None)
    assert P.parse_enabled("No") == (False, None)
    assert P.parse_enabled("[N/A]") == (None, "not_available")
    assert P.parse_mode("enabled") == ("Enabled", None)
    assert P.parse_mode("[N/A]") == (None, "not_available")
    assert P.clean_version("610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]") == "610.43.02"
    assert P.driver_branch("580.95.05") == 580
    assert P.driver_branch(None) is None


def test_invalid_field_message():
    body, rc = device("err-bad-field.txt")
    assert rc == 2
    assert P.invalid_query_fields(body) == ["bogus.field"]


# ---------------------------------------------------------------------------
# --version
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_version_on_capture(name):
    _cmd, body = section(name, "nvidia-smi --version")
    ver = P.parse_version(body)
    assert ver["driver_version"] == CAPTURES[name]["driver"]
    assert ver["cuda_version"] == CAPTURES[name]["cuda"]
    assert ver["nvidia_smi_version"] == CAPTURES[name]["driver"]


def test_version_610_uses_kmd_and_umd():
    _cmd, body = section("linux-x86_64__nvidia-geforce-rtx-2080-super__610.57.04.txt", "nvidia-smi --version")
    ver = P.parse_version(body)
    assert ver == {"nvidia_smi_version": "610.57.04", "nvml_version": "610.57", "driver_version": "610.57.04",
                   "cuda_version": "13.3", "kmd_version": "610.57.04", "cuda_umd_version": "13.3"}


def test_version_device_h200():
    body, rc = device("version.txt")
    assert rc == 0
    assert P.parse_version(body) == {"nvidia_smi_version": "580.159.04", "nvml_version": "580.159",
                                     "driver_version": "580.159.04", "cuda_version": "13.0",
                                     "kmd_version": None, "cuda_umd_version": None}


# ---------------------------------------------------------------------------
# -L
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_list_on_capture(name):
    _cmd, body = section(name, "nvidia-smi -L")
    gpus = P.parse_list(body)
    assert [(g["index"], g["name"]) for g in gpus] == [(0, CAPTURES[name]["name"])]


def test_list_mig_devices_h200():
    _cmd, body = section("linux-x86_64__nvidia-h200-mig__590.48.01.txt", "nvidia-smi -L")
    devs = P.parse_list(body)[0]["mig_devices"]
    assert [(d["profile"], d["device_index"]) for d in devs] == [
        ("1c.3g.71gb", 0), ("2c.3g.71gb", 1), ("2g.35gb", 2), ("1g.18gb", 3), ("1g.18gb", 4)]
    assert devs[4]["uuid"] == "MIG-00000004-0000-0000-0000-000000000004"


def test_list_mig_devices_h100():
    _cmd, body = section("linux-x86_64__nvidia-h100-mig__590.48.01.txt", "nvidia-smi -L")
    devs = P.parse_list(body)[0]["mig_devices"]
    assert [d["profile"] for d in devs] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def test_list_old_driver_format_and_device_h200():
    text = ("GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
            "  MIG 3g.20gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0)\n")
    gpu = P.parse_list(text)[0]
    assert gpu["name"] == "A100-SXM4-40GB"
    assert gpu["mig_devices"] == [{"profile": "3g.20gb", "device_index": 0,
                                   "uuid": "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/1/0"}]
    body, _rc = device("list.txt")
    assert P.parse_list(body) == [{"index": 0, "name": "NVIDIA H200",
                                   "uuid": "GPU-04873e0c-4559-0cdc-493c-07b122c2d475", "mig_devices": []}]
    assert P.parse_list("No devices were found\n") == []


# ---------------------------------------------------------------------------
# topo -m
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_topo_on_capture(name):
    _cmd, body = section(name, "nvidia-smi topo -m")
    assert "\x1b[4m" in body  # real output underlines the header even without a TTY
    topo = P.parse_topo(body)
    assert topo["errors"] == []
    assert topo["gpus"] == ["GPU0"]
    assert topo["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert topo["cpu_affinity"] == {"GPU0": CAPTURES[name]["cpus"]}
    assert topo["numa_affinity"] == {"GPU0": 0}
    assert topo["gpu_numa_id"] == {"GPU0": None}
    assert topo["nvlink_pairs"] == []


def test_topo_device_h200():
    body, rc = device("topo.txt")
    assert rc == 0
    topo = P.parse_topo(body)
    assert topo["cpu_affinity"] == {"GPU0": "0-15"}
    assert P._cpu_list(topo["cpu_affinity"]["GPU0"]) == list(range(16))


def _dgx_h100_topo(glue=False, empty_cpu=False):
    names = ["GPU%d" % i for i in range(8)] + ["NIC0", "NIC1"]
    head = "\t\x1b[4m" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"
    rows = [head]
    for i in range(8):
        links = ["X" if j == i else "NV18" for j in range(8)]
        links = [" X " if c == "X" else c for c in links] + ["PXB", "SYS"]
        cpu = "" if empty_cpu else ("0-55,112-167" if i < 4 else "56-111,168-223")
        numa = "0" if i < 4 else "1"
        if glue and i == 0:
            links = links[:8] + ["PXBSYS"]
        rows.append("GPU%d\t" % i + "\t".join(links) + "\t%s\t%s\t\tN/A" % (cpu, numa))
    rows.append("NIC0\t" + "\t".join(["PXB"] * 8 + [" X ", "SYS"]) + "\t\t\t")
    rows.append("NIC1\t" + "\t".join(["SYS"] * 8 + ["SYS", " X "]) + "\t\t\t")
    rows += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks",
             "", "NIC Legend:", "", "  NIC0: mlx5_0", "  NIC1: mlx5_1", ""]
    return "\n".join(rows)


def test_topo_eight_gpus_nvlink_pairs_affinity_and_nics():
    topo = P.parse_topo(_dgx_h100_topo())
    assert topo["errors"] == []
    assert topo["gpus"] == ["GPU%d" % i for i in range(8)]
    assert len(topo["nvlink_pairs"]) == 28
    assert topo["nvlink_pairs"][0] == {"a": 0, "b": 1, "links": 18}
    assert all(p["links"] == 18 for p in topo["nvlink_pairs"])
    assert topo["cpu_affinity"]["GPU5"] == "56-111,168-223"
    assert topo["numa_affinity"] == {"GPU%d" % i: (0 if i < 4 else 1) for i in range(8)}
    assert topo["matrix"]["GPU0"]["NIC0"] == "PXB"
    assert topo["matrix"]["NIC0"]["GPU3"] == "PXB"
    assert topo["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}


def test_topo_glued_cells_and_empty_cpu_affinity():
    topo = P.parse_topo(_dgx_h100_topo(glue=True, empty_cpu=True))
    assert topo["errors"] == []
    assert topo["matrix"]["GPU0"]["NIC0"] == "PXB" and topo["matrix"]["GPU0"]["NIC1"] == "SYS"
    assert topo["cpu_affinity"]["GPU0"] is None
    assert topo["numa_affinity"]["GPU0"] == 0


def test_topo_garbage():
    assert P.parse_topo("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")["errors"]


# ---------------------------------------------------------------------------
# MIG tables
# ---------------------------------------------------------------------------

def test_lgip_device_h200_all_profiles():
    body, rc = device("mig-lgip.txt")
    assert rc == 0
    profiles = P.parse_mig_lgip(body)
    assert [(p["id"], p["name"], p["instances_total"], p["memory_gib"], p["sm"]) for p in profiles] == [
        (19, "1g.18gb", 7, 16.0, 16), (20, "1g.18gb+me", 1, 16.0, 16), (15, "1g.35gb", 4, 32.5, 26),
        (14, "2g.35gb", 3, 32.5, 32), (9, "3g.71gb", 2, 69.75, 60), (5, "4g.71gb", 1, 69.75, 64),
        (0, "7g.141gb", 1, 140.0, 132)]
    last = profiles[-1]
    assert (last["ce"], last["jpeg"], last["ofa"], last["dec"], last["enc"], last["p2p"]) == (8, 7, 1, 7, 0, False)
    assert profiles[1]["ofa"] == 1 and profiles[0]["ofa"] == 0
    assert all(p["gpu"] == 0 and p["instances_free"] == p["instances_total"] for p in profiles)


H100_LGIP_77 = """+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     1/1        9.75       No     16     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.20gb       15     4/4        19.62      No     26     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   1  MIG 7g.80gb        0     0/1        79.25      No     132    7     0   |
|                                                             8     7     1   |
+-----------------------------------------------------------------------------+
"""


def test_lgip_other_box_width_and_second_gpu():
    profiles = P.parse_mig_lgip(H100_LGIP_77)
    assert [(p["gpu"], p["id"], p["name"], p["instances_free"], p["memory_gib"]) for p in profiles] == [
        (0, 19, "1g.10gb", 7, 9.75), (0, 20, "1g.10gb+me", 1, 9.75), (0, 15, "1g.20gb", 4, 19.62),
        (1, 0, "7g.80gb", 0, 79.25)]
    assert profiles[3]["ce"] == 8


def test_lgipp_device_h200_and_old_format():
    body, _rc = device("mig-lgipp.txt")
    placements = P.parse_mig_lgipp(body)
    assert placements[0] == {"gpu": 0, "profile_id": 19, "starts": [0, 1, 2, 3, 4, 5, 6], "size": 1}
    assert placements[4] == {"gpu": 0, "profile_id": 9, "starts": [0, 4], "size": 4}
    assert placements[-1] == {"gpu": 0, "profile_id": 0, "starts": [0], "size": 8}
    old = "GPU 0 Profile ID 15 Placements: {0,2,4,6}:2\nGPU 0 Profile ID 5 Placement : {0}:4\n"
    assert P.parse_mig_lgipp(old) == [{"gpu": 0, "profile_id": 15, "starts": [0, 2, 4, 6], "size": 2},
                                      {"gpu": 0, "profile_id": 5, "starts": [0], "size": 4}]


def test_lgi_table_and_messages():
    text = """+----------------------------------------------------+
| GPU instances:                                     |
| GPU   Name          Profile  Instance   Placement  |
|                       ID       ID       Start:Size |
|====================================================|
|   0  MIG 3g.20gb       9        1          4:4     |
|   0  MIG 1g.5gb       19        7          0:1     |
+----------------------------------------------------+
"""
    assert P.parse_mig_lgi(text) == [
        {"gpu": 0, "name": "3g.20gb", "profile_id": 9, "instance_id": 1, "placement_start": 4, "placement_size": 4},
        {"gpu": 0, "name": "1g.5gb", "profile_id": 19, "instance_id": 7, "placement_start": 0, "placement_size": 1}]
    body, rc = device("mig-lgi.txt")
    assert rc == 0 and P.parse_mig_lgi(body) == []
    assert P.mig_status_message(body) == "mig_not_enabled"
    assert P.mig_status_message("No MIG-supported devices found.") == "mig_not_supported"
    assert P.mig_status_message("No GPU instances found: Not Found") == "no_gpu_instances"


# ---------------------------------------------------------------------------
# -q text and -q -x
# ---------------------------------------------------------------------------

def test_xml_device_h200():
    body, rc = device("qx.txt")
    assert rc == 0
    details = P.details_from_xml(body)
    assert (details["driver_version"], details["cuda_version"], details["attached_gpus"]) == ("580.159.04", "13.0", 1)
    gpu = details["gpus"][0]
    assert gpu["uuid"] == "GPU-04873e0c-4559-0cdc-493c-07b122c2d475"
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["memory_total_mib"] == 143771
    assert (gpu["power_limit_w"], gpu["power_enforced_limit_w"], gpu["power_default_limit_w"],
            gpu["power_min_limit_w"], gpu["power_max_limit_w"]) == (700.0, 700.0, 700.0, 200.0, 700.0)
    assert gpu["mig_mode_current"] == "Disabled" and gpu["mig_devices"] == []
    assert gpu["architecture"] == "Hopper"
    assert gpu["clocks_applications_graphics_mhz"] == 1980
    assert gpu["fabric_state"] is None


XML_R525 = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">
<nvidia_smi_log><timestamp>x</timestamp><driver_version>510.47.03</driver_version><cuda_version>11.6</cuda_version>
<attached_gpus>1</attached_gpus>
<gpu id="00000000:00:04.0"><product_name>NVIDIA A100-SXM4-40GB</product_name>
<persistence_mode>Disabled</persistence_mode>
<mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>
<mig_devices><mig_device><index>0</index><gpu_instance_id>1</gpu_instance_id><compute_instance_id>0</compute_instance_id>
<device_attributes><shared><multiprocessor_count>42</multiprocessor_count></shared></device_attributes>
<fb_memory_usage><total>19968 MiB</total></fb_memory_usage></mig_device></mig_devices>
<uuid>GPU-1</uuid><pci><pci_bus_id>00000000:00:04.0</pci_bus_id></pci>
<fb_memory_usage><total>40960 MiB</total></fb_memory_usage><compute_mode>Default</compute_mode>
<ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
<power_readings><power_state>P0</power_state><power_management>Supported</power_management><power_draw>66.92 W</power_draw>
<power_limit>300.00 W</power_limit><default_power_limit>400.00 W</default_power_limit><enforced_power_limit>250.00 W</enforced_power_limit>
<min_power_limit>100.00 W</min_power_limit><max_power_limit>400.00 W</max_power_limit></power_readings>
<applications_clocks><graphics_clock>1095 MHz</graphics_clock><mem_clock>1215 MHz</mem_clock></applications_clocks>
<max_clocks><graphics_clock>1410 MHz</graphics_clock><sm_clock>1410 MHz</sm_clock><mem_clock>1215 MHz</mem_clock></max_clocks>
</gpu></nvidia_smi_log>"""

XML_R535 = XML_R525.replace("510.47.03", "535.86.05").replace(
    "<power_readings><power_state>P0</power_state><power_management>Supported</power_management><power_draw>66.92 W</power_draw>\n"
    "<power_limit>300.00 W</power_limit><default_power_limit>400.00 W</default_power_limit><enforced_power_limit>250.00 W</enforced_power_limit>\n"
    "<min_power_limit>100.00 W</min_power_limit><max_power_limit>400.00 W</max_power_limit></power_readings>",
    "<gpu_power_readings><power_state>P0</power_state><power_draw>70.10 W</power_draw>"
    "<current_power_limit>250.00 W</current_power_limit><requested_power_limit>300.00 W</requested_power_limit>"
    "<default_power_limit>400.00 W</default_power_limit><min_power_limit>100.00 W</min_power_limit>"
    "<max_power_limit>400.00 W</max_power_limit></gpu_power_readings>")

XML_R570 = XML_R535.replace("<power_draw>70.10 W</power_draw>",
                            "<average_power_draw>N/A</average_power_draw><instant_power_draw>71.50 W</instant_power_draw>")


@pytest.mark.parametrize("xml,draw", [(XML_R525, 66.92), (XML_R535, 70.10), (XML_R570, 71.50)])
def test_xml_power_across_driver_generations(xml, draw):
    assert "gpu_power_readings" in xml or "<power_readings>" in xml
    gpu = P.details_from_xml(xml)["gpus"][0]
    assert gpu["power_limit_w"] == 300.0
    assert gpu["power_enforced_limit_w"] == 250.0
    assert gpu["power_default_limit_w"] == 400.0
    assert (gpu["power_min_limit_w"], gpu["power_max_limit_w"]) == (100.0, 400.0)
    assert gpu["power_draw_w"] == draw
    assert gpu["mig_devices"] == [{"index": 0, "gpu_instance_id": 1, "compute_instance_id": 0,
                                   "sm_count": 42, "memory_total_mib": 19968}]
    assert gpu["clocks_applications_graphics_mhz"] == 1095
    assert gpu["memory_total_mib"] == 40960


def test_xml_error_text_raises_value_error():
    with pytest.raises(ValueError):
        P.details_from_xml("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


# ---------------------------------------------------------------------------
# Driver files and summaries
# ---------------------------------------------------------------------------

def test_proc_driver_version_open_and_proprietary():
    body, _rc = device("proc-version.txt")
    assert P.parse_proc_driver_version(body) == {"flavour": "open", "version": "580.159.04"}
    prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version: gcc 12\n"
    assert P.parse_proc_driver_version(prop) == {"flavour": "proprietary", "version": "550.54.14"}
    arm = "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U16-I3-B03-4-3)\n"
    assert P.parse_proc_driver_version(arm) == {"flavour": "open", "version": "580.95.05"}
    assert P.parse_proc_driver_version(None) == {"flavour": None, "version": None}


def test_proc_modules_device_capture():
    body, _rc = device("lsmod.txt")
    mods = P.parse_proc_modules(body.split("---\n", 1)[1])
    assert sorted(mods) == ["nvidia", "nvidia_uvm"]
    assert mods["nvidia"]["size"] == 14299136 and mods["nvidia"]["state"] == "Live"
    lsmod = "Module                  Size  Used by\nnvidia_drm             94208  2\nnvidia              56778752  45 nvidia_uvm,nvidia_modeset\n"
    mods = P.parse_proc_modules(lsmod)
    assert mods["nvidia"]["used_by"] == ["nvidia_uvm", "nvidia_modeset"]


def test_driver_params_device_capture():
    body, _rc = device("proc-params.txt")
    params = P.parse_driver_params(body)
    assert params["DeviceFileMode"] == "438"  # 0666
    assert params["DeviceFileUID"] == "0"
    assert params["ModifyDeviceFiles"] == "1"


@pytest.mark.parametrize("name,family", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA A100-SXM4-40GB", "a100"), ("A100-SXM4-80GB", "a100"), ("NVIDIA A10G", "a10"),
    ("NVIDIA GB10", "gb10"), ("NVIDIA GB200", "gb200"), ("NVIDIA B200", "b200"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA L40", "l40"), ("NVIDIA L4", "l4"), ("NVIDIA GeForce RTX 2080 SUPER", "geforce"),
    ("NVIDIA H200 NVL", "h200"), ("Tesla V100-SXM2-32GB", "v100"), ("Mystery GPU", None), (None, None),
])
def test_model_family(name, family):
    assert P.model_family(name) == family


def test_nvswitch_pci_detection():
    entries = [("0000:00:06.0", "0x10de", "0x030200"), ("0000:05:00.0", "0x10de", "0x068000"),
               ("0000:06:00.0", "0x10de", "0x068000\n"), ("0000:07:00.0", "0x15b3", "0x068000")]
    assert P.nvswitch_pci_devices(entries) == ["0000:05:00.0", "0000:06:00.0"]
    body, _rc = device("pci-nvidia.txt")
    real = [(ln.split()[0], "0x10de", ln.split()[1]) for ln in body.splitlines() if ln.strip()]
    assert real == [("0000:00:06.0", "0x10de", "0x030200")]
    assert P.nvswitch_pci_devices(real) == []


LCIP_A100_3G = """\
+--------------------------------------------------------------------------------------+
| Compute instance profiles:                                                           |
| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |
|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |
|         ID                                                          CE    JPEG       |
|======================================================================================|
|   0      1       MIG 1c.3g.20gb       0      3/3           14        2     0     0   |
|                                                                      3     0        |
+--------------------------------------------------------------------------------------+
|   0      1       MIG 2c.3g.20gb       1      1/1           28        2     0     0   |
|                                                                      3     0        |
+--------------------------------------------------------------------------------------+
|   0      1       MIG 3g.20gb          2*     1/1           42        2     0     0   |
|                                                                      3     0        |
+--------------------------------------------------------------------------------------+
"""


def test_parse_mig_lcip_and_lci():
    rows = P.parse_mig_lcip(LCIP_A100_3G)
    assert [(r["gpu"], r["gi_id"], r["name"], r["id"], r["preferred"]) for r in rows] == [
        (0, 1, "1c.3g.20gb", 0, False), (0, 1, "2c.3g.20gb", 1, False), (0, 1, "3g.20gb", 2, True)]
    lci = P.parse_mig_lci("|    0      1       MIG 3g.20gb          2        0          0:3     |\n")
    assert lci == [{"gpu": 0, "gi_id": 1, "name": "3g.20gb", "profile_id": 2, "ci_id": 0, "start": 0, "size": 3}]
    assert P.parse_mig_lcip("") == [] and P.parse_mig_lci(None) == []


def test_clock_details_keep_memory_graphics_pairs_and_auto_boost():
    text = """
==============NVSMI LOG==============

Attached GPUs                                          : 2
GPU 00000000:18:00.0
    Clock Policy
        Auto Boost                                     : N/A
        Auto Boost Default                             : N/A
    Supported Clocks
        Memory                                         : 2619 MHz
            Graphics                                   : 1980 MHz
            Graphics                                   : 1965 MHz
        Memory                                         : 1593 MHz
            Graphics                                   : 1410 MHz

GPU 00000000:2A:00.0
    Clock Policy
        Auto Boost Default                             : On
    Supported Clocks
        Memory                                         : 2619 MHz
            Graphics                                   : 1980 MHz
"""
    out = P.clock_details_from_query_text(text)
    assert out["00000000:18:00.0"]["supported"] == {2619: {1980, 1965}, 1593: {1410}}
    assert out["00000000:18:00.0"]["auto_boost_default"] is None
    assert out["00000000:2A:00.0"]["auto_boost_default"] is True


def test_clock_details_on_the_real_h200_capture():
    """``nvidia-smi -q -d CLOCK,SUPPORTED_CLOCKS`` on the lent H200 (driver 580.159.04)."""
    text = open(os.path.join(DEVICE, "q-clock-supported.txt")).read()
    out = P.clock_details_from_query_text(text)
    assert list(out) == ["00000000:00:06.0"]
    gpu = out["00000000:00:06.0"]
    assert gpu["auto_boost_default"] is None  # "N/A" on this GPU
    # counted independently: every Graphics line under "Supported Clocks" belongs to one memory clock
    block = text.split("    Supported Clocks", 1)[1]
    graphics = [line for line in block.splitlines() if line.strip().startswith("Graphics")]
    assert sum(len(clocks) for clocks in gpu["supported"].values()) == len(graphics)
    assert set(gpu["supported"]) == {3201, 2201}
    assert max(gpu["supported"][3201]) == 1980  # the capture's Max Clocks / Graphics
    assert 1980 in gpu["supported"][2201] and 345 in gpu["supported"][2201]
    # the current and maximum clocks' Memory/Graphics lines (sections "Clocks", "Max Clocks") are
    # not supported pairs: without the Supported Clocks section there are none
    only_current = text.split("    Clock Policy", 1)[0]
    assert P.clock_details_from_query_text(only_current)["00000000:00:06.0"]["supported"] == {}
