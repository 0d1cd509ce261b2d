"""Verify the simulated H200 node's nvidia-smi: persisted state, real messages and exit codes."""

import json


def query(host, fields, gpu=None):
    cmd = "nvidia-smi --query-gpu=%s --format=csv,noheader" % fields
    if gpu is not None:
        cmd += " -i %s" % gpu
    return host.check_output(cmd).splitlines()


def test_header_and_rows_as_real(host):
    out = host.check_output("nvidia-smi --query-gpu=index,name,power.limit,mig.mode.current --format=csv").splitlines()
    assert out[0] == "index, name, power.limit [W], mig.mode.current"
    assert out[1] == "0, NVIDIA H200, 500.00 W, Disabled"
    assert out[2] == "1, NVIDIA H200, 700.00 W, Disabled"
    assert len(out) == 9


def test_state_file_holds_the_setting(host):
    state = json.loads(host.file("/var/lib/dgxops-sim/state.json").content_string)
    assert state["model"] == "dgx-h200"
    assert [g["power_limit"] for g in state["gpus"]] == [500.0] + [700.0] * 7


def test_out_of_range_is_refused_with_the_real_message(host):
    res = host.run("nvidia-smi -i 1 -pl 9999")
    assert res.rc == 2
    assert "Provided power limit 9999.00 W is not a valid power limit which should be between 200.00 W and 700.00 W" in res.stdout
    assert query(host, "power.limit", 1) == ["700.00 W"]


def test_non_root_gets_insufficient_permissions(host):
    res = host.run("sudo -u nobody nvidia-smi -i 1 -pl 500")
    assert res.rc == 4
    assert "Insufficient Permissions" in res.stdout + res.stderr
    assert query(host, "power.limit", 1) == ["700.00 W"]


def test_h200_mig_profiles(host):
    out = host.check_output("nvidia-smi mig -lgip")
    assert "MIG 1g.18gb         19     7/7        16.00" in out
    assert "MIG 7g.141gb         0     1/1" in out


def test_reboot_drops_the_power_limit(host):
    """Last: a real GPU forgets -pl at reboot, so the simulated one does too."""
    host.check_output("dgxops-sim reset")
    assert query(host, "power.limit", 0) == ["700.00 W"]
