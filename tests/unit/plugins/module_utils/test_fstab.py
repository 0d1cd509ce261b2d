"""Byte-preserving fstab option editing (plugins/module_utils/fstab.py).

Every test that edits checks the whole file: the targeted line has exactly the
expected new bytes and every other line is byte-identical to the input.
"""

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import fstab
from ansible_collections.dgxops.fleet.plugins.module_utils.fstab import FstabError, apply_edits

# Real-world shapes: Ubuntu/curtin installer output (aligned with spaces), a
# DGX OS RAID line, tab-separated lines, UUID=/LABEL=/PARTUUID=, swap, bind,
# nfs, tmpfs, options with '=', a quoted option with a comma, comments,
# commented-out entries, blank lines, a line with only three fields.
DGX_FSTAB = (
    "# /etc/fstab: static file system information.\n"
    "#\n"
    "# Use 'blkid' to print the universally unique identifier for a\n"
    "# device; this may be used with UUID= as a more robust way to name devices\n"
    "# that works even if disks are added and removed. See fstab(5).\n"
    "#\n"
    "# <file system> <mount point>   <type>  <options>       <dump>  <pass>\n"
    "# / was on /dev/md126p2 during curtin installation\n"
    "/dev/disk/by-id/md-uuid-3c5e1a2b:9f8d7c6e:5b4a3c2d:1e0f9a8b-part2 / ext4 defaults 0 1\n"
    "# /boot/efi was on /dev/nvme0n1p1 during curtin installation\n"
    "UUID=4C2E-1A3B\t/boot/efi\tvfat\tumask=0077\t0\t1\n"
    "UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  /raid  ext4  defaults,discard,nofail  0  2\n"
    "LABEL=scratch   /scratch        xfs     rw,relatime,attr2,inode64,logbsize=32k,noquota        0 0\n"
    "\n"
    "/swap.img\tnone\tswap\tsw\t0\t0\n"
    "tmpfs   /dev/shm        tmpfs   defaults,size=50%,mode=1777     0 0\n"
    "/raid/containers  /var/lib/docker  none  bind,x-systemd.requires-mounts-for=/raid  0 0\n"
    "nfs01:/export/datasets  /mnt/datasets  nfs4  ro,hard,nconnect=8,_netdev  0 0\n"
    "/dev/vg0/logs /var/log/spark ext4 context=\"system_u:object_r:var_log_t:s0,c1\",noatime 0 2\n"
    "PARTUUID=0a1b2c3d-01 /mnt/my\\040data ext4 noauto,user 0 0\n"
    "#/dev/sdb1 /mnt/old ext4 defaults 0 2\n"
    "   # indented comment\n"
    "proc /proc proc defaults 0 0\n"
    "/dev/sdc1 /mnt/three xfs\n"
)


def assert_only_line_changed(before, after, line_number, expected_line):
    """Every line except ``line_number`` (1-based) is byte-identical; that one equals ``expected_line``."""
    old = before.split("\n")
    new = after.split("\n")
    assert len(old) == len(new)
    for number, (o, n) in enumerate(zip(old, new), start=1):
        if number == line_number:
            assert n == expected_line
            assert o != n
        else:
            assert n == o, "line %d changed: %r -> %r" % (number, o, n)


def test_dgx_fstab_has_at_least_15_lines():
    assert DGX_FSTAB.count("\n") >= 15
    assert len(fstab.parse_entries(DGX_FSTAB)[1]) == 12


@pytest.mark.parametrize("edit, line, expected", [
    ({"target": "/raid", "add": ["noatime"], "remove": ["discard"]}, 12,
     "UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  /raid  ext4  defaults,nofail,noatime  0  2"),
    ({"uuid": "5F1C2A7E-6B1D-4F57-9A43-0C3F8F6F9A10", "add": ["noatime"]}, 12,
     "UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  /raid  ext4  defaults,discard,nofail,noatime  0  2"),
    ({"label": "scratch", "add": ["logbsize=256k"], "remove": ["relatime"]}, 13,
     "LABEL=scratch   /scratch        xfs     rw,attr2,inode64,logbsize=256k,noquota        0 0"),
    ({"target": "/boot/efi", "add": ["noatime"]}, 11,
     "UUID=4C2E-1A3B\t/boot/efi\tvfat\tumask=0077,noatime\t0\t1"),
    ({"source": "UUID=4c2e-1a3b", "remove": ["umask"]}, 11,
     "UUID=4C2E-1A3B\t/boot/efi\tvfat\tdefaults\t0\t1"),
    ({"target": "none", "add": ["pri=10"]}, 15, "/swap.img\tnone\tswap\tsw,pri=10\t0\t0"),
    ({"target": "/dev/shm", "add": ["size=80%"]}, 16,
     "tmpfs   /dev/shm        tmpfs   defaults,size=80%,mode=1777     0 0"),
    ({"target": "/var/lib/docker/", "add": ["nofail"]}, 17,
     "/raid/containers  /var/lib/docker  none  bind,x-systemd.requires-mounts-for=/raid,nofail  0 0"),
    ({"source": "nfs01:/export/datasets", "add": ["nconnect=16", "x-systemd.automount"]}, 18,
     "nfs01:/export/datasets  /mnt/datasets  nfs4  ro,hard,nconnect=16,_netdev,x-systemd.automount  0 0"),
    ({"target": "/var/log/spark", "add": ["nodev"]}, 19,
     "/dev/vg0/logs /var/log/spark ext4 context=\"system_u:object_r:var_log_t:s0,c1\",noatime,nodev 0 2"),
    ({"target": "/mnt/my data", "remove": ["noauto"]}, 20,
     "PARTUUID=0a1b2c3d-01 /mnt/my\\040data ext4 user 0 0"),
    ({"target": "/proc", "add": ["hidepid=2"]}, 23, "proc /proc proc defaults,hidepid=2 0 0"),
    ({"target": "/mnt/three", "add": ["noatime"]}, 24, "/dev/sdc1 /mnt/three xfs defaults,noatime"),
    ({"source": "/dev/disk/by-id/md-uuid-3c5e1a2b:9f8d7c6e:5b4a3c2d:1e0f9a8b-part2", "add": ["noatime"]}, 9,
     "/dev/disk/by-id/md-uuid-3c5e1a2b:9f8d7c6e:5b4a3c2d:1e0f9a8b-part2 / ext4 defaults,noatime 0 1"),
])
def test_edit_changes_only_the_options_field_of_the_target_line(edit, line, expected):
    after, results = apply_edits(DGX_FSTAB, [edit])
    assert_only_line_changed(DGX_FSTAB, after, line, expected)
    assert len(results) == 1 and results[0]["changed"] is True
    assert results[0]["line"] == line


def test_results_report_before_and_after_options():
    after, results = apply_edits(DGX_FSTAB, [{"target": "/raid", "add": ["noatime"], "remove": ["discard"]}])
    assert results == [{
        "selector": {"target": "/raid"},
        "line": 12,
        "target": "/raid",
        "source": "UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10",
        "options_before": "defaults,discard,nofail",
        "options_after": "defaults,nofail,noatime",
        "changed": True,
    }]


def test_no_change_returns_identical_text():
    after, results = apply_edits(DGX_FSTAB, [{"target": "/var/log/spark", "add": ["noatime"]},
                                             {"target": "/raid", "remove": ["noexec"]}])
    assert after == DGX_FSTAB
    assert [r["changed"] for r in results] == [False, False]


def test_second_application_is_a_no_op():
    edits = [{"target": "/raid", "add": ["noatime", "commit=60"], "remove": ["discard"]},
             {"label": "scratch", "add": ["noatime"], "remove": ["relatime"]}]
    once, _results = apply_edits(DGX_FSTAB, edits)
    twice, results = apply_edits(once, edits)
    assert twice == once
    assert not any(r["changed"] for r in results)


def test_several_edits_in_one_pass_including_the_same_line():
    edits = [{"target": "/raid", "add": ["noatime"]},
             {"uuid": "5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10", "remove": ["discard"]},
             {"target": "/scratch", "add": ["noatime"]}]
    after, results = apply_edits(DGX_FSTAB, edits)
    lines = after.split("\n")
    assert lines[11] == "UUID=5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10  /raid  ext4  defaults,nofail,noatime  0  2"
    assert lines[12] == ("LABEL=scratch   /scratch        xfs     "
                         "rw,relatime,attr2,inode64,logbsize=32k,noquota,noatime        0 0")
    assert [r["options_after"] for r in results] == [
        "defaults,discard,nofail,noatime", "defaults,nofail,noatime",
        "rw,relatime,attr2,inode64,logbsize=32k,noquota,noatime"]
    others = [i for i in range(len(lines)) if i not in (11, 12)]
    assert [lines[i] for i in others] == [DGX_FSTAB.split("\n")[i] for i in others]


def test_crlf_line_endings_and_missing_final_newline_survive():
    text = "# c\r\n/dev/a /x ext4 defaults 0 0\r\n/dev/b /y ext4 defaults 0 0"
    after, _results = apply_edits(text, [{"target": "/y", "add": ["noatime"]}])
    assert after == "# c\r\n/dev/a /x ext4 defaults 0 0\r\n/dev/b /y ext4 defaults,noatime 0 0"
    after, _results = apply_edits(text, [{"target": "/x", "add": ["noatime"]}])
    assert after == "# c\r\n/dev/a /x ext4 defaults,noatime 0 0\r\n/dev/b /y ext4 defaults 0 0"


def test_non_utf8_bytes_survive_a_round_trip():
    raw = b"# commentaire \xe9t\xe9 (latin-1)\n/dev/a /x ext4 defaults 0 0\n"
    text = raw.decode("utf-8", "surrogateescape")
    after, _results = apply_edits(text, [{"target": "/x", "add": ["noatime"]}])
    assert after.encode("utf-8", "surrogateescape") == (
        b"# commentaire \xe9t\xe9 (latin-1)\n/dev/a /x ext4 defaults,noatime 0 0\n")


def test_split_lines_round_trips():
    for text in (DGX_FSTAB, "", "\n", "a", "a\r\nb\n\n", "x\ry\n"):
        assert "".join(c + e for c, e in fstab.split_lines(text)) == text


def test_commented_out_entry_is_never_selected():
    with pytest.raises(FstabError) as err:
        apply_edits(DGX_FSTAB, [{"target": "/mnt/old", "add": ["noatime"]}])
    assert "no entry in fstab matches target=/mnt/old" in str(err.value)
    assert "/raid" in str(err.value)


def test_ambiguous_selector_is_refused():
    text = "/dev/a /x ext4 defaults 0 0\n/dev/b /x ext4 defaults 0 0\n"
    with pytest.raises(FstabError) as err:
        apply_edits(text, [{"target": "/x", "add": ["noatime"]}])
    assert "matches 2 entries" in str(err.value) and "lines 1, 2" in str(err.value)


@pytest.mark.parametrize("edit, message", [
    ({"target": "/raid", "add": ["no atime"]}, "whitespace"),
    ({"target": "/raid", "add": ["noatime,nodev"]}, "one option per list item"),
    ({"target": "/raid", "add": ['context="a']}, "unbalanced double quote"),
    ({"target": "/raid", "add": [""]}, "non-empty"),
    ({"target": "/raid", "add": ["=x"]}, "option name"),
    ({"target": "/raid", "add": ["noatime"], "remove": ["noatime"]}, "both added and removed"),
    ({"add": ["noatime"]}, "exactly one of target, source, uuid, label"),
    ({"target": "/raid", "uuid": "x", "add": ["noatime"]}, "exactly one of"),
])
def test_invalid_edits_are_refused(edit, message):
    with pytest.raises(FstabError) as err:
        apply_edits(DGX_FSTAB, [edit])
    assert message in str(err.value)


def test_refused_edit_in_a_batch_changes_nothing():
    edits = [{"target": "/raid", "add": ["noatime"]}, {"target": "/data", "add": ["noatime"]}]
    with pytest.raises(FstabError):
        apply_edits(DGX_FSTAB, edits)


@pytest.mark.parametrize("options, add, remove, expected", [
    (["defaults"], ["noatime"], [], ["defaults", "noatime"]),
    (["defaults", "discard"], [], ["discard"], ["defaults"]),
    (["discard"], [], ["discard"], ["defaults"]),
    (["rw", "discard=async"], [], ["discard"], ["rw"]),
    (["rw", "discard=async", "discard"], [], ["discard=async"], ["rw", "discard"]),
    (["rw", "commit=5", "noatime"], ["commit=60"], [], ["rw", "commit=60", "noatime"]),
    (["commit=5", "rw", "commit=9"], ["commit=60"], [], ["commit=60", "rw"]),
    (["rw"], ["noatime", "noatime"], [], ["rw", "noatime"]),
    (['context="a,b"', "rw"], ["ro"], ["rw"], ['context="a,b"', "ro"]),
])
def test_edit_options(options, add, remove, expected):
    assert fstab.edit_options(options, add, remove) == expected


@pytest.mark.parametrize("text, expected", [
    ("defaults", ["defaults"]),
    ("a,b=1,c", ["a", "b=1", "c"]),
    ('context="x,y",ro', ['context="x,y"', "ro"]),
    ("", []),
])
def test_split_options_respects_quotes(text, expected):
    assert fstab.split_options(text) == expected


def test_octal_escapes_and_trailing_slash_in_targets():
    entry = fstab.parse_entries("/dev/a /mnt/a\\040b\\011c ext4 defaults 0 0\n")[1][0]
    assert entry.target == "/mnt/a b\tc"
    assert fstab.normalize_target("/raid/") == "/raid"
    assert fstab.normalize_target("//raid") == "/raid"
    assert fstab.normalize_target("/") == "/"
    assert fstab.normalize_target("none") == "none"


def test_label_and_uuid_forms():
    text = ("LABEL=\"data\" /a ext4 defaults 0 0\n"
            "/dev/disk/by-label/logs /b ext4 defaults 0 0\n"
            "/dev/disk/by-uuid/abcd-0001 /c ext4 defaults 0 0\n")
    _text, res = apply_edits(text, [{"label": "data", "add": ["ro"]}, {"label": "logs", "add": ["ro"]},
                                    {"uuid": "ABCD-0001", "add": ["ro"]}, {"source": "LABEL=data", "add": ["x"]}])
    assert [r["target"] for r in res] == ["/a", "/b", "/c", "/a"]
