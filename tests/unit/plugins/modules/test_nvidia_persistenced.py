"""dgxops.fleet.nvidia_persistenced: the daemon's drop-in, reload, enable, start and restart in one task.

systemctl is a stateful fake on PATH: it knows the unit once it is installed (on disk) and systemd
reloaded, keeps its enablement and activity in a JSON file, records the drop-ins systemd read at
the last daemon-reload and the ExecStart the running daemon was started with, and logs every call,
so the tests assert the state the module leaves, not only what it reports."""

import json
import os
import stat
import sys

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import persistenced as pd
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_persistenced

from module_runner import run_module

UNIT = "nvidia-persistenced.service"

FAKE_SYSTEMCTL = r'''#!%(python)s
import json, os, sys
state_path = %(state)r
dropin_dir = %(dropins)r
state = json.load(open(state_path))
args = sys.argv[1:]
with open(state_path + ".log", "a") as log:
    log.write(" ".join(args) + "\n")
def execstart():
    # what systemd would run: the last non-empty ExecStart= of the drop-ins, in file-name order
    value = state["packaged"]
    if os.path.isdir(dropin_dir):
        for name in sorted(os.listdir(dropin_dir)):
            if name.endswith(".conf"):
                for line in open(os.path.join(dropin_dir, name)).read().splitlines():
                    if line.startswith("ExecStart=") and line != "ExecStart=":
                        value = line[len("ExecStart="):]
    return value
if args[0] == "daemon-reload":
    state["loaded"] = list(state["installed"])
    state["loaded_exec"] = execstart()
elif args[0] == "show":
    blocks = []
    for name in args[args.index("--") + 1:]:
        if name in state["loaded"]:
            blocks.append("LoadState=loaded\nUnitFileState=%%s\nActiveState=%%s" %% (
                "enabled" if name in state["enabled"] else "disabled",
                "active" if name in state["active"] else "inactive"))
        else:
            blocks.append("LoadState=not-found\nUnitFileState=\nActiveState=inactive")
    print("\n\n".join(blocks))
elif args[0] == "list-unit-files":
    for name in args[2:]:
        if name in state["installed"]:
            print("%%s %%s enabled" %% (name, "enabled" if name in state["enabled"] else "disabled"))
elif args[0] in ("enable", "start", "try-restart"):
    name = args[1]
    if name not in state["loaded"]:
        sys.stderr.write("Unit %%s not found.\n" %% name)
        sys.exit(5)
    if args[0] == "enable":
        state["enabled"] = sorted(set(state["enabled"]) | {name})
    elif args[0] == "start" or name in state["active"]:
        state["active"] = sorted(set(state["active"]) | {name})
        state["running_exec"] = state["loaded_exec"]
json.dump(state, open(state_path, "w"))
'''

PACKAGED = "/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose"


class Systemd(object):
    def __init__(self, tmp_path):
        self.dropin_dir = tmp_path / "etc" / "systemd" / "system" / (UNIT + ".d")
        self.state_path = tmp_path / "systemctl.json"
        self.save({"installed": [], "loaded": [], "enabled": [], "active": [], "packaged": PACKAGED,
                   "loaded_exec": PACKAGED, "running_exec": None})

    def install(self, enabled=False, running=False):
        """The driver's utils package: the unit on disk and loaded, packaged ExecStart."""
        state = self.load()
        state.update(installed=[UNIT], loaded=[UNIT], enabled=[UNIT] if enabled else [],
                     active=[UNIT] if running else [], running_exec=PACKAGED if running else None)
        self.save(state)

    def load(self):
        return json.loads(self.state_path.read_text())

    def save(self, state):
        self.state_path.write_text(json.dumps(state))

    def calls(self):
        log = self.state_path.with_name(self.state_path.name + ".log")
        calls = log.read_text().splitlines() if log.exists() else []
        if log.exists():
            log.unlink()
        return calls

    def mutations(self):
        return [c for c in self.calls() if not c.startswith(("show", "list-unit-files"))]


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    fake = Systemd(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "systemctl"
    script.write_text(FAKE_SYSTEMCTL % {"python": sys.executable, "state": str(fake.state_path),
                                        "dropins": str(fake.dropin_dir)})
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    # no driver loaded unless a test loads one
    monkeypatch.setattr(pd, "PROC_DRIVER_VERSION", str(tmp_path / "proc-driver-nvidia-version"))
    return fake


def load_driver(tmp_path):
    (tmp_path / "proc-driver-nvidia-version").write_text("NVRM version: NVIDIA UNIX Open Kernel Module  580.95.05\n")


def args(systemd, tmp_path, **over):
    base = {"persistence_mode": True, "persistenced_path": "/usr/bin/nvidia-persistenced",
            "persistenced_user": "nvidia-persistenced", "persistenced_state": "auto",
            "dropin": str(systemd.dropin_dir / "dgxops.conf"), "variable_prefix": "nvidia_driver_"}
    base.update(over)
    return base


def test_dropin_text_is_what_the_role_template_rendered():
    # byte for byte: nodes converged before the module see no change and no restart
    assert pd.render_dropin("/usr/bin/nvidia-persistenced", "nvidia-persistenced", True) == (
        "# Managed by Ansible: dgxops.fleet.nvidia_driver. Local changes are overwritten.\n"
        "# The only dgxops drop-in for this unit (gpu_tuning uses it through tasks_from: persistenced):\n"
        "# a second drop-in overriding ExecStart would conflict with it.\n"
        "[Service]\nExecStart=\n"
        "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose\n")
    assert pd.exec_start("/opt/nv/nvidia-persistenced", "", False) == "/opt/nv/nvidia-persistenced --no-persistence-mode --verbose"
    assert pd.exec_start("/usr/bin/nvidia-persistenced", None, True).endswith("nvidia-persistenced --persistence-mode --verbose")


def test_missing_unit_with_started_fails_naming_the_variable(capsys, tmp_path, systemd):
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path, persistenced_state="started"))
    assert res["failed"] is True
    assert res["msg"] == ("nvidia_driver_persistenced_state: started, but nvidia-persistenced.service is not installed "
                          "on this host (it comes with the driver's utils package); allowed: started only where the "
                          "unit exists, else auto")
    assert not systemd.dropin_dir.exists() and systemd.mutations() == []


def test_missing_unit_with_auto_warns_and_changes_nothing(capsys, tmp_path, systemd):
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    assert res.get("failed") is not True
    assert res["changed"] is False and res["managed"] is False and res["unit_present"] is False
    warned = json.dumps(res.get("warnings", [])) + res["_stderr"]
    assert "nvidia-persistenced.service is not installed on this host yet" in " ".join(warned.split())
    assert not systemd.dropin_dir.exists() and systemd.mutations() == []


def test_fresh_node_writes_reloads_enables_and_starts(capsys, tmp_path, systemd):
    systemd.install()
    load_driver(tmp_path)
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path), diff=True)
    assert res["changed"] is True and res["managed"] is True and res["unit_present"] is True
    dropin = systemd.dropin_dir / "dgxops.conf"
    assert dropin.read_text() == pd.render_dropin("/usr/bin/nvidia-persistenced", "nvidia-persistenced", True)
    assert stat.S_IMODE(dropin.stat().st_mode) == 0o644 and dropin.stat().st_uid == 0
    assert stat.S_IMODE(systemd.dropin_dir.stat().st_mode) == 0o755
    assert res["changed_paths"] == [str(systemd.dropin_dir), str(dropin)]
    assert systemd.mutations() == ["daemon-reload", "enable %s" % UNIT, "start %s" % UNIT]
    state = systemd.load()
    assert state["enabled"] == [UNIT] and state["active"] == [UNIT]
    # the daemon runs with the drop-in's command line, not the packaged --no-persistence-mode
    assert state["running_exec"] == res["exec_start"] == (
        "/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose")
    assert res["actions"] == ["enable", "start"] and res["daemon_reload"] is True
    assert res["diff"] == [{"before_header": str(dropin), "after_header": str(dropin), "before": "",
                            "after": dropin.read_text()}]


def test_rerun_changes_nothing_and_only_reads(capsys, tmp_path, systemd):
    systemd.install()
    load_driver(tmp_path)
    run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    systemd.calls()
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    assert res["changed"] is False and res["changed_paths"] == [] and res["actions"] == []
    assert res["managed"] is True and res["daemon_reload"] is False
    assert systemd.calls() == ["show -p LoadState -p UnitFileState -p ActiveState -- %s" % UNIT]


def test_content_change_while_running_restarts_the_daemon(capsys, tmp_path, systemd):
    systemd.install()
    load_driver(tmp_path)
    run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    systemd.calls()
    res = run_module(capsys, nvidia_persistenced.main,
                     args(systemd, tmp_path, persistence_mode=False, persistenced_user=""), diff=True)
    assert res["changed"] is True and res["actions"] == ["restart"]
    assert systemd.mutations() == ["daemon-reload", "try-restart %s" % UNIT]
    assert systemd.load()["running_exec"] == "/usr/bin/nvidia-persistenced --no-persistence-mode --verbose"
    assert "--persistence-mode --verbose" in res["diff"][0]["before"]
    assert res["diff"][0]["after"].endswith("ExecStart=/usr/bin/nvidia-persistenced --no-persistence-mode --verbose\n")


def test_mode_fix_alone_neither_reloads_nor_restarts(capsys, tmp_path, systemd):
    systemd.install()
    load_driver(tmp_path)
    run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    dropin = systemd.dropin_dir / "dgxops.conf"
    dropin.chmod(0o600)
    systemd.calls()
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    assert res["changed"] is True and res["changed_paths"] == [str(dropin)]
    assert stat.S_IMODE(dropin.stat().st_mode) == 0o644
    assert systemd.mutations() == [] and res["daemon_reload"] is False


def test_check_mode_reports_and_changes_nothing(capsys, tmp_path, systemd):
    systemd.install()
    load_driver(tmp_path)
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path), check=True, diff=True)
    assert res["changed"] is True and res["managed"] is True
    assert res["actions"] == ["enable", "start"] and res["daemon_reload"] is True
    assert res["diff"][0]["after"].startswith("# Managed by Ansible: dgxops.fleet.nvidia_driver")
    assert not systemd.dropin_dir.exists() and systemd.mutations() == []
    assert systemd.load()["enabled"] == [] and systemd.load()["active"] == []


def test_check_mode_reports_the_restart_a_content_change_needs(capsys, tmp_path, systemd):
    systemd.install()
    load_driver(tmp_path)
    run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    before = (systemd.dropin_dir / "dgxops.conf").read_text()
    systemd.calls()
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path, persistence_mode=False), check=True)
    assert res["changed"] is True and res["actions"] == ["restart"]
    assert (systemd.dropin_dir / "dgxops.conf").read_text() == before and systemd.mutations() == []


def test_old_dropin_is_removed_and_the_daemon_restarted_without_it(capsys, tmp_path, systemd):
    systemd.install(enabled=True, running=True)
    load_driver(tmp_path)
    systemd.dropin_dir.mkdir(parents=True)
    old = systemd.dropin_dir / "dgxops-persistence-mode.conf"
    old.write_text("[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --no-persistence-mode --verbose\n")
    res = run_module(capsys, nvidia_persistenced.main,
                     args(systemd, tmp_path, remove_dropins=[str(old)]), diff=True)
    assert res["changed"] is True and not old.exists()
    assert res["changed_paths"][-1] == str(old)
    # one reload for both files, one restart; the daemon now runs the one remaining drop-in's ExecStart
    assert systemd.mutations() == ["daemon-reload", "try-restart %s" % UNIT]
    assert systemd.load()["running_exec"].endswith("--user nvidia-persistenced --persistence-mode --verbose")
    assert res["diff"][-1]["after"] == "" and "--no-persistence-mode" in res["diff"][-1]["before"]
    again = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path, remove_dropins=[str(old)]))
    assert again["changed"] is False


def test_old_dropin_removed_where_the_daemon_is_not_used(capsys, tmp_path, systemd):
    # legacy method (nvidia-smi -pm): the old drop-in still goes, the running daemon is restarted without it
    systemd.install(enabled=True, running=True)
    systemd.dropin_dir.mkdir(parents=True)
    old = systemd.dropin_dir / "dgxops-persistence-mode.conf"
    old.write_text("[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode --verbose\n")
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path, persistence_method="legacy",
                                                            remove_dropins=[str(old)]))
    assert res["changed"] is True and res["managed"] is False and not old.exists()
    assert not (systemd.dropin_dir / "dgxops.conf").exists()
    assert systemd.mutations() == ["daemon-reload", "try-restart %s" % UNIT]
    assert systemd.load()["running_exec"] == PACKAGED


def test_auto_without_a_loaded_driver_enables_but_does_not_start(capsys, tmp_path, systemd):
    systemd.install()
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    assert res["changed"] is True and res["driver_loaded"] is False
    assert systemd.mutations() == ["daemon-reload", "enable %s" % UNIT]
    assert systemd.load()["active"] == [] and res["actions"] == ["enable"]
    # started: the caller reads the GPUs next, the daemon starts whatever the proc file says
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path, persistenced_state="started"))
    assert res["actions"] == ["start"] and systemd.load()["active"] == [UNIT]


def test_stopped_daemon_is_not_restarted_by_a_content_change(capsys, tmp_path, systemd):
    systemd.install()
    run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    systemd.calls()
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path, persistence_mode=False))
    assert res["changed"] is True and res["actions"] == []
    assert systemd.mutations() == ["daemon-reload"]


def test_unit_on_disk_that_systemd_has_not_loaded_is_loaded_first(capsys, tmp_path, systemd):
    systemd.install()
    state = systemd.load()
    state["loaded"] = []  # installed by a package, no daemon-reload since
    systemd.save(state)
    load_driver(tmp_path)
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    assert res["managed"] is True and res["unit_present"] is True
    assert systemd.mutations() == ["daemon-reload", "daemon-reload", "enable %s" % UNIT, "start %s" % UNIT]


# ------------------------------------------------------------------ persistence_method (gpu_tuning)

def gpu_tuning(systemd, tmp_path, **over):
    binary = tmp_path / "nvidia-persistenced"
    base = args(systemd, tmp_path, persistenced_path=str(binary), persistenced_state="started",
                persistence_method="auto", variable_prefix="gpu_tuning_")
    base.update(over)
    return base


def test_method_auto_uses_the_daemon_where_the_binary_exists(capsys, tmp_path, systemd):
    systemd.install()
    (tmp_path / "nvidia-persistenced").write_text("#!/bin/sh\n")
    res = run_module(capsys, nvidia_persistenced.main, gpu_tuning(systemd, tmp_path))
    assert res["managed"] is True and res["binary_present"] is True
    assert res["actions"] == ["enable", "start"]
    assert systemd.load()["running_exec"].startswith(str(tmp_path / "nvidia-persistenced") + " --user")


def test_method_auto_without_the_binary_only_reports(capsys, tmp_path, systemd):
    systemd.install()
    res = run_module(capsys, nvidia_persistenced.main, gpu_tuning(systemd, tmp_path))
    assert res["changed"] is False and res["managed"] is False and res["binary_present"] is False
    assert res["unit_present"] is None and systemd.calls() == []


def test_method_daemon_without_the_binary_fails_before_any_change(capsys, tmp_path, systemd):
    res = run_module(capsys, nvidia_persistenced.main, gpu_tuning(systemd, tmp_path, persistence_method="daemon"))
    assert res["failed"] is True
    assert res["msg"] == (
        "gpu_tuning_persistence_method: invalid value 'daemon' on this host; %s does not exist (install the driver's "
        "nvidia-compute-utils package); allowed: daemon only where nvidia-persistenced is installed, else auto or "
        "legacy" % (tmp_path / "nvidia-persistenced"))
    assert systemd.calls() == []


def test_method_with_the_binary_but_no_unit_fails(capsys, tmp_path, systemd):
    (tmp_path / "nvidia-persistenced").write_text("#!/bin/sh\n")
    res = run_module(capsys, nvidia_persistenced.main, gpu_tuning(systemd, tmp_path))
    assert res["failed"] is True and res["msg"].startswith("gpu_tuning_persistence_method: auto, and ")
    assert "nvidia-persistenced.service is not installed on this host" in res["msg"]
    assert not systemd.dropin_dir.exists() and systemd.mutations() == []


@pytest.mark.parametrize("over", [{"persistence_method": "legacy"}, {"persistence_mode": None}])
def test_no_daemon_when_legacy_or_persistence_not_managed(capsys, tmp_path, systemd, over):
    systemd.install()
    (tmp_path / "nvidia-persistenced").write_text("#!/bin/sh\n")
    res = run_module(capsys, nvidia_persistenced.main, gpu_tuning(systemd, tmp_path, **over))
    assert res["changed"] is False and res["managed"] is False and res["exec_start"] is None
    assert systemd.calls() == [] and not systemd.dropin_dir.exists()


def test_failed_command_reports_rc_and_output(capsys, tmp_path, systemd):
    systemd.install()
    state = systemd.load()
    state["installed"] = []  # listed nowhere after the reload: enable fails
    systemd.save(state)
    load_driver(tmp_path)
    res = run_module(capsys, nvidia_persistenced.main, args(systemd, tmp_path))
    assert res["failed"] is True and res["rc"] == 5
    assert res["msg"] == "systemctl enable %s failed: Unit %s not found." % (UNIT, UNIT)
    assert res["stderr"].strip() == "Unit %s not found." % UNIT
