"""validation: the shared type helpers every validator reads booleans and integers with."""

import pytest
from ansible.module_utils.common.validation import check_type_bool, check_type_int

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import (
    ValidationResult,
    as_bool,
    as_int,
    int_allowed,
    is_bool,
    is_int,
    to_bool,
    to_int,
)

TRUE_VALUES = [True, "true", "True", "TRUE", "yes", "Yes", "on", "ON", "y", "t", "1", " yes ", "true\n", 1, 1.0]
FALSE_VALUES = [False, "false", "False", "no", "NO", "off", "n", "f", "0", " off ", 0, 0.0]
NOT_BOOLS = [None, "", "maybe", "enabled", "2", "-1", "1.0", 2, -1, 1.5, 0.5, [], [True], {}, {"a": 1}, b"yes"]


@pytest.mark.parametrize("value", TRUE_VALUES)
def test_to_bool_true(value):
    assert to_bool(value) is True


@pytest.mark.parametrize("value", FALSE_VALUES)
def test_to_bool_false(value):
    assert to_bool(value) is False


@pytest.mark.parametrize("value", NOT_BOOLS)
def test_to_bool_refuses(value):
    assert to_bool(value) is None


@pytest.mark.parametrize("value", TRUE_VALUES + FALSE_VALUES + NOT_BOOLS)
def test_to_bool_reads_what_an_argument_spec_reads(value):
    """type: bool in meta/argument_specs.yml accepts exactly what to_bool reads, with the same result
    (bytes aside: YAML never gives them)."""
    if isinstance(value, bytes):
        return
    try:
        expected = check_type_bool(value)
    except TypeError:
        expected = None
    assert to_bool(value) is expected


@pytest.mark.parametrize("value, expected", [
    (0, 0), (7, 7), (-3, -3), ("7", 7), (" 4 ", 4), ("+3", 3), ("-3", -3), ("007", 7), ("1_000", 1000),
    ("2.0", 2), ("1e3", 1000), (2.0, 2), ("4\n", 4),
])
def test_to_int_reads(value, expected):
    number = to_int(value)
    assert number == expected and isinstance(number, int) and not isinstance(number, bool)


@pytest.mark.parametrize("value", [
    True, False, None, "", " ", "abc", "1.5", 1.5, "0x10", "8k", "1 000", "inf", float("inf"), float("nan"),
    "nan", [], [1], {}, {"a": 1},
])
def test_to_int_refuses(value):
    assert to_int(value) is None


@pytest.mark.parametrize("value", [0, 7, "7", " 4 ", "+3", "-3", "1_000", "2.0", "1e3", 2.0, "1.5", 1.5, "abc", "",
                                   None, [1], "0x10"])
def test_to_int_reads_what_an_argument_spec_reads(value):
    try:
        expected = check_type_int(value)
    except TypeError:
        expected = None
    assert to_int(value) == expected


def test_a_boolean_is_never_an_integer_though_the_argument_spec_passes_it():
    assert check_type_int(True) is True  # what type: int lets through
    assert to_int(True) is None and to_int(False) is None
    assert not is_int(True) and not is_int(False)


@pytest.mark.parametrize("value, expected", [
    (True, True), (False, True), ("true", False), ("no", False), (1, False), (0, False), (None, False),
])
def test_is_bool(value, expected):
    assert is_bool(value) is expected


@pytest.mark.parametrize("value, expected", [
    (0, True), (5, True), (-5, True), (True, False), (False, False), ("5", False), (5.0, False), (None, False),
])
def test_is_int(value, expected):
    assert is_int(value) is expected


@pytest.mark.parametrize("low, high, expected", [
    (1, 65535, "an integer from 1 to 65535"), (1, None, "an integer >= 1"), (None, 7, "an integer <= 7"),
    (None, None, "an integer"),
])
def test_int_allowed(low, high, expected):
    assert int_allowed(low, high) == expected


def test_int_allowed_other_words():
    assert int_allowed(10, 3600, what="whole seconds") == "whole seconds from 10 to 3600"


@pytest.mark.parametrize("value, expected", [("yes", True), ("off", False), (1, True), (False, False)])
def test_as_bool_reads_without_an_error(value, expected):
    result = ValidationResult()
    assert as_bool("x_enabled", value, result) is expected
    assert result.errors == []


@pytest.mark.parametrize("value", ["maybe", 2, None, [], 1.5])
def test_as_bool_error_names_the_variable_the_value_and_what_is_allowed(value):
    result = ValidationResult()
    assert as_bool("x_enabled", value, result) is None
    assert result.errors == ["x_enabled: invalid value %r; allowed: true or false" % (value,)]


def test_as_bool_records_in_a_list_too_with_its_own_allowed_text():
    errors = []
    assert as_bool("x_enabled", "maybe", errors, allowed="true or false (also yes/no)") is None
    assert errors == ["x_enabled: invalid value 'maybe'; allowed: true or false (also yes/no)"]


@pytest.mark.parametrize("value", ["yes", "true", "no", 1, 0, "1"])
def test_as_bool_strict_wants_a_real_boolean(value):
    result = ValidationResult()
    assert as_bool("mig_reboot", value, result, strict=True) is None
    assert result.errors == ["mig_reboot: invalid value %r; allowed: true or false" % (value,)]


@pytest.mark.parametrize("value", [True, False])
def test_as_bool_strict_takes_a_boolean(value):
    result = ValidationResult()
    assert as_bool("mig_reboot", value, result, strict=True) is value
    assert result.ok


@pytest.mark.parametrize("value, expected", [(1, 1), (65535, 65535), ("80", 80), (" 443 ", 443), ("+8080", 8080),
                                             (9100.0, 9100)])
def test_as_int_in_range(value, expected):
    result = ValidationResult()
    assert as_int("port", value, result, 1, 65535) == expected
    assert result.ok


@pytest.mark.parametrize("value", [0, 65536, "-1", "70000", True, False, "http", None, 80.5, "80.5", [80]])
def test_as_int_error_names_the_variable_the_value_and_the_range(value):
    result = ValidationResult()
    assert as_int("port", value, result, 1, 65535) is None
    assert result.errors == ["port: invalid value %r; allowed: an integer from 1 to 65535" % (value,)]


def test_as_int_one_bound_and_own_allowed_text():
    result = ValidationResult()
    assert as_int("n", -1, result, minimum=0) is None
    assert as_int("n", 10 ** 12, result, minimum=0) == 10 ** 12
    assert as_int("t", 5, result, 10, 3600, allowed="whole seconds from 10 to 3600") is None
    assert result.errors == ["n: invalid value -1; allowed: an integer >= 0",
                             "t: invalid value 5; allowed: whole seconds from 10 to 3600"]


@pytest.mark.parametrize("value", ["300", " 300 ", 300.0, True])
def test_as_int_strict_wants_a_real_integer(value):
    errors = []
    assert as_int("mig_boot_timeout", value, errors, 30, 3600, strict=True) is None
    assert errors == ["mig_boot_timeout: invalid value %r; allowed: an integer from 30 to 3600" % (value,)]


def test_as_int_strict_takes_an_integer_and_checks_the_range():
    errors = []
    assert as_int("mig_boot_timeout", 300, errors, 30, 3600, strict=True) == 300
    assert as_int("mig_boot_timeout", 3601, errors, 30, 3600, strict=True) is None
    assert errors == ["mig_boot_timeout: invalid value 3601; allowed: an integer from 30 to 3600"]


# --------------------------------------------------------------------------- the validators' strict checks
# Role variables the tasks read as they are keep wanting a YAML boolean / integer (the argument spec
# would let "no" or "300" through); the messages stay what they were.
def _errors_for(module, config, variable):
    from importlib import import_module
    validator = import_module("ansible_collections.dgxops.fleet.plugins.plugin_utils." + module)
    return [e for e in validator.validate(config).errors if e.startswith(variable + ":")]


@pytest.mark.parametrize("module, variable, value, allowed", [
    ("validate_mig", "mig_reboot", "no", "true or false"),
    ("validate_mig", "mig_boot_unit", 1, "true or false"),
    ("validate_mig", "mig_boot_timeout", "300", "an integer number of seconds from 30 to 3600"),
    ("validate_mig", "mig_reboot_timeout", True, "an integer number of seconds from 60 to 7200"),
    ("validate_mig", "mig_reboot_timeout", 59, "an integer number of seconds from 60 to 7200"),
    ("validate_tenant_isolation", "tenant_isolation_restart_units", "yes", "true or false"),
    ("validate_gpu_tuning", "gpu_tuning_boot_unit_timeout", "300", "whole seconds from 10 to 3600"),
    ("validate_gpu_tuning", "gpu_tuning_boot_unit_enabled", "true", "true or false"),
    ("validate_nvidia_driver", "nvidia_driver_reboot", "yes", "true or false"),
    ("validate_nvidia_driver", "nvidia_driver_nvswitch", "false", "null (from facts), true or false"),
    ("validate_nvidia_driver", "nvidia_driver_reboot_timeout", "900", "an integer number of seconds from 60 to 7200"),
])
def test_strict_checks_keep_their_messages(module, variable, value, allowed):
    assert _errors_for(module, {variable: value}, variable) == [
        "%s: invalid value %r; allowed: %s" % (variable, value, allowed)]


@pytest.mark.parametrize("module, variable, value", [
    ("validate_mig", "mig_reboot", False),
    ("validate_mig", "mig_boot_timeout", 480),
    ("validate_tenant_isolation", "tenant_isolation_restart_units", True),
    ("validate_gpu_tuning", "gpu_tuning_boot_unit_timeout", 300),
    ("validate_nvidia_driver", "nvidia_driver_nvswitch", None),
    ("validate_nvidia_driver", "nvidia_driver_reboot_timeout", 900),
])
def test_strict_checks_take_the_real_type(module, variable, value):
    assert _errors_for(module, {variable: value}, variable) == []


@pytest.mark.parametrize("cpu_weight, ok", [(100, True), ("idle", True), ("100", False), (True, False), (0, False)])
def test_tenant_numbers_stay_strict(cpu_weight, ok):
    errors = _errors_for("validate_tenant_isolation",
                         {"tenant_isolation_tenants": [{"name": "a", "cpu_weight": cpu_weight}]},
                         "tenant_isolation_tenants[a].cpu_weight")
    assert errors == ([] if ok else ["tenant_isolation_tenants[a].cpu_weight: invalid value %r; allowed: an integer "
                                     "from 1 to 10000, or idle" % (cpu_weight,)])
