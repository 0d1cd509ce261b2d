"""Validator of the nvidia_driver role (dgxops.fleet.validate, area nvidia_driver)."""

import pytest

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_nvidia_driver import validate

FPR = "EB693B3035CD5710E231E123A4B469963BF863CC"


def cfg(**kw):
    base = {
        "nvidia_driver_branch": "580",
        "nvidia_driver_version": "",
        "nvidia_driver_flavour": "auto",
        "nvidia_driver_package_layout": "",
        "nvidia_driver_nvswitch": None,
        "nvidia_driver_repo_url": "",
        "nvidia_driver_repo_trusted": False,
        "nvidia_driver_repo_key_fingerprint": FPR,
        "nvidia_driver_modprobe_options": {},
        "nvidia_driver_modprobe_allow_unknown": [],
        "nvidia_driver_reboot": True,
        "nvidia_driver_reboot_timeout": 900,
        "model_family": None,
    }
    base.update(kw)
    return base


def test_defaults_with_branch_are_valid():
    res = validate(cfg())
    assert res.errors == []
    assert res.normalized["branch"] == 580
    assert res.normalized["flavour"] == "auto"
    assert res.normalized["flavour_default"] == "open"
    assert res.normalized["modprobe_options"] == {}
    assert res.normalized["key_fingerprint"] == FPR


@pytest.mark.parametrize("branch", ["", None, "latest", "580-open", "580.95", "58", True, "5800"])
def test_branch_must_be_explicit_and_numeric(branch):
    res = validate(cfg(nvidia_driver_branch=branch))
    assert len(res.errors) == 1
    assert res.errors[0].startswith("nvidia_driver_branch: invalid value %r" % (branch,))
    assert "allowed:" in res.errors[0]


def test_branch_as_int_is_normalised():
    assert validate(cfg(nvidia_driver_branch=550)).normalized["branch"] == 550


def test_branch_too_old():
    res = validate(cfg(nvidia_driver_branch="390"))
    assert res.errors == ["nvidia_driver_branch: invalid value '390'; allowed: a branch >= 470"]


@pytest.mark.parametrize("branch, default", [("535", "proprietary"), ("550", "proprietary"),
                                             ("560", "open"), ("580", "open")])
def test_flavour_default_follows_branch(branch, default):
    assert validate(cfg(nvidia_driver_branch=branch)).normalized["flavour_default"] == default


def test_open_before_r515_refused():
    res = validate(cfg(nvidia_driver_branch="470", nvidia_driver_flavour="open"))
    assert len(res.errors) == 1
    assert "nvidia_driver_flavour: invalid value 'open'" in res.errors[0]
    assert "R515" in res.errors[0]


def test_blackwell_needs_open_modules():
    res = validate(cfg(nvidia_driver_flavour="proprietary", model_family="gb10"))
    assert len(res.errors) == 1
    assert "gb10 GPUs are supported only by the open kernel modules" in res.errors[0]
    assert validate(cfg(nvidia_driver_branch="550", model_family="gb10")).normalized["flavour_default"] == "open"


def test_unknown_flavour():
    res = validate(cfg(nvidia_driver_flavour="nouveau"))
    assert res.errors == ["nvidia_driver_flavour: invalid value 'nouveau'; allowed: auto, open, proprietary"]


@pytest.mark.parametrize("version, ok", [("580.95.05", True), ("580.82", True), ("550.163.01", False),
                                         ("580.95.05-1", False), ("latest", False)])
def test_version_inside_branch(version, ok):
    res = validate(cfg(nvidia_driver_version=version))
    assert res.ok is ok
    if not ok:
        assert res.errors[0].startswith("nvidia_driver_version: invalid value %r" % version)


def test_modprobe_options_rendered_and_typed():
    res = validate(cfg(nvidia_driver_modprobe_options={
        "NVreg_UsePageAttributeTable": True,
        "NVreg_RestrictProfilingToAdminUsers": 0,
        "NVreg_EnablePCIeGen3": "1",
        "NVreg_DeviceFileMode": 0o660,
        "NVreg_DynamicPowerManagement": "0x02",
        "NVreg_TemporaryFilePath": "/var/tmp",
    }))
    assert res.errors == []
    assert res.normalized["modprobe_options"] == {
        "NVreg_UsePageAttributeTable": "1",
        "NVreg_RestrictProfilingToAdminUsers": "0",
        "NVreg_EnablePCIeGen3": "1",
        "NVreg_DeviceFileMode": "0660",
        "NVreg_DynamicPowerManagement": "2",
        "NVreg_TemporaryFilePath": "/var/tmp",
    }
    assert len(res.warnings) == 1 and "NVreg_EnablePCIeGen3" in res.warnings[0]


@pytest.mark.parametrize("name, value, allowed", [
    ("NVreg_UsePageAttributeTable", 2, "0 or 1"),
    ("NVreg_UsePageAttributeTable", "yes", "0 or 1"),
    ("NVreg_DynamicPowerManagement", 4, "one of 0, 1, 2, 3"),
    ("NVreg_DeviceFileUID", -1, "an integer from 0"),
    ("NVreg_DeviceFileMode", "660", "octal file mode"),
    ("NVreg_TemporaryFilePath", "tmp dir", "absolute path"),
    ("NVreg_RegistryDwords", "a b", "without whitespace"),
    ("NVreg_EnablePCIeGen3", None, "a value"),
])
def test_modprobe_bad_values(name, value, allowed):
    res = validate(cfg(nvidia_driver_modprobe_options={name: value}))
    assert len(res.errors) == 1
    assert res.errors[0].startswith("nvidia_driver_modprobe_options[%s]: invalid value %r" % (name, value))
    assert allowed in res.errors[0]
    assert res.normalized["modprobe_options"] == {}


def test_unknown_option_refused_unless_allowed():
    res = validate(cfg(nvidia_driver_modprobe_options={"NVreg_Foo": 1}))
    assert len(res.errors) == 1
    assert res.errors[0].startswith("nvidia_driver_modprobe_options[NVreg_Foo]: invalid value 'NVreg_Foo'")
    assert "nvidia_driver_modprobe_allow_unknown" in res.errors[0]
    res = validate(cfg(nvidia_driver_modprobe_options={"NVreg_Foo": 1},
                       nvidia_driver_modprobe_allow_unknown=["NVreg_Foo"]))
    assert res.errors == []
    assert res.normalized["modprobe_options"] == {"NVreg_Foo": "1"}


def test_unknown_option_value_still_checked():
    res = validate(cfg(nvidia_driver_modprobe_options={"NVreg_Foo": "a\nb"},
                       nvidia_driver_modprobe_allow_unknown=["NVreg_Foo"]))
    assert len(res.errors) == 1 and "NVreg_Foo" in res.errors[0]


def test_options_must_be_a_dict():
    res = validate(cfg(nvidia_driver_modprobe_options=["NVreg_EnableMSI=1"]))
    assert res.errors[0].startswith("nvidia_driver_modprobe_options: invalid value")


def test_trusted_only_for_local_repositories():
    res = validate(cfg(nvidia_driver_repo_trusted=True,
                       nvidia_driver_repo_url="https://mirror.example.com/cuda/ubuntu2204/x86_64/"))
    assert len(res.errors) == 1 and res.errors[0].startswith("nvidia_driver_repo_trusted: invalid value True")
    res = validate(cfg(nvidia_driver_repo_trusted=True, nvidia_driver_repo_url="file:/srv/repo",
                       nvidia_driver_repo_key_fingerprint=""))
    assert res.errors == []
    assert res.normalized["repo_url"] == "file:/srv/repo/"
    assert res.normalized["trusted"] is True


@pytest.mark.parametrize("url", ["ftp://x/y/", "developer.download.nvidia.com/compute", "https://"])
def test_repo_url_scheme(url):
    res = validate(cfg(nvidia_driver_repo_url=url))
    assert res.errors[0].startswith("nvidia_driver_repo_url: invalid value %r" % url)


def test_fingerprint_needed_for_signed_repositories():
    res = validate(cfg(nvidia_driver_repo_key_fingerprint="3bf863cc"))
    assert res.errors == ["nvidia_driver_repo_key_fingerprint: invalid value '3bf863cc'; allowed: "
                          "the 40-hex-digit fingerprint of the repository signing key"]
    spaced = "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC".lower()
    assert validate(cfg(nvidia_driver_repo_key_fingerprint=spaced)).normalized["key_fingerprint"] == FPR


@pytest.mark.parametrize("var, value", [("nvidia_driver_nvswitch", "yes"), ("nvidia_driver_reboot", "no"),
                                        ("nvidia_driver_reboot_timeout", 5), ("nvidia_driver_package_layout", "rpm")])
def test_other_settings_typed(var, value):
    res = validate(cfg(**{var: value}))
    assert len(res.errors) == 1 and res.errors[0].startswith("%s: invalid value %r" % (var, value))


@pytest.mark.parametrize("branch, family, minimum", [("470", "h100", 525), ("535", "h200", 550),
                                                     ("550", "gb10", 580), ("470", "a100", None),
                                                     ("580", "h200", None), ("470", None, None)])
def test_a_branch_that_does_not_support_the_gpu_is_refused(branch, family, minimum):
    errors = [e for e in validate(cfg(nvidia_driver_branch=branch, model_family=family)).errors
              if "does not support" in e]
    if minimum is None:
        assert errors == []
    else:
        assert errors == ["nvidia_driver_branch: invalid value %r; allowed: a branch >= %d for %s GPUs (R%s does not "
                          "support them: the kernel module would refuse the GPU and nvidia-smi would show none)"
                          % (branch, minimum, family, branch)]


# --------------------------------------------------------------------------- nvidia-persistenced values
# Formerly three assert tasks (tasks/persistenced_checks.yml) run in the validate play and again in
# the role's persistenced.yml; now the validator's, once, and the shared entry point's one task.

@pytest.mark.parametrize("variable, value", [
    ("nvidia_driver_persistenced_path", "bin/nvidia-persistenced"),
    ("nvidia_driver_persistenced_path", "/usr/bin/nvidia persistenced"),
    ("nvidia_driver_persistenced_path", "/usr/bin/x;reboot"),
    ("nvidia_driver_persistenced_path", 5),
    ("nvidia_driver_persistenced_user", "a b"),
    ("nvidia_driver_persistenced_user", "-root"),
    ("nvidia_driver_persistenced_user", ["root"]),
])
def test_persistenced_values_refused_with_the_variable_named(variable, value):
    result = validate(cfg(**{variable: value}))
    assert len(result.errors) == 1
    assert result.errors[0].startswith("%s: invalid value %r; allowed: " % (variable, value))


@pytest.mark.parametrize("user", ["nvidia-persistenced", "", None, "svc_gpu$"])
def test_persistenced_values_accepted(user):
    result = validate(cfg(nvidia_driver_persistenced_user=user,
                          nvidia_driver_persistenced_path="/opt/nvidia/bin/nvidia-persistenced"))
    assert result.errors == []


def test_persistenced_values_not_checked_when_the_role_does_not_manage_the_daemon():
    result = validate(cfg(nvidia_driver_persistenced=False, nvidia_driver_persistenced_path="relative"))
    assert result.errors == []


def test_shared_entry_point_area_checks_only_what_it_is_given():
    from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_nvidia_persistenced as VP

    assert VP.validate({}).errors == []
    bad = VP.validate({"nvidia_driver_persistenced_path": "x", "nvidia_driver_persistenced_user": "a b"})
    assert [e.split(":")[0] for e in bad.errors] == ["nvidia_driver_persistenced_path", "nvidia_driver_persistenced_user"]


def test_validated_persistenced_values_are_recorded_for_the_shared_entry_point():
    ok = validate(cfg(nvidia_driver_persistenced_path="/usr/bin/nvidia-persistenced",
                      nvidia_driver_persistenced_user=""))
    assert ok.normalized["persistenced"] == {"path": "/usr/bin/nvidia-persistenced", "user": ""}
    bad = validate(cfg(nvidia_driver_persistenced_path="x"))
    assert "persistenced" not in bad.normalized
