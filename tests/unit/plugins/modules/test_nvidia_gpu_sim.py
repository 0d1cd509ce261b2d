"""dgxops.fleet.nvidia_gpu against the simulated nvidia-smi, for every simulated model.

The module runs as a real process (``python -m ...nvidia_gpu args.json``, the way Ansible
runs it) with a ``nvidia-smi`` wrapper on PATH that execs the simulator. Assertions are on
the simulator's state file (``dgxops.sim.fakesmi.admin show``), not only on the module output.
"""

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = "ansible_collections.dgxops.fleet.plugins.modules.nvidia_gpu"

# model -> (default driver of the simulated fleet, gpus, default W, min W, max W)
MODELS = {
    "dgx-a100-40gb": ("535.247.01", 8, 400.0, 100.0, 400.0),
    "dgx-a100-80gb": ("550.163.01", 8, 400.0, 100.0, 400.0),
    "dgx-h100": ("580.95.05", 8, 700.0, 200.0, 700.0),
    "dgx-h200": ("580.95.05", 8, 700.0, 200.0, 700.0),
    "dgx-spark": ("580.95.05", 1, None, None, None),
}


class Node(object):
    def __init__(self, tmp):
        self.tmp = str(tmp)
        self.state_dir = os.path.join(self.tmp, "state")
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        os.makedirs(self.state_dir)
        wrapper = os.path.join(self.bin, "nvidia-smi")
        with open(wrapper, "w") as handle:
            handle.write("#!/bin/sh\nexec %s -m dgxops.sim.fakesmi \"$@\"\n" % sys.executable)
        os.chmod(wrapper, 0o755)
        self.record = os.path.join(self.tmp, "run", "locked.json")
        self.env = dict(os.environ, DGXOPS_SIM_STATE_DIR=self.state_dir,
                        PYTHONPATH=os.pathsep.join([os.path.join(ROOT, ".collections"), os.path.join(ROOT, "src")]),
                        PATH=self.bin + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"), LC_ALL="C")

    def admin(self, *args):
        out = subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi.admin"] + list(args), env=self.env,
                             capture_output=True, text=True, check=True)
        return out.stdout

    def state(self):
        return json.loads(self.admin("show"))

    def digest(self):
        with open(os.path.join(self.state_dir, "state.json"), "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()

    def smi(self, *args):
        return subprocess.run([os.path.join(self.bin, "nvidia-smi")] + list(args), env=self.env,
                              capture_output=True, text=True, check=False)

    def run(self, check=False, diff=False, **params):
        params.setdefault("locked_clocks_record", self.record)
        params["_ansible_check_mode"] = check
        params["_ansible_diff"] = diff
        path = os.path.join(self.tmp, "args.json")
        with open(path, "w") as handle:
            json.dump({"ANSIBLE_MODULE_ARGS": params}, handle)
        proc = subprocess.run([sys.executable, "-m", MODULE, path], env=self.env, capture_output=True, text=True,
                              check=False)
        try:
            return json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("module printed no JSON: %s %s" % (proc.stdout, proc.stderr)) from None


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def init(node, model, driver=None):
    node.admin("init", "--model", model, "--driver", driver or MODELS[model][0])


@pytest.mark.parametrize("model", sorted(MODELS))
def test_percent_power_and_persistence_then_idempotent(node, model):
    init(node, model)
    driver, count, default, _lo, _hi = MODELS[model]
    before = node.state()
    assert {g["persistence_mode"] for g in before["gpus"]} == {False}
    res = node.run(power_limit_percent=90, persistence_mode=True)
    assert not res.get("failed"), res.get("msg")
    state = node.state()
    assert [g["persistence_mode"] for g in state["gpus"]] == [True] * count
    if default is None:
        # GB10: no power management. Reported as unsupported with the reason, state untouched.
        assert [u["setting"] for u in res["unsupported"]] == ["power_limit"]
        assert "power management is not available" in res["unsupported"][0]["reason"]
        assert [g["power_limit"] for g in state["gpus"]] == [g["power_limit"] for g in before["gpus"]]
        assert res["changes"] == count
    else:
        assert [g["power_limit"] for g in state["gpus"]] == [round(default * 0.9)] * count
        assert res["changes"] == 2 * count
        assert res["changed_gpus"] == count
    # one read, one call per distinct change (all GPUs share it), one read-back
    setters = [c["argv"] for c in res["commands"] if "-i" in c["argv"]]
    assert len(setters) == (1 if default is None else 2)
    assert res["changed"] is True
    again = node.run(power_limit_percent=90, persistence_mode=True)
    assert again["changed"] is False and again["changes"] == 0
    assert len(again["commands"]) == 1  # a single --query-gpu call


@pytest.mark.parametrize("model", ["dgx-a100-80gb", "dgx-h100", "dgx-h200"])
def test_check_mode_reports_and_changes_nothing(node, model):
    init(node, model)
    digest = node.digest()
    res = node.run(check=True, diff=True, power_limit_watts=300)
    assert res["changed"] is True
    assert res["changes"] == 8 and res["changed_gpus"] == 8
    assert {g["after"]["power_limit_w"] for g in res["gpus"]} == {300.0}
    assert {g["before"]["power_limit_w"] for g in res["gpus"]} == {MODELS[model][2]}
    assert "-power_limit_w: %.2f" % MODELS[model][2] not in res["diff"]["after"]
    assert "power_limit_w: 300.00" in res["diff"]["after"]
    assert res["diff"]["after"].count("# GPU ") == 8
    assert node.digest() == digest
    assert all(c["argv"][-1] != "300" for c in res["commands"])


@pytest.mark.parametrize("params, fragment", [
    ({"power_limit_watts": 9999}, "power_limit_watts: 9999 W is outside the power limits of GPUs 0-7 "
                                  "(NVIDIA A100-SXM4-80GB); allowed: 100.00-400.00 W"),
    ({"power_limit_watts": -5}, "power_limit_watts: invalid value -5.0"),
    ({"application_clocks": {"memory_mhz": 1593, "graphics_mhz": 1400}},
     "application_clocks.graphics_mhz: graphics clock 1400 MHz is not supported with memory 1593 MHz"),
    ({"application_clocks": {"memory_mhz": 1215, "graphics_mhz": 1410}},
     "application_clocks.memory_mhz: memory clock 1215 MHz is not supported"),
    ({"locked_clocks": {"min_mhz": 100, "max_mhz": 1410}}, "locked_clocks.min_mhz: 100 MHz is below the lowest"),
    ({"gpus": ["GPU-00000000-0000-0000-0000-000000000000"]}, "gpus: no GPU matches"),
    ({"gpus": ["9"]}, "gpus: no GPU matches '9'; allowed: 'all', an index (0-7)"),
])
def test_bad_input_fails_before_any_gpu_changes(node, params, fragment):
    init(node, "dgx-a100-80gb")
    digest = node.digest()
    # a valid change goes along, so any partial apply would show in the state file
    res = node.run(persistence_mode=True, **params)
    assert res["failed"] is True
    assert fragment in res["msg"], res["msg"]
    assert "allowed" in res["msg"]
    assert node.digest() == digest
    assert not [c for c in res.get("commands", []) if "-i" in c["argv"]]


def test_a_limit_error_on_one_gpu_blocks_all(node):
    """Selected GPUs are all checked first: the bad one stops the good ones too."""
    init(node, "dgx-h100")
    digest = node.digest()
    res = node.run(gpus=["0", "1"], locked_clocks={"min_mhz": 1410, "max_mhz": 2100}, persistence_mode=True)
    assert res["failed"] and "locked_clocks.max_mhz: 2100 MHz is above the maximum graphics clock of GPUs 0, 1" in res["msg"]
    assert node.digest() == digest


def test_selection_by_uuid_and_bus_id_changes_only_those(node):
    init(node, "dgx-h100")
    gpus = node.state()["gpus"]
    res = node.run(gpus=[gpus[2]["uuid"], gpus[5]["bus_id"].lower(), "7"], power_limit_watts=450)
    assert not res.get("failed"), res.get("msg")
    assert [g["power_limit"] for g in node.state()["gpus"]] == [700.0] * 2 + [450.0] + [700.0] * 2 + [450.0, 700.0, 450.0]
    assert [g["index"] for g in res["gpus"]] == [2, 5, 7]


def test_application_clocks_set_and_reset_on_r550(node):
    init(node, "dgx-a100-80gb")
    res = node.run(application_clocks={"memory_mhz": 1593, "graphics_mhz": 1410})
    assert res["changes"] == 8
    assert {tuple(g["app_clocks"]) for g in node.state()["gpus"]} == {(1593, 1410)}
    assert node.run(application_clocks={"memory_mhz": 1593, "graphics_mhz": 1410})["changed"] is False
    res = node.run(application_clocks="default")
    assert res["changes"] == 8
    assert {g["app_clocks"] for g in node.state()["gpus"]} == {None}
    assert node.run(application_clocks="default")["changed"] is False


def test_application_clocks_unsupported_on_r590_warn_and_fail(node):
    init(node, "dgx-h200", "590.48.01")
    digest = node.digest()
    res = node.run(application_clocks={"memory_mhz": 3201, "graphics_mhz": 1980})
    assert res["changed"] is False and not res.get("failed")
    assert len(res["unsupported"]) == 8
    assert "deprecated on driver branch 590" in res["unsupported"][0]["reason"]
    assert "application_clocks on GPU 0,1,2,3,4,5,6,7: application clocks are deprecated" in json.dumps(res["warnings"])
    res = node.run(application_clocks={"memory_mhz": 3201, "graphics_mhz": 1980}, on_unsupported="fail")
    assert res["failed"] and "unsupported settings requested" in res["msg"]
    assert node.digest() == digest


@pytest.mark.parametrize("driver, reason", [("535.247.01", "removed in the R5xx drivers"),
                                            ("470.256.02", "cannot be read back")])
def test_acp_reported_unsupported_with_reason(node, driver, reason):
    init(node, "dgx-a100-40gb", driver)
    res = node.run(application_clock_permissions="unrestricted")
    assert res["changed"] is False
    assert reason in res["unsupported"][0]["reason"]


def test_ecc_change_is_pending_until_reboot(node):
    init(node, "dgx-h100")
    res = node.run(ecc_mode=False)
    assert res["changes"] == 8 and res["reboot_required"] is True
    assert "ecc_mode: enabled now, disabled after the GPU is reset or the node reboots" in res["pending"][0]
    state = node.state()
    assert {(g["ecc_current"], g["ecc_pending"]) for g in state["gpus"]} == {(True, False)}
    again = node.run(ecc_mode=False)
    assert again["changed"] is False and again["reboot_required"] is True
    node.admin("reset")
    assert {g["ecc_current"] for g in node.state()["gpus"]} == {False}
    assert node.run(ecc_mode=False)["reboot_required"] is False


def test_compute_mode_and_locked_clocks_are_idempotent(node):
    init(node, "dgx-h100")
    res = node.run(compute_mode="EXCLUSIVE_PROCESS", locked_clocks={"min_mhz": 1410, "max_mhz": 1980})
    assert res["changes"] == 16
    state = node.state()
    assert {g["compute_mode"] for g in state["gpus"]} == {"Exclusive_Process"}
    assert {tuple(g["locked_clocks"]) for g in state["gpus"]} == {(1410, 1980)}
    with open(node.record) as handle:
        record = json.load(handle)
    assert len(record["gpus"]) == 8
    again = node.run(compute_mode="EXCLUSIVE_PROCESS", locked_clocks={"min_mhz": 1410, "max_mhz": 1980})
    assert again["changed"] is False
    res = node.run(locked_clocks="reset")
    assert res["changes"] == 8
    assert {g["locked_clocks"] for g in node.state()["gpus"]} == {None}
    assert node.run(locked_clocks="reset")["changed"] is False


def test_auto_boost_is_reported_unsupported(node):
    init(node, "dgx-a100-80gb")
    res = node.run(auto_boost_default=False)
    assert res["changed"] is False
    assert "auto-boost default as N/A" in res["unsupported"][0]["reason"]


@pytest.mark.parametrize("model", ["dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-a100-40gb"])
def test_reapply_commands_restore_the_state_after_a_reboot(node, model):
    """What the role's boot unit runs: reset (reboot), the reapply commands, then the read-back."""
    init(node, model)
    res = node.run(persistence_mode=True, power_limit_watts=300, compute_mode="PROHIBITED")
    assert not res.get("failed"), res.get("msg")
    declared = [(g["persistence_mode"], g["power_limit"], g["compute_mode"]) for g in node.state()["gpus"]]
    assert set(declared) == {(True, 300.0, "Prohibited")}
    node.admin("reset")
    assert {g["power_limit"] for g in node.state()["gpus"]} == {MODELS[model][2]}
    reapply = res["reapply"]
    assert len(reapply["commands"]) == 3  # -pm, -c, -pl, each for all 8 GPUs at once
    for argv in reapply["commands"]:
        out = node.smi(*argv)
        assert out.returncode == 0 and "not supported" not in out.stdout, out.stdout
    assert [(g["persistence_mode"], g["power_limit"], g["compute_mode"]) for g in node.state()["gpus"]] == declared
    query = node.smi("--query-gpu=" + ",".join(reapply["query_fields"]), "--format=csv,noheader,nounits",
                     "-i", ",".join(reapply["verify_uuids"]))
    assert sorted(query.stdout.splitlines()) == reapply["expected_rows"]
    assert len(reapply["expected_rows"]) == 8


MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
NODE_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def render_boot_script(node, reapply, lib_dir):
    """gpu_tuning's boot script as the role writes it, with the role's copy of the module_utils code."""
    import jinja2
    from ansible.plugins.filter.core import FilterModule

    os.makedirs(lib_dir)
    for name in ("nvidia_gpu_state.py", "nvidia_smi_parse.py"):  # what boot_unit.yml installs
        shutil.copy(os.path.join(MODULE_UTILS, name), lib_dir)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROOT, "roles", "gpu_tuning", "templates")),
                             trim_blocks=True, keep_trailing_newline=True)
    env.filters.update(FilterModule().filters())
    text = env.get_template("gpu-tuning-apply.py.j2").render(
        ansible_managed="Managed by Ansible", __gpu_tuning_config={"platform_name": "test"},
        __gpu_tuning_lib_dir=lib_dir, __gpu_tuning_nvidia_smi=os.path.join(node.bin, "nvidia-smi"),
        __gpu_tuning_locked_clocks_record=node.record, __gpu_tuning_result={"reapply": reapply})
    script = os.path.join(node.tmp, "gpu-tuning-apply")
    with open(script, "w") as handle:
        handle.write(text)
    os.chmod(script, 0o755)
    return script, text


def run_boot_script(node, script):
    # -I: no PYTHONPATH, no ansible_collections: the node's python3 and the copied code only.
    return subprocess.run([NODE_PYTHON, "-I", script], env=node.env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("model", ["dgx-a100-80gb", "dgx-h100"])
def test_boot_script_reapplies_after_a_reboot_with_the_shipped_code(node, model):
    """The gpu_tuning boot script runs the module's reapply plan through the copied nvidia_gpu_state."""
    init(node, model)
    res = node.run(persistence_mode=True, power_limit_watts=300, compute_mode="PROHIBITED",
                   locked_clocks={"min_mhz": 1000, "max_mhz": 1200})
    assert not res.get("failed"), res.get("msg")
    declared = [(g["persistence_mode"], g["power_limit"], g["compute_mode"]) for g in node.state()["gpus"]]
    script, text = render_boot_script(node, res["reapply"], os.path.join(node.tmp, "lib"))
    assert text.startswith("#!/usr/bin/python3\n")
    assert " -pm 1" in text  # the commands are listed for the operator
    node.admin("reset")
    os.remove(node.record)
    assert {g["power_limit"] for g in node.state()["gpus"]} == {MODELS[model][2]}
    proc = run_boot_script(node, script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 GPU(s) in the declared state" in proc.stdout
    assert [(g["persistence_mode"], g["power_limit"], g["compute_mode"]) for g in node.state()["gpus"]] == declared
    with open(node.record) as handle:
        record = json.load(handle)
    assert record["gpus"] == {g["uuid"]: {"min_mhz": 1000, "max_mhz": 1200} for g in res["gpus"]}
    # the module reads the script's record: nothing left to do
    again = node.run(persistence_mode=True, power_limit_watts=300, compute_mode="PROHIBITED",
                     locked_clocks={"min_mhz": 1000, "max_mhz": 1200})
    assert again["changed"] is False, again.get("gpus")


def test_boot_script_fails_when_the_read_back_differs(node):
    init(node, "dgx-h100")
    res = node.run(power_limit_watts=300)
    reapply = dict(res["reapply"], commands=[])  # nothing applied: the read-back shows the reset state
    script, _text = render_boot_script(node, reapply, os.path.join(node.tmp, "lib"))
    node.admin("reset")
    proc = run_boot_script(node, script)
    assert proc.returncode == 1
    assert "not in the declared state" in proc.stdout
    assert "700.00" in proc.stdout and "300.00" in proc.stdout


@pytest.fixture
def open_node():
    """A node under a directory that user nobody can traverse (pytest's tmp_path is 0700)."""
    path = tempfile.mkdtemp(prefix="dgxops-gpu-")
    os.chmod(path, 0o755)
    try:
        yield Node(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_non_root_gets_a_clear_error_and_check_mode_works(open_node):
    node = open_node
    if os.geteuid() != 0 or shutil.which("runuser") is None or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root and runuser to drop to nobody")
    init(node, "dgx-a100-80gb")
    for path in (node.tmp, node.state_dir, node.bin):
        os.chmod(path, 0o755)
    digest = node.digest()
    site = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "ansible"))]
    env = dict(node.env, PYTHONPATH=node.env["PYTHONPATH"] + os.pathsep + site[0],
               PATH=node.bin + ":/usr/bin:/bin")
    # the interpreter of this venv may live under /root; run the module with the system python
    wrapper = os.path.join(node.bin, "nvidia-smi")
    with open(wrapper, "w") as handle:
        handle.write("#!/bin/sh\nexec /usr/bin/python3 -m dgxops.sim.fakesmi \"$@\"\n")
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXOTH)

    def as_nobody(check):
        path = os.path.join(node.tmp, "args-nobody-%s.json" % check)
        with open(path, "w") as handle:
            json.dump({"ANSIBLE_MODULE_ARGS": {"power_limit_watts": 300, "_ansible_check_mode": check}}, handle)
        os.chmod(path, 0o644)
        argv = ["runuser", "-u", "nobody", "--", "env"] + ["%s=%s" % kv for kv in env.items()
                                                           if kv[0] in ("PYTHONPATH", "PATH", "DGXOPS_SIM_STATE_DIR")]
        proc = subprocess.run(argv + ["/usr/bin/python3", "-m", MODULE, path], capture_output=True, text=True,
                              check=False, cwd="/")
        return json.loads(proc.stdout)

    res = as_nobody(False)
    assert res["failed"] is True
    assert res["msg"].startswith("changing GPU settings needs root: run the task with become: true "
                                 "(8 change(s) pending on 8 GPU(s); nothing was changed)")
    assert node.digest() == digest
    res = as_nobody(True)
    assert res.get("failed") is None and res["changes"] == 8
    assert node.digest() == digest


def test_lost_gpu_fails_with_the_reason_and_changes_nothing(node):
    init(node, "dgx-h100")
    node.admin("fault", "set", "gpu-lost", "--gpu", "3")
    digest = node.digest()
    res = node.run(power_limit_watts=500)
    assert res["failed"] is True
    assert res["rc"] == 15 and res["reason"] == "gpu_lost"
    assert "fallen off the bus" in res["msg"] and "Fix:" in res["msg"]
    assert "GPU is lost" in res["stdout"]
    assert node.digest() == digest
