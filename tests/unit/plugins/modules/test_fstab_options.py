"""dgxops.fleet.fstab_options, run as Ansible runs it: a process reading its arguments file."""

import glob
import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = "ansible_collections.dgxops.fleet.plugins.modules.fstab_options"

FSTAB = (
    "# /etc/fstab: static file system information.\n"
    "# <file system> <mount point>   <type>  <options>       <dump>  <pass>\n"
    "UUID=0b4a1c7e-2f3d-4e5a-9b6c-7d8e9f0a1b2c /               ext4    errors=remount-ro 0       1\n"
    "UUID=4C2E-1A3B\t/boot/efi\tvfat\tumask=0077\t0\t1\n"
    "/dev/md0  /raid  ext4  defaults,discard,nofail  0  2\n"
    "LABEL=scratch /scratch xfs rw,relatime 0 0\n"
    "/swap.img\tnone\tswap\tsw\t0\t0\n"
)


def run_module(args, check=False, diff=False):
    payload = dict(args)
    payload["_ansible_check_mode"] = check
    payload["_ansible_diff"] = diff
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, ".collections"), env.get("PYTHONPATH", "")])
    env["LC_ALL"] = "C"
    proc = subprocess.run(
        [sys.executable, "-m", MODULE], input=json.dumps({"ANSIBLE_MODULE_ARGS": payload}),
        capture_output=True, text=True, env=env, check=False)
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def fstab_file(tmp_path):
    path = tmp_path / "fstab"
    path.write_bytes(FSTAB.encode())
    os.chmod(str(path), 0o640)
    return path


def backups(path):
    return sorted(glob.glob(str(path) + ".*~"))


def test_edit_writes_only_the_options_field_and_keeps_a_backup(fstab_file):
    result = run_module({"path": str(fstab_file), "target": "/raid", "add": ["noatime"], "remove": ["discard"]})
    assert result["changed"] is True
    assert result["entries"] == [{
        "selector": {"target": "/raid"}, "line": 5, "target": "/raid", "source": "/dev/md0",
        "options_before": "defaults,discard,nofail", "options_after": "defaults,nofail,noatime",
        "changed": True}]
    expected = FSTAB.replace("defaults,discard,nofail", "defaults,nofail,noatime")
    assert fstab_file.read_bytes() == expected.encode()
    assert [result["backup_file"]] == backups(fstab_file)
    assert open(result["backup_file"], "rb").read() == FSTAB.encode()
    assert stat.S_IMODE(os.stat(str(fstab_file)).st_mode) == 0o640


def test_second_run_changes_nothing_and_makes_no_backup(fstab_file):
    args = {"path": str(fstab_file), "entries": [
        {"target": "/raid", "add": ["noatime"], "remove": ["discard"]},
        {"label": "scratch", "add": ["noatime"], "remove": ["relatime"]}]}
    first = run_module(args)
    assert first["changed"] is True
    content = fstab_file.read_bytes()
    second = run_module(args)
    assert second["changed"] is False
    assert "backup_file" not in second
    assert [e["changed"] for e in second["entries"]] == [False, False]
    assert fstab_file.read_bytes() == content
    assert len(backups(fstab_file)) == 1


def test_check_mode_reports_and_writes_nothing(fstab_file):
    result = run_module({"path": str(fstab_file), "uuid": "4c2e-1a3b", "add": ["noatime"]}, check=True, diff=True)
    assert result["changed"] is True
    assert result["entries"][0]["options_after"] == "umask=0077,noatime"
    assert fstab_file.read_bytes() == FSTAB.encode()
    assert backups(fstab_file) == []
    assert result["diff"]["before"] == FSTAB
    assert result["diff"]["after"] == FSTAB.replace("umask=0077\t", "umask=0077,noatime\t")


def test_diff_mode_without_check(fstab_file):
    result = run_module({"path": str(fstab_file), "target": "/scratch", "add": ["noatime"]}, diff=True)
    assert result["diff"]["before_header"] == str(fstab_file)
    assert result["diff"]["after"] == fstab_file.read_text()


def test_backup_can_be_disabled(fstab_file):
    result = run_module({"path": str(fstab_file), "target": "/raid", "add": ["noatime"], "backup": False})
    assert result["changed"] is True
    assert "backup_file" not in result
    assert backups(fstab_file) == []


def test_missing_entry_fails_and_writes_nothing(fstab_file):
    result = run_module({"path": str(fstab_file), "entries": [
        {"target": "/raid", "add": ["noatime"]}, {"target": "/data", "add": ["noatime"]}]})
    assert result["failed"] is True
    assert "no entry in %s matches target=/data" % fstab_file in result["msg"]
    assert fstab_file.read_bytes() == FSTAB.encode()
    assert backups(fstab_file) == []


def test_missing_file_fails(tmp_path):
    result = run_module({"path": str(tmp_path / "nope"), "target": "/raid", "add": ["noatime"]})
    assert result["failed"] is True
    assert "does not exist" in result["msg"]


@pytest.mark.parametrize("args, message", [
    ({"target": "/raid", "label": "scratch", "add": ["noatime"]}, "mutually exclusive"),
    ({"entries": [{"target": "/raid"}], "add": ["noatime"]}, "mutually exclusive"),
    ({"add": ["noatime"]}, "one of the following is required"),
    ({"entries": [{"add": ["noatime"]}]}, "exactly one of target, source, uuid, label"),
    ({"target": "/raid", "add": ["no atime"]}, "whitespace"),
])
def test_bad_arguments_fail(fstab_file, args, message):
    payload = dict(args)
    payload["path"] = str(fstab_file)
    result = run_module(payload)
    assert result["failed"] is True
    assert message in result["msg"]
    assert fstab_file.read_bytes() == FSTAB.encode()


FAULT = """
import errno, os
_rename, _fsync = os.rename, os.fsync
KIND = os.environ["DGXOPS_TEST_FAULT"]
def rename(src, dst, *a, **k):
    if KIND == "ebusy" and os.fsdecode(dst).endswith("fstab"):
        raise OSError(errno.EBUSY, "Device or resource busy", dst)
    return _rename(src, dst, *a, **k)
def fsync(fd):
    if KIND == "enospc":
        raise OSError(errno.ENOSPC, "No space left on device")
    return _fsync(fd)
os.rename, os.fsync = rename, fsync
"""


@pytest.mark.parametrize("kind, expected", [
    ("ebusy", "[Errno 16 EBUSY] Device or resource busy; the file is in use or is a mount point"),
    ("enospc", "[Errno 28 ENOSPC] No space left on device; no space left on the node's filesystem"),
])
def test_a_write_fault_names_the_path_errno_and_fix_and_keeps_the_file(fstab_file, tmp_path, monkeypatch, kind, expected):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAULT)
    monkeypatch.setenv("DGXOPS_TEST_FAULT", kind)
    monkeypatch.setenv("PYTHONPATH", str(site))
    res = run_module({"path": str(fstab_file), "entries": [{"target": "/raid", "add": ["noatime"]}]})
    assert res["failed"] is True
    assert expected in res["msg"] and str(fstab_file) in res["msg"], res["msg"]
    assert res["errno"] == (16 if kind == "ebusy" else 28)
    assert fstab_file.read_bytes() == FSTAB.encode()
    assert [p for p in os.listdir(str(fstab_file.parent)) if p.startswith(".fstab_options.")] == []
