"""dgxops doctor: per-host verdict, cause and fix from the doctor playbook's published verdicts."""

from dgxops.cli import doctor_verdicts, format_doctor
from dgxops.runner import Failure, RunResult


def result(facts, failures=()):
    hosts = {h: {"ok": 1, "changed": 0, "dark": 0, "failures": 0, "skipped": 0} for h in ("a", "b", "c")}
    return RunResult("failed", 2, hosts, list(failures), [], facts=facts)


BROKEN = {"status": "broken", "cause": "the NVIDIA driver is not loaded", "fix": "Load it with modprobe nvidia",
          "check": "kernel_module",
          "attention": [{"status": "fail", "check": "kernel_module", "message": "nvidia is not loaded"}]}


def test_verdicts_per_host_including_unreachable_and_unknown():
    res = result({"a": {"dgxops_doctor": BROKEN}},
                 [Failure("b", "Run the driver doctor", "Failed to connect", unreachable=True),
                  Failure("c", "Run the driver doctor", "module crashed")])
    verdicts = doctor_verdicts(res)
    assert verdicts["a"] == BROKEN
    assert verdicts["b"]["status"] == "unreachable" and verdicts["b"]["cause"] == "Failed to connect"
    assert verdicts["c"]["status"] == "unknown" and verdicts["c"]["cause"] == "module crashed"


def test_text_names_verdict_cause_and_fix():
    text = format_doctor({"a": BROKEN, "b": {"status": "healthy", "cause": None, "fix": None, "attention": []}})
    assert text.splitlines() == [
        "a: BROKEN",
        "    cause: the NVIDIA driver is not loaded",
        "    fix: Load it with modprobe nvidia",
        "    FAIL kernel_module: nvidia is not loaded",
        "b: HEALTHY",
    ]
