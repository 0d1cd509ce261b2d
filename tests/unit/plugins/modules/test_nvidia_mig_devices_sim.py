# -*- coding: utf-8 -*-
"""dgxops.fleet.nvidia_mig_devices against a simulated DGX node.

The module runs in-process; nvidia-smi is the fake (through a wrapper on PATH), the driver's
/proc files are the simulator's stand-ins under its state dir (mig-minors, capabilities/,
devices), and the device nodes are real character devices created in a temporary dev dir
(root only: mknod).
"""

import json
import os
import stat
import subprocess
import sys

import pytest

from module_runner import run_module
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_mig_devices

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
SRC = os.path.join(ROOT, "src")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creates character device nodes (mknod needs root)")

ALPHA = 4242
BETA = 4343
GAMMA = 4444


@pytest.fixture
def node(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "nvidia-smi"
    wrapper.write_text('#!/bin/sh\nPYTHONPATH="%s" exec "%s" -m dgxops.sim.fakesmi "$@"\n' % (SRC, sys.executable))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "state"
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setenv("DGXOPS_SIM_STATE_DIR", str(state))
    monkeypatch.setenv("PATH", "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]))

    class Node:
        state_dir = state
        dev_dir = dev
        proc = state / "proc"

        def sh(self, *args, admin=False):
            env = dict(os.environ, PYTHONPATH=SRC)
            mod = "dgxops.sim.fakesmi.admin" if admin else "dgxops.sim.fakesmi"
            return subprocess.run([sys.executable, "-m", mod] + list(args), capture_output=True, text=True,
                                  env=env, check=True).stdout

        def show(self):
            return json.loads(self.sh("show", admin=True))

        def paths(self):
            return {"proc_devices": str(self.proc / "devices"),
                    "mig_minors": str(self.proc / "driver" / "nvidia-caps" / "mig-minors"),
                    "capabilities_dir": str(self.proc / "driver" / "nvidia" / "capabilities"),
                    "nvidia_params": str(self.proc / "driver" / "nvidia" / "params"),
                    "dev_dir": str(self.dev_dir)}

        def cap(self, minor):
            st = os.lstat(str(self.dev_dir / "nvidia-caps" / ("nvidia-cap%d" % minor)))
            return stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), st.st_uid, st.st_gid, \
                stat.S_IMODE(st.st_mode)

        def modify(self, rel):
            with open(str(self.proc / "driver" / "nvidia" / "capabilities" / rel)) as fh:
                text = fh.read()
            return int(text.split("DeviceFileModify:")[1].split()[0])

    n = Node()
    n.sh("init", "--model", "dgx-a100-40gb", "--driver", "535.247.01", "--force", admin=True)
    # GPU 0: MIG with 3g.20gb at 4, 2 x 1g.5gb; GPU 1: MIG with 7 x 1g.5gb; GPU 2: MIG off
    for idx in (0, 1):
        n.sh("-i", str(idx), "-mig", "1")
        n.sh("-r", "-i", str(idx))
    n.sh("mig", "-i", "0", "-cgi", "9:4,19:0,19:1", "-C")
    n.sh("mig", "-i", "1", "-cgi", ",".join(["19"] * 7), "-C")
    return n


def run(capsys, node, access, check=False, diff=False, **extra):
    return run_module(capsys, nvidia_mig_devices.main, dict(node.paths(), access=access, **extra),
                      check=check, diff=diff)


def gis(node, gpu):
    """{(profile id, start): (gi id, [ci ids])} of one GPU, from the simulator state."""
    g = node.show()["gpus"][gpu]
    return dict(((gi["profile"], gi["start"]), (gi["id"], [c["id"] for c in gi["compute_instances"]]))
                for gi in g["gpu_instances"])


def minor(gpu, gi, ci=None):
    """The driver's numbering (nv-caps.c): 3 + 135*gpu + 9*gi (+ 1 + ci)."""
    return 3 + 135 * gpu + 9 * gi + (0 if ci is None else 1 + ci)


ACCESS = [
    {"name": "alpha", "gpus": 0, "profiles": ["1g.5gb"], "group": ALPHA},
    {"name": "beta", "gpus": [0], "placements": [4], "group": BETA, "mode": "0440"},
    {"name": "gamma", "gpus": "2", "group": GAMMA, "mode": "0660"},
]


def test_groups_get_exactly_their_instances_and_the_rest_is_root_only(node, capsys):
    res = run(capsys, node, ACCESS, diff=True)
    assert res.get("failed") is not True, res.get("msg")
    assert res["changed"] is True
    on0 = gis(node, 0)
    g3, g3_cis = on0[(9, 4)]
    for (pid, start), (gi, cis) in on0.items():
        group = BETA if (pid, start) == (9, 4) else ALPHA
        assert node.cap(minor(0, gi)) == (True, 508, minor(0, gi), 0, group, 0o440)
        for ci in cis:
            assert node.cap(minor(0, gi, ci)) == (True, 508, minor(0, gi, ci), 0, group, 0o440)
            assert node.modify("gpu0/mig/gi%d/ci%d/access" % (gi, ci)) == 0
        assert node.modify("gpu0/mig/gi%d/access" % gi) == 0
    assert g3_cis == [0]
    # GPU 1 is selected by nobody: its instances are not touched at all
    for gi, _cis in gis(node, 1).values():
        assert not os.path.exists(str(node.dev_dir / "nvidia-caps" / ("nvidia-cap%d" % minor(1, gi))))
        assert node.modify("gpu1/mig/gi%d/access" % gi) == 1
    # GPU 2 has MIG off: the whole GPU, /dev/nvidia2 (195:2)
    st = os.lstat(str(node.dev_dir / "nvidia2"))
    assert (stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), st.st_gid,
            stat.S_IMODE(st.st_mode)) == (True, 195, 2, GAMMA, 0o660)
    assert stat.S_IMODE(os.stat(str(node.dev_dir / "nvidia-caps")).st_mode) == 0o755
    entries = dict((n["path"], n["entry"]) for n in res["nodes"])
    assert entries[str(node.dev_dir / "nvidia-caps" / ("nvidia-cap%d" % minor(0, g3)))] == "beta"
    assert res["diff"]["before"][str(node.dev_dir / "nvidia2")] == "absent"

    again = run(capsys, node, ACCESS)
    assert again["changed"] is False, again["changes"]
    assert again["changes"] == []


def test_check_mode_reports_and_changes_nothing(node, capsys):
    res = run(capsys, node, ACCESS, check=True)
    assert res["changed"] is True and res["changes"]
    assert not os.path.exists(str(node.dev_dir / "nvidia-caps"))
    assert not os.path.exists(str(node.dev_dir / "nvidia2"))
    gi = gis(node, 0)[(9, 4)][0]
    assert node.modify("gpu0/mig/gi%d/access" % gi) == 1


def test_unassigned_instances_become_root_only_and_nvidia_modprobe_defaults_are_fixed(node, capsys):
    # what nvidia-modprobe -f leaves: 0444 root:root (every user may use the instance)
    gi3 = gis(node, 0)[(9, 4)][0]
    os.makedirs(str(node.dev_dir / "nvidia-caps"))
    path = str(node.dev_dir / "nvidia-caps" / ("nvidia-cap%d" % minor(0, gi3)))
    os.mknod(path, stat.S_IFCHR | 0o444, os.makedev(508, minor(0, gi3)))
    res = run(capsys, node, [ACCESS[0]])
    assert res["changed"] is True
    assert node.cap(minor(0, gi3)) == (True, 508, minor(0, gi3), 0, 0, 0o400)
    assert any(path in c and "0444" in c and "0400" in c for c in res["changes"])
    without = run(capsys, node, [ACCESS[0]], restrict_unassigned=False)
    assert without["changed"] is False


def test_new_layout_stale_nodes_and_new_capabilities(node, capsys):
    assert run(capsys, node, ACCESS[:2])["changed"] is True
    old = gis(node, 0)
    # the layout changes: every instance of GPU 0 destroyed, 2 x 1g created (ids 1 and 2; id 3,
    # the old third instance, is gone) and beta no longer listed
    node.sh("mig", "-i", "0", "-dci")
    node.sh("mig", "-i", "0", "-dgi")
    node.sh("mig", "-i", "0", "-cgi", "19,19", "-C")
    new = gis(node, 0)
    for gi, _cis in new.values():
        assert node.modify("gpu0/mig/gi%d/access" % gi) == 1   # fresh capability entries
    res = run(capsys, node, ACCESS[:1])
    assert res.get("failed") is not True, res.get("msg")
    assert res["changed"] is True
    for gi, _cis in new.values():
        assert node.cap(minor(0, gi))[4:] == (ALPHA, 0o440)
        assert node.modify("gpu0/mig/gi%d/access" % gi) == 0
    # nodes of instances that no longer exist are left root-only, not with their old group
    used = set(minor(0, gi) for gi, _c in new.values()) | set(minor(0, gi, c) for gi, cs in new.values() for c in cs)
    stale = [m for gi, cs in old.values() for m in [minor(0, gi)] + [minor(0, gi, c) for c in cs] if m not in used]
    assert len(stale) == 2
    for m in stale:
        assert node.cap(m)[3:] == (0, 0, 0o400)
    assert run(capsys, node, ACCESS[:1])["changed"] is False


def test_an_entry_that_matches_nothing_warns(node, capsys):
    res = run(capsys, node, [{"name": "delta", "gpus": 1, "profiles": ["3g.20gb"], "group": ALPHA}])
    assert res.get("failed") is not True, res.get("msg")
    text = json.dumps(res.get("warnings", [])) + res["_stderr"]
    assert "no MIG instance on GPU 1 matches" in text


@pytest.mark.parametrize("access, message", [
    ([{"gpus": 9, "group": ALPHA}], "access[0].gpus: invalid value 9; allowed: GPU indexes of this node: 0, 1, 2"),
    ([{"gpus": 0, "group": "no-such-group-xyz"}],
     "access[0].group: invalid value 'no-such-group-xyz'; allowed: a group that exists on this node"),
    ([{"name": "a", "gpus": 0, "group": ALPHA}, {"name": "b", "gpus": 0, "profiles": ["1g.5gb"], "group": BETA}],
     "is given to both a and b with different owner, group or mode"),
    ([{"gpus": 0, "group": ALPHA, "mode": "rw"}], "access[0].mode: invalid value 'rw'; allowed: an octal mode"),
])
def test_errors_name_the_variable_value_and_allowed(node, capsys, access, message):
    res = run(capsys, node, access)
    assert res.get("failed") is True
    assert message in res["msg"]
    assert not os.path.exists(str(node.dev_dir / "nvidia-caps"))


def test_missing_nvidia_caps_major_is_a_clear_error(node, capsys, tmp_path):
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n  1 mem\n195 nvidia-frontend\n\nBlock devices:\n  8 sd\n")
    res = run(capsys, node, ACCESS, proc_devices=str(devices))
    assert res.get("failed") is True
    assert "lists no 'nvidia-caps' character device" in res["msg"]
