"""Layout validation and placement planning on the real MIG profile/placement tables.

Tables: A100-40GB `-lgip` and `-lgipp` are the NVIDIA MIG user guide's (unpadded -lgipp format);
H100 80GB `-lgip` is the verbatim box from nvidia-smi-reference.md §3; H200 `-lgip`/`-lgipp` are
the capture of a real H200 (tests/fixtures/nvidia-smi/device-h200, padded -lgipp format).
A100-80GB: names/ids from the MIG guide's profile table (its verbatim -lgip is not public;
the ids follow the same NVML scheme, see the reference note).
"""
import os

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_layout as ml
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as nsp

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "..", "fixtures", "nvidia-smi")

A100_40_LGIP = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.5gb        19     7/7        4.75       No     14     0     0   |
|                                                             1     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.5gb+me     20     1/1        4.75       No     14     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb       15     4/4        9.62       No     14     1     0   |
|                                                             1     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 2g.10gb       14     3/3        9.62       No     28     1     0   |
|                                                             2     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.20gb        9     2/2        19.50      No     42     2     0   |
|                                                             3     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.20gb        5     1/1        19.50      No     56     2     0   |
|                                                             4     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.40gb        0     1/1        39.25      No     98     5     0   |
|                                                             7     1     1   |
+-----------------------------------------------------------------------------+
"""
A100_LGIPP = """\
GPU 0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU 0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU 0 Profile ID 15 Placements: {0,2,4,6}:2
GPU 0 Profile ID 14 Placements: {0,2,4}:2
GPU 0 Profile ID 9 Placements: {0,4}:4
GPU 0 Profile ID 5 Placement : {0}:4
GPU 0 Profile ID 0 Placement : {0}:8
"""
H100_LGIP = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     7/7        9.75       No     16     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     1/1        9.75       No     16     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.20gb       15     4/4        19.62      No     26     1     0   |
|                                                             1     1     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 2g.20gb       14     3/3        19.62      No     32     2     0   |
|                                                             2     2     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 3g.40gb        9     2/2        39.50      No     60     3     0   |
|                                                             3     3     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 4g.40gb        5     1/1        39.50      No     64     4     0   |
|                                                             4     4     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.80gb        0     1/1        79.25      No     132    7     0   |
|                                                             8     7     1   |
+-----------------------------------------------------------------------------+
"""
A100_80_NAMES = {"1g.5gb": "1g.10gb", "1g.5gb+me": "1g.10gb+me", "1g.10gb": "1g.20gb",
                 "2g.10gb": "2g.20gb", "3g.20gb": "3g.40gb", "4g.20gb": "4g.40gb",
                 "7g.40gb": "7g.80gb"}


def _a100_80_lgip():
    text = A100_40_LGIP
    # replace longest names first so 1g.10gb -> 1g.20gb happens before 1g.5gb -> 1g.10gb
    for old in ("1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me", "1g.5gb"):
        new = A100_80_NAMES[old]
        text = text.replace("MIG %s " % old, "MIG %s " % new.ljust(len(old)))
    return text


def _read_capture(name):
    with open(os.path.join(FIXTURES, "device-h200", name)) as fh:
        return fh.read()


def _multi_gpu(text, gpus):
    """The same table for GPUs 0..n-1, as nvidia-smi prints it for a whole node."""
    out = []
    for idx in range(gpus):
        for line in text.splitlines():
            if line.startswith("|   0  MIG"):
                line = "|   %d  MIG" % idx + line[len("|   0  MIG"):]
            elif line.startswith("GPU 0 ") or line.startswith("GPU  0 "):
                line = line.replace(" 0 ", " %d " % idx, 1)
            out.append(line)
    return "\n".join(out)


def table_for(model, gpu=0):
    if model == "a100-40gb":
        lgip, lgipp = A100_40_LGIP, A100_LGIPP
    elif model == "a100-80gb":
        lgip, lgipp = _a100_80_lgip(), A100_LGIPP
    elif model == "h100":
        lgip, lgipp = H100_LGIP, A100_LGIPP
    elif model == "h200":
        lgip, lgipp = _read_capture("mig-lgip.txt"), _read_capture("mig-lgipp.txt")
    else:
        raise ValueError(model)
    return ml.profile_table(nsp.parse_mig_lgip(lgip), nsp.parse_mig_lgipp(lgipp), gpu)


def desired(model, instances):
    table = table_for(model)
    return table, ml.desired_instances(table, ml.normalize_instances(instances, "layout[0].instances"),
                                       "layout[0].instances")


def starts(plan, name=None):
    return sorted(c["start"] for c in plan["create"] if name is None or c["name"] == name)


# ---------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("model, small, small_gib_name, full", [
    ("a100-40gb", "1g.5gb", "1g.10gb", "7g.40gb"),
    ("a100-80gb", "1g.10gb", "1g.20gb", "7g.80gb"),
    ("h100", "1g.10gb", "1g.20gb", "7g.80gb"),
    ("h200", "1g.18gb", "1g.35gb", "7g.141gb"),
])
def test_profile_tables_of_the_four_gpus(model, small, small_gib_name, full):
    table = table_for(model)
    assert sorted(table) == [0, 5, 9, 14, 15, 19, 20]
    assert table[19] == {"id": 19, "name": small, "max": 7, "starts": [0, 1, 2, 3, 4, 5, 6],
                         "size": 1, "slices": 1}
    assert table[20]["name"] == small + "+me" and table[20]["max"] == 1
    assert table[15]["name"] == small_gib_name and table[15]["starts"] == [0, 2, 4, 6]
    assert table[9]["starts"] == [0, 4] and table[9]["size"] == 4 and table[9]["slices"] == 3
    assert table[0] == {"id": 0, "name": full, "max": 1, "starts": [0], "size": 8, "slices": 7}
    assert ml.total_slots(table) == 8
    assert ml.total_compute(table) == 7


def test_profile_names_resolve_per_gpu_model():
    # the same name means different profiles on different GPUs: the table read at run time decides
    assert ml.resolve_profile(table_for("a100-40gb"), "1g.10gb", "x") == 15
    assert ml.resolve_profile(table_for("a100-80gb"), "1g.10gb", "x") == 19
    assert ml.resolve_profile(table_for("h100"), "1g.10gb", "x") == 19
    assert ml.resolve_profile(table_for("h200"), "1g.18gb+me", "x") == 20
    with pytest.raises(ml.LayoutError) as err:
        ml.resolve_profile(table_for("h200"), "1g.10gb", "layout[0].instances[0].profile")
    assert "layout[0].instances[0].profile: profile '1g.10gb' is not offered by this GPU" in str(err.value)
    assert "1g.18gb (id 19, max 7)" in str(err.value)
    with pytest.raises(ml.LayoutError, match="profile id 3 is not offered"):
        ml.resolve_profile(table_for("h100"), 3, "x")


def test_table_of_the_second_gpu_of_a_node():
    lgip = nsp.parse_mig_lgip(_multi_gpu(A100_40_LGIP, 8))
    lgipp = nsp.parse_mig_lgipp(_multi_gpu(A100_LGIPP, 8))
    table = ml.profile_table(lgip, lgipp, 5)
    assert table[9]["starts"] == [0, 4] and table[19]["max"] == 7
    assert ml.profile_table(lgip, lgipp, 8) == {}


# ---------------------------------------------------------------------------
# planning on empty GPUs
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("model, name", [("a100-40gb", "1g.5gb"), ("a100-80gb", "1g.10gb"),
                                         ("h100", "1g.10gb"), ("h200", "1g.18gb")])
def test_seven_small_instances_fill_slices_0_to_6(model, name):
    table, want = desired(model, [{"profile": name, "count": 7}])
    plan = ml.plan_gpu(table, want, [])
    assert plan["destroy"] == [] and plan["keep"] == []
    assert [(c["profile_id"], c["start"], c["cis"]) for c in plan["create"]] == [
        (19, s, (1,)) for s in range(7)]


def test_guide_mixed_layout_puts_3g_at_slice_4_and_creates_it_first():
    # MIG guide: "-cgi 19,19,14,9" fails (Insufficient Resources) because the 1g instances take
    # the 3g's placement; the planner places 3g at 4 and creates the largest first.
    table, want = desired("a100-40gb", ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"])
    plan = ml.plan_gpu(table, want, [])
    assert [(c["name"], c["start"]) for c in plan["create"]] == [
        ("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 2), ("1g.5gb", 3)]
    assert [a["profile"] for a in plan["after"]] == ["2g.10gb", "1g.5gb", "1g.5gb", "3g.20gb"]


def test_h200_mixed_layout():
    table, want = desired("h200", ["3g.71gb", "2g.35gb", "1g.18gb", {"profile": "1g.18gb+me"}])
    plan = ml.plan_gpu(table, want, [])
    assert [(c["name"], c["start"]) for c in plan["create"]] == [
        ("3g.71gb", 4), ("2g.35gb", 0), ("1g.18gb", 2), ("1g.18gb+me", 3)]
    with pytest.raises(ml.LayoutError, match="needs 9 memory slices but the GPU has 8"):
        desired("h200", ["3g.71gb", "2g.35gb", "1g.35gb", "1g.18gb+me"])


def test_whole_gpu_profile_by_id():
    table, want = desired("h100", [0])
    plan = ml.plan_gpu(table, want, [])
    assert [(c["name"], c["start"], c["cis"]) for c in plan["create"]] == [("7g.80gb", 0, (7,))]


# ---------------------------------------------------------------------------
# layouts that cannot exist
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("instances, message", [
    ([{"profile": "1g.5gb", "count": 8}], "8 x 1g.5gb requested but this GPU holds at most 7"),
    (["4g.20gb", "4g.20gb"], "2 x 4g.20gb requested but this GPU holds at most 1"),
    (["3g.20gb", "3g.20gb", "1g.5gb"], "needs 9 memory slices but the GPU has 8"),
    (["4g.20gb", "3g.20gb", "1g.5gb"], "needs 9 memory slices but the GPU has 8"),
    (["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb", "1g.5gb"], "needs 8 compute slices but the GPU has 7"),
    (["7g.40gb", "1g.5gb"], "needs 9 memory slices"),
    (["1g.5gb+me", "1g.5gb+me"], "2 x 1g.5gb+me requested but this GPU holds at most 1"),
])
def test_impossible_layouts_fail_with_the_reason(instances, message):
    table = table_for("a100-40gb")
    with pytest.raises(ml.LayoutError) as err:
        ml.desired_instances(table, ml.normalize_instances(instances, "layout[0].instances"),
                             "layout[0].instances")
    assert message in str(err.value)
    assert str(err.value).startswith("layout[0].instances")


def test_place_reports_none_when_only_placement_forbids_it():
    # A synthetic table where memory and compute suffice but the starts collide: the planner
    # must say so instead of creating a partial layout.
    table = {
        1: {"id": 1, "name": "2g.20gb", "max": 2, "starts": [0], "size": 2, "slices": 2},
        2: {"id": 2, "name": "1g.10gb", "max": 4, "starts": [0, 1], "size": 1, "slices": 1},
        3: {"id": 3, "name": "4g.40gb", "max": 1, "starts": [0], "size": 4, "slices": 4},
    }
    want = [{"profile_id": 1, "cis": (2,)}, {"profile_id": 2, "cis": (1,)}]
    assert ml.place(table, want) is None
    with pytest.raises(ml.LayoutError) as err:
        ml.plan_gpu(table, want, [], "GPU 3")
    assert "GPU 3: the layout 2g.20gb, 1g.10gb cannot be placed" in str(err.value)
    assert "2g.20gb at slice 0 (2 slices)" in str(err.value)


# ---------------------------------------------------------------------------
# planning against existing instances
# ---------------------------------------------------------------------------

def _gi(gi_id, pid, name, start, size, cis, ci_ids=None):
    return {"gi_id": gi_id, "profile_id": pid, "name": name, "start": start, "size": size,
            "cis": tuple(cis), "ci_ids": ci_ids if ci_ids is not None else list(range(len(cis)))}


SEVEN_1G = [_gi(i + 7, 19, "1g.5gb", i, 1, (1,)) for i in range(7)]


def test_identical_layout_changes_nothing():
    table, want = desired("a100-40gb", [{"profile": "1g.5gb", "count": 7}])
    plan = ml.plan_gpu(table, want, SEVEN_1G)
    assert plan["create"] == [] and plan["destroy"] == [] and plan["recreate_cis"] == []
    assert [g["gi_id"] for g in plan["keep"]] == [7, 8, 9, 10, 11, 12, 13]


def test_change_keeps_what_fits_and_destroys_only_the_rest():
    table, want = desired("a100-40gb", ["3g.20gb", {"profile": "1g.5gb", "count": 4}])
    plan = ml.plan_gpu(table, want, SEVEN_1G)
    assert sorted(g["start"] for g in plan["keep"]) == [0, 1, 2, 3]
    assert sorted(g["start"] for g in plan["destroy"]) == [4, 5, 6]
    assert [(c["name"], c["start"]) for c in plan["create"]] == [("3g.20gb", 4)]


def test_existing_instance_in_the_way_is_moved_not_kept():
    # 1g instances at slices 1 and 5 and a desired 3g + 2 x 1g: each 3g placement (0 or 4)
    # overlaps one of them, so keeping both is impossible; one is kept, one is re-created.
    current = [_gi(1, 19, "1g.5gb", 1, 1, (1,)), _gi(2, 19, "1g.5gb", 5, 1, (1,))]
    table, want = desired("a100-40gb", ["3g.20gb", "1g.5gb", "1g.5gb"])
    plan = ml.plan_gpu(table, want, current)
    assert [g["gi_id"] for g in plan["keep"]] == [2]
    assert [g["gi_id"] for g in plan["destroy"]] == [1]
    assert [(c["name"], c["start"]) for c in plan["create"]] == [("3g.20gb", 0), ("1g.5gb", 6)]


def test_compute_instance_change_keeps_the_gpu_instance():
    current = [_gi(2, 9, "3g.20gb", 4, 4, (3,))]
    table, want = desired("a100-40gb", [{"profile": "3g.20gb", "compute_instances": ["1c", "2c"]}])
    plan = ml.plan_gpu(table, want, current)
    assert plan["create"] == [] and plan["destroy"] == []
    assert [(gi["gi_id"], cis) for gi, cis in plan["recreate_cis"]] == [(2, (2, 1))]
    assert plan["after"] == [{"profile": "3g.20gb", "profile_id": 9, "start": 4, "size": 4,
                              "compute_instances": ["2c", "1c"]}]


def test_prefers_keeping_an_instance_whose_compute_instances_match():
    current = [_gi(1, 9, "3g.20gb", 0, 4, (1, 1, 1)), _gi(2, 9, "3g.20gb", 4, 4, (3,))]
    table, want = desired("a100-40gb", ["3g.20gb"])
    plan = ml.plan_gpu(table, want, current)
    assert [g["gi_id"] for g in plan["keep"]] == [2]
    assert [g["gi_id"] for g in plan["destroy"]] == [1]


@pytest.mark.parametrize("cis, message", [
    (["2c", "2c"], "need 4 compute slices but 3g.20gb has 3"),
    (["8c"], "compute instance of 8 slices does not fit GPU instance 3g.20gb; allowed: 1c, 2c, 3c"),
])
def test_bad_compute_instances(cis, message):
    table = table_for("a100-40gb")
    with pytest.raises(ml.LayoutError, match=message):
        ml.desired_instances(table, ml.normalize_instances(
            [{"profile": "3g.20gb", "compute_instances": cis}], "l"), "l")


def test_4g_offers_no_3c():
    table = table_for("h100")
    with pytest.raises(ml.LayoutError, match="allowed: 1c, 2c, 4c"):
        ml.desired_instances(table, ml.normalize_instances(
            [{"profile": "4g.40gb", "compute_instances": ["3c"]}], "l"), "l")


def test_full_ci_by_name_and_short_form():
    table = table_for("h100")
    got = ml.desired_instances(table, ml.normalize_instances(
        [{"profile": "3g.40gb", "compute_instances": ["1c.3g.40gb", "2c"]},
         {"profile": "3g.40gb", "compute_instances": ["3g.40gb"]}], "l"), "l")
    assert [(d["profile_id"], d["cis"]) for d in got] == [(9, (2, 1)), (9, (3,))]
    assert ml.full_ci(table, 9, (3,)) and not ml.full_ci(table, 9, (2, 1))


# ---------------------------------------------------------------------------
# structure / selectors
# ---------------------------------------------------------------------------

def test_normalize_layout_shapes():
    got = ml.normalize_layout([
        {"gpus": "0-3", "instances": [{"profile": "1g.10gb", "count": 7}]},
        {"gpus": [4, "5", "6,7"], "mig": False},
    ])
    assert got == [
        {"gpus": [0, 1, 2, 3], "mig": True,
         "instances": [{"profile": "1g.10gb", "count": 7, "compute_instances": ["full"]}]},
        {"gpus": [4, 5, 6, 7], "mig": False, "instances": []},
    ]


@pytest.mark.parametrize("layout, message", [
    ([{"gpus": "all", "mig": False, "instances": ["1g.10gb"]}],
     "layout[0].instances: invalid value ['1g.10gb']; allowed: no instances when mig is false"),
    ([{"gpus": "3-1"}], "layout[0].gpus: invalid value '3-1'"),
    ([{"gpus": "all", "instances": ["2x1g"]}], "layout[0].instances[0]: invalid value '2x1g'"),
    ([{"gpus": "all", "instances": [{"profile": "1g.10gb", "count": 0}]}],
     "layout[0].instances[0].count: invalid value 0; allowed: an integer from 1 to 8"),
    ([{"gpus": "all", "instances": [{"profile": "1g.10gb", "cnt": 2}]}],
     "layout[0].instances[0]: unknown key(s) cnt"),
    ([{"gpus": "all", "mig": "maybe"}], "layout[0].mig: invalid value 'maybe'; allowed: true or false"),
    ([], "layout: invalid value []"),
])
def test_normalize_layout_errors(layout, message):
    with pytest.raises(ml.LayoutError) as err:
        ml.normalize_layout(layout)
    assert message in str(err.value)


def test_select_gpus_by_index_uuid_and_overlap():
    gpus = [{"index": i, "uuid": "GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd" % i} for i in range(8)]
    entries = ml.normalize_layout([{"gpus": "0-3", "instances": ["7g.40gb"]},
                                   {"gpus": ["GPU-00000005-aaaa-bbbb-cccc-dddddddddddd"], "mig": False}])
    chosen = ml.select_gpus(entries, gpus)
    assert sorted(chosen) == [0, 1, 2, 3, 5]
    assert chosen[5]["mig"] is False
    with pytest.raises(ml.LayoutError, match="layout\\[1\\].gpus: GPU 2 is already chosen by layout\\[0\\]"):
        ml.select_gpus(ml.normalize_layout([{"gpus": "all"}, {"gpus": 2, "mig": False}]), gpus)
    with pytest.raises(ml.LayoutError, match="GPU index 9 does not exist on this node"):
        ml.select_gpus(ml.normalize_layout([{"gpus": 9}]), gpus)


# ---------------------------------------------------------------------------
# current state parsing
# ---------------------------------------------------------------------------

LCI = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      1       MIG 1c.3g.20gb       0         0          0:1     |
+--------------------------------------------------------------------+
|   0      1       MIG 2c.3g.20gb       1         1          1:2     |
+--------------------------------------------------------------------+
|   0      7       MIG 1g.5gb           0         0          0:1     |
+--------------------------------------------------------------------+
"""
LGI = """\
+----------------------------------------------------+
| GPU instances:                                     |
| GPU   Name          Profile  Instance   Placement  |
|                       ID       ID       Start:Size |
|====================================================|
|   0  MIG 3g.20gb       9        1          4:4     |
+----------------------------------------------------+
|   0  MIG 1g.5gb       19        7          0:1     |
+----------------------------------------------------+
|   1  MIG 7g.40gb        0        0          0:8     |
+----------------------------------------------------+
"""


def test_current_instances_from_lgi_and_lci():
    lci = nsp.parse_mig_lci(LCI)
    assert lci[1] == {"gpu": 0, "gi_id": 1, "name": "2c.3g.20gb", "profile_id": 1, "ci_id": 1,
                      "start": 1, "size": 2}
    cur = ml.current_instances(nsp.parse_mig_lgi(LGI), lci, 0)
    assert cur == [
        {"gi_id": 7, "profile_id": 19, "name": "1g.5gb", "start": 0, "size": 1, "cis": (1,),
         "ci_profile_ids": [0], "ci_ids": [0]},
        {"gi_id": 1, "profile_id": 9, "name": "3g.20gb", "start": 4, "size": 4, "cis": (2, 1),
         "ci_profile_ids": [1, 0], "ci_ids": [0, 1]},
    ]
    gpu1 = ml.current_instances(nsp.parse_mig_lgi(LGI), lci, 1)
    assert gpu1[0]["cis"] == () and gpu1[0]["name"] == "7g.40gb"
    table, want = desired("a100-40gb", ["3g.20gb", "1g.5gb"])
    plan = ml.plan_gpu(table, want, cur)
    assert plan["create"] == [] and plan["destroy"] == []
    assert [(g["gi_id"], cis) for g, cis in plan["recreate_cis"]] == [(1, (3,))]


# ---------------------------------------------------------------------------
# controller-side validators of the mig and tenant_isolation roles
# ---------------------------------------------------------------------------

from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_mig as vm  # noqa: E402
from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_tenant_isolation as vt  # noqa: E402

BUILTIN = {"a100-40gb": {"all-1g.5gb": [{"gpus": "all", "instances": [{"profile": "1g.5gb", "count": 7}]}],
                         "all-disabled": [{"gpus": "all", "mig": False}]}}


def mig_config(**kw):
    cfg = {"mig_gpu_model": "a100-40gb", "mig_layout_name": "all-1g.5gb", "mig_layout": [],
           "mig_layouts": {}, "mig_builtin_layouts": BUILTIN, "mig_force": False,
           "mig_stop_services": ["nvidia-dcgm.service", "nvidia-dcgm.service"], "mig_boot_timeout": 480}
    cfg.update(kw)
    return cfg


def test_validate_mig_resolves_named_and_explicit_layouts():
    res = vm.validate(mig_config())
    assert res.errors == []
    assert res.normalized == {"layout": BUILTIN["a100-40gb"]["all-1g.5gb"], "layout_name": "all-1g.5gb",
                              "stop_services": ["nvidia-dcgm.service"]}
    mine = [{"gpus": 0, "instances": ["3g.20gb"]}]
    res = vm.validate(mig_config(mig_layouts={"all-1g.5gb": mine}))
    assert res.normalized["layout"] == mine            # user layouts win over built-ins
    res = vm.validate(mig_config(mig_layout=mine, mig_layout_name=""))
    assert res.errors == [] and res.normalized["layout_name"] == "(mig_layout)"


@pytest.mark.parametrize("kw, message", [
    ({"mig_layout_name": "all-9g"}, "mig_layout_name: invalid value 'all-9g'; allowed: a layout defined for a100-40gb: all-1g.5gb, all-disabled"),
    ({"mig_gpu_model": ""}, "mig_gpu_model: invalid value ''; allowed: a100-40gb, a100-80gb, h100, h200"),
    ({"mig_layout": [{"gpus": "all", "instances": [{"profile": "1g.5gb", "count": 9}]}]},
     "mig_layout[0].instances[0].count: invalid value 9; allowed: an integer from 1 to 8"),
    ({"mig_layouts": {"mine": [{"gpu": 0}]}}, "mig_layouts[mine][0]: unknown key(s) gpu"),
    ({"mig_force": "yes"}, "mig_force: invalid value 'yes'; allowed: true or false"),
    ({"mig_stop_services": ["dcgm; rm -rf /"]}, "mig_stop_services[0]: invalid value 'dcgm; rm -rf /'"),
    ({"mig_boot_timeout": 5}, "mig_boot_timeout: invalid value 5; allowed: an integer number of seconds from 30 to 3600"),
])
def test_validate_mig_errors(kw, message):
    res = vm.validate(mig_config(**kw))
    assert any(message in e for e in res.errors), res.errors


def test_validate_tenants_builds_slice_properties():
    res = vt.validate({"tenant_isolation_tenants": [
        {"name": "alpha", "cpu_quota": "400%", "cpu_weight": 200, "memory_high": "56G", "memory_max": "64G",
         "numa_nodes": [1, 0], "units": ["spark-worker.service"]},
        {"name": "beta", "cpu_quota": "200%", "memory_max": "8G", "allowed_cpus": "0-7, 64-71"}]})
    assert res.errors == []
    alpha, beta = res.normalized["tenants"]
    assert alpha["slice"] == "tenant-alpha.slice"
    assert alpha["properties"] == ["CPUQuota=400%", "CPUWeight=200", "MemoryHigh=56G", "MemoryMax=64G"]
    assert alpha["numa_nodes"] == [0, 1] and alpha["v2_only"] == ["memory_high", "numa_nodes"]
    assert beta["properties"] == ["CPUQuota=200%", "MemoryMax=8G", "AllowedCPUs=0-7,64-71"]
    assert beta["v2_only"] == ["allowed_cpus"]
    assert vt.memory_bytes("64G") == 68719476736 and vt.memory_bytes("50%") is None


@pytest.mark.parametrize("tenant, message", [
    ({"name": "team-a"}, "tenant_isolation_tenants[0].name: invalid value 'team-a'"),
    ({"name": "a", "cpu_quota": "4"}, "tenant_isolation_tenants[a].cpu_quota: invalid value '4'; allowed: a percentage"),
    ({"name": "a", "memory_max": "64GB"}, "tenant_isolation_tenants[a].memory_max: invalid value '64GB'"),
    ({"name": "a", "memory_high": "80G", "memory_max": "64G"}, "memory_high: invalid value '80G'; allowed: at most memory_max (64G)"),
    ({"name": "a", "cpu_weight": 0}, "cpu_weight: invalid value 0; allowed: an integer from 1 to 10000, or idle"),
    ({"name": "a", "allowed_cpus": "7-3"}, "allowed_cpus: invalid value '7-3'; allowed: a CPU list such as 0-15,32-47"),
    ({"name": "a", "allowed_cpus": "0-3", "numa_nodes": [0]}, "either numa_nodes or allowed_cpus, not both"),
    ({"name": "a", "units": ["spark worker"]}, "units[0]: invalid value 'spark worker'"),
])
def test_validate_tenant_errors(tenant, message):
    res = vt.validate({"tenant_isolation_tenants": [tenant]})
    assert any(message in e for e in res.errors), res.errors


def test_validate_tenant_duplicate_placement():
    res = vt.validate({"tenant_isolation_tenants": [{"name": "a", "units": ["w.service"]},
                                                    {"name": "b", "units": ["w.service"]}]})
    assert res.errors == ["tenant_isolation_tenants[b].units[0]: invalid value 'w.service'; allowed: a unit not "
                          "already placed in tenant a"]
