"""Verify nvidia_driver through real apt and real reboots on a simulated DGX A100 (testinfra,
docker backend).

The node installs from the stand-in CUDA repository its image carries (/srv/dgxops-cuda-repo) and
reboots for real: the container restarts through its own systemd boot, gets a new boot id, and
loads the module DKMS built (/proc/driver/nvidia/version, nvidia-smi's driver_version); before
that reboot nvidia-smi reports a driver/library mismatch, as the real one does.

State after molecule's prepare (the node's preinstalled driver removed, then a fresh install of
550.127.05 proprietary, rebooted) and converge (switch to open at the same version, rebooted;
idempotence: changed=0, no reboot) is checked first; the later tests run the role again with
other settings (tests are ordered: pytest runs them top to bottom) and end on branch 580.
"""

import json
import os
import re
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
REPO = "/srv/dgxops-cuda-repo/ubuntu"  # the Ubuntu layout of the node image's stand-in CUDA repository
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


def boot_id(host):
    return host.file("/proc/sys/kernel/random/boot_id").content_string.strip()


def boots(host):
    """How many times the simulated node booted (dgxops-sim boot counts each boot)."""
    return json.loads(host.check_output("dgxops-sim show"))["boots"]


def loaded_driver(host):
    """(version, flavour) of the loaded module from /proc/driver/nvidia/version, as the role reads it."""
    text = host.file("/proc/driver/nvidia/version").content_string
    match = re.search(r"Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9.]+)\s", text)
    assert match, text
    return match.group(1), "open" if "Open Kernel Module" in text else "proprietary"


def smi_driver_versions(host):
    return host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").splitlines()


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


def test_fresh_install_rebooted_into_the_new_driver(host):
    after = json.loads(host.file("/root/dgxops-after-prepare.json").content_string)
    assert after["boot_id_before"] != after["boot_id_after"]
    first = after["proc_version"].splitlines()[0]
    assert "Kernel Module  550.127.05 " in first and "Open" not in first, first
    assert after["smi_driver_versions"] == ["550.127.05"] * 8


def test_switch_rebooted_into_the_open_module(host):
    after = json.loads(host.file("/root/dgxops-after-prepare.json").content_string)
    assert boot_id(host) != after["boot_id_after"]
    assert loaded_driver(host) == ("550.127.05", "open")
    assert smi_driver_versions(host) == ["550.127.05"] * 8
    # create (1), the fresh install (2), the switch (3); idempotence did not reboot
    assert boots(host) == 3


def test_no_reboot_left_pending(host):
    assert not host.file("/run/dgxops-nvidia-driver.reboot-required").exists
    assert not host.file("/run/reboot-required").exists


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


def wait_for_persistenced_args(host):
    # Type=simple: systemctl returns before the stand-in has written its arguments
    host.run("for i in $(seq 50); do [ -s /run/nvidia-persistenced/args ] && break; sleep 0.1; done")
    return host.file("/run/nvidia-persistenced/args").content_string.split()


def test_persistenced_runs_with_persistence_mode(host):
    # enabled by the role, started at the boot that loaded the driver
    assert host.service("nvidia-persistenced").is_enabled
    assert host.run("systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    args = wait_for_persistenced_args(host)
    assert "--persistence-mode" in args and "--no-persistence-mode" not in args
    assert args[args.index("--user") + 1] == "nvidia-persistenced"
    # the daemon (stand-in) keeps the GPUs initialised: persistence mode on
    assert host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").splitlines() \
        == ["Enabled"] * 8


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
    # auto: the driver is loaded, so the daemon runs
    assert host.file("/proc/driver/nvidia/version").exists
    assert host.run("systemctl is-active nvidia-persistenced").stdout.strip() == "active"


def test_persistenced_entry_point_parameters(host):
    """tasks_from: persistenced with gpu_tuning-like values: mode off, no --user, started; the same
    drop-in file, no second one; idempotent; then back to defaults (restarted with them)."""
    extra = {"nvidia_driver_persistence_mode": False, "nvidia_driver_persistenced_user": "",
             "nvidia_driver_persistenced_state": "started"}
    try:
        first = run_role(extra, playbook="run_persistenced.yml")
        assert first.returncode == 0, first.stdout[-3000:]
        assert host.run("systemctl is-active nvidia-persistenced").stdout.strip() == "active"
        # the running daemon got the new arguments (drop-in written, systemd reloaded, restarted)
        args = wait_for_persistenced_args(host)
        assert args == ["--no-persistence-mode", "--verbose"]
        assert execstart_dropins(host) == {DROPIN}
        again = run_role(extra, playbook="run_persistenced.yml")
        assert again.returncode == 0, again.stdout[-3000:]
        assert recap_changed(again.stdout) == 0
    finally:
        back = run_role({}, playbook="run_persistenced.yml")
    assert back.returncode == 0, back.stdout[-3000:]
    assert "--persistence-mode --verbose" in host.file(DROPIN).content_string
    assert execstart_dropins(host) == {DROPIN}
    assert host.run("systemctl is-active nvidia-persistenced").stdout.strip() == "active"
    assert wait_for_persistenced_args(host) == ["--user", "nvidia-persistenced", "--persistence-mode", "--verbose"]


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


def test_missing_branch_refused_before_any_package_change(host):
    before = (dpkg_state(host), holds(host))
    proc = run_role({"nvidia_driver_branch": "560", "nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert proc.returncode != 0
    assert "nvidia_driver_branch: 560 is not in the repository file:%s/" % REPO in " ".join(proc.stdout.split())
    assert "allowed: a branch the repository carries: 470, 535, 550, 570, 580" in " ".join(proc.stdout.split())
    assert (dpkg_state(host), holds(host)) == before


def test_invalid_option_refused_on_the_controller(host):
    before = host.file("/etc/modprobe.d/nvidia.conf").content_string
    proc = run_role({"nvidia_driver_modprobe_options": {"NVreg_Bogus": 1}})
    assert proc.returncode != 0
    assert "nvidia_driver_modprobe_options[NVreg_Bogus]" in proc.stdout
    assert "nvidia_driver_modprobe_allow_unknown" in proc.stdout
    assert host.file("/etc/modprobe.d/nvidia.conf").content_string == before


def test_check_mode_upgrade_reports_and_changes_nothing(host):
    before = (dpkg_state(host), holds(host), boot_id(host))
    proc = run_role({"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open",
                     "nvidia_driver_nvswitch": True}, check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert recap_changed(proc.stdout) > 0
    assert "would install nvidia-driver-580-open=580.95.05-0ubuntu1" in proc.stdout
    assert (dpkg_state(host), holds(host), boot_id(host)) == before


def test_mixed_flavour_leftovers_are_cleaned(host):
    # a half-done manual switch: the proprietary kernel module package forced in next to open
    host.check_output("dpkg -i --force-conflicts --force-depends "
                      "%s/nvidia-dkms-550_550.127.05-0ubuntu1_all.deb" % REPO)
    assert dpkg_state(host)["nvidia-dkms-550"][0] == "ii"
    proc = run_role({"nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert proc.returncode == 0, proc.stdout[-3000:]
    state = dpkg_state(host)
    assert "nvidia-dkms-550" not in state
    for name, version in OPEN_550.items():
        assert state[name] == ("hi", version), name
    assert holds(host) == sorted(OPEN_550)
    assert host.file("/var/lib/dkms/nvidia/550.127.05/source/flavour").content_string.strip() == "open"
    assert loaded_driver(host) == ("550.127.05", "open")


def test_branch_upgrade_moves_the_hold(host):
    before_id, before_boots = boot_id(host), boots(host)
    proc = run_role({"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert proc.returncode == 0, proc.stdout[-3000:]
    state = dpkg_state(host)
    for name, version in OPEN_580.items():
        assert state[name] == ("hi", version), name
    assert not [name for name in state if "-550" in name]
    assert holds(host) == sorted(OPEN_580)
    for name, version in UNRELATED.items():
        assert state[name] == ("ii", version)
    # the role rebooted the node once, and it came back with the new module loaded
    assert boot_id(host) != before_id
    assert boots(host) == before_boots + 1
    assert loaded_driver(host) == ("580.95.05", "open")
    assert smi_driver_versions(host) == ["580.95.05"] * 8
    assert host.check_output("dkms status -m nvidia").strip() == \
        "nvidia/580.95.05, %s, %s: installed" % (KVER, host.system_info.arch)
    after_id = boot_id(host)
    again = run_role({"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open", "nvidia_driver_nvswitch": True})
    assert again.returncode == 0 and recap_changed(again.stdout) == 0
    assert (boot_id(host), boots(host)) == (after_id, before_boots + 1)
