"""Verify nvidia_driver through real apt on a simulated DGX A100 (testinfra, docker backend).

State after molecule's prepare (fresh install: 550.127.05 proprietary) and converge (switch to
open at the same version) is checked first; the later tests run the role again with other
settings (tests are ordered: pytest runs them top to bottom) and end on branch 580.
"""

import json
import os
import subprocess

KVER = os.uname().release  # containers share the controller's kernel
OPEN_550 = {
    "nvidia-driver-550-open": "550.127.05-0ubuntu1",
    "nvidia-dkms-550-open": "550.127.05-0ubuntu1",
    "nvidia-utils-550": "550.127.05-0ubuntu1",
    "nvidia-fabricmanager-550": "550.127.05-1",
    "libnvidia-nscq-550": "550.127.05-1",
}
PROPRIETARY_550 = {
    "nvidia-driver-550": "550.127.05-0ubuntu1",
    "nvidia-dkms-550": "550.127.05-0ubuntu1",
    "nvidia-utils-550": "550.127.05-0ubuntu1",
    "nvidia-fabricmanager-550": "550.127.05-1",
    "libnvidia-nscq-550": "550.127.05-1",
}
OPEN_580 = {
    "nvidia-driver-580-open": "580.95.05-0ubuntu1",
    "nvidia-dkms-580-open": "580.95.05-0ubuntu1",
    "nvidia-utils-580": "580.95.05-0ubuntu1",
    "nvidia-fabricmanager": "580.95.05-1",
    "libnvidia-nscq": "580.95.05-1",
}
UNRELATED = {"dgxops-canary": "1.0-1", "nvidia-container-toolkit": "1.17.8-1"}
HERE = os.path.dirname(os.path.abspath(__file__))
DROPIN_DIR = "/etc/systemd/system/nvidia-persistenced.service.d"
DROPIN = DROPIN_DIR + "/dgxops.conf"  # the only drop-in replacing ExecStart (shared with gpu_tuning)


def dpkg_state(host):
    """{package: (status, version)} for every package dpkg knows (including config-files)."""
    out = host.check_output("dpkg-query -W -f='${db:Status-Abbrev}|${Package}|${Version}\\n'")
    state = {}
    for line in out.splitlines():
        status, name, version = line.split("|")
        state[name] = (status.strip(), version)
    return state


def nvidia_state(host):
    return {k: v for k, v in dpkg_state(host).items() if "nvidia" in k or k.startswith("cuda")}


def holds(host):
    return sorted(host.check_output("apt-mark showhold").split())


def run_role(extra, check=False, playbook="run_role.yml"):
    cmd = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
           os.path.join(HERE, "..", playbook), "-e", json.dumps(extra)]
    if check:
        cmd.append("--check")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False)
    return proc


def recap_changed(stdout):
    for line in stdout.splitlines():
        if "nvd-a100" in line and "changed=" in line:
            return int(line.split("changed=")[1].split()[0])
    raise AssertionError("no play recap in:\n" + stdout[-3000:])


def test_fresh_install_pinned_and_held_the_proprietary_set(host):
    after = json.loads(host.file("/root/dgxops-after-prepare.json").content_string)
    assert sorted(after["holds"]) == sorted(PROPRIETARY_550)
    for name, version in PROPRIETARY_550.items():
        assert after["packages"][name] == version
    assert "nvidia-driver-550-open" not in after["packages"]
    for name, version in UNRELATED.items():
        assert after["packages"][name] == version


def test_switch_installed_open_set_at_the_same_version(host):
    state = nvidia_state(host)
    for name, version in OPEN_550.items():
        assert state[name] == ("hi", version), name
    # fabric manager at the driver's exact upstream version
    assert state["nvidia-fabricmanager-550"][1].split("-")[0] == state["nvidia-driver-550-open"][1].split("-")[0]


def test_switch_purged_the_other_flavour_and_nothing_else(host):
    state = dpkg_state(host)
    for name in ("nvidia-driver-550", "nvidia-dkms-550"):
        assert name not in state, "%s left as %s" % (name, state.get(name))
    for name, version in UNRELATED.items():
        assert state[name] == ("ii", version)
    assert state["initramfs-tools"][0] == "ii"


def test_showhold_lists_exactly_the_pinned_set(host):
    assert holds(host) == sorted(OPEN_550)


def test_dkms_built_the_open_module_for_the_running_kernel(host):
    out = host.check_output("dkms status -m nvidia")
    assert out.strip() == "nvidia/550.127.05, %s, %s: installed" % (KVER, host.system_info.arch)
    assert host.file("/var/lib/dkms/nvidia/550.127.05/source/flavour").content_string.strip() == "open"


def test_modprobe_parses_the_options_and_blacklist(host):
    out = host.check_output("modprobe --showconfig -C /etc/modprobe.d")
    lines = set(out.splitlines())
    assert {
        "options nvidia NVreg_DeviceFileMode=0660",
        "options nvidia NVreg_RestrictProfilingToAdminUsers=0",
        "options nvidia NVreg_UsePageAttributeTable=1",
        "blacklist nouveau",
        "options nouveau modeset=0",
    } <= lines
    assert len([line for line in lines if line.startswith("options nvidia ")]) == 3
    conf = host.file("/etc/modprobe.d/nvidia.conf")
    assert conf.mode == 0o644 and conf.user == "root"
    assert conf.content_string.startswith("# Managed by Ansible: dgxops.fleet.nvidia_driver")


def test_initramfs_carries_the_blacklist(host):
    image = "/boot/initrd.img-%s" % KVER
    for path in ("etc/modprobe.d/blacklist-nouveau.conf", "etc/modprobe.d/nvidia.conf"):
        inside = host.check_output("tar -xOf %s %s" % (image, path))
        assert inside.strip() == host.file("/" + path).content_string.strip()
    assert "blacklist nouveau" in host.check_output("tar -xOf %s etc/modprobe.d/blacklist-nouveau.conf" % image)


def test_initramfs_not_rebuilt_when_nothing_changed(host):
    # prepare built it once (fresh install); the switch changed neither file, idempotence neither
    calls = host.file("/var/lib/initramfs-standin/calls").content_string.split()
    assert calls == [KVER]


def test_persistenced_runs_with_persistence_mode(host):
    assert host.service("nvidia-persistenced").is_enabled
    host.check_output("systemctl start nvidia-persistenced")
    try:
        args = host.file("/run/nvidia-persistenced/args").content_string.split()
        assert "--persistence-mode" in args and "--no-persistence-mode" not in args
        assert args[args.index("--user") + 1] == "nvidia-persistenced"
    finally:
        host.run("systemctl stop nvidia-persistenced")


def execstart_dropins(host):
    """Drop-ins of nvidia-persistenced.service setting a non-empty ExecStart: every *.conf in the
    /etc drop-in directory plus every drop-in systemd loaded (DropInPaths)."""
    listed = host.run("ls -1 %s/*.conf" % DROPIN_DIR).stdout.split()
    loaded = host.check_output("systemctl show -p DropInPaths --value nvidia-persistenced.service").split()
    found = set()
    for path in set(listed) | set(loaded):
        lines = host.file(path).content_string.splitlines()
        if any(line.startswith("ExecStart=") and line.strip() != "ExecStart=" for line in lines):
            found.add(path)
    return found


def test_persistenced_has_one_managed_dropin(host):
    dropin = host.file(DROPIN)
    assert dropin.mode == 0o644
    assert dropin.content_string.startswith("# Managed by Ansible: dgxops.fleet.nvidia_driver")
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose" \
        in dropin.content_string.splitlines()
    assert execstart_dropins(host) == {DROPIN}
    # auto: no driver is loaded in the container, so the role enabled the daemon without starting it
    assert not host.file("/proc/driver/nvidia/version").exists
    assert host.run("systemctl is-active nvidia-persistenced").stdout.strip() == "inactive"


def test_persistenced_entry_point_parameters(host):
    """tasks_from: persistenced as gpu_tuning calls it: mode off, no --user, started although no
    driver is loaded; the same drop-in file, no second one; idempotent; then back to defaults."""
    extra = {"nvidia_driver_persistence_mode": False, "nvidia_driver_persistenced_user": "",
             "nvidia_driver_persistenced_state": "started"}
    try:
        first = run_role(extra, playbook="run_persistenced.yml")
        assert first.returncode == 0, first.stdout[-3000:]
        assert host.run("systemctl is-active nvidia-persistenced").stdout.strip() == "active"
        # the running daemon got the new arguments (drop-in written, systemd reloaded, restarted);
        # Type=simple: systemctl returns before the stand-in has written them
        host.run("for i in $(seq 50); do [ -s /run/nvidia-persistenced/args ] && break; sleep 0.1; done")
        args = host.file("/run/nvidia-persistenced/args").content_string.split()
        assert args == ["--no-persistence-mode", "--verbose"]
        assert execstart_dropins(host) == {DROPIN}
        again = run_role(extra, playbook="run_persistenced.yml")
        assert again.returncode == 0, again.stdout[-3000:]
        assert recap_changed(again.stdout) == 0
    finally:
        back = run_role({}, playbook="run_persistenced.yml")
        host.run("systemctl stop nvidia-persistenced")
    assert back.returncode == 0, back.stdout[-3000:]
    assert "--persistence-mode --verbose" in host.file(DROPIN).content_string
    assert execstart_dropins(host) == {DROPIN}


def test_persistenced_entry_point_refuses_bad_values(host):
    before = host.check_output("md5sum %s" % DROPIN)
    for extra, variable in (({"nvidia_driver_persistenced_path": "bin/nvidia-persistenced"},
                             "nvidia_driver_persistenced_path"),
                            ({"nvidia_driver_persistenced_user": "a b"}, "nvidia_driver_persistenced_user"),
                            ({"nvidia_driver_persistenced_state": "stopped"}, "nvidia_driver_persistenced_state")):
        proc = run_role(extra, playbook="run_persistenced.yml")
        assert proc.returncode != 0
        assert variable in proc.stdout
        assert host.check_output("md5sum %s" % DROPIN) == before


def test_fabricmanager_enabled(host):
    assert host.service("nvidia-fabricmanager").is_enabled


def test_reboot_reported_as_pending(host):
    reasons = host.file("/run/dgxops-nvidia-driver.reboot-required").content_string.splitlines()
    assert "driver packages changed: open 550.127.05" in reasons
    assert host.file("/run/reboot-required").exists


def test_missing_branch_refused_before_any_package_change(host):
    before = (dpkg_state(host), holds(host))
    proc = run_role({"nvidia_driver_branch": "570", "nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert proc.returncode != 0
    assert "nvidia_driver_branch: 570 is not in the repository file:/srv/dgxops-apt-repo/" in " ".join(proc.stdout.split())
    assert "allowed: a branch the repository carries: 550, 580" in " ".join(proc.stdout.split())
    assert (dpkg_state(host), holds(host)) == before


def test_invalid_option_refused_on_the_controller(host):
    before = host.file("/etc/modprobe.d/nvidia.conf").content_string
    proc = run_role({"nvidia_driver_modprobe_options": {"NVreg_Bogus": 1}})
    assert proc.returncode != 0
    assert "nvidia_driver_modprobe_options[NVreg_Bogus]" in proc.stdout
    assert "nvidia_driver_modprobe_allow_unknown" in proc.stdout
    assert host.file("/etc/modprobe.d/nvidia.conf").content_string == before


def test_check_mode_upgrade_reports_and_changes_nothing(host):
    before = (dpkg_state(host), holds(host))
    proc = run_role({"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open",
                     "nvidia_driver_nvswitch": True}, check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert recap_changed(proc.stdout) > 0
    assert "would install nvidia-driver-580-open=580.95.05-0ubuntu1" in proc.stdout
    assert (dpkg_state(host), holds(host)) == before


def test_mixed_flavour_leftovers_are_cleaned(host):
    # a half-done manual switch: the proprietary kernel module package forced in next to open
    host.check_output("dpkg -i --force-conflicts --force-depends "
                      "/srv/dgxops-apt-repo/nvidia-dkms-550_550.127.05-0ubuntu1_all.deb")
    assert dpkg_state(host)["nvidia-dkms-550"][0] == "ii"
    proc = run_role({"nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert proc.returncode == 0, proc.stdout[-3000:]
    state = dpkg_state(host)
    assert "nvidia-dkms-550" not in state
    for name, version in OPEN_550.items():
        assert state[name] == ("hi", version), name
    assert holds(host) == sorted(OPEN_550)


def test_branch_upgrade_moves_the_hold(host):
    proc = run_role({"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert proc.returncode == 0, proc.stdout[-3000:]
    state = dpkg_state(host)
    for name, version in OPEN_580.items():
        assert state[name] == ("hi", version), name
    assert not [name for name in state if "-550" in name]
    assert holds(host) == sorted(OPEN_580)
    for name, version in UNRELATED.items():
        assert state[name] == ("ii", version)
    # the utils stand-in re-initialised the simulator: nvidia-smi reports the new driver
    assert host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").splitlines()[0] == "580.95.05"
    again = run_role({"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert again.returncode == 0 and recap_changed(again.stdout) == 0
