# -*- coding: utf-8 -*-
"""dgxops.fleet.nvidia_driver_state (and module_utils/driver_state) on dpkg-query output in the
Ubuntu and Debian 12 package layouts, the real H200 capture of /proc/driver/nvidia/version and
fixture /proc, /sys and /lib/modules trees; the commands are answered by a fake node."""

import os

import pytest

from ansible.module_utils import basic
from ansible_collections.dgxops.fleet.plugins.module_utils import driver_state as S
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_driver_state as mod

from module_runner import run_module

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
DEVICE = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "device-h200")
RUNNING = "6.8.0-45-generic"


def capture(name):
    return open(os.path.join(DEVICE, name)).read().split("\n", 1)[1].rsplit("\n# rc=", 1)[0] + "\n"


def dpkg_lines(*rows):
    """dpkg-query -W -f='${db:Status-Abbrev}\\t${Package}\\t${Version}\\t${Architecture}\\n' output."""
    return "".join("\t".join(r) + "\n" for r in rows)


# The Ubuntu layout (branch in the names), held by the role, with the proprietary flavour
# removed and its configuration left, and a multiarch library.
UBUNTU = dpkg_lines(
    ("ii ", "adduser", "3.137ubuntu1", "all"),
    ("ii ", "libc6", "2.39-0ubuntu8.4", "amd64"),
    ("ii ", "libc6", "2.39-0ubuntu8.4", "i386"),
    ("hi ", "libnvidia-compute-580", "580.95.05-0ubuntu1", "amd64"),
    ("hi ", "nvidia-dkms-580-open", "580.95.05-0ubuntu1", "amd64"),
    ("hi ", "nvidia-driver-580-open", "580.95.05-0ubuntu1", "amd64"),
    ("rc ", "nvidia-dkms-580", "580.82.07-0ubuntu1", "amd64"),
    ("hi ", "nvidia-fabricmanager", "580.95.05-1", "amd64"),
    ("ii ", "nvidia-kernel-source-580-open", "580.95.05-0ubuntu1", "amd64"),
    ("un ", "nvidia-persistenced", "", ""),
    ("ii ", "tzdata", "2024a-3ubuntu1.1", "all"),
    ("iU ", "unpacked-only", "1:2.0-1", "amd64"),
)

# NVIDIA's debian12 repository: one name for every branch, the branch in the version.
DEBIAN12 = dpkg_lines(
    ("ii ", "base-files", "12.4+deb12u7", "amd64"),
    ("hi ", "firmware-nvidia-gsp", "580.95.05-1", "amd64"),
    ("hi ", "libcuda1", "580.95.05-1", "amd64"),
    ("hi ", "libnvidia-ml1", "580.95.05-1", "amd64"),
    ("hi ", "nvidia-driver-cuda", "580.95.05-1", "amd64"),
    ("hi ", "nvidia-kernel-open-dkms", "580.95.05-1", "amd64"),
    ("hi ", "nvidia-kernel-support", "580.95.05-1", "amd64"),
    ("hi ", "nvidia-persistenced", "580.95.05-1", "amd64"),
    ("hi ", "nvidia-smi", "580.95.05-1", "amd64"),
    ("rc ", "nvidia-kernel-dkms", "570.172.08-1", "amd64"),
    ("ri ", "being-removed", "1.0", "all"),
)


def test_ubuntu_layout_states():
    got = S.parse_dpkg_status(UBUNTU)
    pk = got["packages"]
    assert "nvidia-dkms-580" not in pk           # rc: configuration only
    assert "nvidia-persistenced" not in pk       # un: known, never installed
    assert pk["unpacked-only"] == [{"name": "unpacked-only", "version": "1:2.0-1", "arch": "amd64", "source": "apt"}]
    assert [e["arch"] for e in pk["libc6"]] == ["amd64", "i386"]
    assert pk["nvidia-driver-580-open"][0]["version"] == "580.95.05-0ubuntu1"
    assert got["held"] == ["libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-driver-580-open", "nvidia-fabricmanager"]
    assert got["config_only"] == ["nvidia-dkms-580"]
    assert list(pk) == ["adduser", "libc6", "libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-driver-580-open",
                        "nvidia-fabricmanager", "nvidia-kernel-source-580-open", "tzdata", "unpacked-only"]


def test_debian12_layout_states():
    got = S.parse_dpkg_status(DEBIAN12)
    assert got["config_only"] == ["nvidia-kernel-dkms"]
    assert "nvidia-kernel-open-dkms" in got["packages"] and "nvidia-kernel-dkms" not in got["packages"]
    assert "being-removed" in got["packages"]    # wanted removed, still installed
    assert len(got["held"]) == 8 and "base-files" not in got["held"]


def test_dpkg_garbage_lines_are_skipped():
    assert S.parse_dpkg_status("\nii\n\tname\n" + dpkg_lines(("ii ", "a", "1", "all"))) == {
        "packages": {"a": [{"name": "a", "version": "1", "arch": "all", "source": "apt"}]}, "held": [], "config_only": []}


def test_loaded_driver_from_real_capture_and_proprietary_text():
    assert S.loaded_driver(capture("proc-version.txt")) == {"version": "580.159.04", "flavour": "open"}
    prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
    assert S.loaded_driver(prop) == {"version": "550.54.14", "flavour": "proprietary"}
    assert S.loaded_driver("") == {"version": None, "flavour": None}


@pytest.mark.parametrize("text, flavour", [
    ("Dual MIT/GPL\n", "open"), ("NVIDIA\n", "proprietary"), ("", None), ("GPL\n", None)])
def test_flavour_from_license(text, flavour):
    assert P.flavour_from_license(text) == flavour


@pytest.mark.parametrize("data, enabled", [
    (b"\x06\x00\x00\x00\x01", True), (b"\x06\x00\x00\x00\x00", False), (b"", None), (None, None)])
def test_secure_boot_from_efivar(data, enabled):
    assert S.secure_boot_from_efivar(data) is enabled


def test_kernels_running_first_then_sorted_without_repeats():
    assert S.kernels("6.8.0-45-generic", ["6.8.0-49-generic", "6.8.0-45-generic", "6.5.0-1-generic"]) == [
        "6.8.0-45-generic", "6.5.0-1-generic", "6.8.0-49-generic"]


@pytest.mark.parametrize("known, rc, out, want", [
    (True, None, "", True), (False, None, "", False),
    (None, 0, "0000:05:00.0 0680: 10de:22a3 (rev a1)\n", True), (None, 0, "", False), (None, 2, "", None)])
def test_is_nvswitch(known, rc, out, want):
    assert S.is_nvswitch(known, rc, out) is want


class Node:
    """Fixture trees and canned answers for dpkg-query, modinfo and lspci."""

    def __init__(self, tmp_path, dpkg=UBUNTU):
        self.proc = tmp_path / "proc"
        self.sys = tmp_path / "sys"
        self.mods = tmp_path / "lib-modules"
        for d in (self.proc / "driver" / "nvidia", self.sys / "module", self.mods / RUNNING, self.mods / "6.8.0-49-generic"):
            d.mkdir(parents=True)
        (self.mods / ".hidden").mkdir()
        (self.mods / "not-a-dir").write_text("")
        (self.proc / "driver" / "nvidia" / "version").write_text(capture("proc-version.txt"))
        self.efivar = tmp_path / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
        self.efivar.write_bytes(b"\x06\x00\x00\x00\x00")
        self.answers = {"dpkg-query": (0, dpkg), "modinfo": (0, "Dual MIT/GPL\n"),
                        "lspci": (0, "0000:05:00.0 0680: 10de:22a3 (rev a1)\n")}
        self.missing = set()
        self.calls = []

    def args(self, **extra):
        args = {"kernel": RUNNING, "proc_root": str(self.proc), "sys_root": str(self.sys),
                "modules_root": str(self.mods), "secure_boot_efivar": str(self.efivar)}
        args.update(extra)
        return args


@pytest.fixture
def node(tmp_path, monkeypatch):
    n = Node(tmp_path)

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return None if name in n.missing else "/usr/bin/" + name

    def run_command(self, argv, **kw):
        n.calls.append((list(argv), kw.get("environ_update")))
        rc, out = n.answers[os.path.basename(argv[0])]
        return rc, out, ""

    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return n


def test_module_reads_everything_in_one_call(capsys, node):
    res = run_module(capsys, mod.main, node.args())
    assert res["changed"] is False and "failed" not in res
    assert res["installed"][:3] == ["adduser", "libc6", "libnvidia-compute-580"]
    assert res["ansible_facts"]["packages"]["nvidia-dkms-580-open"][0]["version"] == "580.95.05-0ubuntu1"
    assert res["config_only"] == ["nvidia-dkms-580"]
    assert res["loaded_version"] == "580.159.04" and res["loaded_flavour"] == "open"
    assert res["module_flavour"] == "open"
    assert res["kernels"] == [RUNNING, "6.8.0-49-generic"]
    assert res["nouveau_loaded"] is False
    assert res["secure_boot"] is False
    assert res["nvswitch"] is True and res["lspci_rc"] == 0
    # argv lists, C locale, the exact queries
    assert [c[0] for c in node.calls] == [
        ["/usr/bin/dpkg-query", "-W", "-f=" + S.DPKG_QUERY_FORMAT],
        ["/usr/bin/modinfo", "-F", "license", "nvidia"],
        ["/usr/bin/lspci", "-n", "-d", "10de::0680"]]
    assert all(c[1] == {"LC_ALL": "C"} for c in node.calls)


def test_module_on_a_bare_debian12_node(capsys, node):
    """No driver loaded or installed module, nouveau loaded, Secure Boot on, no lspci, no EFI-less surprises."""
    node.answers["dpkg-query"] = (0, DEBIAN12)
    node.answers["modinfo"] = (1, "")
    node.missing.add("lspci")
    os.remove(str(node.proc / "driver" / "nvidia" / "version"))
    (node.sys / "module" / "nouveau").mkdir()
    node.efivar.write_bytes(b"\x06\x00\x00\x00\x01")
    res = run_module(capsys, mod.main, node.args(), check=True)
    assert res["loaded_version"] is None and res["loaded_flavour"] is None
    assert res["module_flavour"] is None
    assert res["nouveau_loaded"] is True
    assert res["secure_boot"] is True
    assert res["nvswitch"] is None and res["lspci_rc"] == 2
    assert "nvidia-kernel-open-dkms" in res["installed"]


def test_module_given_nvswitch_does_not_run_lspci_and_no_efivar(capsys, node):
    res = run_module(capsys, mod.main, node.args(nvswitch=False, secure_boot_efivar=str(node.efivar) + "-absent"))
    assert res["nvswitch"] is False and res["lspci_rc"] is None
    assert res["secure_boot"] is None
    assert not [c for c in node.calls if c[0][0].endswith("lspci")]


def test_module_fails_when_dpkg_cannot_be_read(capsys, node):
    node.answers["dpkg-query"] = (2, "")
    res = run_module(capsys, mod.main, node.args())
    assert res["failed"] is True and "dpkg-query -W failed (rc=2)" in res["msg"]


def test_module_reads_the_reboot_reasons_earlier_runs_left(capsys, node, tmp_path):
    marker = tmp_path / "dgxops-nvidia-driver.reboot-required"
    assert run_module(capsys, mod.main, node.args(reboot_marker=str(marker)))["earlier_reboot_reasons"] == []
    marker.write_text("driver packages changed\n\nnvidia module options changed\n")
    res = run_module(capsys, mod.main, node.args(reboot_marker=str(marker)))
    assert res["earlier_reboot_reasons"] == ["driver packages changed", "nvidia module options changed"]
    assert run_module(capsys, mod.main, node.args())["earlier_reboot_reasons"] == []
