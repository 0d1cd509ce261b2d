"""Controller-side validation of the storage_tuning role variables."""

import re

import pytest

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_storage_tuning import (
    glob_to_regex,
    validate,
)

DEFAULTS = {
    "storage_tuning_mounts": [],
    "storage_tuning_fstab_backup": True,
    "storage_tuning_remount": False,
    "storage_tuning_trim_strategy": "fstrim_timer",
    "storage_tuning_block_devices": [{"pattern": "nvme[0-9]*n[0-9]*", "scheduler": "none"}],
    "storage_tuning_nr_requests_policy": "fail",
    "storage_tuning_apply_now": True,
    "storage_tuning_udev_rule_path": "/etc/udev/rules.d/90-dgxops-storage-tuning.rules",
}


def config(**overrides):
    out = dict(DEFAULTS)
    out.update(overrides)
    return out


def test_defaults_are_valid():
    result = validate(config())
    assert result.errors == []
    assert result.warnings == []
    assert result.normalized["block_devices"] == [{
        "position": 0, "pattern": "nvme[0-9]*n[0-9]*", "alternatives": ["nvme[0-9]*n[0-9]*"],
        "regex": "^(?:nvme[0-9].*n[0-9].*)$", "scheduler": "none", "nr_requests": None, "read_ahead_kb": None}]
    assert result.normalized["mounts"] == []
    assert result.normalized["trim_strategy"] == "fstrim_timer"


def test_guide_mount_options_are_normalised():
    """guide 000 §2.3: noatime,nodiratime,discard -> noatime only; fstrim.timer removes discard."""
    result = validate(config(storage_tuning_mounts=[{"target": "/raid", "add": ["noatime", "nodiratime"]}]))
    assert result.errors == []
    assert result.normalized["fstab_entries"] == [{
        "target": "/raid", "add": ["noatime"],
        "remove": ["atime", "relatime", "norelatime", "strictatime", "nostrictatime", "discard"]}]
    assert any("'nodiratime' is implied by 'noatime'" in w for w in result.warnings)


def test_discard_with_fstrim_timer_warns_and_is_kept():
    result = validate(config(storage_tuning_mounts=[{"target": "/raid", "add": ["noatime", "discard"]}]))
    assert result.errors == []
    entry = result.normalized["fstab_entries"][0]
    assert "discard" in entry["add"] and "discard" not in entry["remove"]
    assert any("both" in w and "fstrim.timer" in w and "storage_tuning_mounts[0].add" in w for w in result.warnings)


def test_discard_strategy_adds_discard():
    result = validate(config(storage_tuning_trim_strategy="discard",
                             storage_tuning_mounts=[{"label": "scratch", "add": ["noatime"]}]))
    assert result.errors == []
    entry = result.normalized["fstab_entries"][0]
    assert entry["label"] == "scratch"
    assert entry["add"] == ["noatime", "discard"]
    assert "nodiscard" in entry["remove"]


def test_trim_none_leaves_discard_alone():
    result = validate(config(storage_tuning_trim_strategy="none",
                             storage_tuning_mounts=[{"uuid": "4C2E-1A3B", "add": ["relatime"]}]))
    entry = result.normalized["fstab_entries"][0]
    assert entry["add"] == ["relatime"]
    assert "discard" not in entry["remove"] and "noatime" in entry["remove"]


def test_remount_per_entry_overrides_global():
    result = validate(config(storage_tuning_remount=True, storage_tuning_mounts=[
        {"target": "/raid", "add": ["noatime"]}, {"target": "/scratch", "add": ["noatime"], "remount": False}]))
    assert [m["remount"] for m in result.normalized["mounts"]] == [True, False]


def test_guide_nr_requests_warns_on_the_controller():
    result = validate(config(storage_tuning_block_devices=[
        {"pattern": "nvme[0-9]*n[0-9]*", "scheduler": "none", "nr_requests": 1024}]))
    assert result.errors == []
    assert result.normalized["block_devices"][0]["nr_requests"] == 1024
    assert any("queue depth" in w and "1024" in w for w in result.warnings)


def test_string_numbers_from_extra_vars_are_accepted():
    result = validate(config(storage_tuning_block_devices=[
        {"pattern": "sd[a-z]", "scheduler": "mq-deadline", "nr_requests": "512", "read_ahead_kb": "4096"}]))
    assert result.errors == []
    assert result.normalized["block_devices"][0]["nr_requests"] == 512
    assert result.normalized["block_devices"][0]["read_ahead_kb"] == 4096


@pytest.mark.parametrize("value, expected", [(1, True), (0, False), ("y", True), ("n", False), ("1", True),
                                             (" off ", False), ("On", True)])
def test_booleans_read_as_the_argument_specs_read_them(value, expected):
    result = validate(config(storage_tuning_apply_now=value, storage_tuning_remount=value))
    assert result.errors == []
    assert result.normalized["apply_now"] is expected and result.normalized["remount"] is expected


def test_numbers_read_as_the_argument_specs_read_them():
    result = validate(config(storage_tuning_block_devices=[
        {"pattern": "sd[a-z]", "scheduler": "mq-deadline", "nr_requests": "+512", "read_ahead_kb": 4096.0}]))
    assert result.errors == []
    assert result.normalized["block_devices"][0]["nr_requests"] == 512
    assert result.normalized["block_devices"][0]["read_ahead_kb"] == 4096


BAD = [
    ({"storage_tuning_trim_strategy": "weekly"}, "storage_tuning_trim_strategy", "'weekly'"),
    ({"storage_tuning_nr_requests_policy": "ignore"}, "storage_tuning_nr_requests_policy", "'ignore'"),
    ({"storage_tuning_fstab_backup": "maybe"}, "storage_tuning_fstab_backup", "'maybe'"),
    ({"storage_tuning_apply_now": 2}, "storage_tuning_apply_now", "2"),
    ({"storage_tuning_udev_rule_path": "/etc/udev/rules.d/90-x.conf"}, "storage_tuning_udev_rule_path", ".rules"),
    ({"storage_tuning_udev_rule_path": "/etc/udev/rules.d/../90-x.rules"}, "storage_tuning_udev_rule_path",
     "/etc/udev/rules.d/"),
    ({"storage_tuning_udev_rule_path": "/tmp/90-x.rules"}, "storage_tuning_udev_rule_path", "/tmp/90-x.rules"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "scheduler": "cfq"}]},
     "storage_tuning_block_devices[0].scheduler", "none, mq-deadline, kyber, bfq"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "nr_requests": 0}]},
     "storage_tuning_block_devices[0].nr_requests", "from 4 to 2048"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "nr_requests": 3}]},
     "storage_tuning_block_devices[0].nr_requests", "from 4 to 2048"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "nr_requests": 4096}]},
     "storage_tuning_block_devices[0].nr_requests", "4096"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "nr_requests": True}]},
     "storage_tuning_block_devices[0].nr_requests", "True"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "nr_requests": "many"}]},
     "storage_tuning_block_devices[0].nr_requests", "'many'"),
    ({"storage_tuning_block_devices": [{"pattern": "../nvme0n1", "scheduler": "none"}]},
     "storage_tuning_block_devices[0].pattern", "without '/' or '..'"),
    ({"storage_tuning_block_devices": [{"pattern": "block/nvme0n1", "scheduler": "none"}]},
     "storage_tuning_block_devices[0].pattern", "'block/nvme0n1'"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme0n1\", RUN+=\"reboot", "scheduler": "none"}]},
     "storage_tuning_block_devices[0].pattern", "glob characters"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme[0-9", "scheduler": "none"}]},
     "storage_tuning_block_devices[0].pattern", "brackets are closed"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*|", "scheduler": "none"}]},
     "storage_tuning_block_devices[0].pattern", "non-empty alternatives"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*"}]},
     "storage_tuning_block_devices[0]", "at least one of scheduler, nr_requests, read_ahead_kb"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "read_ahead_kb": 130}]},
     "storage_tuning_block_devices[0].read_ahead_kb", "multiple of the page size"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "read_ahead_kb": -4}]},
     "storage_tuning_block_devices[0].read_ahead_kb", "-4"),
    ({"storage_tuning_block_devices": [{"pattern": "nvme*", "scheduler": "none", "queue_depth": 1023}]},
     "storage_tuning_block_devices[0].queue_depth", "only the keys"),
    ({"storage_tuning_block_devices": [{"pattern": "sd*", "scheduler": "none"}, {"pattern": "sd*", "scheduler": "bfq"}]},
     "storage_tuning_block_devices[1].pattern", "each pattern once"),
    ({"storage_tuning_block_devices": "nvme*"}, "storage_tuning_block_devices", "a list of"),
    ({"storage_tuning_mounts": [{"add": ["noatime"]}]}, "storage_tuning_mounts[0]", "exactly one of target"),
    ({"storage_tuning_mounts": [{"target": "/raid", "label": "x", "add": ["noatime"]}]},
     "storage_tuning_mounts[0]", "exactly one of target"),
    ({"storage_tuning_mounts": [{"target": "raid", "add": ["noatime"]}]},
     "storage_tuning_mounts[0].target", "an absolute mount point"),
    ({"storage_tuning_mounts": [{"target": "/raid/../etc", "add": ["noatime"]}]},
     "storage_tuning_mounts[0].target", "'..'"),
    ({"storage_tuning_mounts": [{"uuid": "not a uuid", "add": ["noatime"]}]},
     "storage_tuning_mounts[0].uuid", "hexadecimal"),
    ({"storage_tuning_mounts": [{"label": "a/b", "add": ["noatime"]}]}, "storage_tuning_mounts[0].label", "'a/b'"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": "noatime"}]},
     "storage_tuning_mounts[0].add", "a list of mount options"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": ["noatime,nodev"]}]},
     "storage_tuning_mounts[0].add[0]", "one option per list item"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": ["no atime"]}]},
     "storage_tuning_mounts[0].add[0]", "whitespace"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": ["noatime", "relatime"]}]},
     "storage_tuning_mounts[0].add", "at most one atime mode"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": ["noatime"], "remove": ["noatime"]}]},
     "storage_tuning_mounts[0].add/remove", "not both"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": ["noatime"], "options": "x"}]},
     "storage_tuning_mounts[0].options", "only the keys"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": ["noatime"]}, {"target": "/raid/", "add": ["nodev"]}]},
     "storage_tuning_mounts[1].target", "each fstab entry once"),
    ({"storage_tuning_mounts": [{"target": "/raid", "add": ["noatime"], "remount": "later"}]},
     "storage_tuning_mounts[0].remount", "'later'"),
    ({"storage_tuning_trim_strategy": "discard",
      "storage_tuning_mounts": [{"target": "/raid", "remove": ["discard"]}]}, "storage_tuning_mounts[0]", "'discard'"),
    ({"storage_tuning_sysfs_root": "/tmp"}, "storage_tuning_sysfs_root", "only the variables"),
]


@pytest.mark.parametrize("overrides, variable, fragment", BAD)
def test_bad_input_is_refused_with_variable_value_and_allowed(overrides, variable, fragment):
    result = validate(config(**overrides))
    assert not result.ok
    matching = [e for e in result.errors if e.startswith(variable)]
    assert matching, result.errors
    assert any(fragment in e for e in matching), matching
    assert any("allowed" in e for e in matching), matching


def test_there_are_at_least_fifteen_bad_inputs():
    assert len(BAD) >= 15


def test_all_errors_are_reported_at_once():
    result = validate(config(storage_tuning_trim_strategy="weekly", storage_tuning_nr_requests_policy="x",
                             storage_tuning_block_devices=[{"pattern": "a/b", "scheduler": "none"}]))
    assert len(result.errors) == 3


@pytest.mark.parametrize("pattern, names, expected", [
    ("nvme[0-9]*n[0-9]*", ["nvme0n1", "nvme12n3", "nvme0n1p1", "nvme-fabrics", "sda"],
     [True, True, True, False, False]),
    ("sd[a-z]|vd[!a]", ["sda", "sdz", "sdaa", "vdb", "vda", "hda"], [True, True, False, True, False, False]),
    ("md12?", ["md127", "md12", "md1"], [True, False, False]),
    ("dm-*", ["dm-0", "dm-", "dmx"], [True, True, False]),
    ("loop.1", ["loop.1", "loopx1"], [True, False]),
])
def test_glob_to_regex_matches_like_fnmatch(pattern, names, expected):
    regex = re.compile(glob_to_regex(pattern))
    assert [bool(regex.match(n)) for n in names] == expected
