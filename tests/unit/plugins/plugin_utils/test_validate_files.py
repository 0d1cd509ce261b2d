"""validate_files: paths and modes of the files the roles write as root."""

import os

import pytest

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_files import VARIABLES, is_secret_key, validate


@pytest.mark.parametrize("variable, value", [
    ("nvidia_driver_modprobe_path", "/etc/modprobe.d/nvidia.conf"),
    ("nccl_conf_path", "/etc/nccl.conf"),
    ("nccl_conf_path", "/opt/nccl/nccl.conf"),
    ("nccl_mpi_mca_params_file", ""),
    ("nccl_mpi_mca_params_file", "/etc/openmpi/openmpi-mca-params.conf"),
    ("spark_rapids_conf_dir", "/opt/spark/conf"),
    ("spark_rapids_spark_home", "/mnt/tools/spark-3.5.1"),
    ("nccl_mpi_mca_params_file", "/usr/mpi/gcc/openmpi-4.1.7rc1/etc/openmpi-mca-params.conf"),
    ("storage_tuning_udev_rule_path", "/etc/udev/rules.d/90-dgxops-storage-tuning.rules"),
    ("mig_config_dir", "/etc/dgxops/mig"),
    ("nccl_conf_mode", "0644"),
    ("nccl_conf_mode", "0600"),
    ("nccl_conf_mode", 0o644),
])
def test_documented_paths_and_modes_pass(variable, value):
    assert validate({variable: value}).errors == []


@pytest.mark.parametrize("variable, value, expected", [
    ("nvidia_driver_modprobe_path", "/etc/passwd", "/etc/passwd belongs to another package"),
    ("nvidia_driver_modprobe_path", "/etc/shadow", "belongs to another package"),
    ("nvidia_driver_modprobe_path", "/etc/modprobe.d/../passwd", "without '..'"),
    ("nvidia_driver_modprobe_path", "/etc/modprobe.d/nvidia", "must end in .conf"),
    ("nccl_conf_path", "/etc/fstab", "belongs to another package"),
    ("nccl_conf_path", "/usr/bin/nccl.conf", "belongs to another package"),
    ("nccl_conf_path", "/etc/ssh/sshd_config", "belongs to another package"),
    ("nccl_conf_path", "nccl.conf", "relative path"),
    ("spark_rapids_conf_dir", "conf", "relative path"),
    ("spark_rapids_conf_dir", "/etc", "not a top-level system directory"),
    ("spark_rapids_conf_dir", "/usr/bin", "belongs to another package"),
    ("spark_rapids_spark_home", "/var", "not a top-level system directory"),
    ("nccl_mpi_environment_path", "/etc/dgxops-mpi.sh", "a .sh file in /etc/profile.d"),
    ("storage_tuning_udev_rule_path", "/etc/sudoers.d/x.rules", "belongs to another package"),
    ("tenant_isolation_unit_dir", "/lib/systemd/system", "belongs to another package"),
    ("nccl_conf_mode", "0666", "not group- or world-writable"),
    ("nccl_conf_mode", "0664", "not group- or world-writable"),
    ("nccl_conf_mode", -1, "octal mode string"),
    ("nccl_conf_mode", "rw-r--r--", "octal mode string"),
])
def test_bad_paths_and_modes_are_refused(variable, value, expected):
    errors = validate({variable: value}).errors
    assert len(errors) == 1, errors
    assert errors[0].startswith("%s: invalid value %r; allowed: " % (variable, value))
    assert expected in errors[0]


def test_other_variables_are_ignored():
    assert validate({"nccl_profile": "/etc/passwd"}).errors == []


@pytest.mark.parametrize("key, secret", [
    ("spark.ssl.keyStorePassword", True), ("spark.ssl.keyStore", True), ("spark.authenticate.secret", True),
    ("spark.hadoop.fs.s3a.session.token", True), ("spark.executor.memory", False)])
def test_secret_keys(key, secret):
    assert is_secret_key(key) is secret


def test_an_integer_mode_is_read_as_the_mode_bits():
    # `nccl_conf_mode: 0666` unquoted in YAML (or -e nccl_conf_mode=0666) arrives as 438
    assert validate({"nccl_conf_mode": 0o666}).errors == [
        "nccl_conf_mode: invalid value '0666'; allowed: a mode that is not group- or world-writable, such as "
        "\"0644\" or \"0640\" (a writable nccl_conf_mode lets any user change what root-run tools read)"]


def _role_defaults():
    import glob

    import yaml
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
    values = {}
    for path in glob.glob(os.path.join(root, "roles", "*", "defaults", "main.yml")):
        with open(path) as handle:
            values.update(yaml.safe_load(handle) or {})
    return values


@pytest.mark.parametrize("variable", VARIABLES)
def test_every_role_default_is_accepted(variable):
    # the roles' own checks see their defaults (the action collects them from the argument specs)
    defaults = _role_defaults()
    assert variable in defaults
    value = defaults[variable]
    if isinstance(value, str) and "{{" in value:  # spark_rapids_conf_dir: "{{ spark_rapids_spark_home }}/conf"
        import jinja2
        value = jinja2.Template(value).render(**defaults)
    result = validate({variable: value})
    assert result.errors == []
