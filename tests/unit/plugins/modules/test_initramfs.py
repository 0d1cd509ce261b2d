"""dgxops.fleet.initramfs: regenerate when the files the initramfs carries changed, by state.

update-initramfs is a fake script that logs its arguments; the inputs and the stamp are files
under the test's directory."""

import hashlib

from ansible_collections.dgxops.fleet.plugins.modules import initramfs
from module_runner import run_module


def setup(tmp_path, rc=0):
    log = tmp_path / "calls"
    tool = tmp_path / "update-initramfs"
    tool.write_text("#!/bin/sh\necho \"$@\" >> %s\necho generated\nexit %d\n" % (log, rc))
    tool.chmod(0o755)
    blacklist, options = tmp_path / "blacklist-nouveau.conf", tmp_path / "nvidia.conf"
    blacklist.write_text("blacklist nouveau\n")
    options.write_text("options nvidia NVreg_EnableGpuFirmware=1\n")
    args = {"inputs": [str(blacklist), str(options)], "stamp": str(tmp_path / "state" / "initramfs.stamp"),
            "update_initramfs": str(tool)}
    return args, log, blacklist, options


def calls(log):
    return log.read_text().splitlines() if log.exists() else []


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_first_run_regenerates_and_records_the_checksums(capsys, tmp_path):
    args, log, blacklist, options = setup(tmp_path)
    res = run_module(capsys, initramfs.main, args)
    assert res["changed"] is True and res["stale"] is True and res["available"] is True
    assert calls(log) == ["-u -k all"]
    # the same string the role recorded with stat's sha256 checksums before this module existed
    assert (tmp_path / "state" / "initramfs.stamp").read_text() == "%s %s\n" % (sha(blacklist), sha(options))


def test_unchanged_inputs_regenerate_nothing(capsys, tmp_path):
    args, log = setup(tmp_path)[:2]
    run_module(capsys, initramfs.main, args)
    res = run_module(capsys, initramfs.main, args)
    assert res["changed"] is False and res["stale"] is False
    assert calls(log) == ["-u -k all"]


def test_an_edit_from_an_earlier_failed_run_still_regenerates(capsys, tmp_path):
    args, log, options = [setup(tmp_path)[i] for i in (0, 1, 3)]
    run_module(capsys, initramfs.main, args)
    options.write_text("options nvidia NVreg_EnableGpuFirmware=0\n")  # edited, initramfs never rebuilt
    res = run_module(capsys, initramfs.main, args)
    assert res["stale"] is True and calls(log) == ["-u -k all", "-u -k all"]
    assert run_module(capsys, initramfs.main, args)["changed"] is False


def test_force_regenerates_and_a_missing_input_counts_as_absent(capsys, tmp_path):
    args, log, blacklist = setup(tmp_path)[:3]
    run_module(capsys, initramfs.main, args)
    assert run_module(capsys, initramfs.main, dict(args, force=True))["stale"] is True
    blacklist.unlink()
    res = run_module(capsys, initramfs.main, args)
    assert res["stale"] is True and res["checksums"].startswith("absent ")
    assert len(calls(log)) == 3


def test_check_mode_reports_and_runs_nothing(capsys, tmp_path):
    args, log = setup(tmp_path)[:2]
    res = run_module(capsys, initramfs.main, args, check=True)
    assert res["changed"] is True and res["stale"] is True
    assert calls(log) == [] and not (tmp_path / "state").exists()


def test_without_update_initramfs_nothing_happens(capsys, tmp_path):
    args, log = setup(tmp_path)[:2]
    res = run_module(capsys, initramfs.main, dict(args, update_initramfs=str(tmp_path / "nope"), force=True))
    assert res["changed"] is False and res["available"] is False and res["stale"] is False
    assert not (tmp_path / "state").exists()


def test_a_failing_update_initramfs_fails_and_records_nothing(capsys, tmp_path):
    args, log = setup(tmp_path, rc=1)[:2]
    res = run_module(capsys, initramfs.main, args)
    assert res["failed"] is True and res["rc"] == 1 and "update-initramfs -u -k all failed" in res["msg"]
    assert not (tmp_path / "state" / "initramfs.stamp").exists()
