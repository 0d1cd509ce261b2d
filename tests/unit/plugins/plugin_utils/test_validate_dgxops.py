"""validate_dgxops: the playbook-level dgxops_* variables, checked like role variables."""

import pytest

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_dgxops import validate


@pytest.mark.parametrize("value", [1, "2", "25%", "100%", [1, "10%", "100%"], " 50 % "])
def test_good_serial(value):
    assert validate({"dgxops_serial": value}).errors == []


@pytest.mark.parametrize("value", ["lots", 0, -1, "0%", "150%", [], [1, "many"], True, 2.5, None])
def test_bad_serial_names_the_variable(value):
    errors = validate({"dgxops_serial": value}).errors
    assert len(errors) == 1 and errors[0].startswith("dgxops_serial: invalid value %r; allowed: a positive integer" % (value,))


@pytest.mark.parametrize("value, ok", [(0, True), (100, True), ("30", True), (101, False), (-1, False),
                                       ("half", False), (True, False), (None, False)])
def test_max_fail_percentage(value, ok):
    errors = validate({"dgxops_max_fail_percentage": value}).errors
    assert (errors == []) is ok
    if not ok:
        assert errors[0].startswith("dgxops_max_fail_percentage: invalid value %r" % (value,))


def test_enable_flags():
    result = validate({"enable": {"dgxops_enable_storage": "maybe", "dgxops_enable_spark": "no",
                                  "dgxops_enable_mig": True, "dgxops_enable_stroage": False}})
    assert result.errors == [
        "dgxops_enable_storage: invalid value 'maybe'; allowed: true or false (also yes/no, on/off, 1/0)",
        "dgxops_enable_stroage: invalid value False; allowed: no such area; the dgxops_enable_<area> variables "
        "are dgxops_enable_identity, dgxops_enable_driver, dgxops_enable_gpu_tuning, dgxops_enable_storage, "
        "dgxops_enable_nccl, dgxops_enable_mig, dgxops_enable_isolation, dgxops_enable_spark, dgxops_enable_monitoring",
    ]
    assert result.normalized["enable"] == {"spark": False, "mig": True}


def test_absent_variables_pass():
    assert validate({"enable": {}}).errors == []
