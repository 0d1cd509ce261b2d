"""dgxops.fleet.block_devices on fake sysfs trees shaped like real ones.

The trees follow what a DGX node's kernel shows (and what the molecule scenario plants):
/sys/block/<dev> entries are symlinks into /sys/devices; NVMe disks have the multi-queue
files with a tag depth of 1023 (io_queue_depth 1024), a SATA disk (sda) has depth 32, a
partition lives inside its disk's directory, and bio-based devices (zram, md) have no
queue/scheduler. systemctl, systemd-detect-virt and udevadm are fake scripts on PATH.
"""

import os

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import block_devices as bd
from ansible_collections.dgxops.fleet.plugins.modules import block_devices
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_storage_tuning import glob_to_regex
from module_runner import run_module

NVME = ["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1"]
NVME_GLOB = "nvme[0-9]*n[0-9]*"


def nvme_files(scheduler="[none] mq-deadline kyber bfq", nr="1023", ra="128", tags="1023"):
    return {"queue/scheduler": scheduler, "queue/nr_requests": nr, "queue/read_ahead_kb": ra,
            "mq/0/nr_tags": tags, "mq/0/nr_reserved_tags": "0", "queue/logical_block_size": "512"}


SATA = {"queue/scheduler": "[mq-deadline] none", "queue/nr_requests": "64", "queue/read_ahead_kb": "128",
        "mq/0/nr_tags": "32"}
# zram and md are bio-based: no scheduler, no nr_requests, no mq/ directory
ZRAM = {"queue/read_ahead_kb": "128", "queue/logical_block_size": "4096"}


def make_tree(root, devices):
    """<root>/block/<dev> -> ../devices/virtual/block/<dev>, as in sysfs; ``devices`` maps a name
    to {relative file: content}."""
    block = root / "block"
    block.mkdir(parents=True)
    for name, files in devices.items():
        real = root / "devices" / "virtual" / "block" / name
        real.mkdir(parents=True)
        for rel, value in files.items():
            path = real / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(value + "\n")
        os.symlink(os.path.join("..", "devices", "virtual", "block", name), str(block / name))
    return str(root)


def rule(position, pattern, scheduler=None, nr_requests=None, read_ahead_kb=None):
    """A rule as the validator normalizes it."""
    return {"position": position, "pattern": pattern, "alternatives": pattern.split("|"),
            "regex": glob_to_regex(pattern), "scheduler": scheduler, "nr_requests": nr_requests,
            "read_ahead_kb": read_ahead_kb}


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """Fake systemctl / systemd-detect-virt / udevadm; ``tools(name, script)`` replaces one."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))

    def put(name, body):
        path = bindir / name
        if body is None:
            if path.exists():
                path.unlink()
            return
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(0o755)

    put("systemctl", 'echo "$@" > %s/systemctl.args\nprintf "LoadState=loaded\\nUnitFileState=enabled\\n"'
        % tmp_path)
    put("systemd-detect-virt", "echo docker")
    put("udevadm", 'echo "255 (255.4-1ubuntu8)"')
    return put


@pytest.fixture
def socket(tmp_path):
    path = tmp_path / "control"
    path.write_text("")
    return str(path)


def run(capsys, sysroot, devices, socket, check=False, **extra):
    args = {"devices": devices, "sysfs_root": sysroot, "udev_control": socket}
    args.update(extra)
    return run_module(capsys, block_devices.main, args, check=check)


def dgx_tree(tmp_path, **nvme):
    devices = {name: nvme_files(**nvme) for name in NVME}
    devices["nvme0n1"]["nvme0n1p1/partition"] = "1"
    devices["sda"] = dict(SATA)
    devices["zram0"] = dict(ZRAM)
    return make_tree(tmp_path / "sys", devices)


def test_plan_for_the_guide_settings_on_nvme(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path, scheduler="[mq-deadline] kyber bfq none", nr="256")
    res = run(capsys, root, [rule(0, NVME_GLOB, "none", 1023, 256)], socket, check=True)
    assert not res.get("failed"), res
    assert res["changed"] is False
    assert [i["device"] for i in res["plan"]] == NVME  # not the partition, not sda
    assert res["plan"][0] == {
        "device": "nvme0n1", "position": 0, "pattern": NVME_GLOB,
        "scheduler_file": True, "scheduler_current": "mq-deadline",
        "schedulers_available": ["mq-deadline", "kyber", "bfq", "none"],
        "scheduler": "none", "scheduler_after": "none",
        "nr_requests_file": True, "nr_requests_current": 256, "nr_requests_requested": 1023,
        "nr_requests_limit": 1023, "nr_requests": 1023, "nr_tags": 1023,
        "read_ahead_file": True, "read_ahead_kb_current": 128, "read_ahead_kb": 256}
    assert res["notes"] == [] and res["refusals"] == []
    assert res["udev_version"] == 255 and res["udevadm_found"] and res["udevd_running"]
    assert res["fstrim_unit"] == [] and res["in_container"] is False  # trim_strategy none: not read
    assert res["page_kb"] == os.sysconf("SC_PAGESIZE") // 1024


def test_nr_requests_above_the_nvme_queue_depth_is_refused_per_device(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    res = run(capsys, root, [rule(0, NVME_GLOB, "none", 1024)], socket)
    assert res["failed"]
    assert len(res["refusals"]) == 4
    assert res["refusals"][0] == (
        "storage_tuning_block_devices[0].nr_requests: 1024 is more than device nvme0n1 accepts with scheduler "
        "'none'. Its queue depth is 1023 (%s/block/nvme0n1/mq/0/nr_tags), so the kernel would reject the "
        "write with EINVAL. Allowed: 4 to 1023. With scheduler 'none' leave nr_requests unset (the kernel "
        "already uses the whole queue depth), lower it, or set storage_tuning_nr_requests_policy to 'clamp'. "
        "Nothing has been changed." % root)
    assert res["msg"] == "\n".join(res["refusals"])


def test_clamp_lowers_to_the_depth_and_warns(capsys, tmp_path, tools, socket):
    root = make_tree(tmp_path / "sys", {"nvme0n1": nvme_files(), "nvme1n1": nvme_files(tags="511")})
    res = run(capsys, root, [rule(0, NVME_GLOB, "none", 1024)], socket, nr_requests_policy="clamp")
    assert not res.get("failed"), res
    assert [(i["nr_requests_limit"], i["nr_requests"]) for i in res["plan"]] == [(1023, 1023), (511, 511)]
    assert res["notes"] == [
        "WARNING storage_tuning: storage_tuning_block_devices[0].nr_requests 1024 is above the limit %d of %s "
        "(scheduler 'none'); storage_tuning_nr_requests_policy is 'clamp', so %d is used." % (n, dev, n)
        for n, dev in ((1023, "nvme0n1"), (511, "nvme1n1"))]


def test_with_a_scheduler_the_limit_is_max_sched_rq(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    ok = run(capsys, root, [rule(0, "sd*", "mq-deadline", 2048)], socket)
    assert not ok.get("failed"), ok
    assert [(i["device"], i["nr_requests_limit"], i["nr_tags"]) for i in ok["plan"]] == [("sda", 2048, 32)]
    # the current scheduler counts when none is asked for
    res = run(capsys, root, [rule(0, "sda", None, 2048)], socket, max_sched_requests=1024)
    assert res["failed"]
    assert "accepts with scheduler 'mq-deadline'. With an I/O scheduler the kernel limit is 1024 " \
           "(MAX_SCHED_RQ). Allowed: 4 to 1024." in res["msg"]


def test_missing_queue_depth_and_nr_requests(capsys, tmp_path, tools, socket):
    files = nvme_files()
    del files["mq/0/nr_tags"]
    root = make_tree(tmp_path / "sys", {"nvme0n1": files, "zram0": dict(ZRAM)})
    res = run(capsys, root, [rule(0, "nvme*", "none", 64)], socket)
    assert res["failed"]
    assert res["refusals"] == [
        "storage_tuning_block_devices[0].nr_requests: 64 is more than device nvme0n1 accepts with scheduler "
        "'none'. Its queue depth cannot be read (%s/block/nvme0n1/mq/0/nr_tags is missing) and cannot be "
        "checked. Allowed: 4 to the queue depth. With scheduler 'none' leave nr_requests unset (the kernel already "
        "uses the whole queue depth), lower it, or set storage_tuning_nr_requests_policy to 'clamp'. Nothing has "
        "been changed." % root]
    # no scheduler file: the limit is MAX_SCHED_RQ, but there is no nr_requests to write
    res = run(capsys, root, [rule(0, "zram*", None, 64)], socket)
    assert res["refusals"] == [
        "storage_tuning_block_devices[0].nr_requests: 64 is more than device zram0 accepts with scheduler ''. "
        "With an I/O scheduler the kernel limit is 2048 (MAX_SCHED_RQ). Allowed: 4 to 2048. With scheduler "
        "'none' leave nr_requests unset (the kernel already uses the whole queue depth), lower it, or set "
        "storage_tuning_nr_requests_policy to 'clamp'. Nothing has been changed."]


def test_scheduler_on_a_bio_based_device_is_refused(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    res = run(capsys, root, [rule(0, "zram*|md*", "none")], socket)
    assert res["failed"]
    assert res["refusals"] == [
        "storage_tuning_block_devices[0].scheduler: none cannot be set on zram0 (pattern zram*|md*): it has no "
        "%s/block/zram0/queue/scheduler (a bio-based device such as zram, md or dm-linear). Allowed: a pattern "
        "that matches only request-based disks." % root]


def test_read_ahead_not_a_page_multiple(capsys, tmp_path, tools, socket, monkeypatch):
    monkeypatch.setattr(os, "sysconf", lambda name: 65536)  # a 64 KiB-page kernel (arm64)
    root = dgx_tree(tmp_path)
    res = run(capsys, root, [rule(0, NVME_GLOB, read_ahead_kb=4), rule(1, "zram0", read_ahead_kb=128),
                             rule(2, "sda", read_ahead_kb=128)], socket)
    assert res["failed"] and res["page_kb"] == 64
    assert len(res["refusals"]) == 4  # zram0 and sda: 128 is a multiple of 64 and the file exists
    assert res["refusals"][0] == (
        "storage_tuning_block_devices[0].read_ahead_kb: 4 is not a multiple of this host's page size (64 KiB); "
        "the kernel would round it down and every run would write it again. Allowed: a multiple of 64 KiB on a "
        "device that has queue/read_ahead_kb.")
    os.unlink(os.path.join(root, "devices/virtual/block/sda/queue/read_ahead_kb"))
    res = run(capsys, root, [rule(0, "sda", read_ahead_kb=128)], socket)
    assert ", and the device has no queue/read_ahead_kb. Allowed" in res["msg"]


def test_a_device_two_patterns_match_is_refused(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    res = run(capsys, root, [rule(0, "nvme*", "none"), rule(1, "sda"), rule(2, "nvme1*", "none")], socket)
    assert res["failed"] and res["plan"] == []
    assert res["refusals"] == [
        "storage_tuning_block_devices: device nvme1n1 matches more than one pattern: "
        " storage_tuning_block_devices[0] (nvme*) storage_tuning_block_devices[2] (nvme1*). Allowed: each "
        "device matched by one pattern only (udev would apply both rules and the last one would win, so the "
        "outcome would depend on the rule order)."]


def test_pattern_without_device_is_a_note_and_unlisted_scheduler_a_warning(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    res = run(capsys, root, [rule(0, "vd*", "none"), rule(1, "sda", "bfq")], socket)
    assert not res.get("failed"), res
    assert res["notes"] == [
        "storage_tuning_block_devices[0] pattern vd* matches no device in %s/block now; the udev rule applies it "
        "when one appears." % root,
        "WARNING storage_tuning: scheduler 'bfq' is not listed for sda (mq-deadline none); the kernel tries to "
        "load its module when it is selected, and the role reads the value back."]


def test_no_sysfs_block_directory(capsys, tmp_path, tools, socket):
    res = run(capsys, str(tmp_path / "nothing"), [rule(0, NVME_GLOB, "none")], socket)
    assert not res.get("failed") and res["plan"] == [] and len(res["notes"]) == 1


def test_fstrim_timer_missing_is_refused(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    tools("systemctl", 'printf "LoadState=not-found\\nUnitFileState=\\n"')
    res = run(capsys, root, [], socket, trim_strategy="fstrim_timer")
    assert res["failed"]
    assert res["msg"] == (
        "storage_tuning_trim_strategy: 'fstrim_timer' needs fstrim.timer (shipped by util-linux), but it is not "
        "available on this host (LoadState=not-found, UnitFileState=). Allowed: install the timer, or set "
        "storage_tuning_trim_strategy to 'discard' or 'none'.")
    tools("systemctl", None)
    res = run(capsys, root, [], socket, trim_strategy="fstrim_timer")
    assert "on this host (Error executing command.)." in res["msg"]
    tools("systemctl", 'echo "System has not been booted with systemd" >&2; exit 1')
    res = run(capsys, root, [], socket, trim_strategy="fstrim_timer")
    assert "on this host (The command exited with a non-zero return code.)." in res["msg"]


def test_fstrim_timer_present_and_container(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    res = run(capsys, root, [], socket, trim_strategy="fstrim_timer")
    assert not res.get("failed"), res
    assert res["fstrim_unit"] == ["LoadState=loaded", "UnitFileState=enabled"] and res["in_container"] is True
    assert (tmp_path / "systemctl.args").read_text().split() == [
        "show", "--property=LoadState", "--property=UnitFileState", "--property=ActiveState", "fstrim.timer"]
    # enabled is all a container's timer can be: nothing left for the role to do
    assert res["fstrim_timer_ready"] is True
    tools("systemd-detect-virt", "echo none; exit 1")
    res = run(capsys, root, [], socket, trim_strategy="fstrim_timer")
    # outside a container an enabled timer must also be active (this systemctl reports no ActiveState)
    assert res["in_container"] is False and res["fstrim_timer_ready"] is False


@pytest.mark.parametrize("unit, container, ready", [
    ("LoadState=loaded\\nUnitFileState=enabled\\nActiveState=active", False, True),
    ("ActiveState=active\\nLoadState=loaded\\nUnitFileState=enabled", False, True),  # systemctl's own order
    ("LoadState=loaded\\nUnitFileState=enabled\\nActiveState=inactive", False, False),
    ("LoadState=loaded\\nUnitFileState=enabled\\nActiveState=inactive", True, True),
    ("LoadState=loaded\\nUnitFileState=disabled\\nActiveState=active", False, False),
    ("LoadState=loaded\\nUnitFileState=disabled\\nActiveState=inactive", True, False),
])
def test_fstrim_timer_ready_only_when_enabled_and_active(capsys, tmp_path, tools, socket, unit, container, ready):
    root = dgx_tree(tmp_path)
    tools("systemctl", 'printf "%s\\n"' % unit)
    tools("systemd-detect-virt", "echo docker" if container else "echo none; exit 1")
    res = run(capsys, root, [], socket, trim_strategy="fstrim_timer")
    assert not res.get("failed"), res
    assert res["fstrim_timer_ready"] is ready
    # the other strategies never read the timer's readiness
    assert run(capsys, root, [], socket, trim_strategy="discard")["fstrim_timer_ready"] is False


def test_discard_with_the_timer_enabled_warns(capsys, tmp_path, tools, socket):
    root = dgx_tree(tmp_path)
    res = run(capsys, root, [], socket, trim_strategy="discard", mounts=True)
    assert res["notes"] == [bd.discard_warning("fstrim.timer")]
    assert res["notes"][0].startswith("WARNING storage_tuning: storage_tuning_trim_strategy is 'discard' but "
                                      "fstrim.timer is enabled on this host")
    assert run(capsys, root, [], socket, trim_strategy="discard")["notes"] == []  # no mounts edited
    tools("systemctl", 'printf "LoadState=loaded\\nUnitFileState=disabled\\n"')
    assert run(capsys, root, [], socket, trim_strategy="discard", mounts=True)["notes"] == []


def test_udev_missing_and_old(capsys, tmp_path, tools):
    root = dgx_tree(tmp_path)
    tools("udevadm", None)
    res = run(capsys, root, [rule(0, "sda", "none")], str(tmp_path / "no-socket"))
    assert res["udevadm_found"] is False and res["udev_version"] == 0 and res["udevd_running"] is False
    assert res["notes"][0] == (
        "WARNING storage_tuning: udevadm is not installed on this host; the rule "
        "/etc/udev/rules.d/90-dgxops-storage-tuning.rules is written but nothing will apply it at boot or "
        "hot-plug.")
    assert run(capsys, root, [], str(tmp_path / "no-socket"))["notes"] == []  # no block device settings
    tools("udevadm", "echo 249")  # Ubuntu 22.04: no udevadm verify
    assert run(capsys, root, [], str(tmp_path / "x"))["udev_version"] == 249


def test_warn_notes_shows_every_note_as_a_warning(capsys, tmp_path, tools):
    """With warn_notes (the role's way) each note is also an Ansible warning, without the
    'WARNING ' the printed note carries; without it, nothing is warned."""
    root = dgx_tree(tmp_path)
    tools("udevadm", None)
    quiet = run(capsys, root, [rule(0, "sda", "none")], str(tmp_path / "no-socket"))
    assert "udevadm is not installed" not in str(quiet.get("warnings", [])) + quiet["_stderr"]
    res = run(capsys, root, [rule(0, "sda", "none")], str(tmp_path / "no-socket"), warn_notes=True)
    shown = str(res.get("warnings", [])) + res["_stderr"]
    assert "storage_tuning: udevadm is not installed on this host" in shown
    assert "WARNING storage_tuning" not in shown
    assert res["notes"] == quiet["notes"]


@pytest.mark.parametrize("raw, current, available", [
    ("[none] mq-deadline kyber bfq", "none", ["none", "mq-deadline", "kyber", "bfq"]),
    ("mq-deadline kyber [bfq] none", "bfq", ["mq-deadline", "kyber", "bfq", "none"]),
    ("none", "none", ["none"]),
    ("", "", []),
])
def test_scheduler_line(raw, current, available):
    item = bd.plan_item(rule(0, "x"), "x", {"queue/scheduler": raw}, "fail", 2048)
    assert (item["scheduler_current"], item["schedulers_available"]) == (current, available)


def test_values_are_read_like_grep():
    assert bd.jinja_int("12") == 12 and bd.jinja_int("x") == 0 and bd.jinja_int("1.0") == 1
    assert bd.read_value("/nonexistent/file") == ""
