"""Behaviour of the simulated nvidia-smi: setters, validation, exit codes, state, reboot, faults."""
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from simhelp import Node  # noqa: E402

H200_BUS0 = "00000000:18:00.0"


@pytest.fixture
def h200(tmp_path):
    return Node(tmp_path, model="dgx-h200", driver="580.95.05")


@pytest.fixture
def a100(tmp_path):
    return Node(tmp_path, model="dgx-a100-40gb", driver="535.183.01")


def q(node, fields, *extra):
    rc, out, _ = node.smi("--query-gpu=" + fields, "--format=csv,noheader", *extra)
    assert rc == 0, out
    return [line.split(", ") for line in out.strip().split("\n")]


# ---------------------------------------------------------------- the "must show" items

def test_must_show_query_header_and_rows(h200):
    rc, out, _ = h200.smi("--query-gpu=index,name,power.limit,mig.mode.current", "--format=csv")
    lines = out.split("\n")
    assert rc == 0
    assert lines[0] == "index, name, power.limit [W], mig.mode.current"
    assert lines[1] == "0, NVIDIA H200, 700.00 W, Disabled"
    assert len([x for x in lines if x]) == 9


def test_must_show_power_limit_range_then_set(h200):
    rc, out, _ = h200.smi("-pl", "9999")
    assert rc == 2
    assert out == ("Provided power limit 9999.00 W is not a valid power limit which should be between 200.00 W "
                   "and 700.00 W for GPU %s\nTerminating early due to previous errors.\n" % H200_BUS0)
    assert q(h200, "power.limit")[0] == ["700.00 W"]
    rc, out, _ = h200.smi("-pl", "500")
    assert rc == 0
    assert out.split("\n")[0] == "Power limit for GPU %s was set to 500.00 W from 700.00 W." % H200_BUS0
    assert out.endswith("All done.\n")
    assert {row[0] for row in q(h200, "power.limit")} == {"500.00 W"}


def test_must_show_lgip_h200(h200):
    rc, out, _ = h200.smi("mig", "-lgip")
    assert rc == 0
    lines = out.split("\n")
    assert lines[5] == "|   0  MIG 1g.18gb         19     7/7        16.00      No     16     1     0   |"
    assert "|   0  MIG 7g.141gb         0     1/1        140.00     No     132    7     0   |" in lines
    assert all(len(x) == 81 for x in lines if x)


def test_must_show_non_root_power_limit(h200):
    rc, out, _ = h200.smi("-pl", "500", euid=1000)
    assert rc == 4
    assert "Insufficient Permissions" in out
    assert out.startswith("Failed to set power management limit for GPU %s: Insufficient Permissions" % H200_BUS0)
    assert q(h200, "power.limit", "-i", "0")[0] == ["700.00 W"]


# ---------------------------------------------------------------- table-driven setters

SETTER_CASES = [
    # args, euid, rc, expected first stdout line (prefix), query field, expected value of GPU 0
    (("-pm", "1", "-i", "0"), 0, 0, "Enabled Legacy persistence mode for GPU %s." % H200_BUS0,
     "persistence_mode", "Enabled"),
    (("-pm", "0", "-i", "0"), 0, 0, "Persistence mode is already Disabled for GPU %s." % H200_BUS0,
     "persistence_mode", "Disabled"),
    (("-pm", "1", "-i", "0"), 1000, 4, "Unable to set persistence mode for GPU %s: Insufficient Permissions"
     % H200_BUS0, "persistence_mode", "Disabled"),
    (("-pm", "7"), 0, 2, "Invalid combination of input arguments.", "persistence_mode", "Disabled"),
    (("-pl", "199.99", "-i", "0"), 0, 2, "Provided power limit 199.99 W is not a valid power limit",
     "power.limit", "700.00 W"),
    (("-pl", "200", "-i", "0"), 0, 0, "Power limit for GPU %s was set to 200.00 W from 700.00 W." % H200_BUS0,
     "power.limit", "200.00 W"),
    (("-pl", "abc"), 0, 2, "Invalid combination of input arguments.", "power.limit", "700.00 W"),
    (("-ac", "3201,1410", "-i", "0"), 0, 0, 'Applications clocks set to "(MEM 3201, SM 1410)" for GPU %s'
     % H200_BUS0, "clocks.applications.graphics", "1410 MHz"),
    (("-ac", "3201,1411", "-i", "0"), 0, 0, 'Specified clock combination "(MEM 3201, SM 1411)" is not supported',
     "clocks.applications.graphics", "1980 MHz"),
    (("-ac", "3201,1410", "-i", "0"), 1000, 4, "Failed to set applications clocks for GPU", "clocks.applications.graphics",
     "1980 MHz"),
    (("-c", "3", "-i", "0"), 0, 0, "Set compute mode to EXCLUSIVE_PROCESS for GPU %s." % H200_BUS0, "compute_mode",
     "Exclusive_Process"),
    (("-c", "PROHIBITED", "-i", "0"), 0, 0, "Set compute mode to PROHIBITED for GPU", "compute_mode", "Prohibited"),
    (("-c", "1"), 0, 2, "Invalid combination of input arguments.", "compute_mode", "Default"),
    (("-c", "0", "-i", "0"), 1000, 4, "Unable to set compute mode for GPU", "compute_mode", "Default"),
    (("-e", "0", "-i", "0"), 0, 0, "Disabled ECC support for GPU %s." % H200_BUS0, "ecc.mode.pending", "Disabled"),
    (("-e", "0", "-i", "0"), 1000, 4, "Unable to set the ECC mode for GPU", "ecc.mode.pending", "Enabled"),
    (("--auto-boost-default=0", "-i", "0"), 0, 0, "Enabling/disabling default auto boosted clocks is not supported",
     "power.limit", "700.00 W"),
    (("-mig", "1", "-i", "0"), 0, 0, "Warning: persistence mode is disabled on device", "mig.mode.current", "Enabled"),
    (("-mig", "1", "-i", "0"), 1000, 4, "Unable to enable MIG Mode for GPU %s: Insufficient Permissions" % H200_BUS0,
     "mig.mode.current", "Disabled"),
    (("-lgc", "1000,1500", "-i", "0"), 0, 0, 'GPU clocks set to "(gpuClkMin 1000, gpuClkMax 1500)" for GPU', "index",
     "0"),
    (("-lgc", "1500,1000"), 0, 2, "Invalid combination of input arguments.", "index", "0"),
    (("-i", "9", "-pl", "300"), 0, 6, "No devices were found", "power.limit", "700.00 W"),
    (("-i", "GPU-nope", "-pm", "1"), 0, 6, "No devices were found", "persistence_mode", "Disabled"),
    (("--persistence-mode=1", "--id=" + H200_BUS0), 0, 0, "Enabled Legacy persistence mode for GPU", "persistence_mode",
     "Enabled"),
    (("-acp", "0"), 0, 255, "ERROR: Option -acp is not recognized.", "index", "0"),
]


@pytest.mark.parametrize("args,euid,rc,first,field,expect", SETTER_CASES,
                         ids=[" ".join(c[0]) + (" nonroot" if c[1] else "") for c in SETTER_CASES])
def test_setter_table(h200, args, euid, rc, first, field, expect):
    got_rc, out, _ = h200.smi(*args, euid=euid)
    assert got_rc == rc, out
    assert out.startswith(first), out
    assert q(h200, field, "-i", "0")[0] == [expect]


def test_warning_exit_zero_and_all_done(h200):
    rc, out, _ = h200.smi("-ac", "1,2", "-i", "0")
    assert rc == 0
    assert out.split("\n")[1:] == ["Treating as warning and moving on.", "All done.", ""]


def test_multi_gpu_setter_one_line_per_gpu(h200):
    rc, out, _ = h200.smi("-pm", "1")
    lines = out.strip().split("\n")
    assert rc == 0 and len(lines) == 9 and lines[-1] == "All done."
    assert q(h200, "persistence_mode") == [["Enabled"]] * 8


def test_select_by_uuid_bus_id_and_list(h200):
    uuid3 = q(h200, "uuid", "-i", "3")[0][0]
    assert q(h200, "index", "-i", uuid3) == [["3"]]
    assert q(h200, "index", "-i", "0000:2A:00.0") == [["1"]]
    assert q(h200, "index", "-i", "2,%s,7" % uuid3) == [["2"], ["3"], ["7"]]


def test_persistence_wording_before_580(tmp_path):
    node = Node(tmp_path, model="dgx-h100", driver="550.90.07")
    rc, out, _ = node.smi("-pm", "1", "-i", "0")
    assert out.startswith("Enabled persistence mode for GPU 00000000:18:00.0.\n")


def test_acp_only_on_old_branches(tmp_path):
    node = Node(tmp_path, model="dgx-a100-40gb", driver="470.256.02")
    rc, out, _ = node.smi("-acp", "0", "-i", "0")
    assert rc == 0 and out.startswith("Applications clocks commands have been set to UNRESTRICTED for GPU 0000:07:00.0")


@pytest.mark.parametrize("driver,present,absent", [
    ("525.147.05", ["<power_readings>", "<power_draw>", "clocks_throttle_reasons", "nvsmi_device_v11.dtd"],
     ["<gpu_power_readings>", "average_power_draw", "clocks_event_reasons"]),
    ("535.183.01", ["<gpu_power_readings>", "<power_draw>", "<clocks_event_reasons>", "nvsmi_device_v12.dtd"],
     ["<average_power_draw>", "<power_readings>"]),
    ("580.95.05", ["<gpu_power_readings>", "<average_power_draw>", "<instant_power_draw>", "nvsmi_device_v13.dtd"],
     ["<power_draw>", "<power_readings>"]),
])
def test_xml_power_section_by_branch(tmp_path, driver, present, absent):
    node = Node(tmp_path, model="dgx-h100", driver=driver, gpus=1)
    rc, out, _ = node.smi("-q", "-x")
    assert rc == 0
    for s in present:
        assert s in out
    for s in absent:
        assert s not in out


def test_throttle_reason_names_by_branch(tmp_path):
    old = Node(tmp_path / "a", model="dgx-a100-40gb", driver="525.147.05", gpus=1) if (tmp_path / "a").mkdir() is None \
        else None
    rc, out, _ = old.smi("--query-gpu=clocks_throttle_reasons.active", "--format=csv")
    assert out.split("\n")[0] == "clocks_throttle_reasons.active"
    rc, out, _ = old.smi("--query-gpu=clocks_event_reasons.active", "--format=csv")
    assert rc == 2
    (tmp_path / "b").mkdir()
    new = Node(tmp_path / "b", model="dgx-h100", driver="580.95.05", gpus=1)
    rc, out, _ = new.smi("--query-gpu=clocks_throttle_reasons.active", "--format=csv")
    assert out.split("\n")[0] == "clocks_event_reasons.active"


def test_nounits_and_aliases(h200):
    rc, out, _ = h200.smi("--query-gpu=gpu_name,clocks.gr,power.limit,memory.total", "--format=csv,nounits", "-i", "0")
    assert out.split("\n")[:2] == ["name, clocks.current.graphics [MHz], power.limit [W], memory.total [MiB]",
                                   "NVIDIA H200, 345, 700.00, 143771"]


def test_invalid_field_and_format(h200):
    assert h200.smi("--query-gpu=cuda_version", "--format=csv") == (
        2, 'Field "cuda_version" is not a valid field to query.\n\n', "")
    assert h200.smi("--query-gpu=index", "--format=json")[:2] == (2, "Format modifier is not recognized.\n")


# ---------------------------------------------------------------- MIG

def test_mig_ampere_pending_until_reboot_and_busy_refusal(a100):
    rc, out, _ = a100.smi("-i", "0", "-mig", "1")
    assert rc == 0 and "MIG mode is in pending enable state for GPU 00000000:07:00.0:Not Supported" in out
    assert q(a100, "mig.mode.current,mig.mode.pending", "-i", "0") == [["Disabled", "Enabled"]]
    assert a100.smi("mig", "-lgi")[1] == "No MIG-enabled devices found.\n"
    a100.admin("fault", "set", "busy", "--gpu", "1")
    rc, out, _ = a100.smi("-i", "1", "-mig", "1")
    assert rc == 0 and ":In use by another client" in out
    rc, out, _ = a100.smi("-r", "-i", "1")
    assert rc == 255 and "being used by some other process" in out
    assert q(a100, "mig.mode.current", "-i", "1") == [["Disabled"]]
    a100.admin("reset")
    assert q(a100, "mig.mode.current,mig.mode.pending", "-i", "0,1") == [["Enabled", "Enabled"]] * 2


def test_mig_hopper_immediate_and_lost_on_reboot(h200):
    rc, out, _ = h200.smi("-i", "0", "-mig", "1")
    assert rc == 0 and "Enabled MIG Mode for GPU %s" % H200_BUS0 in out
    assert q(h200, "mig.mode.current,utilization.gpu", "-i", "0") == [["Enabled", "[N/A]"]]
    h200.admin("reset")
    assert q(h200, "mig.mode.current", "-i", "0") == [["Disabled"]]


def test_mig_hopper_busy_refused(h200):
    h200.admin("process", "add", "--gpu", "2")
    rc, out, _ = h200.smi("-i", "2", "-mig", "1")
    assert rc == 255 and "In use by another client" in out
    assert q(h200, "mig.mode.current", "-i", "2") == [["Disabled"]]


def test_mig_create_list_destroy(h200):
    h200.smi("-i", "0", "-mig", "1")
    assert h200.smi("mig", "-lgi") == (6, "No GPU instances found: Not Found\n", "")
    rc, out, _ = h200.smi("mig", "-i", "0", "-cgi", "9,3g.71gb", "-C")
    assert rc == 0
    assert out.split("\n")[:2] == [
        "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.71gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using profile MIG 3g.71gb (ID  2)"]
    rc, out, _ = h200.smi("mig", "-lgi")
    assert "|   0  MIG 3g.71gb          9        1          4:4     |" in out.split("\n")
    assert "|   0  MIG 3g.71gb          9        2          0:4     |" in out.split("\n")
    # GPU is full: one more 1g does not fit
    rc, out, _ = h200.smi("mig", "-cgi", "19")
    assert rc == 255
    assert out == ("Unable to create a GPU instance on GPU  0 using profile 19: Insufficient Resources\n"
                   "Failed to create GPU instances: Insufficient Resources\n")
    rc, out, _ = h200.smi("-L")
    assert out.split("\n")[1].startswith("  MIG 3g.71gb     Device  0: (UUID: MIG-")
    rc, out, _ = h200.smi("mig", "-lgip")
    assert "|   0  MIG 3g.71gb          9     0/2        69.75      No     60     3     0   |" in out
    assert h200.smi("mig", "-dgi", "-gi", "1")[0] == 255  # has a compute instance
    assert h200.smi("mig", "-dci", "-gi", "1")[0] == 0
    rc, out, _ = h200.smi("mig", "-dgi", "-gi", "1")
    assert rc == 0 and out == "Successfully destroyed GPU instance ID  1 from GPU  0\n"


def test_mig_placement_order_matters_like_the_guide(tmp_path):
    node = Node(tmp_path, model="dgx-a100-40gb", driver="580.95.05", gpus=1)
    node.smi("-mig", "1")
    node.admin("reset")  # Ampere: effective after reboot
    rc, out, _ = node.smi("mig", "-cgi", "19,19,14,9")
    assert rc == 255
    assert out.endswith("Unable to create a GPU instance on GPU  0 using profile 9: Insufficient Resources\n"
                        "Failed to create GPU instances: Insufficient Resources\n")
    node.smi("mig", "-dgi")
    assert node.smi("mig", "-cgi", "9,19,19,14")[0] == 0  # 3g first fits 3+1+1+2


def test_mig_explicit_placement(h200):
    h200.smi("-mig", "1", "-i", "0")
    assert h200.smi("mig", "-i", "0", "-cgi", "19:6")[0] == 0
    rc, out, _ = h200.smi("mig", "-i", "0", "-cgi", "9:4")
    assert rc == 255 and "Insufficient Resources" in out
    rc, out, _ = h200.smi("mig", "-i", "0", "-cgi", "9:3")
    assert rc == 2 and "Invalid Argument" in out
    rc, out, _ = h200.smi("mig", "-i", "0", "-cgi", "9", euid=1000)
    assert rc == 4 and "Insufficient Permissions" in out


def test_mig_not_supported_on_spark(tmp_path):
    node = Node(tmp_path, model="dgx-spark", driver="580.95.05")
    assert node.smi("mig", "-lgip") == (0, "No MIG-supported devices found.\n", "")
    rc, out, _ = node.smi("-mig", "1")
    assert rc == 0 and out == ("Unable to enable MIG Mode for GPU 0000000F:01:00.0: Not Supported\n"
                               "Treating as warning and moving on.\nAll done.\n")


# ---------------------------------------------------------------- models

@pytest.mark.parametrize("model,count,name,mem,plimits", [
    ("dgx-a100-40gb", 8, "NVIDIA A100-SXM4-40GB", "40960 MiB", ("100.00 W", "400.00 W")),
    ("dgx-a100-80gb", 8, "NVIDIA A100-SXM4-80GB", "81920 MiB", ("100.00 W", "400.00 W")),
    ("dgx-h100", 8, "NVIDIA H100 80GB HBM3", "81559 MiB", ("200.00 W", "700.00 W")),
    ("dgx-h200", 8, "NVIDIA H200", "143771 MiB", ("200.00 W", "700.00 W")),
    ("dgx-spark", 1, "NVIDIA GB10", "[N/A]", ("[N/A]", "[N/A]")),
])
def test_models(tmp_path, model, count, name, mem, plimits):
    node = Node(tmp_path, model=model, driver="580.95.05")
    rows = q(node, "name,memory.total,power.min_limit,power.max_limit")
    assert len(rows) == count
    assert rows[0] == [name, mem, plimits[0], plimits[1]]
    rc, out, _ = node.smi("topo", "-m")
    row0 = out.split("\n")[1].split("\t")
    if count == 8:
        assert row0[1:9] == [" X "] + ["NV12" if "a100" in model else "NV18"] * 7


# ---------------------------------------------------------------- state, reboot, factory reset

def test_reboot_semantics(h200):
    h200.smi("-pm", "1")
    h200.smi("-pl", "450", "-i", "1")
    h200.smi("-c", "3", "-i", "1")
    h200.smi("-e", "0", "-i", "1")
    h200.smi("-ac", "3201,1410", "-i", "1")
    before = q(h200, "persistence_mode,power.limit,compute_mode,ecc.mode.current,ecc.mode.pending", "-i", "1")
    assert before == [["Enabled", "450.00 W", "Exclusive_Process", "Enabled", "Disabled"]]
    uuid = q(h200, "uuid", "-i", "1")
    h200.admin("reset")
    after = q(h200, "persistence_mode,power.limit,compute_mode,ecc.mode.current,ecc.mode.pending,"
                    "clocks.applications.graphics", "-i", "1")
    assert after == [["Disabled", "700.00 W", "Default", "Disabled", "Disabled", "1980 MHz"]]
    assert q(h200, "uuid", "-i", "1") == uuid
    h200.admin("factory-reset")
    assert q(h200, "ecc.mode.current", "-i", "1") == [["Enabled"]]


def test_state_file_is_json_and_persists(h200):
    h200.smi("-pl", "321", "-i", "4")
    st = h200.state()
    assert st["gpus"][4]["power_limit"] == 321.0 and st["model"] == "dgx-h200"
    rc, out = h200.admin("show")
    assert json.loads(out)["gpus"][4]["power_limit"] == 321.0


def test_init_refuses_change_without_force(h200):
    with pytest.raises(SystemExit):
        h200.admin("init", "--model", "dgx-h100", "--driver", "580.95.05")
    rc, out = h200.admin("init", "--model", "dgx-h100", "--driver", "580.95.05", "--force")
    assert rc == 0 and h200.state()["model"] == "dgx-h100"


def test_first_call_initialises_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("DGXOPS_SIM_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("DGXOPS_SIM_NODE_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.setenv("DGXOPS_SIM_MODEL", "dgx-a100-80gb")
    monkeypatch.setenv("DGXOPS_SIM_DRIVER", "535.183.01")
    from dgxops.sim.fakesmi import cli
    assert cli.main(["-L"], euid=0) == 0
    st = json.loads((tmp_path / "state.json").read_text())
    assert st["model"] == "dgx-a100-80gb" and st["driver"] == "535.183.01"


def test_first_call_initialises_from_node_json(tmp_path, monkeypatch):
    cfg = tmp_path / "node.json"
    cfg.write_text(json.dumps({"model": "dgx-spark", "driver": "580.95.05"}))
    monkeypatch.setenv("DGXOPS_SIM_STATE_DIR", str(tmp_path / "st"))
    monkeypatch.setenv("DGXOPS_SIM_NODE_CONFIG", str(cfg))
    from dgxops.sim.fakesmi import cli
    assert cli.main(["-L"], euid=0) == 0
    assert json.loads((tmp_path / "st" / "state.json").read_text())["model"] == "dgx-spark"


# ---------------------------------------------------------------- faults

def test_fault_driver_not_loaded(h200):
    h200.admin("fault", "set", "driver-not-loaded")
    rc, out, err = h200.smi("-L")
    assert rc == 9 and out.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    h200.admin("fault", "clear", "driver-not-loaded")
    assert h200.smi("-L")[0] == 0


def test_fault_gpu_lost(h200):
    h200.admin("fault", "set", "gpu-lost", "--gpu", "2")
    rc, out, _ = h200.smi("--query-gpu=index", "--format=csv,noheader")
    assert rc == 15
    lines = out.strip().split("\n")
    assert lines[2] == ("Unable to determine the device handle for GPU 0000:3A:00.0: GPU is lost.  "
                        "Reboot the system to recover this GPU")
    assert lines[3] == "3"
    assert h200.smi("-pl", "300", "-i", "2")[0] == 15
    assert h200.smi("--query-gpu=index", "--format=csv", "-i", "1")[0] == 0


def test_fault_unknown_error_field(h200):
    h200.admin("fault", "set", "unknown-error", "--gpu", "1", "--field", "power.draw")
    rows = q(h200, "index,power.draw", "-i", "0,1")
    assert rows[1] == ["1", "[Unknown Error]"] and rows[0][1].endswith(" W")


def test_fault_busy_lists_process(h200):
    h200.admin("fault", "set", "busy", "--gpu", "5")
    rc, out, _ = h200.smi("--query-compute-apps=pid,process_name,used_gpu_memory,gpu_bus_id", "--format=csv")
    assert out.split("\n")[0] == "pid, process_name, used_gpu_memory [MiB], gpu_bus_id"
    assert out.split("\n")[1].endswith(", /usr/bin/python3, 2048 MiB, 00000000:AB:00.0")
    h200.admin("fault", "clear", "busy")
    assert h200.smi("--query-compute-apps=pid", "--format=csv,noheader")[1] == ""


# ---------------------------------------------------------------- real process: exit codes, streams, hang

def _run(tmp_path, *args, timeout=20):
    env = dict(os.environ, DGXOPS_SIM_STATE_DIR=str(tmp_path), PYTHONPATH=os.path.join(ROOT, "src"))
    return subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi"] + list(args), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)


def _admin(tmp_path, *args):
    env = dict(os.environ, DGXOPS_SIM_STATE_DIR=str(tmp_path), PYTHONPATH=os.path.join(ROOT, "src"))
    return subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi.admin"] + list(args), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=20)


def test_subprocess_exit_codes_and_streams(tmp_path):
    assert _admin(tmp_path, "init", "--model", "dgx-h200", "--driver", "580.159.04").returncode == 0
    p = _run(tmp_path, "--query-gpu=index,name,power.limit,mig.mode.current", "--format=csv", "-i", "0")
    assert (p.returncode, p.stdout, p.stderr) == (
        0, "index, name, power.limit [W], mig.mode.current\n0, NVIDIA H200, 700.00 W, Disabled\n", "")
    p = _run(tmp_path, "-pl", "9999")
    assert p.returncode == 2 and "Terminating early due to previous errors." in p.stdout
    p = _run(tmp_path, "-i", "7", "--query-gpu=index", "--format=csv", "-i", "99")
    assert (p.returncode, p.stdout) == (6, "No devices were found\n")
    p = _run(tmp_path, "--bogus")
    assert p.returncode == 255
    _admin(tmp_path, "fault", "set", "driver-not-loaded")
    p = _run(tmp_path, "-q")
    assert p.returncode == 9 and "couldn't communicate with the NVIDIA driver" in p.stdout


def test_subprocess_hang_until_timeout(tmp_path):
    _admin(tmp_path, "init", "--model", "dgx-h100", "--driver", "580.95.05")
    _admin(tmp_path, "fault", "set", "hang")
    t0 = time.time()
    with pytest.raises(subprocess.TimeoutExpired):
        _run(tmp_path, "-L", timeout=1.5)
    assert time.time() - t0 < 10
    _admin(tmp_path, "fault", "clear", "hang")
    assert _run(tmp_path, "-L").returncode == 0


def test_subprocess_non_root_reader_of_root_state(tmp_path):
    """A non-root caller can query (real nvidia-smi lets it) and is refused setters with exit 4."""
    _admin(tmp_path, "init", "--model", "dgx-h200", "--driver", "580.95.05")
    from dgxops.sim.fakesmi import cli
    os.environ["DGXOPS_SIM_STATE_DIR"] = str(tmp_path)
    assert cli.main(["--query-gpu=persistence_mode", "--format=csv,noheader", "-i", "0"], euid=65534) == 0
    assert cli.main(["-pm", "1", "-i", "0"], euid=65534) == 4


def test_mig_tables_are_rectangular(h200):
    h200.smi("-mig", "1", "-i", "0")
    h200.smi("mig", "-cgi", "9,14,19,19", "-C")
    h200.smi("mig", "-cgi", "19", "-i", "0")
    for args in (("mig", "-lgip"), ("mig", "-lgi"), ("mig", "-lci"), ("mig", "-lcip"), ("-i", "0")):
        rc, out, _ = h200.smi(*args)
        assert rc == 0, (args, out)
        box = [x for x in out.split("\n") if x.startswith(("|", "+"))]
        assert len({len(x) for x in box}) == 1, (args, out)
