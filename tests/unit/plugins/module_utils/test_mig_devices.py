# -*- coding: utf-8 -*-
"""mig_devices: the variable, the driver's tables and the plan (no device nodes are made here)."""

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_devices as md
from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_mig, validate_mig_devices

# A real /proc/devices excerpt (majors of nvidia-caps are dynamic: the MIG guide shows 508 and 238)
PROC_DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
236 nvidia-caps-imex-channels
238 nvidia-caps
510 nvidia-uvm

Block devices:
  8 sd
238 nvidia-caps-block-impostor
"""

MINORS = "config 1\nmonitor 2\n" + "".join(
    "gpu%d/gi%d/access %d\n" % (g, i, 3 + 135 * g + 9 * i) + "".join(
        "gpu%d/gi%d/ci%d/access %d\n" % (g, i, c, 4 + 135 * g + 9 * i + c) for c in range(8))
    for g in range(2) for i in range(15))


def view(mig1=True):
    """GPU 0 (device minor 1!) with 3g@4 (gi 1), 1g@0 (gi 2), 1g@1 (gi 3); GPU 1 (minor 0) MIG on or off."""
    return {"gpus": [
        {"index": 0, "uuid": "GPU-aaaaaaaa-0000", "minor": 1, "mig": True, "instances": [
            {"gi": 1, "profile": "3g.20gb", "start": 4, "cis": [0]},
            {"gi": 2, "profile": "1g.5gb", "start": 0, "cis": [0]},
            {"gi": 3, "profile": "1g.5gb", "start": 1, "cis": [0]}]},
        {"index": 1, "uuid": "GPU-bbbbbbbb-0000", "minor": 0, "mig": mig1, "instances": []},
    ]}


def entries(value):
    return md.normalize_access(value)[0]


def test_parse_proc_devices_reads_only_the_character_section():
    majors = md.parse_proc_devices(PROC_DEVICES)
    assert majors["nvidia-caps"] == 238
    assert majors["nvidia-frontend"] == 195
    assert "sd" not in majors and "nvidia-caps-block-impostor" not in majors


def test_parse_mig_minors_follows_the_drivers_numbering():
    table = md.parse_mig_minors(MINORS)
    assert table["config"] == 1 and table["monitor"] == 2
    assert table["gpu0/gi1/access"] == 12 and table["gpu0/gi1/ci0/access"] == 13
    assert table["gpu0/gi2/access"] == 21 and table["gpu1/gi0/access"] == 138


def test_gpu_minor_comes_from_nvidia_smi_q_not_the_index():
    q = ("\n==============NVSMI LOG==============\n\nAttached GPUs : 2\nGPU 00000000:07:00.0\n"
         "    Product Name : NVIDIA A100-SXM4-40GB\n    Minor Number : 2\nGPU 00000000:0F:00.0\n    Minor Number : 0\n")
    csv = "0, GPU-aaaaaaaa-0000, 00000000:07:00.0, Enabled\n1, GPU-bbbbbbbb-0000, 00000000:0F:00.0, Disabled\n"
    lgi = ("|   0  MIG 3g.20gb          9        1          4:4     |\n"
           "|   0  MIG 1g.5gb          19        2          0:1     |\n")
    lci = ("|   0      1       MIG 3g.20gb          2        0          0:3     |\n"
           "|   0      2       MIG 1g.5gb           0        0          0:1     |\n")
    v = md.node_view(csv, q, lgi, lci)
    assert [(g["index"], g["minor"], g["mig"]) for g in v["gpus"]] == [(0, 2, True), (1, 0, False)]
    assert v["gpus"][0]["instances"] == [{"gi": 1, "profile": "3g.20gb", "start": 4, "cis": [0]},
                                         {"gi": 2, "profile": "1g.5gb", "start": 0, "cis": [0]}]


def test_plan_grants_instances_by_profile_and_placement_and_restricts_the_rest():
    access = entries([{"name": "alpha", "gpus": 0, "profiles": ["1g.5gb"], "placements": [0], "group": 4242},
                      {"name": "beta", "gpus": "0", "profiles": ["3g.20gb"], "group": 4343, "mode": "0640"},
                      {"name": "gamma", "gpus": [1], "group": 4444, "mode": 0o660}])
    nodes, warnings = md.plan(access, view(mig1=False), md.parse_mig_minors(MINORS), 238, "/x/dev", "/x/caps")
    got = dict((p, (n["major"], n["minor"], n["uid"], n["gid"], n["mode"], n["entry"])) for p, n in nodes.items())
    gpu0 = 135   # device minor 1
    assert got == {
        "/x/dev/nvidia-caps/nvidia-cap%d" % (3 + gpu0 + 9 * 1): (238, 3 + gpu0 + 9, 0, 4343, 0o640, "beta"),
        "/x/dev/nvidia-caps/nvidia-cap%d" % (4 + gpu0 + 9 * 1): (238, 4 + gpu0 + 9, 0, 4343, 0o640, "beta"),
        "/x/dev/nvidia-caps/nvidia-cap%d" % (3 + gpu0 + 18): (238, 3 + gpu0 + 18, 0, 4242, 0o440, "alpha"),
        "/x/dev/nvidia-caps/nvidia-cap%d" % (4 + gpu0 + 18): (238, 4 + gpu0 + 18, 0, 4242, 0o440, "alpha"),
        "/x/dev/nvidia-caps/nvidia-cap%d" % (3 + gpu0 + 27): (238, 3 + gpu0 + 27, 0, 0, 0o400, "unassigned"),
        "/x/dev/nvidia-caps/nvidia-cap%d" % (4 + gpu0 + 27): (238, 4 + gpu0 + 27, 0, 0, 0o400, "unassigned"),
        "/x/dev/nvidia0": (195, 0, 0, 4444, 0o660, "gamma"),
    }
    assert nodes["/x/dev/nvidia-caps/nvidia-cap%d" % (4 + gpu0 + 18)]["proc"] == "/x/caps/gpu1/mig/gi2/ci0/access"
    assert warnings == []


def test_plan_without_restriction_and_stale_nodes():
    access = entries([{"gpus": 0, "placements": [4], "group": 4242}])
    minors = md.parse_mig_minors(MINORS)
    nodes, _w = md.plan(access, view(), minors, 238, restrict_unassigned=False)
    assert sorted(n["minor"] for n in nodes.values()) == [147, 148]
    # a node of gi 9 (gone) on a managed GPU is restricted; one of GPU 1 (device minor 0, unmanaged) is not
    stale = [3 + 135 + 81, 3 + 81]
    nodes, _w = md.plan(access, view(), minors, 238, existing_caps=stale)
    assert nodes["/dev/nvidia-caps/nvidia-cap%d" % stale[0]]["entry"] == "stale"
    assert "/dev/nvidia-caps/nvidia-cap%d" % stale[1] not in nodes


@pytest.mark.parametrize("access, message", [
    ([{"gpus": 5, "group": 1}], "mig_device_access[0].gpus: invalid value 5; allowed: GPU indexes of this node: 0, 1"),
    ([{"gpus": "GPU-cccccccc-0000", "group": 1}], "mig_device_access[0].gpus: invalid value 'GPU-cccccccc-0000'"),
    ([{"name": "a", "gpus": 0, "group": 1}, {"name": "b", "gpus": "all", "profiles": ["3g.20gb"], "group": 2}],
     "is given to both a and b with different owner, group or mode"),
    ([{"gpus": 0, "group": "surely-not-a-group-here"}], "mig_device_access[0].group: invalid value 'surely-not-a-group-here'; "
                                                        "allowed: a group that exists on this node"),
])
def test_plan_errors(access, message):
    with pytest.raises(md.DeviceAccessError) as exc:
        md.plan(entries(access), view(), md.parse_mig_minors(MINORS), 238)
    assert message in str(exc.value)


def test_same_grant_twice_is_not_a_conflict_and_no_match_warns():
    access = entries([{"name": "a", "gpus": 0, "group": 7}, {"name": "b", "gpus": "0-1", "profiles": ["1g.5gb"], "group": 7},
                      {"name": "c", "gpus": 1, "profiles": ["7g.40gb"], "group": 8}])
    nodes, warnings = md.plan(access, view(), md.parse_mig_minors(MINORS), 238)
    assert len(nodes) == 6
    assert any("mig_device_access[1] (b): no MIG instance on GPU 1 matches" in w for w in warnings)


@pytest.mark.parametrize("value, message", [
    ("tenant-a", "mig_device_access: invalid value 'tenant-a'; allowed: a list of"),
    ([{"group": "a"}], "mig_device_access[0].gpus: invalid value None"),
    ([{"gpus": 0}], "mig_device_access[0].group: invalid value None; allowed: the unix group"),
    ([{"gpus": "0-x", "group": "a"}], "mig_device_access[0].gpus: invalid value '0-x'"),
    ([{"gpus": 0, "group": "a b"}], "mig_device_access[0].group: invalid value 'a b'"),
    ([{"gpus": 0, "group": "a", "mode": "0999"}], "mig_device_access[0].mode: invalid value '0999'; allowed: an octal mode"),
    ([{"gpus": 0, "group": "a", "mode": 0o1777}], "mig_device_access[0].mode: invalid value 1023"),
    ([{"gpus": 0, "group": "a", "profiles": ["big"]}], "mig_device_access[0].profiles: invalid value ['big']"),
    ([{"gpus": 0, "group": "a", "placements": [8]}], "mig_device_access[0].placements: invalid value [8]"),
    ([{"gpus": 0, "group": "a", "users": ["x"]}], "mig_device_access[0]: invalid value 'users'; allowed: keys name, gpus"),
    ([{"name": "x", "gpus": 0, "group": "a"}, {"name": "x", "gpus": 1, "group": "b"}], "mig_device_access[1].name: invalid value 'x'"),
])
def test_normalize_access_errors(value, message):
    with pytest.raises(md.DeviceAccessError) as exc:
        md.normalize_access(value)
    assert message in str(exc.value)


def test_normalize_access_defaults_and_warnings():
    got, warnings = md.normalize_access([{"gpus": "0,2-3", "group": "tenant-a"},
                                         {"gpus": "all", "group": 1001, "owner": "1000", "mode": "0444"}])
    assert got[0] == {"name": "entry 0", "gpus": [0, 2, 3], "profiles": None, "placements": None,
                      "owner": "root", "group": "tenant-a", "mode": 0o440}
    assert got[1]["gpus"] == "all" and got[1]["owner"] == 1000 and got[1]["mode"] == 0o444
    assert any("mig_device_access[1].mode 0444 gives every user access" in w for w in warnings)


def test_validators_report_the_same_messages():
    bad = {"mig_device_access": [{"gpus": 0, "group": "a", "mode": "rw"}], "mig_device_restrict_unassigned": "yes"}
    res = validate_mig_devices.validate(bad)
    assert "mig_device_access[0].mode: invalid value 'rw'; allowed: an octal mode string such as '0440' (quote it in YAML)" in res.errors
    assert "mig_device_restrict_unassigned: invalid value 'yes'; allowed: true or false" in res.errors
    good = validate_mig_devices.validate({"mig_device_access": [{"gpus": "0-1", "group": "a"}],
                                          "mig_device_restrict_unassigned": False})
    assert good.ok and good.normalized["restrict_unassigned"] is False
    assert good.normalized["access"][0]["gpus"] == [0, 1]
    # the mig area runs the same checks when its config carries the keys
    res = validate_mig.validate({"mig_gpu_model": "h100", "mig_layout_name": "all-disabled",
                                 "mig_builtin_layouts": {"h100": {"all-disabled": [{"gpus": "all", "mig": False}]}},
                                 "mig_device_access": bad["mig_device_access"]})
    assert any(e.startswith("mig_device_access[0].mode: invalid value 'rw'") for e in res.errors)
