# -*- coding: utf-8 -*-
"""libmount (util-linux ``findmnt``), the real consumer of fstab, reads what we write.

* ``findmnt --verify --tab-file F`` (rc 0: no parse error and no error) accepts
  a realistic fstab after the dgxops.fleet.storage_tuning role edited it, run
  through ansible-playbook against localhost with a temporary fstab and a fake
  sysfs tree.
* ``findmnt --tab-file F -J`` parses every edited file into the same entries as
  the original except for the options of the selected entry, which are exactly
  the options ``apply_edits`` reported: libmount and our parser agree on fields,
  quoted commas, octal escapes and a missing options field.

Measured with util-linux 2.38.1 (Debian 12). ``findmnt --verify`` returns 1 on
parse errors, a missing target or an unresolvable source needed at boot (a
``UUID=`` or ``LABEL=`` without ``noauto``; ``nofail`` does not downgrade it),
and 0 with warnings only; it does not check
filesystem-specific options.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.dgxops.fleet.plugins.module_utils.fstab import apply_edits  # noqa: E402

FINDMNT = shutil.which("findmnt")
pytestmark = pytest.mark.skipif(FINDMNT is None, reason="findmnt (util-linux) is not installed")
COLUMNS = "SOURCE,TARGET,FSTYPE,OPTIONS,VFS-OPTIONS,FS-OPTIONS,FREQ,PASSNO"


def parse(path):
    proc = subprocess.run([FINDMNT, "--tab-file", str(path), "-J", "-o", COLUMNS],
                          capture_output=True, text=True, check=False, env={"LC_ALL": "C", "PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    assert "parse error" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)["filesystems"]


def verify(path):
    return subprocess.run([FINDMNT, "--verify", "--tab-file", str(path)],
                          capture_output=True, text=True, check=False, env={"LC_ALL": "C", "PATH": os.environ["PATH"]})


def realistic_fstab(base):
    """A DGX-like fstab whose mount points exist under ``base`` so findmnt --verify can pass."""
    for name in ("raid", "scratch", "shm", "docker", "datasets", "spark logs", "proc", "cache"):
        os.makedirs(os.path.join(base, name), exist_ok=True)
    return textwrap.dedent("""\
        # /etc/fstab: static file system information.
        #
        # Use 'blkid' to print the universally unique identifier for a
        # device; this may be used with UUID= as a more robust way to name devices
        # that works even if disks are added and removed. See fstab(5).
        #
        # <file system> <mount point>   <type>  <options>       <dump>  <pass>
        # /raid: RAID-0 over the data NVMe drives
        UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  {b}/raid  ext4  defaults,discard,noauto,x-systemd.device-timeout=10s  0  2
        LABEL=scratch   {b}/scratch        xfs     rw,relatime,attr2,inode64,logbsize=32k,noquota,noauto        0 0

        tmpfs\t{b}/shm\ttmpfs\tdefaults,size=50%,mode=1777\t0\t0
        {b}/raid  {b}/docker  none  bind,x-systemd.requires-mounts-for={b}/raid  0 0
        # SELinux-style context with a quoted comma: one option for libmount
        tmpfs {b}/spark\\040logs tmpfs context="system_u:object_r:var_log_t:s0,c1",noatime 0 0
        #/dev/sdb1 /mnt/old ext4 defaults 0 2
           # indented comment
        proc {b}/proc proc defaults 0 0
        tmpfs {b}/cache tmpfs
        """).format(b=base)


def test_role_edited_fstab_is_accepted_by_findmnt_verify(tmp_path):
    base = str(tmp_path / "mnt")
    text = realistic_fstab(base)
    fstab = tmp_path / "fstab"
    fstab.write_text(text)
    original = tmp_path / "fstab.orig"
    original.write_text(text)
    before = verify(original)
    assert before.returncode == 0, before.stdout + before.stderr  # the test is meaningful: it passes before

    sysfs = tmp_path / "sys" / "block" / "nvme0n1"
    (sysfs / "queue").mkdir(parents=True)
    (sysfs / "mq" / "0").mkdir(parents=True)
    for rel, value in (("queue/scheduler", "[mq-deadline] kyber bfq none"), ("queue/nr_requests", "256"),
                       ("queue/read_ahead_kb", "128"), ("mq/0/nr_tags", "1023")):
        (sysfs / rel).write_text(value + "\n")
    playbook = tmp_path / "play.yml"
    playbook.write_text(textwrap.dedent("""\
        - hosts: localhost
          connection: local
          gather_facts: false
          tasks:
            - name: Apply the storage tuning role to a temporary fstab and sysfs tree
              ansible.builtin.include_role:
                name: dgxops.fleet.storage_tuning
              vars:
                __storage_tuning_fstab_path: {fstab}
                __storage_tuning_sysfs_root: {sys}
                __storage_tuning_udev_rule_dest: {rule}
                storage_tuning_trim_strategy: none
                storage_tuning_mounts:
                  - target: {b}/raid
                    add: [noatime, nodiratime]
                    remove: [discard]
                  - label: scratch
                    add: [noatime, logbsize=256k]
                  - target: "{b}/spark logs"
                    add: [nodev]
                  - target: {b}/cache
                    add: [size=1g]
        """).format(fstab=fstab, sys=tmp_path / "sys", rule=tmp_path / "90-test.rules", b=base))
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = os.path.join(ROOT, "ansible.cfg")
    env["ANSIBLE_COLLECTIONS_PATH"] = os.path.join(ROOT, ".collections")
    # -i, not ANSIBLE_INVENTORY: that setting is a path list, so "localhost," also names "" (the
    # working directory, the checkout), and Ansible would run every executable in it with --list
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-e", "ansible_python_interpreter=" + sys.executable, str(playbook)],
                          capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

    after = verify(fstab)
    assert after.returncode == 0, after.stdout + after.stderr
    assert "0 parse errors, 0 errors" in after.stdout + after.stderr

    old = {e["target"]: e for e in parse(original)}
    new = {e["target"]: e for e in parse(fstab)}
    assert set(old) == set(new) and len(new) == 7
    assert new[base + "/raid"]["options"] == "defaults,noauto,x-systemd.device-timeout=10s,noatime"
    assert new[base + "/raid"]["vfs-options"] == "noatime"
    assert new[base + "/scratch"]["options"] == "rw,attr2,inode64,logbsize=256k,noquota,noauto,noatime"
    assert new[base + "/spark logs"]["options"] == 'context="system_u:object_r:var_log_t:s0,c1",noatime,nodev'
    assert new[base + "/spark logs"]["fs-options"] == 'context="system_u:object_r:var_log_t:s0,c1"'
    assert new[base + "/cache"]["options"] == "defaults,size=1g"
    edited = {base + t for t in ("/raid", "/scratch", "/spark logs", "/cache")}
    for target in set(old) - edited:
        assert new[target] == old[target]
    # and byte for byte: only the four options fields moved
    changed = [(o, n) for o, n in zip(text.split("\n"), fstab.read_text().split("\n")) if o != n]
    assert len(changed) == 4
    assert len(text.split("\n")) == len(fstab.read_text().split("\n"))


SHAPES = [
    ("/dev/md0\t/raid\text4\tdefaults,discard\t0\t2\n", {"target": "/raid", "add": ["noatime"], "remove": ["discard"]}),
    ("UUID=\"AbCd-0001\" /x xfs defaults\n", {"uuid": "abcd-0001", "add": ["nofail"]}),
    ("LABEL=data /y ext4 rw,commit=5 0 0\n", {"label": "data", "add": ["commit=60"]}),
    ("/dev/a /mnt/a\\040b ext4 noauto,user 0 0\n", {"target": "/mnt/a b", "remove": ["noauto"]}),
    ("/dev/a /z ext4\n", {"target": "/z", "add": ["noatime"]}),
    ('/dev/a /q ext4 context="a,b",ro 0 0\n', {"target": "/q", "add": ["nodev"], "remove": ["ro"]}),
    ("/swap.img none swap sw 0 0\n", {"target": "none", "add": ["pri=5"]}),
    ("# c\r\n/dev/a /w ext4 defaults 0 0\r\n", {"target": "/w", "add": ["noatime"]}),
]


@pytest.mark.parametrize("line, edit", SHAPES)
def test_libmount_sees_exactly_the_reported_options(tmp_path, line, edit):
    text = "# leading comment\n/dev/other /other ext4 defaults 0 0\n" + line + "proc /proc proc defaults 0 0\n"
    after, results = apply_edits(text, [edit])
    src = tmp_path / "before"
    dst = tmp_path / "after"
    src.write_text(text, newline="")
    dst.write_text(after, newline="")
    old = parse(src)
    new = parse(dst)
    assert len(old) == len(new) == 3
    assert old[0] == new[0] and old[2] == new[2]
    assert new[1]["options"] == results[0]["options_after"]
    for key in ("source", "target", "fstype", "freq", "passno"):
        assert new[1][key] == old[1][key]
