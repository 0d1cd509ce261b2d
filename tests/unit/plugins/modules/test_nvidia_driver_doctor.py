# -*- coding: utf-8 -*-
"""dgxops.fleet.nvidia_driver_doctor on fixture trees (proc/dev/sys/modules) built from the
real H200 captures, with nvidia-smi answered from the same captures."""

import json
import os
import stat

import pytest

from ansible.module_utils import basic
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_driver_doctor as doctor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
DEVICE = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "device-h200")
RELEASE = "6.8.0-45-generic"
DRIVER_TEXT = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")


def capture(name):
    return open(os.path.join(DEVICE, name)).read().split("\n", 1)[1].rsplit("\n# rc=", 1)[0] + "\n"


class Node:
    """A fixture node: directory trees plus canned command output."""

    def __init__(self, tmp_path):
        self.root = tmp_path
        self.proc = tmp_path / "proc"
        self.dev = tmp_path / "dev"
        self.sys = tmp_path / "sys"
        self.mods = tmp_path / "lib-modules"
        self.usr_src = tmp_path / "usr-src"
        self.dkms = tmp_path / "dkms"
        self.lib = tmp_path / "lib"
        for d in (self.proc / "driver" / "nvidia" / "gpus" / "0000:00:06.0", self.dev, self.sys / "bus" / "pci" / "devices",
                  self.mods / RELEASE / "updates" / "dkms", self.usr_src, self.dkms, self.lib):
            d.mkdir(parents=True, exist_ok=True)
        self.smi = (0, None)  # rc, stdout (None = real capture)
        self.dpkg = "nvidia-driver-580-open 580.159.04-0ubuntu1 ii \nnvidia-dkms-580-open 580.159.04-0ubuntu1 ii \n"
        self.kernel_log = "[    0.6] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"
        self.calls = []
        self.driver = None  # another driver version in nvidia-smi's answers
        # healthy defaults, from the H200 captures
        (self.proc / "modules").write_text(capture("lsmod.txt").split("---\n", 1)[1])
        (self.proc / "driver" / "nvidia" / "version").write_text(capture("proc-version.txt"))
        (self.proc / "driver" / "nvidia" / "params").write_text(capture("proc-params.txt"))
        info = capture("proc-gpus.txt").split("\n", 1)[1]
        (self.proc / "driver" / "nvidia" / "gpus" / "0000:00:06.0" / "information").write_text(info)
        self.process("1234", "nvidia-persistenced")
        (self.mods / RELEASE / "updates" / "dkms" / "nvidia.ko.zst").write_text("")
        (self.mods / RELEASE / "build").mkdir()
        (self.mods / RELEASE / "build" / "Makefile").write_text("")
        (self.lib / "libnvidia-ml.so.580.159.04").write_text("")
        for name, minor in (("nvidiactl", 255), ("nvidia0", 0), ("nvidia-uvm", 0)):
            self.chardev(name, 0o666, 195 if name != "nvidia-uvm" else 238, minor)

    def process(self, pid, comm):
        (self.proc / pid).mkdir(exist_ok=True)
        (self.proc / pid / "comm").write_text(comm + "\n")

    def chardev(self, name, mode, major=195, minor=0):
        path = self.dev / name
        if path.exists():
            path.unlink()
        try:
            os.mknod(str(path), mode | stat.S_IFCHR, os.makedev(major, minor))
        except PermissionError:
            pytest.skip("mknod needs root")
        os.chmod(str(path), mode)

    def run_command(self, argv, **kwargs):
        assert isinstance(argv, list)
        assert kwargs.get("environ_update") == {"LC_ALL": "C", "LANG": "C"}
        if os.path.basename(argv[0]) == "timeout":
            argv = argv[4:]
        name = os.path.basename(argv[0])
        self.calls.append([name] + argv[1:])
        if name == "nvidia-smi":
            rc, out = self.smi
            if out is None:
                if argv[1] == "--version":
                    return 0, capture("version.txt"), ""
                fields = argv[1].split("=", 1)[1].split(",")
                head, row = capture("query-default.txt").strip().splitlines()
                allf = open(os.path.join(DEVICE, "default_fields.txt")).read().strip().split(",")
                hs, rs = head.split(", "), row.split(", ")
                idx = [allf.index(f) for f in fields]
                out = ", ".join(hs[i] for i in idx) + "\n" + ", ".join(rs[i] for i in idx) + "\n"
                return 0, out.replace("580.159.04", self.driver) if self.driver else out, ""
            return rc, out, ""
        if name == "dpkg-query":
            return 0, self.dpkg, ""
        return 127, "", "not found"


class Done(Exception):
    pass


def run(monkeypatch, node, **extra):
    def exit_json(self, **kwargs):
        raise Done(kwargs)

    def fail_json(self, **kwargs):
        kwargs["failed"] = True
        raise Done(kwargs)

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return {"nvidia-smi": str(node.root / "nvidia-smi"), "timeout": "/usr/bin/timeout",
                "dpkg-query": "/usr/bin/dpkg-query"}.get(name)
    (node.root / "nvidia-smi").write_text("#!/bin/sh\nexit 99\n")
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: node.run_command(argv, **kw))
    monkeypatch.setattr(doctor.Doctor, "kernel_release", staticmethod(lambda: RELEASE))
    monkeypatch.setattr(doctor.Doctor, "USR_SRC", str(node.usr_src))
    monkeypatch.setattr(doctor.Doctor, "DKMS_DIR", str(node.dkms))
    monkeypatch.setattr(doctor.Doctor, "NVML_GLOBS", (str(node.lib / "libnvidia-ml.so.*.*"),))
    log = node.root / "kern.log"
    log.write_text(node.kernel_log)
    args = {"proc_root": str(node.proc), "dev_root": str(node.dev), "sys_root": str(node.sys),
            "modules_root": str(node.mods), "kernel_log": str(log)}
    args.update(extra)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    try:
        doctor.main()
    except Done as exc:
        res = exc.args[0]
        res["by"] = {f["check"]: f for f in res.get("findings", [])}
        return res
    raise AssertionError("module did not exit")


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def test_healthy_h200_node(monkeypatch, node):
    res = run(monkeypatch, node, expected_gpu_count=1)
    assert res["changed"] is False
    statuses = {k: v["status"] for k, v in res["by"].items()}
    assert statuses == {"nvidia_smi": "ok", "kernel_module": "ok", "nouveau": "ok", "nvrm_log": "ok",
                        "version_mismatch": "ok", "device_nodes": "ok", "kernel_headers": "ok",
                        "driver_packages": "ok", "persistence": "ok", "fabric_manager": "skip",
                        "driver_support": "ok"}
    assert res["verdict"] == {"status": "healthy", "cause": None, "fix": None, "check": None, "failed_checks": []}
    assert res["nvidia_smi"]["gpus"][0]["uuid"] == "GPU-04873e0c-4559-0cdc-493c-07b122c2d475"
    assert "1 GPU(s) (h200), driver 580.159.04" in res["by"]["nvidia_smi"]["message"]
    assert res["by"]["device_nodes"]["message"] == "3 device nodes present with mode 666"
    assert [c[0] for c in node.calls] == ["nvidia-smi", "dpkg-query"]  # kernel log came from the file


def test_driver_not_loaded_module_missing_for_kernel(monkeypatch, node):
    node.smi = (9, DRIVER_TEXT)
    (node.proc / "modules").write_text("ext4 1015808 1 - Live 0x0000000000000000\n")
    (node.proc / "driver" / "nvidia" / "version").unlink()
    os.unlink(str(node.mods / RELEASE / "updates" / "dkms" / "nvidia.ko.zst"))
    for name in ("nvidiactl", "nvidia0", "nvidia-uvm"):
        (node.dev / name).unlink()
    res = run(monkeypatch, node)
    v = res["verdict"]
    assert v["status"] == "broken" and v["check"] == "kernel_module"
    assert v["cause"].startswith("the nvidia kernel module is not loaded and none is built for kernel 6.8.0-45-generic")
    assert "exit 9" in v["cause"]
    assert "linux-headers-6.8.0-45-generic" in v["fix"] and "dkms autoinstall" in v["fix"]
    assert set(v["failed_checks"]) == {"kernel_module", "nvidia_smi", "device_nodes"}
    assert res["by"]["nvidia_smi"]["evidence"][0].startswith("NVIDIA-SMI has failed")


def test_module_built_but_not_loaded(monkeypatch, node):
    node.smi = (9, DRIVER_TEXT)
    (node.proc / "modules").write_text("")
    res = run(monkeypatch, node)
    assert res["verdict"]["check"] == "kernel_module"
    assert "is built (" in res["verdict"]["cause"] and "nvidia.ko.zst" in res["verdict"]["cause"]
    assert "modprobe nvidia" in res["verdict"]["fix"]


def test_nouveau_is_the_cause(monkeypatch, node):
    node.smi = (9, DRIVER_TEXT)
    (node.proc / "modules").write_text("nouveau 2834432 0 - Live 0x0\ndrm 700416 1 nouveau, Live 0x0\n")
    res = run(monkeypatch, node)
    assert res["by"]["nouveau"]["status"] == "fail"
    assert res["verdict"]["check"] == "nouveau"
    assert "update-initramfs -u" in res["verdict"]["fix"]


def test_xid_79_in_the_kernel_log(monkeypatch, node):
    node.smi = (15, "Unable to determine the device handle for GPU0000:00:06.0: GPU is lost.  Reboot the system to recover this GPU\n")
    node.kernel_log += ("[ 8123.4] NVRM: GPU at PCI:0000:00:06: GPU-04873e0c-4559-0cdc-493c-07b122c2d475\n"
                        "[ 8123.4] NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
                        "[ 8123.5] NVRM: GPU 0000:00:06.0: GPU has fallen off the bus.\n")
    res = run(monkeypatch, node)
    f = res["by"]["nvrm_log"]
    assert f["status"] == "fail"
    assert "Xid 79 (GPU has fallen off the bus)" in f["message"]
    assert len(f["evidence"]) == 2
    assert res["verdict"]["check"] == "nvrm_log"
    assert "gpu_lost" not in res["verdict"]["cause"] and "exit 15" in res["verdict"]["cause"]


def test_application_xid_is_only_a_warning(monkeypatch, node):
    node.kernel_log += "[ 99.0] NVRM: Xid (PCI:0000:00:06): 13, pid=4242, name=python, Graphics Exception\n"
    res = run(monkeypatch, node)
    assert res["by"]["nvrm_log"]["status"] == "warn"
    assert res["verdict"]["status"] == "degraded"


def test_version_mismatch(monkeypatch, node):
    node.smi = (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n")
    (node.proc / "driver" / "nvidia" / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n")
    res = run(monkeypatch, node)
    f = res["by"]["version_mismatch"]
    assert f["status"] == "fail"
    assert f["message"] == "the loaded kernel module (580.95.05) and the user-space driver library (580.159.04) differ"
    assert res["verdict"]["check"] == "version_mismatch"
    assert "Reboot" in res["verdict"]["fix"]


def test_device_node_permissions(monkeypatch, node):
    node.chardev("nvidia0", 0o600)
    res = run(monkeypatch, node)
    f = res["by"]["device_nodes"]
    assert f["status"] == "warn"
    assert "/dev/nvidia0 is 600 0:0, the driver wants 666 0:0" in f["message"]
    assert res["verdict"]["status"] == "degraded"


def test_dkms_without_headers(monkeypatch, node):
    os.unlink(str(node.mods / RELEASE / "build" / "Makefile"))
    (node.dkms / "nvidia").mkdir()
    res = run(monkeypatch, node)
    f = res["by"]["kernel_headers"]
    assert f["status"] == "fail" and "built by DKMS" in f["message"]
    assert "linux-headers-6.8.0-45-generic" in f["fix"]


def test_both_flavours_installed(monkeypatch, node):
    node.dpkg += "nvidia-dkms-580 580.159.04-0ubuntu1 ii \nnvidia-driver-580 580.159.04-0ubuntu1 ii \nnvidia-utils-580 580.159.04 ii \n"
    res = run(monkeypatch, node)
    f = res["by"]["driver_packages"]
    assert f["status"] == "fail"
    assert "open (nvidia-driver-580-open, nvidia-dkms-580-open)" in f["message"]
    assert "proprietary (nvidia-dkms-580, nvidia-driver-580)" in f["message"]
    assert "apt-get purge nvidia-dkms-580 nvidia-driver-580" in f["fix"]  # the loaded module is open


def test_debian12_layout_module_packages_are_recognised(monkeypatch, node):
    # NVIDIA's debian12 repository: the flavour is in the module package's name, the branch in the version
    node.dpkg = ("nvidia-driver-cuda 580.159.04-1 ii \nnvidia-kernel-dkms 580.159.04-1 ii \n"
                 "nvidia-smi 580.159.04-1 ii \n")
    res = run(monkeypatch, node)
    f = res["by"]["driver_packages"]
    # the loaded module is open (kernel log / proc of the fixture), the installed one proprietary
    assert f["status"] == "warn" and "the loaded module is open" in f["message"], f
    assert "nvidia-kernel-dkms" in " ".join(f["evidence"])
    node.dpkg = node.dpkg.replace("nvidia-kernel-dkms", "nvidia-kernel-open-dkms")
    f = run(monkeypatch, node)["by"]["driver_packages"]
    assert f["status"] == "ok" and "nvidia-kernel-open-dkms" in f["message"], f


def test_two_branches_installed(monkeypatch, node):
    node.dpkg += "nvidia-driver-550-open 550.163.01 ii \n"
    res = run(monkeypatch, node)
    assert res["by"]["driver_packages"]["status"] == "warn"
    assert "[550, 580]" in res["by"]["driver_packages"]["message"]


def test_persistence_daemon_missing(monkeypatch, node):
    (node.proc / "1234" / "comm").write_text("bash\n")
    res = run(monkeypatch, node)
    f = res["by"]["persistence"]
    assert f["status"] == "warn" and "legacy persistence mode" in f["message"]
    assert f["fix"] == "systemctl enable --now nvidia-persistenced"


def test_fabric_manager_required_where_nvswitches_are_visible(monkeypatch, node):
    for i in range(4):
        d = node.sys / "bus" / "pci" / "devices" / ("0000:0%d:00.0" % (5 + i))
        d.mkdir()
        (d / "vendor").write_text("0x10de\n")
        (d / "class").write_text("0x068000\n")
    res = run(monkeypatch, node)
    f = res["by"]["fabric_manager"]
    assert f["status"] == "fail"
    assert f["message"].startswith("4 NVSwitch(es) present but nvidia-fabricmanager is not running")
    assert "580.159.04" in f["fix"]
    assert res["nvidia_smi"]["nvswitch_source"] == "pci"
    node.process("4321", "nv-fabricmanager")
    res = run(monkeypatch, node)
    assert res["by"]["fabric_manager"]["status"] == "ok"


def test_unreadable_kernel_log_is_skipped(monkeypatch, node):
    res = run(monkeypatch, node, kernel_log=str(node.root / "missing.log"))
    # a missing file reads as an empty log: no errors found
    assert res["by"]["nvrm_log"]["status"] == "ok"


def test_bad_timeout_fails_early(monkeypatch, node):
    res = run(monkeypatch, node, timeout=0)
    assert res["failed"] is True and res["msg"].startswith("timeout: invalid value 0")
    assert node.calls == []


def test_a_driver_branch_that_does_not_support_the_gpu_is_the_cause(monkeypatch, node):
    node.driver = "535.247.01"  # H200 needs R550
    res = run(monkeypatch, node)
    assert res["by"]["driver_support"]["status"] == "fail"
    assert res["verdict"]["status"] == "broken"
    assert res["verdict"]["check"] == "driver_support"
    assert res["verdict"]["cause"] == "driver branch R535 does not support h200 GPUs (the first branch that does is R550)"
    assert res["verdict"]["fix"].startswith("Install driver branch 550 or newer")
