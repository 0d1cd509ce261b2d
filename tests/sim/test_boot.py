"""The simulated node's boot (dgxops-sim boot) in a sandbox root: which driver loads, from what.

Off a node the boot never mounts anything: everything lands under DGXOPS_SIM_ROOT.
"""

import os
import re

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P
from dgxops.sim.fakesmi import boot
from dgxops.sim.fakesmi.state import Store, new_state, write_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "..", "fixtures", "nvidia-smi", "device-h200", "proc-version.txt")


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("DGXOPS_SIM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DGXOPS_SIM_ROOT", str(tmp_path / "root"))
    os.makedirs(tmp_path / "state")
    return tmp_path / "root"


def built(root, version, kernel, flavour, arch=None):
    d = root / "var/lib/dkms/nvidia" / version / kernel / (arch or os.uname().machine) / "module"
    d.mkdir(parents=True)
    (d / "flavour").write_text(flavour + "\n")


def lib(root, version):
    d = root / "usr/lib" / ("%s-linux-gnu" % os.uname().machine)
    d.mkdir(parents=True, exist_ok=True)
    (d / ("libnvidia-ml.so." + version)).write_text("stand-in\n")


def init(model="dgx-h100", driver="580.95.05"):
    state = new_state(model, driver)
    write_atomic(state)
    return state


def test_never_touches_the_real_system_off_a_node(sandbox):
    assert not boot.on_node()
    init()
    summary = boot.boot(real=True)
    assert summary["boot_id"] and (sandbox / "run/dgxops-sim/boot_id").exists()
    assert (sandbox / "run/dgxops-sim/boot.json").exists()
    assert not os.path.exists("/run/dgxops-sim")  # the machine's own /run is untouched


def test_loads_what_dkms_built_for_the_booted_kernel(sandbox):
    init(driver="550.163.01")
    kernel = os.uname().release
    built(sandbox, "580.95.05", kernel, "open")
    lib(sandbox, "580.95.05")
    summary = boot.boot(real=False)
    assert (summary["driver"], summary["flavour"], summary["reason"]) == ("580.95.05", "open", None)
    with Store(write=False) as st:
        assert st.state["driver"] == "580.95.05" and st.state["driver_loaded"] is True
    text = (sandbox / "proc/driver/nvidia/version").read_text()
    assert P.parse_proc_driver_version(text) == {"flavour": "open", "version": "580.95.05"}


def test_proc_version_has_the_real_files_shape():
    with open(CAPTURE) as fh:
        real = [line for line in fh if line.startswith(("NVRM", "GCC"))]
    ours = boot.proc_version_text("580.159.04", "open", arch="x86_64").splitlines()
    # same first words and the version in the same field
    assert ours[0].split()[:9] == real[0].split()[:9]
    assert ours[1].split()[:3] == real[1].split()[:3]
    prop = boot.proc_version_text("550.163.01", "proprietary", arch="x86_64")
    assert P.parse_proc_driver_version(prop) == {"flavour": "proprietary", "version": "550.163.01"}


def test_newest_kernel_boots_and_needs_its_own_module(sandbox):
    init()
    (sandbox / "boot").mkdir(parents=True)
    for k in ("6.1.0-28-amd64", "6.1.0-99-dgxsim", "6.1.0-9-amd64"):
        (sandbox / "boot" / ("vmlinuz-" + k)).write_text("")
    assert boot.booted_kernel() == "6.1.0-99-dgxsim"
    built(sandbox, "580.95.05", "6.1.0-28-amd64", "open")
    summary = boot.boot(real=False)
    assert summary["driver"] is None and "6.1.0-99-dgxsim" in summary["reason"]
    assert not (sandbox / "proc/driver/nvidia/version").exists()
    built(sandbox, "580.95.05", "6.1.0-99-dgxsim", "open")
    assert boot.boot(real=False)["driver"] == "580.95.05"


def test_faults_and_secure_boot_keep_the_driver_unloaded(sandbox):
    init()
    built(sandbox, "580.95.05", os.uname().release, "open")
    with Store(write=True) as st:
        st.state["faults"]["driver_load_fails"] = True
        st.save()
    assert "driver-load-fails" in boot.boot(real=False)["reason"]
    with Store(write=True) as st:
        st.state["faults"] = {}
        st.state["firmware"] = {"secure_boot": True}
        st.save()
    reason = boot.boot(real=False)["reason"]
    assert reason and "Secure Boot" in reason
    efivar = sandbox / "sys/firmware/efi/efivars" / ("SecureBoot-" + boot.EFI_GUID)
    assert list(efivar.read_bytes()) == [6, 0, 0, 0, 1]
    with Store(write=True) as st:
        st.state["firmware"]["mok_enrolled"] = True
        st.save()
    assert boot.boot(real=False)["driver"] == "580.95.05"


def test_reboot_semantics_apply_at_each_boot_but_not_the_first(sandbox):
    init()
    built(sandbox, "580.95.05", os.uname().release, "open")
    with Store(write=True) as st:
        g = st.state["gpus"][0]
        g["power_limit"] = 500
        g["mig_pending"] = True
        st.save()
    boot.boot(real=False, first=True)
    with Store(write=False) as st:
        assert st.state["gpus"][0]["power_limit"] == 500
    boot.boot(real=False)
    with Store(write=False) as st:
        g = st.state["gpus"][0]
        # Hopper: power limit back to default, MIG mode lost at the reboot
        assert g["power_limit"] != 500 and g["mig_current"] is False
        assert st.state["boots"] == 2


def test_no_boot_fault_is_one_shot(sandbox):
    init()
    with Store(write=True) as st:
        st.state["faults"]["no_boot"] = True
        st.save()
    assert boot.boot(real=False).get("halt") is True
    assert not boot.boot(real=False).get("halt")


def test_nvidia_smi_reports_a_library_mismatch_before_the_reboot(sandbox, monkeypatch, capsys):
    from dgxops.sim.fakesmi import cli
    init(driver="550.163.01")
    built(sandbox, "550.163.01", os.uname().release, "proprietary")
    lib(sandbox, "550.163.01")
    boot.boot(real=False, first=True)
    assert cli.main(["--query-gpu=driver_version", "--format=csv,noheader"]) == 0
    assert set(capsys.readouterr().out.split()) == {"550.163.01"}
    # the new user-space driver is installed; the old module is still loaded
    lib(sandbox, "580.95.05")
    os.unlink(sandbox / "usr/lib" / ("%s-linux-gnu" % os.uname().machine) / "libnvidia-ml.so.550.163.01")
    assert cli.main(["-L"]) == 18
    out = capsys.readouterr().out
    assert re.search(r"Driver/library version mismatch\nNVML library version: 580\.95", out)
