"""Unit tests of the nvidia_gpu diff logic (pure functions) and the gpu_tuning validator."""

import json

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_gpu_state as S
from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_gpu_tuning as V

HEADER = ("index, uuid, pci.bus_id, name, driver_version, persistence_mode, power.limit [W], "
          "power.default_limit [W], power.min_limit [W], power.max_limit [W], "
          "clocks.applications.graphics [MHz], clocks.applications.memory [MHz], "
          "clocks.default_applications.graphics [MHz], clocks.default_applications.memory [MHz], "
          "clocks.max.graphics [MHz], clocks.max.memory [MHz], compute_mode, ecc.mode.current, ecc.mode.pending")


def a100_row(i, pm="Disabled", pl="400.00 W", app=("1275 MHz", "1593 MHz"), mode="Default", ecc=("Enabled", "Enabled")):
    return ", ".join([
        str(i), "GPU-0000000%d-aaaa-bbbb-cccc-dddddddddddd" % i, "00000000:%s:00.0" % ("07", "0F", "47", "4E")[i],
        "NVIDIA A100-SXM4-80GB", "550.163.01", pm, pl, "400.00 W", "100.00 W", "400.00 W",
        app[0], app[1], "1275 MHz", "1593 MHz", "1410 MHz", "1593 MHz", mode, ecc[0], ecc[1]])


def a100(n=4, **kw):
    text = HEADER + "\n" + "\n".join(a100_row(i, **kw) for i in range(n)) + "\n"
    gpus, errors = S.parse_state(text)
    assert errors == []
    return gpus


DEPRECATED = "[Requested functionality has been deprecated]"


def h200_610():
    row = ", ".join(["0", "GPU-11111111-aaaa-bbbb-cccc-dddddddddddd", "00000000:18:00.0", "NVIDIA H200", "610.43.02",
                     "Enabled", "700.00 W", "700.00 W", "200.00 W", "700.00 W", DEPRECATED, DEPRECATED, DEPRECATED,
                     DEPRECATED, "1980 MHz", "3201 MHz", "Default", "Enabled", "Enabled"])
    gpus, errors = S.parse_state(HEADER + "\n" + row + "\n")
    assert errors == []
    return gpus


def spark():
    row = ", ".join(["0", "GPU-22222222-aaaa-bbbb-cccc-dddddddddddd", "0000000F:01:00.0", "NVIDIA GB10", "580.95.05",
                     "Disabled", "[N/A]", "[N/A]", "[N/A]", "[N/A]", "3003 MHz", "4266 MHz", "3003 MHz", "4266 MHz",
                     "3003 MHz", "4266 MHz", "Default", "[N/A]", "[N/A]"])
    gpus, errors = S.parse_state(HEADER + "\n" + row + "\n")
    assert errors == []
    return gpus


def desired(**params):
    out, errors = S.check_options(params)
    assert errors == []
    return out


# --------------------------------------------------------------------------- reading

def test_current_settings_parse_units_and_modes():
    gpu = a100(1, pm="Enabled", mode="Exclusive_Process", ecc=("Enabled", "Disabled"))[0]
    assert gpu["persistence_mode"] is True
    assert gpu["power_limit_w"] == 400.0 and gpu["power_min_limit_w"] == 100.0
    assert gpu["application_clocks"] == {"memory_mhz": 1593, "graphics_mhz": 1275}
    assert gpu["compute_mode"] == "EXCLUSIVE_PROCESS"
    assert gpu["ecc_mode"] == {"current": True, "pending": False}


def test_deprecated_application_clocks_are_none_with_reason():
    gpu = h200_610()[0]
    assert gpu["application_clocks"] is None
    assert gpu["unavailable"]["application_clocks"] == "deprecated"


# --------------------------------------------------------------------------- options

@pytest.mark.parametrize("params, fragment", [
    ({"power_limit_watts": -5}, "power_limit_watts: invalid value -5"),
    ({"power_limit_watts": 0}, "power_limit_watts: invalid value 0"),
    ({"power_limit_percent": 120}, "power_limit_percent: invalid value 120"),
    ({"power_limit_watts": 300, "power_limit_percent": 80}, "mutually exclusive"),
    ({"compute_mode": "EXCLUSIVE_THREAD"}, "EXCLUSIVE_THREAD was removed"),
    ({"compute_mode": "shared"}, "compute_mode: invalid value 'shared'"),
    ({"application_clocks": {"memory_mhz": 1593}}, "application_clocks.graphics_mhz: invalid value None"),
    ({"application_clocks": {"memory_mhz": 1593, "graphics_mhz": -1}}, "application_clocks.graphics_mhz: invalid value -1"),
    ({"application_clocks": "max"}, "application_clocks: invalid value 'max'"),
    ({"locked_clocks": {"min_mhz": 1500, "max_mhz": 1000}}, "min_mhz less than or equal to max_mhz"),
    ({"locked_clocks": {"min_mhz": -1, "max_mhz": 1000}}, "locked_clocks.min_mhz: invalid value -1"),
    ({"persistence_mode": "yes"}, "persistence_mode: invalid value 'yes'"),
])
def test_check_options_names_the_option_and_what_is_allowed(params, fragment):
    _desired, errors = S.check_options(params, prefix="")
    assert len(errors) == 1
    assert fragment in errors[0]
    assert "allowed" in errors[0] or "mutually exclusive" in errors[0]


def test_check_options_prefix_names_the_role_variable():
    _d, errors = S.check_options({"power_limit_watts": -1}, prefix="gpu_tuning_")
    assert errors[0].startswith("gpu_tuning_power_limit_watts: invalid value -1")


# --------------------------------------------------------------------------- selection

def test_select_by_index_uuid_and_bus_id():
    gpus = a100(4)
    chosen, errors = S.select_gpus(gpus, ["3", "GPU-00000001-AAAA-bbbb-cccc-dddddddddddd", "47:00.0"])
    assert errors == []
    assert [g["index"] for g in chosen] == [1, 2, 3]


def test_unknown_selector_is_an_error_listing_what_exists():
    chosen, errors = S.select_gpus(a100(4), ["GPU-ffffffff-0000-0000-0000-000000000000", "9"], prefix="gpu_tuning_")
    assert chosen == []
    assert len(errors) == 2
    assert errors[0].startswith("gpu_tuning_gpus: no GPU matches 'GPU-ffffffff")
    assert "an index (0-3)" in errors[1]


def test_all_cannot_be_mixed():
    _c, errors = S.select_gpus(a100(2), ["all", "0"])
    assert "cannot be combined" in errors[0]


# --------------------------------------------------------------------------- planning

def test_power_limit_differs_on_every_gpu_and_groups_into_one_call():
    gpus = a100(4)
    planned = S.plan(gpus, desired(power_limit_watts=300, persistence_mode=True))
    assert planned["errors"] == []
    assert S.count_changes(planned) == 8
    groups = S.group_commands(planned)
    assert [(s, a, len(u)) for s, a, u in groups] == [("persistence_mode", ["-pm", "1"], 4),
                                                      ("power_limit_w", ["-pl", "300"], 4)]


def test_nothing_to_do_when_already_declared():
    gpus = a100(4, pm="Enabled", pl="300.00 W")
    planned = S.plan(gpus, desired(power_limit_watts=300, persistence_mode=True))
    assert S.count_changes(planned) == 0
    assert S.group_commands(planned) == []


def test_only_the_differing_gpu_changes():
    gpus = a100(4, pl="300.00 W")
    gpus[2]["power_limit_w"] = 350.0
    planned = S.plan(gpus, desired(power_limit_watts=300))
    assert [len(g["changes"]) for g in planned["gpus"]] == [0, 0, 1, 0]
    assert planned["gpus"][2]["changes"][0] == {"setting": "power_limit_w", "before": 350.0, "after": 300.0,
                                                "args": ["-pl", "300"]}


def test_power_out_of_range_is_refused_with_the_range():
    planned = S.plan(a100(1), desired(power_limit_watts=9999), prefix="gpu_tuning_")
    assert planned["errors"] == ["gpu_tuning_power_limit_watts: 9999 W is outside the power limits of GPU 0 "
                                 "(00000000:07:00.0, NVIDIA A100-SXM4-80GB); allowed: 100.00-400.00 W"]
    # eight GPUs with the same limits: one message naming all of them
    planned = S.plan(a100(4), desired(power_limit_watts=9999))
    assert planned["errors"] == ["power_limit_watts: 9999 W is outside the power limits of GPUs 0-3 "
                                 "(NVIDIA A100-SXM4-80GB); allowed: 100.00-400.00 W"]


def test_power_percent_resolves_to_whole_watts():
    planned = S.plan(a100(1), desired(power_limit_percent=85))
    assert planned["gpus"][0]["target"]["power_limit_w"] == 340.0  # 85 % of 400 W
    planned = S.plan(a100(1), desired(power_limit_percent=10, power_limit_percent_of="max"))
    assert planned["errors"] and "10% of power.max_limit = 40 W" in planned["errors"][0]


def test_application_clocks_must_be_a_supported_pair():
    gpus = a100(1)
    table = {gpus[0]["uuid"]: {1593: {1410, 1395, 1275}}}
    ok = S.plan(gpus, desired(application_clocks={"memory_mhz": 1593, "graphics_mhz": 1410}), supported_clocks=table)
    assert ok["errors"] == []
    assert ok["gpus"][0]["changes"][0]["args"] == ["-ac", "1593,1410"]
    bad = S.plan(gpus, desired(application_clocks={"memory_mhz": 1593, "graphics_mhz": 1400}), supported_clocks=table)
    assert "application_clocks.graphics_mhz: graphics clock 1400 MHz is not supported" in bad["errors"][0]
    assert "allowed: 1275, 1395, 1410 MHz" in bad["errors"][0]
    mem = S.plan(gpus, desired(application_clocks={"memory_mhz": 1215, "graphics_mhz": 1410}), supported_clocks=table)
    assert "allowed memory clocks: 1593 MHz" in mem["errors"][0]


def test_application_clocks_reset_only_when_not_default():
    gpus = a100(2)
    gpus[1]["application_clocks"] = {"memory_mhz": 1593, "graphics_mhz": 1410}
    planned = S.plan(gpus, desired(application_clocks="default"))
    assert [c["args"] for g in planned["gpus"] for c in g["changes"]] == [["-rac"]]


def test_application_clocks_unsupported_on_r610_with_reason():
    planned = S.plan(h200_610(), desired(application_clocks={"memory_mhz": 3201, "graphics_mhz": 1980}), branch=610)
    assert planned["errors"] == []
    assert S.count_changes(planned) == 0
    assert planned["unsupported"][0]["setting"] == "application_clocks"
    assert "deprecated on driver branch 610" in planned["unsupported"][0]["reason"]


def test_acp_is_unsupported_on_r5xx():
    planned = S.plan(a100(1), desired(application_clock_permissions="unrestricted"), branch=550)
    assert "removed in the R5xx drivers" in planned["unsupported"][0]["reason"]
    assert S.count_changes(planned) == 0


def test_power_limit_unsupported_on_spark():
    planned = S.plan(spark(), desired(power_limit_watts=100, ecc_mode=True), branch=580)
    assert planned["errors"] == []
    assert {u["setting"] for u in planned["unsupported"]} == {"power_limit", "ecc_mode"}
    assert "not_available" in planned["unsupported"][0]["reason"]


def test_ecc_compares_pending_and_reports_pending_until_reset():
    gpus = a100(2, ecc=("Enabled", "Enabled"))
    planned = S.plan(gpus, desired(ecc_mode=False))
    assert [c["args"] for c in planned["gpus"][0]["changes"]] == [["-e", "0"]]
    assert "after the GPU is reset or the node reboots" in planned["gpus"][0]["pending"][0]
    # already pending from an earlier run: no change, still pending
    gpus = a100(1, ecc=("Enabled", "Disabled"))
    planned = S.plan(gpus, desired(ecc_mode=False))
    assert S.count_changes(planned) == 0
    assert planned["gpus"][0]["pending"]


def test_compute_mode_uses_numeric_argument():
    planned = S.plan(a100(1), desired(compute_mode="EXCLUSIVE_PROCESS"))
    assert planned["gpus"][0]["changes"][0]["args"] == ["-c", "3"]


def test_locked_clocks_use_the_record_and_limits():
    gpus = a100(2)
    table = {g["uuid"]: {1593: set(range(210, 1411, 15))} for g in gpus}
    want = desired(locked_clocks={"min_mhz": 1200, "max_mhz": 1410})
    record = {gpus[0]["uuid"]: {"min_mhz": 1200, "max_mhz": 1410}}
    planned = S.plan(gpus, want, supported_clocks=table, locked_record=record)
    assert [len(g["changes"]) for g in planned["gpus"]] == [0, 1]
    too_high = S.plan(gpus, desired(locked_clocks={"min_mhz": 1200, "max_mhz": 1500}), supported_clocks=table)
    assert "locked_clocks.max_mhz: 1500 MHz is above the maximum graphics clock" in too_high["errors"][0]
    assert "allowed: 210-1410 MHz" in too_high["errors"][0]


def test_locked_reset_is_a_change_unless_known_unlocked():
    gpus = a100(2)
    planned = S.plan(gpus, desired(locked_clocks="reset"), locked_record={gpus[0]["uuid"]: None})
    assert [len(g["changes"]) for g in planned["gpus"]] == [0, 1]


def test_auto_boost_not_reported_is_unsupported():
    gpus = a100(1)
    planned = S.plan(gpus, desired(auto_boost_default=False), auto_boost={gpus[0]["uuid"]: None})
    assert "auto-boost default as N/A" in planned["unsupported"][0]["reason"]


# --------------------------------------------------------------------------- setters, verify, diff

@pytest.mark.parametrize("rc, out, kind", [
    (0, "Power limit for GPU 00000000:05:00.0 was set to 110.00 W from 180.00 W.\nAll done.\n", None),
    (0, "Persistence mode is already Enabled for GPU 00000000:00:1E.0.\nAll done.\n", None),
    (0, "Changing power management limit is not supported for GPU: 00000000:01:00.0.\n"
        "Treating as warning and moving on.\nAll done.\n", "not_supported"),
    (4, "Failed to set power management limit for GPU 00000000:01:00.0: Insufficient Permissions\n", "permission"),
    (2, "Provided power limit 50.00 W is not a valid power limit which should be between 200.00 W and 700.00 W "
        "for GPU 00000000:06:00.0\nTerminating early due to previous errors.\n", "refused"),
    (0, 'Specified clock combination "(MEM 715, SM 111)" is not supported for GPU 00000002:01:00.0. Run '
        "'nvidia-smi -q -d SUPPORTED_CLOCKS' to see list of supported clock combinations\n"
        "Treating as warning and moving on.\nAll done.\n", "refused"),
])
def test_setter_problems(rc, out, kind):
    problem = S.setter_problems(rc, out, "")
    assert (problem or {}).get("kind") == kind


def test_verify_reports_a_value_that_did_not_stick():
    gpus = a100(2)
    planned = S.plan(gpus, desired(power_limit_watts=300))
    after = a100(2, pl="300.00 W")
    after[1]["power_limit_w"] = 400.0
    problems = S.verify(planned, dict((g["uuid"], g) for g in after))
    assert len(problems) == 1
    assert "GPU 1" in problems[0] and "power_limit_w reads 400.0 after setting 300.0" in problems[0]


def test_simulate_after_and_diff_text():
    gpu = a100(1)[0]
    planned = S.plan([gpu], desired(power_limit_watts=300, ecc_mode=False))
    view = S.settings_view(gpu)
    after = S.simulate_after(view, planned["gpus"][0])
    assert after["power_limit_w"] == 300.0 and after["ecc_mode_pending"] is False and after["ecc_mode_current"] is True
    entry = dict(planned["gpus"][0], before=view, after=after)
    text = S.diff_text([entry], "after")
    assert text.startswith("# GPU 0 GPU-00000000-aaaa-bbbb-cccc-dddddddddddd 00000000:07:00.0\n")
    assert "power_limit_w: 300.00\n" in text


# --------------------------------------------------------------------------- role validator

A100_DATA = {"name": "DGX A100", "gpu_count": 8, "power_limit_w": {"min": 100, "default": 400, "max": 400},
             "graphics_clock_mhz": {"min": 210, "max": 1410}, "persistence_supported": True,
             "power_management_supported": True, "fabric_manager": True, "defaults": {"persistence_mode": True}}
SPARK_DATA = {"name": "DGX Spark", "gpu_count": 1, "power_limit_w": None,
              "graphics_clock_mhz": {"min": 208, "max": 3003}, "persistence_supported": False,
              "power_management_supported": False, "fabric_manager": False, "defaults": {}}


def role_config(**over):
    config = {
        "gpu_tuning_platform": "dgx_a100", "gpu_tuning_platform_data": A100_DATA, "gpu_tuning_gpus": ["all"],
        "gpu_tuning_persistence_mode": None, "gpu_tuning_persistence_method": "auto",
        "gpu_tuning_persistenced_path": "/usr/bin/nvidia-persistenced",
        "gpu_tuning_persistenced_user": "nvidia-persistenced", "gpu_tuning_power_limit_watts": None,
        "gpu_tuning_power_limit_percent": None, "gpu_tuning_power_limit_percent_of": "default",
        "gpu_tuning_application_clocks": None, "gpu_tuning_locked_clocks": None, "gpu_tuning_compute_mode": None,
        "gpu_tuning_ecc_mode": None, "gpu_tuning_auto_boost_default": None,
        "gpu_tuning_application_clock_permissions": None, "gpu_tuning_on_unsupported": "warn",
        "gpu_tuning_boot_unit_enabled": True, "gpu_tuning_boot_unit_before": ["slurmd.service"],
        "gpu_tuning_boot_unit_timeout": 300,
    }
    config.update(over)
    return config


def test_validator_defaults_fill_platform_persistence():
    res = V.validate(role_config(gpu_tuning_power_limit_watts=300))
    assert res.errors == []
    assert res.normalized["settings"] == {"persistence_mode": True, "power_limit": {"watts": 300.0}}
    assert res.normalized["module_args"]["power_limit_watts"] == 300.0
    assert res.normalized["module_args"]["persistence_mode"] is True


def test_validator_explicit_false_beats_platform_default():
    res = V.validate(role_config(gpu_tuning_persistence_mode=False))
    assert res.normalized["settings"]["persistence_mode"] is False


def test_validator_spark_manages_no_persistence_and_warns_on_power():
    res = V.validate(role_config(gpu_tuning_platform="dgx_spark", gpu_tuning_platform_data=SPARK_DATA,
                                 gpu_tuning_power_limit_watts=100))
    assert res.errors == []
    assert "persistence_mode" not in res.normalized["settings"]
    assert "does not support power limits" in res.warnings[0]


@pytest.mark.parametrize("over, fragment", [
    ({"gpu_tuning_power_limit_watts": 9999}, "gpu_tuning_power_limit_watts: invalid value 9999; allowed: 100-400 W on DGX A100"),
    ({"gpu_tuning_power_limit_watts": -5}, "gpu_tuning_power_limit_watts: invalid value -5"),
    ({"gpu_tuning_power_limit_percent": 20}, "gpu_tuning_power_limit_percent: invalid value 20; allowed: 25.0-100 %"),
    ({"gpu_tuning_application_clocks": {"memory_mhz": 1593, "graphics_mhz": 2000}},
     "gpu_tuning_application_clocks.graphics_mhz: invalid value 2000; allowed: 210-1410 MHz on DGX A100"),
    ({"gpu_tuning_locked_clocks": {"min_mhz": 100, "max_mhz": 1410}}, "gpu_tuning_locked_clocks.min_mhz: invalid value 100"),
    ({"gpu_tuning_gpus": ["GPU-xyz"]}, "gpu_tuning_gpus[0]: invalid value 'GPU-xyz'"),
    ({"gpu_tuning_gpus": ["0", "8"]}, "gpu_tuning_gpus[1]: invalid value '8'; allowed: an index 0-7 (DGX A100 has 8 GPUs)"),
    ({"gpu_tuning_gpus": []}, "gpu_tuning_gpus: invalid value []"),
    ({"gpu_tuning_persistence_method": "nvidia-smi"}, "gpu_tuning_persistence_method: invalid value 'nvidia-smi'"),
    ({"gpu_tuning_boot_unit_before": ["slurmd"]}, "gpu_tuning_boot_unit_before: invalid value ['slurmd']"),
    ({"gpu_tuning_boot_unit_timeout": 0}, "gpu_tuning_boot_unit_timeout: invalid value 0"),
    ({"gpu_tuning_compute_mode": "EXCLUSIVE_THREAD"}, "gpu_tuning_compute_mode: invalid value 'EXCLUSIVE_THREAD'"),
    ({"gpu_tuning_on_unsupported": "ignore"}, "gpu_tuning_on_unsupported: invalid value 'ignore'"),
])
def test_validator_rejects_bad_values(over, fragment):
    res = V.validate(role_config(**over))
    assert any(fragment in e for e in res.errors), res.errors


# Formerly an assert task of the role (tasks/persistence_checks.yml) run on every host where the
# daemon kept persistence mode; now the controller's, before any host changes.
@pytest.mark.parametrize("declared, over", [
    ({"nvidia_driver_persistence_mode": False}, {}),  # the platform default (on) against the driver's off
    ({"nvidia_driver_persistence_mode": True}, {"gpu_tuning_persistence_mode": False}),
    ({"nvidia_driver_persistenced_user": "root"}, {}),
    ({"nvidia_driver_persistenced_path": "/opt/nvidia/bin/nvidia-persistenced"}, {}),
])
def test_validator_refuses_driver_persistenced_values_that_differ(declared, over):
    res = V.validate(role_config(__nvidia_driver_declared=declared, **over))
    assert len(res.errors) == 1, res.errors
    msg = res.errors[0]
    assert msg.startswith("gpu_tuning_persistence_mode / gpu_tuning_persistenced_user / gpu_tuning_persistenced_path (")
    assert "differ from nvidia_driver_persistence_mode / _persistenced_user / _persistenced_path (" in msg
    assert msg.endswith("allowed: the same values in both roles")
    for name, value in declared.items():
        assert json.dumps(value) in msg, (name, msg)


@pytest.mark.parametrize("declared, over", [
    ({}, {}),
    ({"nvidia_driver_persistence_mode": True, "nvidia_driver_persistenced_user": "nvidia-persistenced",
      "nvidia_driver_persistenced_path": "/usr/bin/nvidia-persistenced"}, {}),
    ({"nvidia_driver_persistenced_user": ""}, {"gpu_tuning_persistenced_user": None}),  # both: no --user
    # the daemon does not keep persistence mode: nothing to agree on
    ({"nvidia_driver_persistence_mode": False}, {"gpu_tuning_persistence_method": "legacy"}),
    ({"nvidia_driver_persistence_mode": False}, {"gpu_tuning_platform": "dgx_spark", "gpu_tuning_platform_data": SPARK_DATA}),
])
def test_validator_accepts_driver_persistenced_values_that_agree(declared, over):
    res = V.validate(role_config(__nvidia_driver_declared=declared, **over))
    assert res.errors == []


def test_validator_warns_about_acp():
    res = V.validate(role_config(gpu_tuning_application_clock_permissions="unrestricted"))
    assert res.errors == []
    assert "removed in the R5xx drivers" in res.warnings[0]


# ---------------------------------------------------------------------------
# One argv table: plan, apply and the boot-time reapply
# ---------------------------------------------------------------------------

def _declared_plan():
    gpus = a100(n=2)
    desired = {"persistence_mode": True, "power_limit": {"watts": 300.5}, "compute_mode": "PROHIBITED",
               "locked_clocks": {"min_mhz": 1000, "max_mhz": 1200}}
    return S.plan(gpus, desired, branch=550, supported_clocks={}, locked_record={})


def test_plan_and_reapply_take_their_argv_from_one_table():
    planned = _declared_plan()
    assert planned["errors"] == []
    seen = set()
    for entry in planned["gpus"]:
        for change in entry["changes"]:
            assert change["args"] == S.setting_argv(change["setting"], change["after"])
            seen.add(tuple(change["args"]))
    assert seen == {("-pm", "1"), ("-pl", "300.50"), ("-c", "2"), ("-lgc", "1000,1200")}
    reapply = S.reapply_plan(planned)
    uuids = ",".join(e["uuid"] for e in planned["gpus"])
    assert reapply["commands"] == [["-i", uuids] + list(args) for args in
                                   (("-pm", "1"), ("-c", "2"), ("-pl", "300.50"), ("-lgc", "1000,1200"))]
    assert reapply["query_fields"] == ["uuid", "persistence_mode", "compute_mode", "power.limit"]
    assert reapply["expected_rows"][0].endswith(", Enabled, Prohibited, 300.50")


@pytest.mark.parametrize("setting,value,argv", [
    ("persistence_mode", False, ["-pm", "0"]),
    ("ecc_mode", True, ["-e", "1"]),
    ("compute_mode", "EXCLUSIVE_PROCESS", ["-c", "3"]),
    ("power_limit_w", 300.0, ["-pl", "300"]),
    ("application_clocks", "default", ["-rac"]),
    ("application_clocks", {"memory_mhz": 1593, "graphics_mhz": 1410}, ["-ac", "1593,1410"]),
    ("locked_clocks", None, ["-rgc"]),
    ("auto_boost_default", False, ["--auto-boost-default=DISABLED"]),
])
def test_setting_argv(setting, value, argv):
    assert S.setting_argv(setting, value) == argv


def _readback_csv(rows):
    return "uuid, persistence_mode, compute_mode, power.limit [W]\n" + "".join(r + "\n" for r in rows)


def test_run_reapply_runs_the_commands_and_parses_the_read_back(tmp_path):
    planned = _declared_plan()
    reapply = S.reapply_plan(planned)
    calls = []

    def run(args):
        calls.append(args)
        if args[0].startswith("--query-gpu="):
            assert args[1] == "--format=csv"
            return 0, _readback_csv(["%s, Enabled, Prohibited, 300.50 W" % e["uuid"] for e in planned["gpus"]]), ""
        return 0, "All done.\n", ""

    boot = tmp_path / "boot_id"
    boot.write_text("b1\n")
    record = tmp_path / "run" / "locked.json"
    assert S.run_reapply(reapply, run, str(record), boot_id_path=str(boot)) == []
    assert calls[:-1] == reapply["commands"]
    assert S.load_locked_record(str(record), boot_id_path=str(boot)) == reapply["locked_clocks"]
    boot.write_text("b2\n")  # another boot: the record no longer counts
    assert S.load_locked_record(str(record), boot_id_path=str(boot)) == {}


def test_run_reapply_stops_at_a_setter_that_refused_with_rc_0(tmp_path):
    reapply = S.reapply_plan(_declared_plan())
    calls = []

    def run(args):
        calls.append(args)
        if "-c" in args:
            return 0, ("Setting compute mode is not supported for GPU 00000000:07:00.0.\n"
                       "Treating as warning and moving on.\n"), ""
        return 0, "", ""

    problems = S.run_reapply(reapply, run, str(tmp_path / "locked.json"))
    assert len(problems) == 1 and "not supported" in problems[0] and "-c 2" in problems[0]
    assert len(calls) == 2  # -pm, then -c refused: nothing after it
    assert not (tmp_path / "locked.json").exists()


def test_run_reapply_names_what_differs():
    planned = _declared_plan()
    reapply = dict(S.reapply_plan(planned), commands=[], locked_clocks={})
    rows = ["%s, Enabled, Prohibited, %s W" % (e["uuid"], "300.50" if e["index"] == 0 else "400.00")
            for e in planned["gpus"]]

    def run(args):
        return 0, _readback_csv(rows), ""

    problems = S.run_reapply(reapply, run, "/nonexistent/record")
    assert len(problems) == 1
    assert "not in the declared state" in problems[0] and "400.00" in problems[0]


def test_module_args_carry_no_nulls():
    """#23: a setting that is not managed is absent from module_args (tasks use default(omit))."""
    res = V.validate(role_config(gpu_tuning_power_limit_watts=300, gpu_tuning_ecc_mode=False))
    assert res.errors == []
    args = res.normalized["module_args"]
    assert None not in args.values()
    assert args["power_limit_watts"] == 300.0 and args["ecc_mode"] is False and args["persistence_mode"] is True
    assert "locked_clocks" not in args and "application_clocks" not in args and "compute_mode" not in args
