"""Verify the mig scenario on the simulated nodes (testinfra, docker backend).

The simulator's state file (`dgxops-sim show`) is the oracle, with what nvidia-smi, the local
fact, systemd and the device nodes report. Tests run host by host, top to bottom:

- the converged state: the GPU clients stopped and started around the MIG mode change (the log of
  prepare.yml's stand-ins), the instances and their placements, the MIG devices nvidia-smi lists,
  the local fact, the boot units, the device nodes each group got and the DeviceFileModify flags;
- a simulated reboot (`dgxops-sim reset`): the boot units re-create the layout and the device
  grants, and the role run again (run_role.yml) changes nothing;
- on the DGX A100 only: a layout change refused on a busy GPU without force, applied with force,
  then MIG disabled (twice: the second run changes nothing). The a100_changes fixture puts the node
  back afterwards (the converged layout, the device nodes and the client log as they were), so
  verify can run again after a fresh converge.
"""

import base64
import json
import os
import re
import sys

import pytest

SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(SCENARIO, "..", "shared"))

from role_runs import run_playbook  # noqa: E402

CLIENTS_LOG = "/var/log/dgxops-gpu-clients.log"
CAPS_PROC = "/var/lib/dgxops-sim/proc/driver/nvidia/capabilities"
WANT = {
    "mig-a100": {"devices": 56, "per_gpu": [7, 7, 7, 7, 7, 7, 7, 7]},
    "mig-h100": {"devices": 16, "per_gpu": [4, 4, 4, 4, 0, 0, 0, 0]},
    "mig-h200": {"devices": 8, "per_gpu": [1, 1, 1, 1, 1, 1, 1, 1]},
}
# the stand-ins of prepare.yml; the fabric manager is stopped on the DGX A100 (NVSwitch) only
CLIENTS = ["nvidia-dcgm.service", "nvidia-dcgm-exporter.service", "nvsm.service", "nvidia-fabricmanager.service",
           "tenant-inference.service"]
NOT_STOPPED = {"mig-a100": [], "mig-h100": ["nvidia-fabricmanager.service"],
               "mig-h200": ["nvidia-fabricmanager.service"]}
# mig_device_access of the host (molecule.yml) as {GPU index: {GI profile id or '*': group}}
# (H100: 19 = 1g.10gb, 14 = 2g.20gb, 9 = 3g.40gb)
GRANTS = {
    "mig-a100": {0: {"*": "tenant-a"}},
    "mig-h100": {0: {19: "tenant-a", 14: "tenant-b", 9: "tenant-b"}, 1: {19: "tenant-a", 14: "tenant-b", 9: "tenant-b"}},
    "mig-h200": {},
}
# the GPUs whose capabilities the grants lock (DeviceFileModify 0)
MANAGED_CAPS = {"mig-a100": r"^gpu0/", "mig-h100": r"^gpu[01]/"}
LIST_NODES = r"""
for f in /dev/nvidia-caps/* /dev/nvidia[0-9]*; do
  [ -e "$f" ] || continue
  [ -c "$f" ] || { echo "$f not-a-char-device"; continue; }
  stat -c '%n %t:%T %U:%G %a' "$f"
done
"""
BUSY_PID = 7777
DEVICE_UNIT = "dgxops-mig-devices.service"
# up to 60 s for the device unit to start (a new start timestamp) and finish (no job left)
WAIT_DEVICE_UNIT = ("for i in $(seq 300); do"
                    " [ \"$(systemctl show -p ExecMainStartTimestampMonotonic --value " + DEVICE_UNIT + ")\" != \"%s\" ]"
                    " && [ -z \"$(systemctl list-jobs --no-legend " + DEVICE_UNIT + ")\" ] && break; sleep 0.2; done")


def name_of(host):
    return host.backend.get_hostname()


def sim_state(host):
    return json.loads(host.check_output("dgxops-sim show"))


def device_unit_started(host):
    return host.check_output("systemctl show -p ExecMainStartTimestampMonotonic --value %s" % DEVICE_UNIT)


def instances_per_gpu(state):
    return [len(g["gpu_instances"]) for g in state["gpus"]]


def expected_caps(name, state):
    """The capability nodes the grants give, from a simulator state: the driver's numbering
    nvidia-cap<3 + 135*gpu + 9*gi (+ 1 + ci)>, major 508 (0x1fc)."""
    grants = GRANTS[name]
    out = {}
    for gpu in state["gpus"]:
        if gpu["index"] not in grants:
            continue
        for gi in gpu["gpu_instances"]:
            group = grants[gpu["index"]].get(gi["profile"]) or grants[gpu["index"]]["*"]
            minor = 3 + 135 * gpu["index"] + 9 * gi["id"]
            out["/dev/nvidia-caps/nvidia-cap%d" % minor] = "1fc:%x root:%s 440" % (minor, group)
            for ci in gi["compute_instances"]:
                cminor = minor + 1 + ci["id"]
                out["/dev/nvidia-caps/nvidia-cap%d" % cminor] = "1fc:%x root:%s 440" % (cminor, group)
    return out


def device_nodes(host, command=LIST_NODES):
    """{path: 'major:minor owner:group mode'} of the MIG capability and whole-GPU device nodes."""
    out = host.check_output(command)
    return dict(line.split(" ", 1) for line in out.splitlines())


def run_role(host, extra=None):
    return run_playbook(os.path.join(SCENARIO, "run_role.yml"), extra, limit=name_of(host))


# ---------------------------------------------------------------- the converged state

def test_clients_stopped_and_started_around_the_mode_change(host):
    # converge enabled MIG on GPU 0 of every node: each client the role should stop was stopped
    # while GPU 0's MIG mode was still Disabled and started again once it was Enabled, exactly
    # once (idempotence changed no mode, so nothing more); the fabric manager of the Hopper nodes
    # was left alone
    name = name_of(host)
    log = host.file(CLIENTS_LOG).content_string.splitlines()
    for unit in CLIENTS:
        want = [] if unit in NOT_STOPPED[name] else ["stop %s Disabled" % unit, "start %s Enabled" % unit]
        assert [line for line in log if " %s " % unit in line] == want, log


def test_client_log_holds_only_those_units_and_all_run_again(host):
    name = name_of(host)
    log = host.file(CLIENTS_LOG).content_string.splitlines()
    stopped = len(CLIENTS) - len(NOT_STOPPED[name])
    # nothing else in the log, every stop before every start
    assert [line.split()[0] for line in log] == ["stop"] * stopped + ["start"] * stopped, log
    active = host.run("systemctl is-active %s" % " ".join(CLIENTS)).stdout.splitlines()
    assert active == ["active"] * len(CLIENTS)


def test_gpu_instances_in_the_simulator_state(host):
    want = WANT[name_of(host)]
    gpus = sim_state(host)["gpus"]
    assert [len(g["gpu_instances"]) for g in gpus] == want["per_gpu"]
    assert sum(len(gi["compute_instances"]) for g in gpus for gi in g["gpu_instances"]) == want["devices"]


def test_h100_placements(host):
    # 3g at slice 4, 2g at 0, 1g at 2 and 3; GPUs 4-7 whole
    if name_of(host) != "mig-h100":
        pytest.skip("DGX H100 only")
    gpus = sim_state(host)["gpus"]
    placed = sorted(gpus[0]["gpu_instances"], key=lambda gi: gi["start"])
    assert [gi["start"] for gi in placed] == [0, 2, 3, 4]
    assert [gi["profile"] for gi in placed] == [14, 19, 19, 9]
    assert gpus[4]["mig_current"] is False
    assert gpus[0]["mig_current"] is True


def test_h200_holds_one_1g_18gb_me_instance_per_gpu(host):
    # all-1g.18gb.me: one 1g.18gb+me (profile 20, one memory slice) on each of the 8 GPUs, nothing else
    if name_of(host) != "mig-h200":
        pytest.skip("DGX H200 only")
    lgi = host.check_output("nvidia-smi mig -lgi").splitlines()
    # the table rows of `nvidia-smi mig -lgi`: | GPU  MIG <name>  <profile id>  <GI id>  <start>:<size> |
    rows = [line for line in lgi if re.search(r"^[|]\s+\d+\s+MIG ", line)]
    assert len(rows) == 8, lgi
    assert [int(row.split()[1]) for row in rows] == list(range(8)), lgi
    assert len([row for row in rows if re.search(r"MIG 1g[.]18gb[+]me\s+20\s+\d+\s+\d:1\s", row)]) == 8, lgi
    instances = [gi for g in sim_state(host)["gpus"] for gi in g["gpu_instances"]]
    assert {gi["profile"] for gi in instances} == {20}
    assert [len(gi["compute_instances"]) for gi in instances] == [1] * 8


def test_nvidia_smi_lists_the_mig_devices(host):
    listed = host.check_output("nvidia-smi -L").splitlines()
    assert len([line for line in listed if line.startswith("  MIG")]) == WANT[name_of(host)]["devices"], listed


def test_local_fact_counts_the_mig_devices(host):
    want = WANT[name_of(host)]
    fact = json.loads(host.file("/etc/ansible/facts.d/dgxops_mig.fact").content_string)
    assert fact["mig_devices"] == want["devices"]
    assert [g["devices"] for g in fact["gpus"]] == want["per_gpu"]


def test_boot_units_are_installed_and_enabled(host):
    # the device permission unit only where mig_device_access grants something (not on mig-h200)
    units = ["dgxops-mig.service"] + (["dgxops-mig-devices.service"] if GRANTS[name_of(host)] else [])
    enabled = host.run("systemctl is-enabled %s" % " ".join(units)).stdout.splitlines()
    assert enabled == ["enabled"] * len(units)


def test_each_group_got_exactly_its_instances(host):
    # and GPU 4 of the H100 whole to tenant-c; no other capability or GPU node
    name = name_of(host)
    want = expected_caps(name, sim_state(host))
    if name == "mig-h100":
        want["/dev/nvidia4"] = "c3:4 root:tenant-c 660"
    actual = device_nodes(host)
    assert actual == want, {k: (v, want.get(k)) for k, v in actual.items() if want.get(k) != v}


def test_granted_capabilities_are_locked_and_the_others_keep_the_driver_default(host):
    # DeviceFileModify 0 for the granted GPUs' capabilities (nvidia-modprobe keeps the grants), 1 elsewhere
    out = host.check_output("grep -r DeviceFileModify %s" % CAPS_PROC)
    lines = sorted(line[len(CAPS_PROC) + 1:] if line.startswith(CAPS_PROC + "/") else line for line in out.splitlines())
    managed = MANAGED_CAPS.get(name_of(host), r"^none$")
    assert [line for line in lines if re.search(managed, line) and line.endswith(" 1")] == [], lines
    assert [line for line in lines if line.startswith("gpu") and not re.search(managed, line)
            and line.endswith(" 0")] == [], lines
    assert [line for line in lines if line.startswith("gpu0/")], lines
    assert "mig/config:DeviceFileModify: 1" in lines


# ---------------------------------------------------------------- reboot: the boot units

def test_boot_units_recreate_the_layout_after_a_reboot(host):
    name = name_of(host)
    before = sim_state(host)
    # reboot the simulated GPUs: instances lost; Hopper also loses MIG mode
    host.check_output("dgxops-sim reset")
    assert [gi for g in sim_state(host)["gpus"] for gi in g["gpu_instances"]] == []
    if GRANTS[name]:
        # the capability nodes as nvidia-modprobe would make them
        host.check_output("chown root:root /dev/nvidia-caps/* && chmod 0444 /dev/nvidia-caps/*")
    # the boot unit (it wants the device unit, which runs after it: systemctl waits for the boot
    # unit only, so wait until the device unit has started since and its job is done)
    started = device_unit_started(host)
    host.check_output("systemctl restart dgxops-mig.service")
    if GRANTS[name]:
        host.run(WAIT_DEVICE_UNIT % started)
        assert device_unit_started(host) != started, "%s did not run after the boot unit" % DEVICE_UNIT
        assert host.check_output("systemctl list-jobs --no-legend %s" % DEVICE_UNIT) == ""
        assert host.check_output("systemctl show -p Result --value %s" % DEVICE_UNIT) == "success"
    booted = sim_state(host)
    assert instances_per_gpu(booted) == WANT[name]["per_gpu"]
    assert [g["mig_current"] for g in booted["gpus"]] == [g["mig_current"] for g in before["gpus"]]
    if GRANTS[name]:
        # the device unit gave the groups their re-created instances again
        actual = device_nodes(host, "stat -c '%n %t:%T %U:%G %a' /dev/nvidia-caps/*")
        for path, want in expected_caps(name, booted).items():
            assert actual.get(path, "absent") == want, path


def test_role_rerun_after_the_boot_units_changes_nothing(host):
    run = run_role(host)
    assert run.rc == 0, run.stdout[-4000:]
    assert run.result["mig_applied_changed"] is False, run.result
    assert run.result["mig_devices_changed"] is False, run.result


# ---------------------------------------------------------------- DGX A100: layout change, busy GPU, MIG off

@pytest.fixture(scope="module")
def a100_changes(host):
    """The DGX A100's converged state, put back after the tests that change it: the converged
    layout (the role run again with the scenario's settings), the device nodes as they were (the
    nodes the changes added removed) and the GPU clients' log."""
    if name_of(host) != "mig-a100":
        pytest.skip("DGX A100 only")
    layout = [[(gi["profile"], gi["start"]) for gi in g["gpu_instances"]] for g in sim_state(host)["gpus"]]
    nodes = device_nodes(host)
    log = host.file(CLIENTS_LOG).content_string
    yield
    host.check_output("dgxops-sim process remove --pid %d" % BUSY_PID)
    back = run_role(host)
    assert back.rc == 0, back.stdout[-4000:]
    for path in sorted(set(device_nodes(host)) - set(nodes)):
        host.check_output("rm -f %s" % path)
    host.check_output("echo %s | base64 -d > %s" % (base64.b64encode(log.encode()).decode(), CLIENTS_LOG))
    assert [[(gi["profile"], gi["start"]) for gi in g["gpu_instances"]] for g in sim_state(host)["gpus"]] == layout
    assert device_nodes(host) == nodes
    assert host.file(CLIENTS_LOG).content_string == log


def test_a100_busy_gpu_refused_without_force(host, a100_changes):
    host.check_output("dgxops-sim process add --gpu 3 --name spark-executor --pid %d" % BUSY_PID)
    before = sim_state(host)["gpus"]
    run = run_role(host, {"mig_layout_name": "all-balanced"})
    assert run.rc != 0, run.stdout[-4000:]
    assert any("GPU 3 (NVIDIA A100-SXM4-40GB) has running compute processes (pid 7777 spark-executor)" in msg
               for msg in run.failures), run.failures or run.stdout[-4000:]
    # no GPU was changed
    assert sim_state(host)["gpus"] == before


def test_a100_force_applies_the_balanced_layout_on_the_busy_gpu(host, a100_changes):
    assert [p["pid"] for p in sim_state(host)["processes"] if p["gpu"] == 3] == [BUSY_PID]
    run = run_role(host, {"mig_layout_name": "all-balanced", "mig_force": True})
    assert run.rc == 0, run.stdout[-4000:]
    state = sim_state(host)
    # every GPU holds 3g + 2g + 2 x 1g at the planned slices
    for gpu in state["gpus"]:
        placed = sorted(gpu["gpu_instances"], key=lambda gi: gi["start"])
        assert [gi["profile"] for gi in placed] == [14, 19, 19, 9], gpu["index"]
        assert [gi["start"] for gi in placed] == [0, 2, 3, 4], gpu["index"]
    # tenant-a has GPU 0's new instances; the old ones that are gone are root-only
    want = expected_caps("mig-a100", state)
    actual = device_nodes(host, "stat -c '%n %t:%T %U:%G %a' /dev/nvidia-caps/*")
    assert len(want) == 8
    assert {path: actual.get(path) for path in want} == want, actual
    assert {value.split(" ", 1)[1] for path, value in actual.items() if path not in want} == {"root:root 400"}, actual


def test_a100_disable_mig(host, a100_changes):
    host.check_output("dgxops-sim process remove")
    run = run_role(host, {"mig_layout_name": "all-disabled"})
    assert run.rc == 0, run.stdout[-4000:]
    gpus = sim_state(host)["gpus"]
    # MIG off with no instances and no reboot pending
    assert {g["mig_current"] for g in gpus} == {False}
    assert {g["mig_pending"] for g in gpus} == {False}
    assert [gi for g in gpus for gi in g["gpu_instances"]] == []
    assert run.result["mig_applied_reboot_required"] is False, run.result
    # GPU 0 is granted whole (/dev/nvidia0) and no capability node is left open
    lines = host.check_output("stat -c '%n %t:%T %U:%G %a' /dev/nvidia-caps/* /dev/nvidia0").splitlines()
    assert "/dev/nvidia0 c3:0 root:tenant-a 440" in lines
    assert [line for line in lines if line.startswith("/dev/nvidia-caps/") and not line.endswith(" root:root 400")] == []
    # disabling again changes nothing
    again = run_role(host, {"mig_layout_name": "all-disabled"})
    assert again.rc == 0, again.stdout[-4000:]
    assert again.result["mig_applied_changed"] is False, again.result
    assert again.result["mig_devices_changed"] is False, again.result
