# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the validate action hands a role's validator, collected from the role itself.

Each role variable is written once (defaults/main.yml, described in meta/argument_specs.yml):
the action reads the *names* from the role's argument specs and the *values* from the task
vars, so no tasks/validate.yml repeats a list of variables. What a validator needs beyond the
role's own variables is declared here once per role:

- ``PRIVATE``: the role's private tables (``__<role>_*`` in the role's vars) the validator reads;
- ``DERIVED``: inputs computed from other variables or from the host's context (facts,
  inventory), replacing the Jinja expressions the config lists used to carry.

``get(name, default)`` returns the templated value of a variable (``default`` when undefined).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import to_bool

ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")
_SPEC_CACHE = {}
_DATA_CACHE = {}
_MISSING = object()

# the role each collected area belongs to (an area named after its role)
ROLES = ("fleet_identity", "gpu_tuning", "mig", "monitoring", "nccl", "nvidia_driver",
         "spark_rapids", "storage_tuning", "tenant_isolation")


def _yaml_loader(yaml):
    """libyaml's safe loader where PyYAML has it (about ten times faster: every host's worker
    parses the argument specs again), else the pure-Python one; both build the same data."""
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def argument_spec(role, roles_dir=None):
    """The options of the role's ``main`` entry point (meta/argument_specs.yml), in order."""
    import yaml  # controller only: PyYAML comes with ansible-core

    path = os.path.join(roles_dir or ROLES_DIR, role, "meta", "argument_specs.yml")
    if path not in _SPEC_CACHE:
        with open(path) as handle:
            specs = yaml.load(handle, Loader=_yaml_loader(yaml))["argument_specs"]
        _SPEC_CACHE[path] = specs["main"]["options"]
    return dict(_SPEC_CACHE[path])


def argument_spec_names(role, roles_dir=None):
    """The option names of the role's ``main`` entry point (meta/argument_specs.yml), in order."""
    return list(argument_spec(role, roles_dir))


def _role_data(role, name, roles_dir=None):
    """A plain data file of the role (vars/<name>.yml: no templates), e.g. a platform table."""
    import yaml

    path = os.path.join(roles_dir or ROLES_DIR, role, "vars", name + ".yml")
    if path not in _DATA_CACHE:
        with open(path) as handle:
            _DATA_CACHE[path] = yaml.load(handle, Loader=_yaml_loader(yaml)) or {}
    return _DATA_CACHE[path]


def _distribution(get):
    """``(Distribution-Major, architecture)`` from the host's facts; None where not gathered."""
    facts = get("ansible_facts", {}) or {}
    dist, major = facts.get("distribution"), facts.get("distribution_major_version")
    name = "%s-%s" % (dist, major) if dist and major else None
    return name, facts.get("architecture"), facts.get("distribution_version")


def _host(get):
    return get("inventory_hostname", "")


def gpu_tuning_platform(get):
    """The host's platform: gpu_tuning_platform, or for ``auto`` the GPU facts' model family
    (__gpu_tuning_family_platform), else the first of the host's groups named after a platform,
    else ``generic``."""
    platform = get("gpu_tuning_platform", "auto")
    if platform != "auto":
        return platform
    platforms = get("__gpu_tuning_platforms", []) or []
    family = ((get("ansible_facts", {}) or {}).get("nvidia_smi") or {}).get("model_family") or "none"
    by_family = get("__gpu_tuning_family_platform", {}) or {}
    if family in by_family:
        return by_family[family]
    for group in get("group_names", []) or []:
        if group in platforms:
            return group
    return "generic"


# the nvidia_driver values of the one nvidia-persistenced drop-in, checked against gpu_tuning's
GPU_TUNING_DRIVER_PERSISTENCED = ("nvidia_driver_persistence_mode", "nvidia_driver_persistenced_user",
                                  "nvidia_driver_persistenced_path")


def _gpu_tuning(get):
    # the platform and its data file (vars/<platform>.yml)
    platform = gpu_tuning_platform(get)
    known = platform in (get("__gpu_tuning_platforms", []) or [])
    data = _role_data("gpu_tuning", platform).get("__gpu_tuning_platform_data", {}) if known else {}
    # the nvidia_driver values declared for the host (inventory, or the role applied earlier in
    # the same play): both roles write the one nvidia-persistenced drop-in
    declared = {}
    for name in GPU_TUNING_DRIVER_PERSISTENCED:
        value = get(name, _MISSING)
        if value is not _MISSING:
            declared[name] = value
    return {"gpu_tuning_platform": platform, "gpu_tuning_platform_data": data,
            "__nvidia_driver_declared": declared}


def nvidia_driver_persistenced(get):
    """What the nvidia_driver role writes into the one nvidia-persistenced drop-in, with its
    defaults (``get`` reads the role's variables as it runs): ``__nvidia_driver_declared`` for
    gpu_tuning's check where site.yml's validate play checks both roles of a host, so a site run
    whose two plays would write different drop-ins (and restart the daemon twice) is refused.
    Empty where the role leaves the daemon alone (nvidia_driver_persistenced: false)."""
    if not get("nvidia_driver_persistenced", True):
        return {}
    declared_mode = get("gpu_tuning_persistence_mode", None)
    return {
        # the driver play renders the host's gpu_tuning_persistence_mode where it is a boolean
        "nvidia_driver_persistence_mode": declared_mode if isinstance(declared_mode, bool)
        else get("nvidia_driver_persistence_mode", True),
        "nvidia_driver_persistenced_user": get("nvidia_driver_persistenced_user", None),
        "nvidia_driver_persistenced_path": get("nvidia_driver_persistenced_path", None),
    }


def _mig(get):
    return {
        "mig_builtin_layouts": get("__mig_builtin_layouts", {}),
        "mig_gpu_model": get("__mig_gpu_model", ""),
    }


def _monitoring(get):
    driver = get("monitoring_declared_driver_version", None)
    if driver is None:
        driver = get("nvidia_driver_version", None) or ""
        if not driver:
            branch = get("nvidia_driver_branch", None)
            driver = str(branch) if branch else ""
    power = get("monitoring_declared_power_limit_watts", None)
    if power is None:
        power = get("gpu_tuning_power_limit_watts", None)
    server = get("monitoring_prometheus_server", "")
    groups = get("groups", {}) or {}
    distribution, _architecture, version = _distribution(get)
    return {
        "monitoring_declared_driver_version": driver,
        "monitoring_declared_power_limit_watts": power,
        "monitoring_prometheus_server_is_self": server in ("", _host(get)),
        "monitoring_prometheus_server_known": server in [""] + list(groups.get("all", [])),
        "inventory_address": get("ansible_host", None) or _host(get),
        "__distribution": distribution,
        "__distribution_version": version,
    }


def _nccl(get):
    # the Open MPI settings count only where the role writes them (when: nccl_mpi_enabled | bool)
    enabled = to_bool(get("nccl_mpi_enabled", False)) is True
    return {
        "nccl_mpi_mca_params": get("nccl_mpi_mca_params", {}) if enabled else {},
        "nccl_mpi_mca_params_absent": get("nccl_mpi_mca_params_absent", []) if enabled else [],
        "nccl_mpi_environment": get("nccl_mpi_environment", {}) if enabled else {},
    }


def _nvidia_driver(get):
    family = get("nvidia_driver_model_family", None)
    if family is None:
        family = (get("ansible_facts", {}) or {}).get("nvidia_smi", {}).get("model_family")
    distribution, architecture, version = _distribution(get)
    # the distribution's repository directory and package layout (vars/<Distribution-Major>.yml,
    # the file the role loaded with include_vars before the validator resolved them)
    known = distribution in (get("__nvidia_driver_supported", []) or [])
    data = _role_data("nvidia_driver", distribution) if known else {}
    return {"model_family": family, "__distribution": distribution, "__distribution_version": version,
            "__architecture": architecture,
            "__nvidia_driver_repo_distro": data.get("__nvidia_driver_repo_distro"),
            "__nvidia_driver_default_layout": data.get("__nvidia_driver_default_layout")}


def _spark_rapids(get):
    group = get("spark_rapids_cluster_group", "")
    groups = get("groups", {}) or {}
    facts = get("ansible_facts", {}) or {}
    return {
        "__cluster_group_size": len(groups[group]) if group and group in groups else None,
        "__play_hosts_count": len(get("ansible_play_hosts_all", []) or []),
        "__limit": get("ansible_limit", None),
        "__nvidia_smi_facts": facts.get("nvidia_smi", {}),
        "__facts_vcpus": facts.get("processor_vcpus"),
        "__facts_memtotal_mb": facts.get("memtotal_mb"),
    }


PRIVATE = {
    "gpu_tuning": ("__gpu_tuning_platforms",),
    "monitoring": ("__monitoring_supported",),
    "nccl": ("__nccl_profiles",),
    "nvidia_driver": ("__nvidia_driver_supported", "__nvidia_driver_repo_arches", "__nvidia_driver_repo_base",
                      "__nvidia_driver_layouts"),
    "spark_rapids": ("__spark_rapids_key_catalog", "__spark_rapids_key_prefixes", "__spark_rapids_key_hints",
                     "__spark_rapids_supported_spark", "__spark_rapids_shims", "__spark_rapids_min_plugin",
                     "__spark_rapids_profiles", "__spark_rapids_base_settings", "__spark_rapids_ucx_env"),
}

DERIVED = {
    "gpu_tuning": _gpu_tuning,
    "mig": _mig,
    "monitoring": _monitoring,
    "nccl": _nccl,
    "nvidia_driver": _nvidia_driver,
    "spark_rapids": _spark_rapids,
}

# path variables a role run on its own leaves unchecked, as before the action collected them: the
# site play's files area checks them (tests/fidelity/test_nccl_consumer.py writes the Open MPI
# files of a standalone nccl run to a temporary directory)
NOT_CHECKED_ALONE = {
    "nccl": ("nccl_mpi_environment_path", "nccl_mpi_mca_params_file"),
}


def collect(role, get, roles_dir=None):
    """The validator's config for ``role``: its argument-spec variables, private tables and
    derived inputs. ``get(name, default)`` reads a (templated) variable."""
    config = {}
    for name in argument_spec_names(role, roles_dir):
        if name in NOT_CHECKED_ALONE.get(role, ()):
            continue
        value = get(name, _MISSING)
        if value is not _MISSING:
            config[name] = value
    for name in PRIVATE.get(role, ()):
        value = get(name, _MISSING)
        if value is not _MISSING:
            config[name] = value
    if role in DERIVED:
        config.update(DERIVED[role](get))
    return config
