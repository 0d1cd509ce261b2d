# -*- coding: utf-8 -*-
"""dgxops.fleet.nvidia_mig against simulated DGX nodes (the fake nvidia-smi and its state file).

Every test runs the real module code in-process; its run_command spawns the simulator through a
tiny `nvidia-smi` wrapper on PATH, and the assertions read the simulator's state (`admin show`),
not only the module's answer.
"""

import json
import os
import stat
import subprocess
import sys

import pytest

from module_runner import run_module
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_mig

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SRC = os.path.join(ROOT, "src")

SEVEN_1G = [{"gpus": "all", "instances": [{"profile": "1g.5gb", "count": 7}]}]


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A simulated node: state dir + nvidia-smi wrapper first on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "nvidia-smi"
    wrapper.write_text('#!/bin/sh\nPYTHONPATH="%s" exec "%s" -m dgxops.sim.fakesmi "$@"\n' % (SRC, sys.executable))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "state"
    monkeypatch.setenv("DGXOPS_SIM_STATE_DIR", str(state))
    monkeypatch.setenv("PATH", "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]))

    class Node:
        def admin(self, *args):
            env = dict(os.environ, PYTHONPATH=SRC)
            proc = subprocess.run([sys.executable, "-m", "dgxops.sim.fakesmi.admin"] + list(args),
                                  capture_output=True, text=True, env=env, check=True)
            return proc.stdout

        def init(self, model, driver):
            self.admin("init", "--model", model, "--driver", driver, "--force")

        def show(self):
            return json.loads(self.admin("show"))

        def layout(self, gpu=None):
            """{gpu index: sorted [(profile id, start, gi id, (ci slices...))]} from the state."""
            out = {}
            for g in self.show()["gpus"]:
                out[g["index"]] = sorted(((gi["profile"], gi["start"], gi["id"],
                                           tuple(sorted(c["slices"] for c in gi["compute_instances"])))
                                          for gi in g["gpu_instances"]), key=lambda r: r[1])
            return out if gpu is None else out[gpu]

        def mig(self):
            return [(g["mig_current"], g["mig_pending"]) for g in self.show()["gpus"]]

    return Node()


def run(capsys, args, check=False, diff=False):
    return run_module(capsys, nvidia_mig.main, args, check=check, diff=diff)


def warnings_of(res):
    """Warnings of a module result (plain strings, or dicts with 'msg' on newer ansible-core)."""
    out = []
    for w in res.get("warnings", []):
        out.append(w.get("msg", w.get("message", json.dumps(w))) if isinstance(w, dict) else w)
    out.extend(line for line in res.get("_stderr", "").splitlines() if "WARNING" in line)
    return out


# ---------------------------------------------------------------------------


def test_guide_layout_on_dgx_a100_creates_56_instances_and_is_idempotent(node, capsys):
    node.init("dgx-a100-40gb", "535.247.01")
    first = run(capsys, {"layout": SEVEN_1G})
    assert first.get("failed") is not True, first.get("msg")
    assert first["changed"] is True
    assert first["mig_devices"] == 56 and first["reboot_required"] is False
    # Ampere: -mig 1 stays pending on an NVSwitch board, the module resets the idle GPU
    assert ["nvidia-smi" in c[0] for c in first["commands"]]
    assert any(c[1:] == ["-r", "-i", "0"] for c in first["commands"])
    state = node.layout()
    assert sorted(state) == list(range(8))
    for idx in range(8):
        assert [(pid, start, cis) for pid, start, _id, cis in state[idx]] == [(19, s, (1,)) for s in range(7)]
    assert node.mig() == [(True, True)] * 8
    assert sum(len(v) for v in state.values()) == 56

    second = run(capsys, {"layout": SEVEN_1G})
    assert second["changed"] is False
    assert second["commands"] == [] and second["actions"] == []
    assert node.layout() == state


def test_unplaceable_layout_fails_before_any_instance_is_destroyed(node, capsys):
    node.init("dgx-a100-40gb", "535.247.01")
    run(capsys, {"layout": SEVEN_1G})
    before = node.show()
    res = run(capsys, {"layout": [
        {"gpus": "0-6", "instances": ["7g.40gb"]},
        {"gpus": 7, "instances": ["3g.20gb", "3g.20gb", "1g.5gb"]},
    ]})
    assert res["failed"] is True
    assert "nothing was changed" in res["msg"]
    assert "GPU 7 (NVIDIA A100-SXM4-40GB): layout[1].instances: the layout needs 9 memory slices but the GPU has 8" in res["msg"]
    assert res["commands"] == []
    assert node.show()["gpus"] == before["gpus"]

    res = run(capsys, {"layout": [{"gpus": "all", "instances": [{"profile": "1g.5gb", "count": 8}]}]})
    assert res["failed"] is True and "8 x 1g.5gb requested but this GPU holds at most 7" in res["msg"]
    res = run(capsys, {"layout": [{"gpus": "all", "instances": ["1g.18gb"]}]})
    assert res["failed"] is True and "profile '1g.18gb' is not offered by this GPU" in res["msg"]
    assert node.show()["gpus"] == before["gpus"]


def test_busy_gpu_keeps_its_instances_unless_force(node, capsys):
    node.init("dgx-a100-40gb", "535.247.01")
    run(capsys, {"layout": SEVEN_1G})
    node.admin("process", "add", "--gpu", "2", "--name", "spark-executor", "--pid", "4242")
    before = node.layout()
    mixed = [{"gpus": "all", "instances": ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]}]

    res = run(capsys, {"layout": mixed})
    assert res["failed"] is True
    assert "GPU 2 (NVIDIA A100-SXM4-40GB) has running compute processes (pid 4242 spark-executor)" in res["msg"]
    assert "set force=true" in res["msg"]
    assert node.layout() == before          # no GPU changed, not even the idle ones

    # same layout as now: nothing to destroy, so a busy GPU is no obstacle
    same = run(capsys, {"layout": SEVEN_1G})
    assert same["changed"] is False and same.get("failed") is not True

    forced = run(capsys, {"layout": mixed, "force": True})
    assert forced.get("failed") is not True, forced.get("msg")
    after = node.layout()
    for idx in range(8):
        assert [(pid, start) for pid, start, _id, _c in after[idx]] == [(14, 0), (19, 2), (19, 3), (9, 4)]
    assert node.show()["processes"][0]["pid"] == 4242


def test_change_of_layout_keeps_matching_instances(node, capsys):
    node.init("dgx-a100-40gb", "535.247.01")
    run(capsys, {"layout": SEVEN_1G})
    ids_before = dict((start, gi_id) for _p, start, gi_id, _c in node.layout(0))
    res = run(capsys, {"layout": [{"gpus": 0, "instances": ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]}]}, diff=True)
    assert res["changed"] is True
    got = node.layout(0)
    assert [(p, s) for p, s, _i, _c in got] == [(14, 0), (19, 2), (19, 3), (9, 4)]
    # the 1g instances at slices 2 and 3 were kept (same GPU instance ids, so same MIG devices)
    kept = dict((s, i) for p, s, i, _c in got if p == 19)
    assert kept == {2: ids_before[2], 3: ids_before[3]}
    assert res["diff"]["before"]["GPU 0"]["instances"] == ["1g.5gb@%d [1c]" % s for s in range(7)]
    assert res["diff"]["after"]["GPU 0"]["instances"] == [
        "2g.10gb@0 [2c]", "1g.5gb@2 [1c]", "1g.5gb@3 [1c]", "3g.20gb@4 [3c]"]
    assert list(res["diff"]["before"]) == ["GPU 0"]
    # untouched GPUs keep 7 x 1g
    assert len(node.layout(1)) == 7
    # the create commands carry explicit placements, largest first
    cgi = [c for c in res["commands"] if "-cgi" in c]
    assert cgi == [[cgi[0][0], "mig", "-i", "0", "-cgi", "9:4,14:0", "-C"]]
    assert run(capsys, {"layout": [{"gpus": 0, "instances": ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]}]})["changed"] is False


def test_check_mode_reports_and_changes_nothing(node, capsys):
    node.init("dgx-a100-40gb", "535.247.01")
    run(capsys, {"layout": SEVEN_1G})
    before = node.show()["gpus"]
    res = run(capsys, {"layout": [{"gpus": "0-3", "instances": ["4g.20gb", "3g.20gb"]},
                                  {"gpus": "4-7", "mig": False}]}, check=True, diff=True)
    assert res["changed"] is True and res["commands"] == []
    assert "GPU 0: create 4g.20gb at slice 0 with compute instances 4c" in res["actions"]
    assert "GPU 5: disable MIG mode" in res["actions"]
    assert res["diff"]["after"]["GPU 0"]["instances"] == ["4g.20gb@0 [4c]", "3g.20gb@4 [3c]"]
    assert res["diff"]["after"]["GPU 7"] == {"mig": "disabled", "pending": "Disabled", "instances": []}
    assert node.show()["gpus"] == before


def test_disable_mig_on_some_gpus(node, capsys):
    node.init("dgx-a100-40gb", "535.247.01")
    run(capsys, {"layout": SEVEN_1G})
    layout = [{"gpus": "0-3", "instances": [{"profile": "1g.5gb", "count": 7}]}, {"gpus": "4-7", "mig": False}]
    res = run(capsys, {"layout": layout})
    assert res["changed"] is True and res["reboot_required"] is False
    assert node.mig() == [(True, True)] * 4 + [(False, False)] * 4
    state = node.layout()
    assert [len(state[i]) for i in range(8)] == [7, 7, 7, 7, 0, 0, 0, 0]
    assert res["mig_devices"] == 28
    again = run(capsys, {"layout": layout})
    assert again["changed"] is False and again["commands"] == []


def test_ampere_busy_gpu_mode_change_is_pending_and_reported(node, capsys):
    node.init("dgx-a100-40gb", "535.247.01")
    node.admin("process", "add", "--gpu", "1", "--pid", "5000")
    refused = run(capsys, {"layout": SEVEN_1G})
    assert refused["failed"] is True and "refusing to enable MIG mode" in refused["msg"]
    assert node.mig() == [(False, False)] * 8
    res = run(capsys, {"layout": SEVEN_1G, "force": True})
    assert res.get("failed") is not True, res.get("msg")
    assert res["reboot_required"] is True and res["reboot_required_gpus"] == [1]
    mig = node.mig()
    assert mig[1] == (False, True)                         # pending until reset/reboot
    assert [m for i, m in enumerate(mig) if i != 1] == [(True, True)] * 7
    assert len(node.layout(1)) == 0 and len(node.layout(0)) == 7
    # after the reboot the pending mode is current; a re-run creates GPU 1's instances
    node.admin("reset")
    res = run(capsys, {"layout": SEVEN_1G})
    assert res["changed"] is True and res["reboot_required"] is False
    assert all(len(v) == 7 for v in node.layout().values())


def test_allow_reset_false_reports_reboot_required(node, capsys):
    node.init("dgx-a100-80gb", "580.95.05")
    res = run(capsys, {"layout": [{"gpus": 0, "instances": ["7g.80gb"]}], "allow_reset": False})
    assert res["changed"] is True and res["reboot_required_gpus"] == [0]
    assert not any("-r" in c for c in res["commands"])
    assert node.mig()[0] == (False, True)
    assert any("MIG mode enabled is pending (allow_reset is false)" in w for w in warnings_of(res)), res


def test_hopper_mig_is_immediate_and_lost_at_reboot(node, capsys):
    node.init("dgx-h100", "580.95.05")
    layout = [{"gpus": "0-3", "instances": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
              {"gpus": "4-7", "mig": False}]
    res = run(capsys, {"layout": layout})
    assert res["changed"] is True and res["reboot_required"] is False
    assert not any("-r" in c for c in res["commands"])
    assert any("lost when the driver reloads or the node reboots" in w for w in warnings_of(res)), res
    assert [g["mig_mode_persistent"] for g in res["gpus"]] == [False] * 8
    assert [(p, s) for p, s, _i, _c in node.layout(3)] == [(14, 0), (19, 2), (19, 3), (9, 4)]
    node.admin("reset")                                    # reboot: Hopper loses MIG mode
    assert node.mig()[0] == (False, False)
    again = run(capsys, {"layout": layout})
    assert again["changed"] is True
    assert [(p, s) for p, s, _i, _c in node.layout(0)] == [(14, 0), (19, 2), (19, 3), (9, 4)]


def test_compute_instances_are_created_and_changed_in_place(node, capsys):
    node.init("dgx-h200", "580.95.05")
    layout = [{"gpus": 0, "instances": [{"profile": "3g.71gb", "compute_instances": ["1c", "2c"]}, "4g.71gb"]}]
    res = run(capsys, {"layout": layout})
    assert res.get("failed") is not True, res.get("msg")
    assert [(p, s, c) for p, s, _i, c in node.layout(0)] == [(5, 0, (4,)), (9, 4, (1, 2))]
    assert res["mig_devices"] == 3
    gi_3g = [i for p, _s, i, _c in node.layout(0) if p == 9][0]
    assert run(capsys, {"layout": layout})["changed"] is False
    full = [{"gpus": 0, "instances": ["3g.71gb", "4g.71gb"]}]
    res = run(capsys, {"layout": full})
    assert res["changed"] is True
    assert "GPU 0: replace the compute instances of 3g.71gb (GPU instance %d) with 3c" % gi_3g in res["actions"]
    assert [(p, s, i, c) for p, s, i, c in node.layout(0) if p == 9] == [(9, 4, gi_3g, (3,))]


def test_bad_input_names_the_variable(node, capsys):
    node.init("dgx-h100", "580.95.05")
    res = run(capsys, {"layout": [{"gpus": "all", "mig": False, "instances": ["1g.10gb"]}]})
    assert res["failed"] is True
    assert res["msg"].startswith("layout[0].instances: invalid value ['1g.10gb']; allowed: no instances when mig is false")
    res = run(capsys, {"layout": [{"gpus": 8, "instances": []}]})
    assert res["failed"] is True and "GPU index 8 does not exist on this node; allowed: 0, 1" in res["msg"]
    assert node.mig() == [(False, False)] * 8


def test_gpu_without_mig_is_refused(node, capsys):
    node.init("dgx-spark", "580.95.05")
    res = run(capsys, {"layout": SEVEN_1G})
    assert res["failed"] is True
    assert "MIG is not supported" in res["msg"]


def test_a_layout_refused_after_mig_was_enabled_to_read_the_table_restores_the_mode(node, capsys):
    # driver 535 lists MIG profiles only on MIG-enabled GPUs: the table is read after the mode
    # change; a layout it refuses must leave the GPU as it was (issue 22: 1g.20gb on an A100-40GB)
    node.init("dgx-a100-40gb", "535.247.01")
    before = node.mig()
    assert before == [(False, False)] * 8
    res = run(capsys, {"layout": [{"gpus": 0, "instances": [{"profile": "1g.20gb", "count": 1}]}]})
    assert res["failed"] is True
    assert "profile '1g.20gb' is not offered by this GPU" in res["msg"]
    assert "no instance was created and MIG mode was restored to Disabled on GPU(s) 0" in res["msg"]
    assert node.mig() == before
    assert node.layout(0) == []


@pytest.mark.parametrize("option", ["nvidia_smi_path", "nvidia_smi"])
def test_nvidia_smi_path_and_its_old_name(node, capsys, tmp_path, option):
    """One option name in every module; nvidia_smi (the mig role's old name) is its alias."""
    node.init("dgx-a100-40gb", "535.247.01")
    wrapper = str(tmp_path / "bin" / "nvidia-smi")
    res = run(capsys, {"layout": SEVEN_1G, option: wrapper}, check=True)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True
    res = run(capsys, {"layout": SEVEN_1G, "nvidia_smi_path": "nvidia-smi-missing"})
    assert res["failed"] is True
    assert res["msg"].startswith("nvidia_smi_path: 'nvidia-smi-missing' was not found on PATH nor in /usr/bin")


def _render(template, **variables):
    """A mig role template as the role renders it (Ansible's filters, trim_blocks)."""
    import jinja2
    from ansible.plugins.filter.core import FilterModule

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(ROOT, "roles", "mig", "templates")),
                             trim_blocks=True, keep_trailing_newline=True)
    env.filters.update(FilterModule().filters())
    return env.get_template(template).render(ansible_managed="Managed by Ansible", **variables)


def test_boot_script_recreates_the_layout_with_the_shipped_parsers(node, capsys, tmp_path):
    """dgxops-mig-apply (the boot unit's script) re-creates a Hopper layout after a reboot, reading
    nvidia-smi through the copied nvidia_smi_parse.py, with the node's python3 only."""
    import shutil

    node.init("dgx-h100", "580.95.05")
    layout = [{"gpus": "0-1", "instances": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
              {"gpus": "2-7", "mig": False}]
    res = run(capsys, {"layout": layout})
    assert res["changed"] is True and not res.get("failed")
    declared = [node.layout(0), node.layout(1)]
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(os.path.join(ROOT, "plugins", "module_utils", "nvidia_smi_parse.py"), str(lib))
    layout_file = tmp_path / "layout.json"
    layout_file.write_text(_render("layout.json.j2", __mig_applied=res,
                                   __mig_validated={"normalized": {"layout_name": "test"}}))
    script = tmp_path / "dgxops-mig-apply"
    script.write_text(_render("dgxops-mig-apply.py.j2", __mig_boot_lib_dir=str(lib)))
    node.admin("reset")                                    # reboot: Hopper loses MIG mode and instances
    assert node.mig()[0] == (False, False)
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    proc = subprocess.run([python, "-I", str(script), "--nvidia-smi", str(tmp_path / "bin" / "nvidia-smi"),
                           str(layout_file)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 of 8 GPU(s) match the layout test" in proc.stdout
    assert [node.layout(0), node.layout(1)] == declared
    again = subprocess.run([python, "-I", str(script), "--nvidia-smi", str(tmp_path / "bin" / "nvidia-smi"),
                            str(layout_file)], capture_output=True, text=True, timeout=300, check=False)
    assert again.returncode == 0 and "layout already present (4 GPU instances)" in again.stdout, again.stdout
