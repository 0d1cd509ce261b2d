"""Verify the storage_tuning scenario on the simulated node (testinfra, docker backend)."""

import base64
import hashlib
import json
import os
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERGE = os.path.join(HERE, "..", "converge.yml")
RULE = "/etc/udev/rules.d/90-dgxops-storage-tuning.rules"
NVME = ["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1"]

with open(os.path.join(HERE, "..", "fstab.orig"), "rb") as _handle:
    ORIGINAL = _handle.read()

# The two lines the converge edits, before and after (everything else must not move a byte).
EDITED = {
    b"UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  /raid  ext4  defaults,discard,nofail,"
    b"x-systemd.device-timeout=10s  0  2":
    b"UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  /raid  ext4  defaults,nofail,"
    b"x-systemd.device-timeout=10s,noatime  0  2",
    b"LABEL=scratch   /scratch        xfs     rw,relatime,attr2,inode64,logbufs=8,logbsize=32k,"
    b"noquota        0 0":
    b"LABEL=scratch   /scratch        xfs     rw,attr2,inode64,logbufs=8,logbsize=256k,"
    b"noquota,noatime        0 0",
}


def _bytes(host, path):
    return base64.b64decode(host.check_output("base64 -w0 %s", path))


def _sysfs_root(host):
    return host.file("/root/storage-tuning-sysfs-root").content_string.strip()


def _queue(host, device, name):
    return host.file("%s/block/%s/queue/%s" % (_sysfs_root(host), device, name)).content_string.strip()


def test_fstab_only_targeted_lines_changed(host):
    current = _bytes(host, "/etc/fstab")
    before_lines = ORIGINAL.split(b"\n")
    after_lines = current.split(b"\n")
    assert len(before_lines) == len(after_lines) == 24  # 23 lines and the final newline
    changed = 0
    for old, new in zip(before_lines, after_lines):
        if old in EDITED:
            assert new == EDITED[old]
            changed += 1
        else:
            assert new == old
    assert changed == 2


def test_fstab_backup_is_the_original(host):
    backups = host.run("ls /etc/fstab.*~").stdout.split()
    assert len(backups) == 1, backups  # the idempotence run made none
    assert _bytes(host, backups[0]) == ORIGINAL
    assert host.file("/etc/fstab").mode == 0o644


def test_libmount_parses_the_edited_fstab(host):
    """findmnt (util-linux, the real consumer) sees the new options and every other entry unchanged."""
    cols = "SOURCE,TARGET,FSTYPE,OPTIONS,FREQ,PASSNO"
    before = json.loads(host.check_output("findmnt --tab-file /root/fstab.orig -J -o %s", cols))
    after = json.loads(host.check_output("findmnt --tab-file /etc/fstab -J -o %s", cols))
    old = {e["target"]: e for e in before["filesystems"]}
    new = {e["target"]: e for e in after["filesystems"]}
    assert len(new) == len(old) == 10
    assert new["/raid"]["options"] == "defaults,nofail,x-systemd.device-timeout=10s,noatime"
    assert new["/scratch"]["options"] == "rw,attr2,inode64,logbufs=8,logbsize=256k,noquota,noatime"
    for target in set(old) - {"/raid", "/scratch"}:
        assert new[target] == old[target]
    # The mount points do not exist in the container, so --verify reports errors about them;
    # what matters is that libmount parses every line.
    summary = host.run("findmnt --verify --tab-file /etc/fstab").stderr
    assert re.search(r"^0 parse errors, ", summary, re.M), summary


def test_udev_rule(host):
    rule = host.file(RULE)
    assert rule.exists and rule.user == "root" and rule.mode == 0o644
    lines = [line for line in rule.content_string.splitlines() if line and not line.startswith("#")]
    assert lines == [
        'ACTION=="add|change", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", KERNEL=="nvme[0-9]*n[0-9]*", '
        'ATTR{queue/scheduler}="none", ATTR{queue/nr_requests}="1023", ATTR{queue/read_ahead_kb}="256"'
    ]


def test_nvme_queue_settings_applied(host):
    for device in NVME:
        assert _queue(host, device, "scheduler") == "none"
        assert _queue(host, device, "nr_requests") == "1023"
        assert _queue(host, device, "read_ahead_kb") == "256"


def test_unmatched_disk_and_partition_untouched(host):
    root = _sysfs_root(host)
    assert _queue(host, "sda", "scheduler") == "none [mq-deadline]"
    assert _queue(host, "sda", "nr_requests") == "64"
    assert _queue(host, "sda", "read_ahead_kb") == "128"
    assert sorted(host.file("%s/block/nvme0n1/nvme0n1p1" % root).listdir()) == ["partition", "start"]


def test_fstrim_timer_enabled(host):
    assert host.run("systemctl is-enabled fstrim.timer").stdout.strip() == "enabled"
    # util-linux's timer has ConditionVirtualization=!container: enabled, never active here
    assert host.run("systemd-detect-virt --container").rc == 0
    assert host.run("systemctl is-active fstrim.timer").stdout.strip() == "inactive"


def _state(host):
    """A digest of everything the role may change."""
    root = _sysfs_root(host)
    paths = ["/etc/fstab", RULE] + [
        "%s/block/%s/queue/%s" % (root, d, f) for d in NVME + ["sda"]
        for f in ("scheduler", "nr_requests", "read_ahead_kb")]
    out = host.check_output("cat %s; ls /etc/fstab.*~" % " ".join(paths))
    return hashlib.sha256(out.encode()).hexdigest()


def _converge(extra):
    env = os.environ.copy()
    env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"})
    proc = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], CONVERGE,
         "-e", json.dumps(extra)],
        capture_output=True, text=True, env=env, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("extra, expected", [
    # the guide's own values: scheduler none, nr_requests 1024 on a device of depth 1023
    ({"storage_tuning_block_devices": [{"pattern": "nvme[0-9]*n[0-9]*", "scheduler": "none",
                                        "nr_requests": 1024}]},
     ["storage_tuning_block_devices[0].nr_requests: 1024", "device nvme0n1", "queue depth is 1023",
      "EINVAL", "Nothing has been changed"]),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "scheduler": "cfq"}]},
     # refused by the role's argument spec, which runs before the validator
     ["scheduler must be one of: none, mq-deadline, kyber, bfq", "cfq", "storage_tuning_block_devices"]),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "nr_requests": 0}]},
     ["storage_tuning_block_devices[0].nr_requests", "from 4 to 2048"]),
    ({"storage_tuning_block_devices": [{"pattern": "../nvme0n1", "scheduler": "none"}]},
     ["storage_tuning_block_devices[0].pattern", "'../nvme0n1'", "without '/' or '..'"]),
    ({"storage_tuning_mounts": [{"target": "/data", "add": ["noatime"]}]},
     ["no entry in /etc/fstab matches target=/data", "/raid"]),
])
def test_bad_input_refused_before_any_change(host, extra, expected):
    before = _state(host)
    rc, output = _converge(extra)
    assert rc != 0
    for text in expected:
        assert text in output, (text, output[-3000:])
    assert _state(host) == before


def test_check_mode_reports_changes_and_writes_nothing(host):
    before = _state(host)
    env = os.environ.copy()
    env.update({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"})
    extra = {"storage_tuning_block_devices": [{"pattern": "nvme[0-9]*n[0-9]*", "scheduler": "none",
                                               "nr_requests": 1023, "read_ahead_kb": 512}],
             "storage_tuning_mounts": [{"target": "/raid", "add": ["noatime", "nodev"]}]}
    proc = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], CONVERGE, "--check", "--diff",
         "-e", json.dumps(extra)],
        capture_output=True, text=True, env=env, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    for device in NVME:
        assert "%s: read_ahead_kb 256 -> 512" % device in output
    assert "+UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  /raid  ext4  defaults,nofail," \
           "x-systemd.device-timeout=10s,noatime,nodev  0  2" in output
    assert _state(host) == before
