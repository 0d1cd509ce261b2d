"""The fleet lifecycle on simulated nodes that really reboot (issue: fleet lifecycle end to end).

* a rolling driver upgrade 550 -> 580 in three batches through plain ``ansible-playbook``
  (playbooks/driver_upgrade.yml, no wrapper), with a node whose new driver does not load after
  its reboot: the roll stops at that batch, the node is reported with the doctor's verdict,
  the later batch keeps 550, hooks ran in order; after the fault is cleared the same command
  finishes the roll, and a third run changes nothing;
* a kernel upgrade: a node that reboots into a newer kernel without a module for it comes back
  without its driver; the driver role builds the module for every installed kernel and reboots
  it back to a loaded driver;
* the boot-time units after a real reboot: gpu_tuning's power limit and the MIG layout are
  applied again by the node's own boot (nothing from the controller in between);
* the driver role on NVIDIA's debian12 layout (the Debian 12 nodes' default): an older point
  release, a flavour switch and a branch upgrade, each loaded after a real reboot;
* the fleet consistency check finds a node that differs, names what differs, and --strict exits 5.

Each reboot is the container going down and starting again through its own systemd boot.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from dgxops.sim import aptrepo
from dgxops.sim.fleet import SimFleet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.dirname(sys.executable)
DOCKER = "/usr/bin/docker"


def _env():
    return dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), PATH=VENV_BIN + os.pathsep + os.environ["PATH"],
                ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")


def playbook(inventory, play, *args, timeout=900):
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", inventory, play, *args],
                          capture_output=True, text=True, cwd=ROOT, env=_env(), check=False, timeout=timeout)
    # the whole output of every run, for a failing test's reader
    with open(os.path.join(os.environ.get("TMPDIR", "/tmp"), "dgxops-lifecycle-runs.log"), "a") as fh:
        fh.write("\n\n===== ansible-playbook %s %s (rc=%d)\n%s\n%s" % (play, " ".join(args), proc.returncode,
                                                                     proc.stdout, proc.stderr))
    return proc


def node(name, *argv, check=True):
    proc = subprocess.run([DOCKER, "exec", name, *argv], capture_output=True, text=True, check=False, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError("%s: %s -> rc=%d %s %s" % (name, argv, proc.returncode, proc.stdout, proc.stderr))
    return proc


def loaded_driver(name):
    """(version, flavour) from the node's /proc/driver/nvidia/version, or None."""
    proc = node(name, "cat", "/proc/driver/nvidia/version", check=False)
    if proc.returncode != 0:
        return None
    first = proc.stdout.splitlines()[0]
    version = [w for w in first.split() if w[:3].isdigit() and "." in w][0]
    return version, "open" if "Open Kernel Module" in first else "proprietary"


def boot_id(name):
    return node(name, "cat", "/proc/sys/kernel/random/boot_id").stdout.strip()


def recap(stdout):
    """host -> {ok, changed, failed, ...} from the PLAY RECAP."""
    out = {}
    for line in stdout.split("PLAY RECAP")[-1].splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[1] == ":":
            out[parts[0]] = {k: int(v) for k, v in (p.split("=") for p in parts[2:])}
    return out


@pytest.fixture(scope="module")
def roll_fleet(fleet_factory):
    with fleet_factory("pytest-roll", "dgx-a100-80gb=4") as started:
        yield started.names, started.inventory, started.inv_dir


HOOK = """---
- name: Record the hook
  ansible.builtin.shell: "echo {phase} $(cat /proc/sys/kernel/random/boot_id) >> /var/lib/dgxops-hooks.log"
  changed_when: true
"""


def test_rolling_upgrade_stops_at_the_failed_batch_then_finishes(roll_fleet, tmp_path):
    names, inventory, _inv_dir = roll_fleet
    names = sorted(names)
    for name in names:
        assert loaded_driver(name) == ("550.163.01", "proprietary")
    (tmp_path / "pre.yml").write_text(HOOK.format(phase="pre"))
    (tmp_path / "post.yml").write_text(HOOK.format(phase="post"))
    extra = json.dumps({
        "nvidia_driver_branch": "580",
        "dgxops_serial": [1, 1, 2],
        "dgxops_upgrade_pre_tasks": [str(tmp_path / "pre.yml")],
        "dgxops_upgrade_post_tasks": [str(tmp_path / "post.yml")],
    })
    boots = {n: boot_id(n) for n in names}
    # the second batch's node: its new driver will not load after the reboot
    node(names[1], "dgxops-sim", "fault", "set", "driver-load-fails")

    first = playbook(inventory, "playbooks/driver_upgrade.yml", "-e", extra)
    assert first.returncode != 0, first.stdout[-3000:]
    # batch 1 upgraded, rebooted and healthy
    assert loaded_driver(names[0]) == ("580.95.05", "proprietary")
    assert boot_id(names[0]) != boots[names[0]]
    # batch 2: installed, rebooted, did not load: reported with the doctor's verdict
    assert loaded_driver(names[1]) is None
    assert boot_id(names[1]) != boots[names[1]]
    failed_line = [line for line in first.stdout.splitlines() if names[1] in line and "doctor verdict" in line]
    assert failed_line, first.stdout[-4000:]
    assert "BROKEN" in " ".join(first.stdout.split()), first.stdout[-3000:]
    # batch 3 never started: still 550, same boot, no hook ran there
    for name in names[2:]:
        assert loaded_driver(name) == ("550.163.01", "proprietary")
        assert boot_id(name) == boots[name]
        assert node(name, "cat", "/var/lib/dgxops-hooks.log", check=False).returncode != 0
    # hooks: drained and resumed on the healthy node (post after the reboot), the failed node stays drained
    log0 = node(names[0], "cat", "/var/lib/dgxops-hooks.log").stdout.split("\n")
    assert [line.split()[0] for line in log0 if line] == ["pre", "post"]
    assert log0[0].split()[1] != log0[1].split()[1]  # the post hook ran in the new boot
    log1 = node(names[1], "cat", "/var/lib/dgxops-hooks.log").stdout.split()
    assert log1[0::2] == ["pre"]
    rc = recap(first.stdout)
    assert rc[names[1]]["failed"] == 1
    # the later batch only had its facts read and settings validated
    assert all(rc[n]["changed"] == 0 and rc[n]["failed"] == 0 for n in names[2:])

    # the fault is cleared: the same command finishes the roll
    node(names[1], "dgxops-sim", "fault", "clear", "driver-load-fails")
    second = playbook(inventory, "playbooks/driver_upgrade.yml", "-e", extra)
    assert second.returncode == 0, second.stdout[-4000:]
    for name in names:
        assert loaded_driver(name) == ("580.95.05", "proprietary")
        smi = node(name, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout.split()
        assert set(smi) == {"580.95.05"}
        # the Debian 12 nodes use NVIDIA's debian12 layout (the distribution default): one name for
        # every branch, the branch in the version, the whole release at one version
        held = node(name, "apt-mark", "showhold").stdout.split()
        assert {"nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-smi"} <= set(held), held
        versions = dict(line.split() for line in node(name, "dpkg-query", "-W", "-f", "${Package} ${Version}\\n",
                                                       "nvidia-*", "libnvidia-*", "libcuda1").stdout.splitlines()
                        if len(line.split()) == 2)
        assert versions["nvidia-driver-cuda"] == "580.95.05-1", versions
        for pkg in ("nvidia-kernel-dkms", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-persistenced"):
            assert versions[pkg] == "580.95.05-1", (pkg, versions)
        assert "nvidia-kernel-open-dkms" not in versions and not [p for p in versions if re.search(r"-5[0-9]{2}\b", p)]
    assert recap(second.stdout)[names[0]]["changed"] == 2  # only the two hook tasks: nothing to upgrade there

    third = playbook(inventory, "playbooks/driver_upgrade.yml", "-e", json.dumps({"nvidia_driver_branch": "580", "dgxops_serial": 2}))
    assert third.returncode == 0, third.stdout[-3000:]
    assert {h: r["changed"] for h, r in recap(third.stdout).items() if h in names} == {n: 0 for n in names}


def test_consistency_finds_the_odd_node_and_strict_exits_5(roll_fleet, tmp_path):
    names, inventory, _inv_dir = roll_fleet
    names = sorted(names)
    # one node gets a different nccl.conf than the rest
    for name in names:
        node(name, "sh", "-c", "printf 'NCCL_DEBUG=WARN\\n' > /etc/nccl.conf")
    node(names[2], "sh", "-c", "printf 'NCCL_DEBUG=INFO\\n' > /etc/nccl.conf")
    out = tmp_path / "c.json"
    proc = subprocess.run([sys.executable, "-m", "dgxops.cli", "consistency", "-i", inventory, "-q", "--strict",
                           "--save", str(out), "--strategy", "linear"],
                          capture_output=True, text=True, cwd=ROOT, env=_env(), check=False, timeout=600)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert not data["consistent"] and data["outlier_count"] == 1
    (group,) = data["groups"].values()
    assert list(group["outliers"]) == [names[2]]
    assert group["outliers"][names[2]]["files"]["differs"] == ["/etc/nccl.conf"]
    assert "INCONSISTENT" in proc.stdout and names[2] in proc.stdout
    node(names[2], "sh", "-c", "printf 'NCCL_DEBUG=WARN\\n' > /etc/nccl.conf")
    again = subprocess.run([sys.executable, "-m", "dgxops.cli", "consistency", "-i", inventory, "-q", "--strict"],
                           capture_output=True, text=True, cwd=ROOT, env=_env(), check=False, timeout=600)
    assert again.returncode == 0 and again.stdout.startswith("CONSISTENT"), again.stdout + again.stderr


@pytest.fixture(scope="module")
def debian_fleet(fleet_factory):
    with fleet_factory("pytest-deb12", "dgx-a100-80gb=1") as started:
        yield started.names[0], started.inventory, started.inv_dir


LIBCUDA_VERSION = ("import ctypes; v = ctypes.c_int(0); "
                   "assert ctypes.CDLL('libcuda.so.1').cuDriverGetVersion(ctypes.byref(v)) == 0; print(v.value)")


def driver_packages(name):
    """{package: version} of the installed NVIDIA driver packages ("ii", or "hi" when held)."""
    out = node(name, "dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n").stdout
    return {p: v for p, v, st in (line.split() for line in out.splitlines() if len(line.split()) == 3)
            if st[1:2] == "i" and re.match(r"^((lib)?nvidia-|libcuda1$|firmware-nvidia-gsp$)", p)
            and not p.startswith("nvidia-container")}


def test_debian12_layout_install_flavour_switch_and_branch_upgrade(debian_fleet):
    """The role on NVIDIA's debian12 layout (the Debian 12 nodes' distribution default): an older
    point release (every package of the release named at its version, three levels of exact-version
    dependencies), open <-> proprietary, 550 -> 580, each loaded after a real reboot, then changed=0."""
    name, inventory, _inv_dir = debian_fleet
    assert loaded_driver(name) == ("550.163.01", "proprietary")
    release_set = {"nvidia-driver-cuda", "nvidia-smi", "libcuda1", "libnvidia-ml1", "libnvidia-ptxjitcompiler1",
                   "nvidia-persistenced", "nvidia-kernel-support", "firmware-nvidia-gsp"}
    steps = [({"nvidia_driver_branch": "550", "nvidia_driver_version": "550.127.05", "nvidia_driver_flavour": "proprietary"},
              ("550.127.05", "proprietary"), "nvidia-kernel-dkms"),
             ({"nvidia_driver_branch": "550", "nvidia_driver_version": "550.127.05", "nvidia_driver_flavour": "open"},
              ("550.127.05", "open"), "nvidia-kernel-open-dkms"),
             ({"nvidia_driver_branch": "580", "nvidia_driver_flavour": "open"}, ("580.95.05", "open"), "nvidia-kernel-open-dkms")]
    for extra, loaded, kernel_pkg in steps:
        old = boot_id(name)
        proc = playbook(inventory, "playbooks/driver.yml", "--limit", name, "-e", json.dumps(extra))
        assert proc.returncode == 0, proc.stdout[-4000:]
        assert boot_id(name) != old and loaded_driver(name) == loaded
        pkgs = driver_packages(name)
        # one flavour, the whole release at one exact version, no Ubuntu-style names (the simulated
        # A100-80GB shows no NVSwitch, so no fabric manager)
        assert set(pkgs) == release_set | {kernel_pkg}, pkgs
        assert set(pkgs.values()) == {"%s-1" % loaded[0]}, pkgs
        held = set(node(name, "apt-mark", "showhold").stdout.split())
        assert {"nvidia-driver-cuda", kernel_pkg, "nvidia-smi"} <= held, held
        assert loaded[0] in node(name, "dkms", "status", "-m", "nvidia").stdout
        # libcuda.so.1 (libcuda1's, the simulator's stand-in) follows the upgrade: the facts'
        # CUDA version comes from it, without a process, as on a real node
        assert node(name, "python3", "-c", LIBCUDA_VERSION).stdout.strip() == aptrepo.cuda_api_version(loaded[0])
        again = playbook(inventory, "playbooks/driver.yml", "--limit", name, "-e", json.dumps(extra))
        assert again.returncode == 0 and recap(again.stdout)[name]["changed"] == 0, again.stdout[-3000:]


@pytest.fixture(scope="module")
def boot_fleet(fleet_factory):
    with fleet_factory("pytest-boot", "dgx-h100=1") as started:
        yield started.names[0], started.inventory, started.inv_dir


def test_kernel_upgrade_reboot_comes_back_with_its_driver(boot_fleet):
    name, inventory, _inv_dir = boot_fleet
    from dgxops.sim.aptrepo import NEW_KERNEL
    assert loaded_driver(name) == ("580.95.05", "open")
    # an unattended kernel upgrade: the image only, no headers, so DKMS cannot build for it
    node(name, "sh", "-c", "printf 'Types: deb\\nURIs: file:/srv/dgxops-cuda-repo/debian12/\\nSuites: /\\nTrusted: yes\\n' "
                           "> /etc/apt/sources.list.d/test-kernel.sources && apt-get update -qq "
                           "&& DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-image-%s "
                           "&& rm /etc/apt/sources.list.d/test-kernel.sources" % NEW_KERNEL)
    play = os.path.join(ROOT, "tests", "fleet", "plays", "reboot.yml")
    proc = playbook(inventory, play, "--limit", name)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert node(name, "cat", "/run/dgxops-sim/kernel").stdout.strip() == NEW_KERNEL
    assert loaded_driver(name) is None
    assert node(name, "nvidia-smi", check=False).returncode == 9
    # the driver role: headers and a module for every installed kernel, then the reboot
    proc = playbook(inventory, "playbooks/driver.yml", "--limit", name)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert node(name, "cat", "/run/dgxops-sim/kernel").stdout.strip() == NEW_KERNEL
    assert loaded_driver(name) == ("580.95.05", "open")
    status = node(name, "dkms", "status", "-m", "nvidia").stdout
    assert "nvidia/580.95.05, %s," % NEW_KERNEL in status and "nvidia/580.95.05, %s," % os.uname().release in status
    again = playbook(inventory, "playbooks/driver.yml", "--limit", name)
    assert recap(again.stdout)[name]["changed"] == 0, again.stdout[-2000:]


def test_boot_units_reapply_power_and_mig_after_a_real_reboot(boot_fleet):
    name, inventory, _inv_dir = boot_fleet
    extra = json.dumps({"gpu_tuning_power_limit_watts": 500, "mig_layout_name": "all-1g.10gb",
                        "dgxops_enable_spark": False, "dgxops_enable_isolation": False})
    proc = playbook(inventory, "site.yml", "--limit", name, "-e", extra)
    assert proc.returncode == 0, proc.stdout[-3000:]

    def state():
        q = node(name, "nvidia-smi", "--query-gpu=power.limit,mig.mode.current", "--format=csv,noheader,nounits").stdout
        lgi = node(name, "nvidia-smi", "mig", "-lgi").stdout
        return [tuple(x.strip() for x in line.split(",")) for line in q.splitlines()], lgi.count("MIG 1g.10gb")

    before = state()
    assert {p for p, _m in before[0]} == {"500.00"} and {m for _p, m in before[0]} == {"Enabled"}
    assert before[1] == 56
    old = boot_id(name)
    play = os.path.join(ROOT, "tests", "fleet", "plays", "reboot.yml")
    proc = playbook(inventory, play, "--limit", name)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert boot_id(name) != old
    # Hopper loses MIG mode, instances and the power limit at a reboot: the node's boot units put them back
    assert state() == before
    # the report's MIG column from the facts module's real output
    facts = playbook(inventory, os.path.join(ROOT, "tests", "fleet", "plays", "facts_json.yml"), "--limit", name)
    assert facts.returncode == 0, facts.stdout[-2000:]
    from dgxops.report import gpu_rows
    data = json.loads(node(name, "cat", "/tmp/dgxops-facts.json").stdout)
    rows = gpu_rows({name: {"nvidia_smi": data}})
    assert {r["mig_instances"] for r in rows} == {"7 x 1g.10gb"}


def test_secure_boot_is_detected_and_the_documented_choice_holds(boot_fleet):
    name, inventory, _inv_dir = boot_fleet
    reboot = os.path.join(ROOT, "tests", "fleet", "plays", "reboot.yml")
    node(name, "dgxops-sim", "secure-boot", "on")
    assert playbook(inventory, reboot, "--limit", name).returncode == 0
    # an unsigned DKMS module under Secure Boot: the node comes back without its driver
    assert loaded_driver(name) is None
    # the role's choice 1: fail before changing anything
    strict = playbook(inventory, "playbooks/driver.yml", "--limit", name, "-e", '{"nvidia_driver_fail_on_secure_boot": true}')
    assert strict.returncode != 0
    assert "nvidia_driver_fail_on_secure_boot: Secure Boot is enabled on %s" % name in " ".join(strict.stdout.split())
    assert recap(strict.stdout)[name]["changed"] == 0
    # choice 2: enrol a MOK key for DKMS (done by the operator at the console), then the module loads
    node(name, "dgxops-sim", "secure-boot", "enroll-mok")
    proc = playbook(inventory, "playbooks/driver.yml", "--limit", name)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "WARNING: Secure Boot is enabled on %s" % name in " ".join(proc.stdout.split())
    assert loaded_driver(name) == ("580.95.05", "open")


def test_a_node_made_not_to_come_back_stays_down_until_started(boot_fleet):
    name, inventory, _inv_dir = boot_fleet
    import time
    node(name, "dgxops-sim", "fault", "set", "no-boot")
    old = boot_id(name)
    play = os.path.join(ROOT, "tests", "fleet", "plays", "reboot.yml")
    # the reboot module waits for the node: it must give up, not hang
    proc = playbook(inventory, play, "--limit", name, "-e", '{"dgxops_test_reboot_timeout": 25}', timeout=300)
    assert proc.returncode != 0
    deadline = time.monotonic() + 60
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run([DOCKER, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name],
                               capture_output=True, text=True, check=False).stdout.split()
        if state and state[0] == "exited":
            break
        time.sleep(1)
    assert state == ["exited", "0"]
    SimFleet("pytest-boot").start(name)
    assert boot_id(name) != old
    assert loaded_driver(name) == ("580.95.05", "open")
