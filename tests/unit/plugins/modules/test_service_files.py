"""dgxops.fleet.service_files: directories, files, removals and units in one task.

systemctl is a stateful fake on PATH: it keeps each unit's enablement and activity in a JSON
file, knows a unit when its file exists under the test's unit directory (after a daemon-reload,
as systemd does), and logs every call, so the tests assert the state the module leaves."""

import json
import os
import stat
import sys

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import systemd_units as su
from ansible_collections.dgxops.fleet.plugins.modules import service_files

from module_runner import run_module

FAKE_SYSTEMCTL = r'''#!%(python)s
import json, os, sys
state_path = %(state)r
unit_dir = %(units)r
state = json.load(open(state_path))
args = sys.argv[1:]
with open(state_path + ".log", "a") as log:
    log.write(" ".join(args) + "\n")
def known(name):
    return name in state["loaded"]
if args[0] == "daemon-reload":
    state["loaded"] = sorted(set(state.get("static", [])) | set(os.listdir(unit_dir)))
elif args[0] == "show":
    names = args[args.index("--") + 1:]
    blocks = []
    for name in names:
        if known(name):
            blocks.append("LoadState=loaded\nUnitFileState=%%s\nActiveState=%%s" %% (
                "enabled" if name in state["enabled"] else "disabled",
                "active" if name in state["active"] else "inactive"))
        else:
            blocks.append("LoadState=not-found\nUnitFileState=\nActiveState=inactive")
    print("\n\n".join(blocks))
elif args[0] in ("enable", "disable", "start", "stop", "restart"):
    name = args[1]
    if not known(name):
        sys.stderr.write("Unit %%s not found.\n" %% name)
        sys.exit(5)
    if args[0] == "enable":
        state["enabled"] = sorted(set(state["enabled"]) | {name})
    elif args[0] == "disable":
        state["enabled"] = sorted(set(state["enabled"]) - {name})
    elif args[0] in ("start", "restart"):
        state["active"] = sorted(set(state["active"]) | {name})
    else:
        state["active"] = sorted(set(state["active"]) - {name})
json.dump(state, open(state_path, "w"))
'''


class Systemd(object):
    def __init__(self, tmp_path):
        self.units = tmp_path / "etc" / "systemd" / "system"
        self.units.mkdir(parents=True)
        self.state_path = tmp_path / "systemctl.json"
        self.save({"loaded": [], "enabled": [], "active": []})

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
        return [c for c in self.calls() if not c.startswith("show")]


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    fake = Systemd(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "systemctl"
    script.write_text(FAKE_SYSTEMCTL % {"python": sys.executable, "state": str(fake.state_path), "units": str(fake.units)})
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    # the tests' unit directory counts as systemd's (a change there needs a daemon-reload)
    monkeypatch.setattr(su, "UNIT_DIRS", su.UNIT_DIRS + (str(fake.units) + "/",))
    return fake


def owner():
    import grp
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name


def collector(tmp_path, systemd, script="print('v1')\n", enabled=True):
    user, group = owner()
    libexec = tmp_path / "libexec" / "dgxops"
    return {
        "directories": [{"path": str(libexec), "owner": user, "group": group}],
        "files": [
            {"dest": str(libexec / "collector"), "content": script, "mode": "0755", "owner": user, "group": group,
             "restart": ["dgxops-collector.service"]},
            {"dest": str(systemd.units / "dgxops-collector.service"), "content": "[Service]\nType=oneshot\n",
             "owner": user, "group": group, "restart": ["dgxops-collector.service"]},
            {"dest": str(systemd.units / "dgxops-collector.timer"), "content": "[Timer]\nOnCalendar=minutely\n",
             "owner": user, "group": group},
        ],
        "units": [{"name": "dgxops-collector.timer", "enabled": enabled, "state": "started" if enabled else "stopped"}],
    }


def test_first_run_writes_reloads_enables_starts_and_runs_the_oneshot(capsys, tmp_path, systemd):
    res = run_module(capsys, service_files.main, collector(tmp_path, systemd))
    assert res["changed"] is True and res["daemon_reload"] is True
    script = tmp_path / "libexec" / "dgxops" / "collector"
    assert script.read_text() == "print('v1')\n" and stat.S_IMODE(script.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "libexec" / "dgxops").stat().st_mode) == 0o755
    assert (systemd.units / "dgxops-collector.timer").read_text() == "[Timer]\nOnCalendar=minutely\n"
    assert systemd.mutations() == ["daemon-reload", "enable dgxops-collector.timer", "start dgxops-collector.timer",
                                   "restart dgxops-collector.service"]
    state = systemd.load()
    assert state["enabled"] == ["dgxops-collector.timer"]
    assert set(state["active"]) == {"dgxops-collector.timer", "dgxops-collector.service"}
    assert res["units"][0] == {"name": "dgxops-collector.timer", "found": True, "enabled": False, "running": False,
                               "actions": ["enable", "start"]}


def test_second_run_changes_nothing_and_only_reads(capsys, tmp_path, systemd):
    run_module(capsys, service_files.main, collector(tmp_path, systemd))
    systemd.calls()
    res = run_module(capsys, service_files.main, collector(tmp_path, systemd))
    assert res["changed"] is False and res["changed_paths"] == [] and res["daemon_reload"] is False
    assert systemd.calls() == ["show -p LoadState -p UnitFileState -p ActiveState -- dgxops-collector.timer"]


def test_a_changed_file_restarts_its_units_once_without_a_reload_outside_systemd(capsys, tmp_path, systemd):
    run_module(capsys, service_files.main, collector(tmp_path, systemd))
    systemd.calls()
    res = run_module(capsys, service_files.main, collector(tmp_path, systemd, script="print('v2')\n"), diff=True)
    assert res["changed"] is True and res["daemon_reload"] is False
    assert res["changed_paths"] == [str(tmp_path / "libexec" / "dgxops" / "collector")]
    assert systemd.mutations() == ["restart dgxops-collector.service"]
    assert res["diff"] == [{"before_header": res["changed_paths"][0], "after_header": res["changed_paths"][0],
                            "before": "print('v1')\n", "after": "print('v2')\n"}]


def test_a_mode_change_alone_rewrites_no_content_and_restarts_nothing(capsys, tmp_path, systemd):
    run_module(capsys, service_files.main, collector(tmp_path, systemd))
    script = tmp_path / "libexec" / "dgxops" / "collector"
    script.chmod(0o700)
    inode = script.stat().st_ino
    systemd.calls()
    res = run_module(capsys, service_files.main, collector(tmp_path, systemd))
    assert res["changed"] is True and res["changed_paths"] == [str(script)]
    assert stat.S_IMODE(script.stat().st_mode) == 0o755 and script.stat().st_ino == inode
    assert systemd.mutations() == []


def test_check_mode_reports_everything_and_changes_nothing(capsys, tmp_path, systemd):
    res = run_module(capsys, service_files.main, collector(tmp_path, systemd), check=True, diff=True)
    assert res["changed"] is True and res["daemon_reload"] is True
    assert len(res["changed_paths"]) == 4
    # the unit does not exist yet (its file is not written): the enable and start it needs are reported
    assert res["units"][0]["found"] is False and res["units"][0]["actions"] == ["enable", "start"]
    assert not (tmp_path / "libexec").exists() and os.listdir(systemd.units) == []
    assert systemd.mutations() == []
    assert [d["after"] for d in res["diff"]][0] == "print('v1')\n"


def test_a_missing_unit_fails_outside_check_mode(capsys, tmp_path, systemd):
    args = {"units": [{"name": "nvidia-dcgm.service", "enabled": True, "state": "started"}]}
    res = run_module(capsys, service_files.main, args)
    assert res["failed"] is True
    assert "nvidia-dcgm.service: the unit does not exist on this host" in res["msg"]
    assert systemd.mutations() == []


def test_removal_stops_disables_and_deletes(capsys, tmp_path, systemd):
    run_module(capsys, service_files.main, collector(tmp_path, systemd))
    systemd.calls()
    remove = {"units": [{"name": "dgxops-collector.timer", "enabled": False, "state": "stopped"}],
              "absent": [str(systemd.units / "dgxops-collector.timer"), str(tmp_path / "libexec" / "dgxops")]}
    res = run_module(capsys, service_files.main, remove, diff=True)
    assert res["changed"] is True and res["daemon_reload"] is True
    assert not (systemd.units / "dgxops-collector.timer").exists() and not (tmp_path / "libexec" / "dgxops").exists()
    # stopped and disabled while systemd still knows the unit, then its file removed and systemd reloaded
    assert systemd.mutations() == ["disable dgxops-collector.timer", "stop dgxops-collector.timer", "daemon-reload"]
    assert res["diff"][0]["before"] == "[Timer]\nOnCalendar=minutely\n"
    again = run_module(capsys, service_files.main, remove)
    assert again["changed"] is False and systemd.mutations() == []


def test_other_files_in_the_directories_are_kept(capsys, tmp_path, systemd):
    args = collector(tmp_path, systemd)
    libexec = tmp_path / "libexec" / "dgxops"
    libexec.mkdir(parents=True)
    (libexec / "mine").write_text("keep me\n")
    run_module(capsys, service_files.main, args)
    assert (libexec / "mine").read_text() == "keep me\n"


def test_bad_mode_and_unknown_owner_fail_before_any_change(capsys, tmp_path, systemd):
    args = collector(tmp_path, systemd)
    args["files"][2]["mode"] = "rw-r--r--"
    res = run_module(capsys, service_files.main, args)
    assert res["failed"] is True and "invalid mode 'rw-r--r--'" in res["msg"]
    args = collector(tmp_path, systemd)
    args["directories"][0]["owner"] = "no-such-user-dgxops"
    res = run_module(capsys, service_files.main, args)
    assert res["failed"] is True and "owner 'no-such-user-dgxops'" in res["msg"]
    assert not (tmp_path / "libexec").exists() and systemd.mutations() == []


def test_parse_show_keeps_the_order_of_the_names():
    out = "LoadState=loaded\nUnitFileState=static\nActiveState=active\n\nLoadState=not-found\nUnitFileState=\nActiveState=inactive\n"
    states = su.parse_show(out, ["a.service", "b.service"])
    assert su.is_enabled(states["a.service"]) and su.is_running(states["a.service"])
    assert not su.is_loaded(states["b.service"]) and not su.is_enabled(states["b.service"])
    with pytest.raises(ValueError):
        su.parse_show(out, ["a.service"])


def test_backup_copies_a_replaced_file_once_and_never_in_check_mode(capsys, tmp_path, systemd):
    user, group = owner()
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text("spark.local 1\n")

    def args(content):
        return {"files": [{"dest": str(conf), "content": content, "owner": user, "group": group, "backup": True}]}
    res = run_module(capsys, service_files.main, args("spark.managed 1\n"), check=True)
    assert res["changed"] is True and res["backup_files"] == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("spark-defaults")) == ["spark-defaults.conf"]
    res = run_module(capsys, service_files.main, args("spark.managed 1\n"))
    assert res["changed"] is True and len(res["backup_files"]) == 1
    backup = res["backup_files"][0]
    assert backup.startswith(str(conf) + ".") and backup.endswith("~")
    assert open(backup).read() == "spark.local 1\n" and conf.read_text() == "spark.managed 1\n"
    # unchanged content: no second copy
    res = run_module(capsys, service_files.main, args("spark.managed 1\n"))
    assert res["changed"] is False and res["backup_files"] == []


def test_no_backup_unless_asked_and_none_of_a_new_file(capsys, tmp_path, systemd):
    user, group = owner()
    conf = tmp_path / "new.conf"
    res = run_module(capsys, service_files.main, {"files": [
        {"dest": str(conf), "content": "a\n", "owner": user, "group": group, "backup": True}]})
    assert res["changed"] is True and res["backup_files"] == []
    res = run_module(capsys, service_files.main, {"files": [
        {"dest": str(conf), "content": "b\n", "owner": user, "group": group}]})
    assert res["backup_files"] == [] and [p.name for p in tmp_path.iterdir() if p.name.startswith("new.conf")] == ["new.conf"]


def test_validate_checks_the_new_content_before_it_replaces_the_file(capsys, tmp_path, systemd):
    user, group = owner()
    rule = tmp_path / "90-x.rules"
    rule.write_text("old\n")
    checker = tmp_path / "bin" / "verify"
    seen = tmp_path / "verify.args"
    checker.write_text("#!/bin/sh\necho \"$@\" > %s\ngrep -q good \"$2\" || { echo \"bad rule in $2\" >&2; exit 1; }\n" % seen)
    checker.chmod(0o755)

    def args(content):
        return {"files": [{"dest": str(rule), "content": content, "owner": user, "group": group,
                           "validate": "%s verify %%s" % checker}]}
    res = run_module(capsys, service_files.main, args("bad\n"))
    assert res.get("failed") and res["rc"] == 1 and "failed validation" in res["msg"] and "bad rule in" in res["stderr"]
    assert rule.read_text() == "old\n" and res["changed"] is False
    # the checked file was a temporary file beside dest, and it is gone
    checked = seen.read_text().split()[1]
    assert os.path.dirname(checked) == str(tmp_path) and not os.path.exists(checked)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".dgxops-")) == []
    res = run_module(capsys, service_files.main, args("good\n"))
    assert res["changed"] is True and rule.read_text() == "good\n"
    seen.unlink()
    # unchanged content and check mode: nothing to validate
    assert run_module(capsys, service_files.main, args("good\n"))["changed"] is False
    assert run_module(capsys, service_files.main, args("good too\n"), check=True)["changed"] is True
    assert not seen.exists() and rule.read_text() == "good\n"


def test_validate_without_a_placeholder_fails_before_any_change(capsys, tmp_path, systemd):
    user, group = owner()
    rule = tmp_path / "r.rules"
    res = run_module(capsys, service_files.main, {"files": [
        {"dest": str(rule), "content": "x\n", "owner": user, "group": group, "validate": "true"}]})
    assert res.get("failed") and "validate must contain %s" in res["msg"] and not rule.exists()
