# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths and modes of the files the roles write as root (``area: files``).

Every variable that names a file or directory a role writes as root is checked here: the path
is absolute and normalised (no ``..``, no relative path that would land under the remote user's
temporary directory), lies inside the directory the variable is documented for, and is not a
system file another package owns (``/etc/passwd``, ``/etc/shadow``, ``/etc/fstab`` ...).
File modes are octal strings that are never group- or world-writable.

The ``dgxops.fleet.validate`` action runs :func:`check` on every area's config as well, so a
role used on its own gets the same refusal; the validate play passes every such variable the
inventory sets with ``area: files``.

config: ``{variable name: value}`` of any of :data:`PATH_RULES` and :data:`MODE_VARS`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath
import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, is_int

# Files other packages own; a role must never replace them (the fstab role edits /etc/fstab in
# place through its own module and has no path variable for it).
PROTECTED = (
    "/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/sudoers", "/etc/fstab",
    "/etc/crypttab", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/etc/login.defs",
    "/etc/pam.conf", "/etc/nsswitch.conf", "/etc/environment", "/etc/profile", "/etc/bash.bashrc",
    "/etc/os-release", "/etc/machine-id", "/etc/modules", "/etc/default/grub",
)
PROTECTED_DIRS = ("/etc/ssh", "/etc/pam.d", "/etc/sudoers.d", "/etc/apt", "/boot", "/proc", "/sys",
                  "/dev", "/bin", "/sbin", "/lib", "/lib64", "/usr/bin", "/usr/sbin", "/usr/lib")
# Directories that must never *be* the target directory itself (a role writes files into it).
SYSTEM_DIRS = ("/", "/etc", "/usr", "/var", "/opt", "/home", "/root", "/tmp", "/run", "/srv",
               "/usr/local", "/var/lib")

# variable -> (kind, allowed parent directories (None: anywhere but the system's own), required
# suffix or None, documented as)
PATH_RULES = {
    # read by their consumer from one directory only: the path must be there
    "nvidia_driver_modprobe_path": ("file", ("/etc/modprobe.d",), ".conf", "a .conf file in /etc/modprobe.d"),
    "nccl_mpi_environment_path": ("file", ("/etc/profile.d",), ".sh", "a .sh file in /etc/profile.d"),
    "storage_tuning_udev_rule_path": ("file", ("/etc/udev/rules.d",), ".rules", "a .rules file in /etc/udev/rules.d"),
    "tenant_isolation_unit_dir": ("dir", ("/etc/systemd/system", "/run/systemd/system"), None,
                                  "/etc/systemd/system or /run/systemd/system"),
    # read from wherever they are configured (NCCL_CONF_FILE, SPARK_HOME, --collector.textfile.directory,
    # Ansible's fact_path ...): anywhere but the system's own files and directories
    "nccl_conf_path": ("file", None, None, "a file of its own, such as /etc/nccl.conf"),
    "nccl_xml_dir": ("dir", None, None, "a directory of its own, such as /etc/nccl"),
    "nccl_mpi_mca_params_file": ("file", None, None, "empty, or Open MPI's parameter file, such as "
                                 "/etc/openmpi/openmpi-mca-params.conf"),
    "spark_rapids_spark_home": ("dir", None, None, "a directory of its own, such as /opt/spark"),
    "spark_rapids_conf_dir": ("dir", None, None, "a directory of its own, such as /opt/spark/conf"),
    "spark_rapids_discovery_script_path": ("file", None, None, "a file of its own, such as "
                                           "/usr/local/bin/dgxops-spark-gpu-discovery"),
    "mig_config_dir": ("dir", None, None, "a directory of its own, such as /etc/dgxops/mig"),
    "mig_facts_dir": ("dir", None, None, "a directory of its own, such as /etc/ansible/facts.d"),
    "fleet_identity_facts_dir": ("dir", None, None, "a directory of its own, such as /etc/ansible/facts.d"),
    "monitoring_textfile_dir": ("dir", None, None, "a directory of its own, such as /var/lib/prometheus/node-exporter"),
    "monitoring_prometheus_config_dir": ("dir", None, None, "a directory of its own, such as /etc/prometheus/dgxops"),
}
# variables that may be empty (the feature is off)
OPTIONAL = ("nccl_mpi_mca_params_file",)
MODE_VARS = ("nccl_conf_mode",)
# every variable this area checks: the validate play reads them from the task vars by these names
VARIABLES = tuple(PATH_RULES) + MODE_VARS
_MODE_RE = re.compile(r"^0?[0-7]{3}$")
_SECRET_RE = re.compile(r"(password|passwd|secret|token|keystore|credential)", re.IGNORECASE)


def _inside(path, parent):
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def check_path(result, variable, value):
    kind, parents, suffix, documented = PATH_RULES[variable]
    if value in ("", None) and variable in OPTIONAL:
        return
    allowed = "an absolute path: %s" % documented
    if not isinstance(value, str) or not value.startswith("/"):
        result.error(variable, value, allowed + " (a relative path would be written under the remote "
                     "user's temporary directory)")
        return
    norm = posixpath.normpath(value)
    if norm.startswith("//"):
        norm = norm[1:]
    if ".." in value.split("/") or "\n" in value:
        result.error(variable, value, allowed + " without '..'")
        return
    if norm in PROTECTED or any(_inside(norm, d) for d in PROTECTED_DIRS):
        result.error(variable, value, allowed + "; %s belongs to another package and is never "
                     "replaced by dgxops" % norm)
        return
    if kind == "dir" and norm in SYSTEM_DIRS:
        result.error(variable, value, allowed + "; not a top-level system directory")
        return
    # a file goes inside one of its parents; a directory may be one of them (tenant_isolation_unit_dir)
    if parents is not None and not any(_inside(norm, p) and (kind == "dir" or norm != p) for p in parents):
        result.error(variable, value, allowed)
        return
    if suffix and not norm.endswith(suffix):
        result.error(variable, value, allowed + " (the name must end in %s, or the consumer ignores it)" % suffix)


def check_mode(result, variable, value):
    # an integer is the mode itself, as Ansible's file modules read it (YAML 0644 is 420)
    if is_int(value) and 0 <= value <= 0o7777:
        bits = value
    elif isinstance(value, str) and _MODE_RE.match(value):
        bits = int(value, 8)
    else:
        result.error(variable, value, "an octal mode string such as \"0644\" (quoted in YAML)")
        return
    if bits & 0o022:
        result.error(variable, value if isinstance(value, str) else "%04o" % bits,
                     "a mode that is not group- or world-writable, such as \"0644\" or "
                     "\"0640\" (a writable %s lets any user change what root-run tools read)" % variable)


def is_secret_key(key):
    """True for a setting name that holds a secret (password, secret, token, keyStore ...)."""
    return bool(_SECRET_RE.search(str(key)))


def check(config, result):
    """Check every path and mode variable present in ``config`` (any area's config)."""
    for variable in sorted(config):
        if variable in PATH_RULES:
            check_path(result, variable, config[variable])
        elif variable in MODE_VARS:
            check_mode(result, variable, config[variable])


def validate(config):
    result = ValidationResult()
    check(config, result)
    return result
