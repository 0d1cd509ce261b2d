# -*- coding: utf-8 -*-
"""dgxops.fleet.nvidia_smi_facts with run_command answered from real captures.

The fake answers ``--query-gpu=<any fields>`` by selecting those columns from the
exporter's full query of the same capture (so the module's own field list is
exercised against real values), and other commands from the capture's sections.
"""

import json
import os
import re
import stat

import pytest

from ansible.module_utils import basic
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi as smi
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_smi_facts

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
PUBLIC = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "public")
DEVICE = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "device-h200")

DRIVER_TEXT = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n\n")


def sections(name):
    out = {}
    lines = open(os.path.join(PUBLIC, name)).read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("# $ "):
            cmd = lines[i][4:].rstrip()
            i += 1
            if i < len(lines) and lines[i].startswith("####"):
                i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("####"):
                body.append(lines[i])
                i += 1
            out.setdefault(cmd, "\n".join(body).strip("\n") + "\n")
        else:
            i += 1
    return out


class CaptureSmi:
    """Answers nvidia-smi argv from one public capture (idle phase)."""

    def __init__(self, name):
        self.sections = sections(name)
        query = [c for c in self.sections if c.startswith("nvidia-smi --query-gpu=")][0]
        self.fields = query.split("=", 1)[1].split(" --format")[0].split(",")
        body = self.sections[query].strip().splitlines()
        self.header = body[0].split(", ")
        self.rows = [ln.split(", ") for ln in body[1:]]
        self.calls = []
        self.overrides = {}

    def query(self, fields, nounits):
        for f in fields:
            if f not in self.fields:
                return 2, 'Field "%s" is not a valid field to query.\n\n' % f, ""
        idx = [self.fields.index(f) for f in fields]
        head = ", ".join(self.header[i] for i in idx)
        rows = []
        for row in self.rows:
            cells = [row[i] for i in idx]
            if nounits:
                cells = [re.sub(r"^([-\d.]+) (W|MiB|MHz|%|C)$", r"\1", c) for c in cells]
            rows.append(", ".join(cells))
        return 0, head + "\n" + "\n".join(rows) + "\n", ""

    def __call__(self, argv):
        if argv[0].endswith("timeout"):
            assert argv[1:4] == ["-k", "5", "30"] or argv[1] == "-k"
            argv = argv[4:]
        args = argv[1:]
        self.calls.append(args)
        key = " ".join(args)
        if key in self.overrides:
            return self.overrides[key]
        if args and args[0].startswith("--query-gpu="):
            fmt = args[1].split("=", 1)[1]
            return self.query(args[0].split("=", 1)[1].split(","), "nounits" in fmt)
        cmd = "nvidia-smi " + key
        if cmd in self.sections:
            return 0, self.sections[cmd], ""
        return 2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", ""


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


@pytest.fixture
def fake_bin(tmp_path):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\nexit 99\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def run(monkeypatch, fake, args, pynvml_module=None, cuda="13.9"):
    """Run the module's main path with run_command answered by ``fake``."""
    def exit_json(self, **kwargs):
        raise ExitJson(kwargs)

    def fail_json(self, **kwargs):
        kwargs["failed"] = True
        raise FailJson(kwargs)

    def run_command(self, argv, **kwargs):
        assert isinstance(argv, list)
        assert kwargs.get("environ_update") == {"LC_ALL": "C", "LANG": "C"}
        return fake(argv)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    module = basic.AnsibleModule(argument_spec=dict(
        gather_subset=dict(type="list", elements="str", default=["default"]),
        backend=dict(type="str", choices=["auto", "nvml", "nvidia-smi"], default="auto"),
        timeout=dict(type="int", default=30),
        nvidia_smi_path=dict(type="str"),
        require_gpus=dict(type="bool", default=False),
        expected_gpu_count=dict(type="int"),
    ), supports_check_mode=True)
    try:
        nvidia_smi_facts.run_module(module, pynvml_module=pynvml_module, cuda_probe=lambda: cuda)
    except ExitJson as exc:
        return exc.args[0]
    except FailJson as exc:
        return exc.args[0]
    raise AssertionError("module returned without exit_json/fail_json")


def test_argspec_matches_module_main():
    """The harness above uses the module's own argument spec (kept in sync by this check)."""
    src = open(nvidia_smi_facts.__file__).read()
    for opt in ("gather_subset", "backend", "timeout", "nvidia_smi_path", "require_gpus", "expected_gpu_count"):
        assert "%s=dict(" % opt in src
        if opt == "nvidia_smi_path":   # documented once, in the collection's nvidia_smi doc fragment
            from ansible_collections.dgxops.fleet.plugins.doc_fragments.nvidia_smi import ModuleDocFragment
            assert "  - dgxops.fleet.nvidia_smi\n" in nvidia_smi_facts.DOCUMENTATION
            assert "\n  %s:\n" % opt in ModuleDocFragment.DOCUMENTATION
        else:
            assert "\n  %s:\n" % opt in nvidia_smi_facts.DOCUMENTATION


def test_default_subset_is_one_process_h200(monkeypatch, fake_bin):
    fake = CaptureSmi("linux-x86_64__nvidia-h200__590.48.01.txt")
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "backend": "nvidia-smi"})
    facts = res["ansible_facts"]["nvidia_smi"]
    assert res["changed"] is False
    assert len(fake.calls) == 1
    assert fake.calls[0][0] == "--query-gpu=" + ",".join(P.FIELDS_GPUS)
    assert fake.calls[0][1] == "--format=csv,nounits"
    assert facts["gpu_count"] == 1
    assert facts["driver_version"] == "590.48.01"
    assert facts["driver_branch"] == 590
    assert facts["cuda_version"] == "13.9" and facts["cuda_version_source"] == "libcuda"
    assert facts["model_family"] == "h200"
    assert facts["mig_capable"] is True and facts["mig_enabled"] is False
    assert facts["unified_memory"] is False
    assert facts["nvswitch"] is True and facts["nvswitch_source"] == "gpu_fabric_state"
    assert facts["health"]["ok"] is True and facts["health"]["rc"] == 0
    gpu = facts["gpus"][0]
    assert gpu["memory_total_mib"] == 143771
    assert gpu["power_limit_w"] == 700.0 and gpu["power_min_limit_w"] == 200.0
    assert gpu["persistence_mode"] is True
    assert gpu["mig_mode_current"] == "Disabled"
    assert "clocks_max_graphics_mhz" not in gpu  # clocks are opt-in
    assert facts["collection"]["backend"] == "nvidia-smi"
    assert facts["collection"]["timeout_enforced"] is True
    assert [c["rc"] for c in facts["collection"]["commands"]] == [0]


def test_without_libcuda_the_cuda_version_comes_from_version(monkeypatch, fake_bin):
    fake = CaptureSmi("linux-x86_64__nvidia-l40s__595.80.txt")
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "backend": "nvidia-smi"}, cuda=None)
    facts = res["ansible_facts"]["nvidia_smi"]
    assert [c[0] for c in fake.calls] == ["--query-gpu=" + ",".join(P.FIELDS_GPUS), "--version"]
    assert facts["cuda_version"] == "13.2"
    assert facts["cuda_version_source"] == "nvidia-smi --version"
    assert facts["nvml_version"] == "595.80"
    assert facts["model_family"] == "l40s"
    assert facts["mig_capable"] is False
    assert facts["nvswitch"] is False
    assert facts["gpus"][0]["unavailable"]["mig_mode_current"] == "not_available"


def test_all_subsets_mig_capture(monkeypatch, fake_bin):
    fake = CaptureSmi("linux-x86_64__nvidia-h100-mig__590.48.01.txt")
    fake.overrides["mig -lgip"] = (0, open(os.path.join(PUBLIC, "..", "device-h200", "mig-lgip.txt")).read()
                                   .split("\n", 1)[1].rsplit("\n# rc=", 1)[0], "")
    lgi = ("+----------------------------------------------------+\n| GPU instances:                                     |\n"
           "|====================================================|\n"
           "|   0  MIG 3g.40gb       9        2          0:4     |\n"
           "|   0  MIG 2g.20gb      14        3          4:2     |\n+----------------------------------------------------+\n")
    fake.overrides["mig -lgi"] = (0, lgi, "")
    fake.overrides["mig -lgipp"] = (0, "GPU  0 Profile ID  9 Placements: {0,4}:4\n", "")
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "gather_subset": ["all"], "backend": "nvidia-smi"})
    facts = res["ansible_facts"]["nvidia_smi"]
    gpu = facts["gpus"][0]
    assert facts["mig_enabled"] is True
    assert gpu["clocks_max_graphics_mhz"] == 1980
    assert gpu["clocks_applications_graphics_mhz"] is None
    assert gpu["unavailable"]["clocks_applications_graphics_mhz"] == "deprecated"
    assert gpu["temperature_c"] == 42 and gpu["pstate"] == "P0"
    assert [p["id"] for p in gpu["mig_profiles"]] == [19, 20, 15, 14, 9, 5, 0]
    assert gpu["mig_placements"] == [{"profile_id": 9, "starts": [0, 4], "size": 4}]
    assert [(i["name"], i["instance_id"]) for i in gpu["mig_instances"]] == [("3g.40gb", 2), ("2g.20gb", 3)]
    assert [d["profile"] for d in gpu["mig_devices"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert gpu["cpu_affinity"] == "0-19" and gpu["numa_node"] == 0 and gpu["nvlink_peers"] == {}
    assert facts["topology"]["matrix"] == {"GPU0": {"GPU0": "X"}}
    assert facts["processes"] == []
    assert facts["nvml_version"] == "590.48"
    assert facts["cuda_version"] == "13.1" and facts["cuda_version_source"] == "nvidia-smi --version"
    ran = [" ".join(c) for c in fake.calls]
    assert ran[0].startswith("--query-gpu=") and "clocks.max.graphics" in ran[0] and "pstate" in ran[0]
    assert sum(1 for c in ran if c.startswith("--query-gpu=")) == 1  # gpus+clocks+health share one call
    assert {"topo -m", "mig -lgip", "mig -lgipp", "mig -lgi", "-L", "--version"} <= set(ran)


def test_old_driver_missing_field_is_dropped_and_retried(monkeypatch, fake_bin):
    fake = CaptureSmi("linux-x86_64__nvidia-h200__590.48.01.txt")
    fake.fields = list(fake.fields)
    original = fake.query

    def old_query(fields, nounits):
        if "gpu_recovery_action" in fields:
            return 2, 'Field "gpu_recovery_action" is not a valid field to query.\n\n', ""
        return original(fields, nounits)
    fake.query = old_query
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "backend": "nvidia-smi"})
    facts = res["ansible_facts"]["nvidia_smi"]
    assert len([c for c in fake.calls if c[0].startswith("--query-gpu")]) == 2
    assert facts["health"]["ok"] is True
    assert facts["gpus"][0]["recovery_action"] is None
    assert facts["gpus"][0]["unavailable"]["recovery_action"] == "field_unknown_to_driver"
    assert any("gpu_recovery_action" in w for w in res.get("warnings", []) + facts["collection"]["warnings"])


@pytest.mark.parametrize("rc,out,code", [
    (9, DRIVER_TEXT, "driver_not_loaded"),
    (15, "Unable to determine the device handle for GPU0000:18:00.0: GPU is lost.  Reboot the system to recover this GPU\n", "gpu_lost"),
    (6, "No devices were found\n", "no_devices"),
    (124, "", "timeout"),
    (12, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.\n", "nvml_missing"),
    (255, "Unknown Error\n", "other_error"),
])
def test_failures_do_not_crash_and_report_health(monkeypatch, fake_bin, rc, out, code):
    def fake(argv):
        return rc, out, ""
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "backend": "nvidia-smi"})
    assert "failed" not in res
    facts = res["ansible_facts"]["nvidia_smi"]
    assert facts["gpu_count"] == 0 and facts["gpus"] == []
    assert facts["health"]["ok"] is False
    assert facts["health"]["code"] == code
    assert facts["health"]["rc"] == rc
    assert facts["health"]["fix"]
    assert facts["mig_capable"] is False


def test_require_gpus_fails_with_rc_stdout_and_fix(monkeypatch, fake_bin):
    def fake(argv):
        return 9, DRIVER_TEXT, DRIVER_TEXT
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "require_gpus": True, "backend": "nvidia-smi"})
    assert res["failed"] is True
    assert res["rc"] == 9
    assert "couldn't communicate with the NVIDIA driver" in res["stdout"]
    assert "driver is not loaded" in res["msg"] and "modprobe nvidia" in res["msg"]


def test_expected_gpu_count_mismatch(monkeypatch, fake_bin):
    fake = CaptureSmi("linux-x86_64__nvidia-h200__590.48.01.txt")
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "expected_gpu_count": 8, "backend": "nvidia-smi"})
    health = res["ansible_facts"]["nvidia_smi"]["health"]
    assert health["ok"] is False and health["code"] == "gpu_issues"
    assert "expected 8 GPUs, nvidia-smi reports 1" in health["issues"][0]
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "expected_gpu_count": 8, "require_gpus": True,
                                  "backend": "nvidia-smi"})
    assert res["failed"] is True and "expected 8 GPUs" in res["msg"]


def test_missing_binary_is_not_installed(monkeypatch, tmp_path):
    res = run(monkeypatch, lambda argv: (0, "", ""), {"nvidia_smi_path": str(tmp_path / "nope")})
    health = res["ansible_facts"]["nvidia_smi"]["health"]
    assert health["code"] == "not_installed" and health["rc"] is None


@pytest.mark.parametrize("subset", [["bogus"], ["!nope"], ["gpus", "clock"]])
def test_bad_subset_fails_early_naming_the_value(monkeypatch, fake_bin, subset):
    calls = []
    res = run(monkeypatch, lambda argv: calls.append(argv) or (0, "", ""), {"nvidia_smi_path": fake_bin, "gather_subset": subset})
    assert res["failed"] is True
    assert "gather_subset: invalid value" in res["msg"] and "allowed: all, default, min, gpus" in res["msg"]
    assert calls == []


def test_bad_timeout_fails_early(monkeypatch, fake_bin):
    res = run(monkeypatch, lambda argv: (0, "", ""), {"nvidia_smi_path": fake_bin, "timeout": 0})
    assert res["failed"] is True and res["msg"].startswith("timeout: invalid value 0")


def test_min_subset_starts_no_process(monkeypatch, fake_bin):
    calls = []
    res = run(monkeypatch, lambda argv: calls.append(argv) or (0, "", ""),
              {"nvidia_smi_path": fake_bin, "gather_subset": ["min"]})
    assert calls == []
    assert res["ansible_facts"]["nvidia_smi"]["collection"]["subsets"] == ["min"]


def test_resolve_subsets():
    assert smi.resolve_subsets(["default"]) == ({"min", "gpus"}, [])
    assert smi.resolve_subsets(["all", "!processes", "!topology"])[0] == {
        "min", "gpus", "clocks", "health", "mig", "versions"}
    assert smi.resolve_subsets(["topology"])[0] == {"min", "gpus", "topology"}
    assert smi.resolve_subsets(["min"])[0] == {"min"}
    assert smi.resolve_subsets(["!gpus"])[0] == {"min"}


def test_gpu_health_issues_and_warnings():
    facts = smi.empty_facts()
    facts["gpus"] = [
        {"index": 0, "pci_bus_id": "A", "recovery_action": "Reset", "mig_mode_current": "Disabled",
         "mig_mode_pending": "Enabled", "remapped_rows_pending": True, "ecc_errors_uncorrected_volatile": 3},
        {"index": 1, "pci_bus_id": "B", "recovery_action": "None", "remapped_rows_failure": True,
         "fabric_state": "Completed", "fabric_status": "Failure"},
    ]
    issues, warnings = smi.health_from_gpus(facts)
    assert issues == ["GPU 0 (A): driver requests recovery action 'Reset'",
                      "GPU 1 (B): row remapping failed (needs RMA)",
                      "GPU 1 (B): NVSwitch fabric status 'Failure' (check nvidia-fabricmanager)"]
    assert warnings == ["GPU 0 (A): row remapping pending (reset the GPU)",
                        "GPU 0 (A): 3 uncorrected volatile ECC errors",
                        "GPU 0 (A): MIG mode Disabled, pending Enabled (reset or reboot to apply)"]


def test_classify_exit_codes():
    assert smi.classify(0, "index\n0\n") is None
    assert smi.classify(0, "No devices were found\n")["code"] == "no_devices"
    assert smi.classify(9, DRIVER_TEXT)["code"] == "driver_not_loaded"
    assert "nvidia-smi said: NVIDIA-SMI has failed" in smi.classify(9, DRIVER_TEXT)["message"]
    assert smi.classify(137, "")["code"] == "timeout"
    assert smi.classify(77, DRIVER_TEXT)["code"] == "driver_not_loaded"
    assert smi.classify(77, "weird")["code"] == "other_error"
    assert smi.classify(None)["code"] == "not_installed"
    for rc in (2, 3, 4, 6, 8, 9, 10, 12, 13, 14, 15, 255):
        assert smi.classify(rc, "x")["rc"] == rc


# ---------------------------------------------------------------------------
# NVML backend with a stand-in pynvml built from the H200 capture's values
# ---------------------------------------------------------------------------

class FakeNVMLError(Exception):
    pass


class FakePynvml:
    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, init_error=None, mig=(0, 0), memory=143771 * 1024 * 1024):
        self.init_error = init_error
        self.mig = mig
        self.memory = memory
        self.shutdown = False

    def nvmlInit(self):
        if self.init_error:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetNVMLVersion(self):
        return "13.580.159.04"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return "GPU-04873e0c-4559-0cdc-493c-07b122c2d475"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H200"

    def nvmlDeviceGetPciInfo(self, h):
        class Pci:
            busId = b"00000000:00:06.0"
            pciDeviceId = 0x233510DE
        return Pci()

    def nvmlDeviceGetSerial(self, h):
        return "1654024076848"

    def nvmlDeviceGetVbiosVersion(self, h):
        return "96.00.A5.00.1A"

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetComputeMode(self, h):
        return 0

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, h):
        if self.memory is None:
            raise FakeNVMLError("Not Supported")

        class Mem:
            total = self.memory
        return Mem()

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700000

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 700000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h):
        return [200000, 700000]

    def nvmlDeviceGetMigMode(self, h):
        if self.mig is None:
            raise FakeNVMLError("Not Supported")
        return list(self.mig)

    def nvmlDeviceGetEccMode(self, h):
        return [1, 1]


def test_nvml_backend_matches_the_csv_path(monkeypatch, fake_bin):
    fields = open(os.path.join(DEVICE, "default_fields.txt")).read().strip().split(",")
    body = open(os.path.join(DEVICE, "query-default.txt")).read().split("\n", 1)[1].rsplit("\n# rc=", 1)[0]
    csv_gpu = P.gpus_from_query(body, fields)[0][0]
    nv = FakePynvml()
    calls = []
    res = run(monkeypatch, lambda argv: calls.append(argv) or (0, "", ""), {"nvidia_smi_path": fake_bin}, pynvml_module=nv)
    facts = res["ansible_facts"]["nvidia_smi"]
    assert calls == []  # NVML only: no nvidia-smi process at all
    assert nv.shutdown is True
    assert facts["collection"]["backend"] == "nvml"
    assert facts["cuda_version"] == "13.0" and facts["cuda_version_source"] == "nvml"
    assert facts["nvml_version"] == "13.580.159.04"
    gpu = facts["gpus"][0]
    for key in ("index", "uuid", "name", "pci_bus_id", "pci_device_id", "serial", "vbios_version",
                "driver_version", "persistence_mode", "compute_mode", "compute_capability", "memory_total_mib",
                "power_limit_w", "power_enforced_limit_w", "power_default_limit_w", "power_min_limit_w",
                "power_max_limit_w", "mig_mode_current", "mig_mode_pending", "ecc_mode_current", "ecc_mode_pending"):
        assert gpu[key] == csv_gpu[key], key
    assert gpu["fabric_state"] is None and gpu["unavailable"]["fabric_state"] == "not_collected_by_nvml"
    assert facts["health"]["ok"] is True


def test_nvml_unified_memory_and_no_mig(monkeypatch, fake_bin):
    nv = FakePynvml(mig=None, memory=None)
    res = run(monkeypatch, lambda argv: (0, "", ""), {"nvidia_smi_path": fake_bin}, pynvml_module=nv)
    facts = res["ansible_facts"]["nvidia_smi"]
    gpu = facts["gpus"][0]
    assert gpu["memory_total_mib"] is None and gpu["unavailable"]["memory_total_mib"] == "not_supported"
    assert facts["unified_memory"] is True
    assert facts["mig_capable"] is False and gpu["unavailable"]["mig_mode_current"] == "not_supported"


def test_nvml_init_failure_falls_back_to_nvidia_smi(monkeypatch, fake_bin):
    nv = FakePynvml(init_error="Driver Not Loaded")
    res = run(monkeypatch, lambda argv: (9, DRIVER_TEXT, ""), {"nvidia_smi_path": fake_bin}, pynvml_module=nv)
    facts = res["ansible_facts"]["nvidia_smi"]
    assert facts["collection"]["backend"] == "nvidia-smi"
    assert any("NVML failed (Driver Not Loaded)" in w for w in facts["collection"]["warnings"])
    assert facts["health"]["code"] == "driver_not_loaded" and facts["health"]["rc"] == 9


def test_backend_nvidia_smi_ignores_pynvml(monkeypatch, fake_bin):
    fake = CaptureSmi("linux-x86_64__nvidia-h200__590.48.01.txt")
    res = run(monkeypatch, fake, {"nvidia_smi_path": fake_bin, "backend": "nvidia-smi"}, pynvml_module=FakePynvml())
    assert res["ansible_facts"]["nvidia_smi"]["collection"]["backend"] == "nvidia-smi"


def test_real_timeout_binary_kills_a_hung_nvidia_smi(monkeypatch, tmp_path):
    """End to end through the real run_command and coreutils timeout (1 s)."""
    hang = tmp_path / "nvidia-smi"
    hang.write_text("#!/bin/sh\nsleep 30\n")
    hang.chmod(0o755)
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": {}}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)
    module = basic.AnsibleModule(argument_spec={}, supports_check_mode=True)
    runner = smi.NvidiaSmi(module, binary=str(hang), timeout=1)
    if not runner.timeout_enforced:
        pytest.skip("coreutils timeout is not installed on this machine")
    res = runner.run(["--query-gpu=index", "--format=csv"])
    assert res.rc == 124
    assert res.error["code"] == "timeout"
    assert res.duration_ms < 10000
