"""Verify the gpu_tuning scenario on the simulated nodes (testinfra, docker backend).

The simulator's state file (`dgxops-sim show`) is the oracle: tests assert on it, not only on
Ansible's output.
"""

import json
import os
import subprocess
import tempfile

import pytest

UNIT = "dgxops-gpu-tuning.service"
DROPIN_DIR = "/etc/systemd/system/nvidia-persistenced.service.d"
DROPIN = DROPIN_DIR + "/dgxops.conf"  # the nvidia_driver role's (the nvidia_persistenced module writes it)
OLD_DROPIN = DROPIN_DIR + "/dgxops-persistence-mode.conf"  # written by gpu_tuning before
SCENARIO = os.path.join(os.path.dirname(__file__), "..")


def sim_state(host):
    return json.loads(host.check_output("dgxops-sim show"))


def name_of(host):
    return host.backend.get_hostname()


def run_playbook(playbook, limit, extra=None, check=False):
    argv = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
            os.path.join(SCENARIO, playbook), "--limit", limit]
    if extra:
        argv += ["-e", json.dumps(extra)]
    if check:
        argv.append("--check")
    return subprocess.run(argv, capture_output=True, text=True, env=os.environ.copy(), check=False)


def expect_a100(state):
    assert [g["power_limit"] for g in state["gpus"]] == [300.0] * 8
    assert [g["persistence_mode"] for g in state["gpus"]] == [True] * 8


def expect_h100(state):
    assert [g["power_limit"] for g in state["gpus"]] == [595.0] * 8  # 85 % of 700 W
    assert [g["persistence_mode"] for g in state["gpus"]] == [True] * 8
    assert [g["compute_mode"] for g in state["gpus"]] == ["Exclusive_Process"] * 8
    assert [g["locked_clocks"] for g in state["gpus"]] == [[1410, 1980]] * 8


EXPECT = {"gpu-a100": expect_a100, "gpu-h100": expect_h100}


def test_gpus_are_in_the_declared_state(host):
    EXPECT[name_of(host)](sim_state(host))


def test_nvidia_smi_reports_the_declared_state(host):
    out = host.check_output("nvidia-smi --query-gpu=persistence_mode,power.limit,compute_mode "
                            "--format=csv,noheader,nounits")
    rows = set(out.splitlines())
    if name_of(host) == "gpu-a100":
        assert rows == {"Enabled, 300.00, Default"}
    else:
        assert rows == {"Enabled, 595.00, Exclusive_Process"}


def test_boot_unit_is_enabled_and_ordered(host):
    unit = host.service(UNIT)
    assert unit.is_enabled
    assert host.run("systemctl is-active %s" % UNIT).stdout.strip() == "active"
    after = host.check_output("systemctl show -p After --value %s" % UNIT).split()
    assert "nvidia-persistenced.service" in after
    assert "nvidia-fabricmanager.service" in after
    before = host.check_output("systemctl show -p Before --value %s" % UNIT).split()
    assert "slurmd.service" in before
    assert host.check_output("systemctl show -p Type --value %s" % UNIT) == "oneshot"
    assert host.file("/etc/systemd/system/%s" % UNIT).mode == 0o644


def execstart_dropins(host):
    """Drop-ins of nvidia-persistenced.service that set a non-empty ExecStart.

    Two sources: every *.conf in the /etc drop-in directory, and every drop-in systemd itself
    loaded (DropInPaths, which also covers /run and /usr/lib). Both must agree.
    """
    listed = host.run("ls -1 %s/*.conf" % DROPIN_DIR).stdout.split()
    loaded = host.check_output("systemctl show -p DropInPaths --value nvidia-persistenced.service").split()
    found = set()
    for path in set(listed) | set(loaded):
        lines = host.file(path).content_string.splitlines()
        if any(line.startswith("ExecStart=") and line.strip() != "ExecStart=" for line in lines):
            found.add(path)
    return found, sorted(loaded)


def persistenced_argv(host):
    """The argv systemd runs for nvidia-persistenced (after every drop-in is applied)."""
    out = host.check_output("systemctl show -p ExecStart --value nvidia-persistenced.service")
    return out.split("argv[]=", 1)[1].split(" ;", 1)[0].split()


def test_persistence_method_matches_the_node(host):
    dropin = host.file(DROPIN)
    script = host.file("/usr/local/libexec/dgxops/gpu-tuning-apply").content_string
    assert not host.file(OLD_DROPIN).exists
    if name_of(host) == "gpu-h100":
        assert dropin.exists
        assert dropin.mode == 0o644
        # the nvidia_driver role's drop-in (its text is the nvidia_persistenced module's), not a gpu_tuning one
        assert "Managed by Ansible: dgxops.fleet.nvidia_driver" in dropin.content_string
        assert persistenced_argv(host) == [
            "/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced", "--persistence-mode", "--verbose"]
        # only ONE drop-in replaces ExecStart: a second would win or lose by file name, silently
        found, loaded = execstart_dropins(host)
        assert found == {DROPIN}
        assert loaded == [DROPIN]
        assert host.service("nvidia-persistenced").is_running
        assert " -pm " not in script  # the daemon keeps persistence, not the deprecated flag
        assert "Wants=nvidia-persistenced.service" in host.file("/etc/systemd/system/%s" % UNIT).content_string
    else:
        assert not dropin.exists
        assert " -pm 1" in script


def test_upgrade_removes_the_old_gpu_tuning_dropin(host):
    """A node converged by the earlier gpu_tuning (its own drop-in, here from a run with persistence
    off) ends with the one nvidia_driver drop-in and the daemon restarted with it."""
    if name_of(host) != "gpu-h100":
        pytest.skip("the daemon node")
    host.check_output("rm -f %s" % DROPIN)
    host.check_output(
        "printf '[Service]\\nExecStart=\\nExecStart=/usr/bin/nvidia-persistenced --no-persistence-mode --verbose\\n'"
        " > %s" % OLD_DROPIN)
    host.check_output("systemctl daemon-reload && systemctl restart nvidia-persistenced.service")
    assert persistenced_argv(host)[1] == "--no-persistence-mode"  # the old drop-in is in effect
    assert {g["persistence_mode"] for g in sim_state(host)["gpus"]} == {False}
    first = run_playbook("converge.yml", "gpu-h100")
    assert first.returncode == 0, first.stdout + first.stderr
    assert not host.file(OLD_DROPIN).exists
    found, loaded = execstart_dropins(host)
    assert found == {DROPIN} and loaded == [DROPIN]
    assert "--persistence-mode" in persistenced_argv(host)
    assert host.service("nvidia-persistenced").is_running
    expect_h100(sim_state(host))  # the daemon was restarted before the GPUs were read
    second = run_playbook("converge.yml", "gpu-h100")
    assert second.returncode == 0, second.stdout
    assert "changed=0" in second.stdout


def test_persistence_off_goes_through_the_same_dropin(host):
    """gpu_tuning_persistence_mode: false renders --no-persistence-mode into the one drop-in
    (before, the driver role's --persistence-mode drop-in could win); then back to on."""
    if name_of(host) != "gpu-h100":
        pytest.skip("the daemon node")
    try:
        off = run_playbook("converge.yml", "gpu-h100", {"gpu_tuning_persistence_mode": False})
        assert off.returncode == 0, off.stdout + off.stderr
        assert persistenced_argv(host) == [
            "/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced", "--no-persistence-mode", "--verbose"]
        assert execstart_dropins(host)[0] == {DROPIN}
        assert {g["persistence_mode"] for g in sim_state(host)["gpus"]} == {False}
    finally:
        on = run_playbook("converge.yml", "gpu-h100")
    assert on.returncode == 0, on.stdout + on.stderr
    assert "--persistence-mode" in persistenced_argv(host)
    expect_h100(sim_state(host))


def test_conflicting_driver_setting_fails_before_any_change(host):
    """Both roles write the one drop-in: different values for the host fail before a change."""
    if name_of(host) != "gpu-h100":
        pytest.skip("the daemon node")
    before = host.check_output("md5sum %s /var/lib/dgxops-sim/state.json" % DROPIN)
    proc = run_playbook("converge.yml", "gpu-h100",
                        {"gpu_tuning_persistence_mode": False, "nvidia_driver_persistence_mode": True})
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "nvidia_driver_persistence_mode" in output and "allowed" in output
    assert host.check_output("md5sum %s /var/lib/dgxops-sim/state.json" % DROPIN) == before


def test_reboot_restores_the_declared_state(host):
    """`dgxops-sim reset` is the reboot; then what systemd would start at boot, in order."""
    host.check_output("dgxops-sim reset")
    state = sim_state(host)
    assert {g["persistence_mode"] for g in state["gpus"]} == {False}
    assert {g["power_limit"] for g in state["gpus"]} == {400.0 if name_of(host) == "gpu-a100" else 700.0}
    if name_of(host) == "gpu-h100":
        host.check_output("systemctl restart nvidia-persistenced.service")
    host.check_output("systemctl restart %s" % UNIT)
    EXPECT[name_of(host)](sim_state(host))
    journal = host.check_output("journalctl -u %s -n 20 --no-pager" % UNIT)
    assert "8 GPU(s) in the declared state" in journal


def test_boot_unit_fails_visibly_when_a_gpu_is_lost(host):
    """A GPU that cannot be set makes the unit fail (visible in systemctl --failed), not pass silently."""
    if name_of(host) != "gpu-a100":
        pytest.skip("one node is enough")
    host.check_output("dgxops-sim reset")
    host.check_output("dgxops-sim fault set gpu-lost --gpu 3")
    try:
        res = host.run("systemctl restart %s" % UNIT)
        assert res.rc != 0
        assert host.run("systemctl is-failed %s" % UNIT).stdout.strip() == "failed"
        journal = host.check_output("journalctl -u %s -n 30 --no-pager" % UNIT)
        assert "GPU is lost" in journal
        assert "dgxops-gpu-tuning: nvidia-smi -i" in journal
    finally:
        host.check_output("dgxops-sim fault clear gpu-lost")
    host.check_output("systemctl restart %s" % UNIT)
    assert host.run("systemctl is-active %s" % UNIT).stdout.strip() == "active"
    expect_a100(sim_state(host))


def test_second_run_changes_nothing_and_check_mode_on_a_fresh_node(host):
    """Check mode on a factory-fresh A100 reports 8 GPUs to change and leaves the state untouched."""
    if name_of(host) != "gpu-a100":
        pytest.skip("the acceptance case is the DGX A100")
    # a fresh node: no boot unit, no script, GPUs at factory defaults
    host.check_output("systemctl disable --now %s" % UNIT)
    host.check_output("rm -f /etc/systemd/system/%s /usr/local/libexec/dgxops/gpu-tuning-apply" % UNIT)
    host.check_output("systemctl daemon-reload")
    host.check_output("dgxops-sim factory-reset")
    before = host.check_output("md5sum /var/lib/dgxops-sim/state.json")
    with tempfile.TemporaryDirectory() as tmp:
        result_file = os.path.join(tmp, "result.json")
        proc = run_playbook("check_mode.yml", "gpu-a100", {"gpu_tuning_result_file": result_file})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        with open(result_file) as handle:
            result = json.load(handle)
    assert result["changed_gpus"] == 8
    assert result["changes"] == 16  # power limit and persistence mode on each GPU
    assert {c["setting"] for g in result["gpus"] for c in g["changes"]} == {"power_limit_w", "persistence_mode"}
    assert {g["after"]["power_limit_w"] for g in result["gpus"]} == {300.0}
    assert host.check_output("md5sum /var/lib/dgxops-sim/state.json") == before
    assert not host.file("/etc/systemd/system/%s" % UNIT).exists  # check mode wrote nothing
    assert not host.file("/usr/local/libexec/dgxops/gpu-tuning-apply").exists
    # converge again: applies, then a second run reports nothing to change
    first = run_playbook("converge.yml", "gpu-a100")
    assert first.returncode == 0, first.stdout
    expect_a100(sim_state(host))
    second = run_playbook("converge.yml", "gpu-a100")
    assert second.returncode == 0, second.stdout
    assert "changed=0" in second.stdout
    assert host.service(UNIT).is_enabled


@pytest.mark.parametrize("extra, variable", [
    ({"gpu_tuning_power_limit_watts": 9999}, "gpu_tuning_power_limit_watts"),
    ({"gpu_tuning_power_limit_watts": -5}, "gpu_tuning_power_limit_watts"),
    ({"gpu_tuning_application_clocks": {"memory_mhz": 1593, "graphics_mhz": 1400}},
     "gpu_tuning_application_clocks.graphics_mhz"),
    ({"gpu_tuning_application_clocks": {"memory_mhz": 1000, "graphics_mhz": 1410}},
     "gpu_tuning_application_clocks.memory_mhz"),
    ({"gpu_tuning_gpus": ["GPU-00000000-0000-0000-0000-000000000000"]}, "gpu_tuning_gpus"),
    ({"gpu_tuning_gpus": ["0", "12"]}, "gpu_tuning_gpus[1]"),
    ({"gpu_tuning_locked_clocks": {"min_mhz": -1, "max_mhz": 1000}}, "gpu_tuning_locked_clocks.min_mhz"),
])
def test_bad_input_fails_before_any_gpu_changes(host, extra, variable):
    if name_of(host) != "gpu-a100":
        pytest.skip("one node is enough")
    before = host.check_output("md5sum /var/lib/dgxops-sim/state.json")
    proc = run_playbook("converge.yml", "gpu-a100", dict(extra, gpu_tuning_power_limit_watts=extra.get(
        "gpu_tuning_power_limit_watts", 250)))
    output = proc.stdout + proc.stderr  # ansible-core 2.21 prints failed results on stderr
    assert proc.returncode != 0
    assert variable in output
    assert "allowed" in output
    assert host.check_output("md5sum /var/lib/dgxops-sim/state.json") == before
