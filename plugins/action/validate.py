# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.dgxops.fleet.plugins.plugin_utils import (
    role_inputs,
    validate_declared,
    validate_dgxops,
    validate_files,
    validate_fleet_identity,
    validate_gpu_tuning,
    validate_mig,
    validate_mig_devices,
    validate_monitoring,
    validate_nccl,
    validate_nvidia_driver,
    validate_nvidia_persistenced,
    validate_spark_rapids,
    validate_storage_tuning,
    validate_tenant_gpu_affinity,
    validate_tenant_isolation,
)

# area -> validator (plugins/plugin_utils/validate_<area>.py); an area not listed here is refused.
# Area "roles" (site.yml's validate play) runs the validators of the roles it is given, in one task.
VALIDATORS = {
    "declared": validate_declared,
    "dgxops": validate_dgxops,
    "files": validate_files,
    "fleet_identity": validate_fleet_identity,
    "gpu_tuning": validate_gpu_tuning,
    "mig": validate_mig,
    "mig_devices": validate_mig_devices,
    "monitoring": validate_monitoring,
    "nccl": validate_nccl,
    "nvidia_driver": validate_nvidia_driver,
    "nvidia_persistenced": validate_nvidia_persistenced,
    "spark_rapids": validate_spark_rapids,
    "storage_tuning": validate_storage_tuning,
    "tenant_gpu_affinity": validate_tenant_gpu_affinity,
    "tenant_isolation": validate_tenant_isolation,
}


def _secret_values(value, depth=0, inside=False):
    """The values held under keys that name a secret (validate_files.is_secret_key), as strings.
    The roles' private tables (``__`` variables: key catalogs) are left out by the caller."""
    found = []
    if depth > 6:
        return found
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_secret_values(item, depth + 1,
                                        inside or (isinstance(key, str) and validate_files.is_secret_key(key))))
    elif isinstance(value, list):
        for item in value:
            found.extend(_secret_values(item, depth + 1, inside))
    elif inside and value not in (None, "") and not isinstance(value, bool):
        found.append(str(value))
    return found


def _mask(text, secrets):
    for secret in sorted(set(secrets), key=len, reverse=True):
        text = text.replace(secret, "********")
    return text


def _unique(items):
    """The items in order, each once (a host variable is seen by its role and by the files check)."""
    seen = set()
    return [item for item in items if not (item in seen or seen.add(item))]


def _declared_config(task_vars_get, enabled, normalized):
    """validate_declared's config (the declared state against the host's facts, across roles),
    from the roles' validated settings."""
    facts = task_vars_get("ansible_facts", {}) or {}
    mig = normalized.get("mig") or {}
    gpu_tuning = normalized.get("gpu_tuning") or {}
    spark = normalized.get("spark_rapids") or {}
    return {
        "facts": facts.get("nvidia_smi", {}) or {},
        # the validate play gathers the hardware facts where a tenant pins CPUs
        "vcpus": facts.get("processor_vcpus"),
        "tenant_isolation_tenants": task_vars_get("tenant_isolation_tenants", []) or [],
        "enabled": list(enabled),
        "mig_layout": mig.get("layout", []) if "mig" in enabled else [],
        "mig_gpu_model": task_vars_get("mig_gpu_model", "") or "",
        "gpu_tuning_gpus": gpu_tuning.get("gpus", ["all"]),
        "spark_rapids_cluster_manager": spark.get("cluster_manager"),
        "spark_rapids_profile": spark.get("profile"),
        "spark_rapids_settings": task_vars_get("spark_rapids_settings", {}) or {},
        "monitoring_listen_address": task_vars_get("monitoring_listen_address", None),
    }


class ActionModule(ActionBase):
    """Controller-only action: no connection to the host is made."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def _collect(self, area, task_vars):
        """The config of an area whose task gives none: the variables are read from the task vars
        (names: the role's argument specs, validate_files' table, the dgxops_* switches)."""
        def get(name, default=None):
            if name not in task_vars:
                return default
            return self._templar.template(task_vars[name])

        if area in role_inputs.ROLES:
            return role_inputs.collect(area, get)
        if area == "files":
            return dict((name, get(name)) for name in validate_files.VARIABLES if name in task_vars)
        if area == "dgxops":
            return validate_dgxops.collect(sorted(task_vars), get)
        raise AnsibleActionFail("validate: area %r needs 'config' (only a role's area collects its variables)" % (area,))

    def _role_file(self, role, *parts):
        """A role's defaults or vars file, loaded as the role would load it (templates trusted).

        Read only: ``unsafe=True`` hands back the loader's cached data instead of a deep copy,
        which cost most of this action's time (tagged values copy slowly); the getter only
        reads it (a shallow merge, then templating)."""
        path = os.path.join(role_inputs.ROLES_DIR, role, *parts)
        if not os.path.isfile(path):
            return {}
        return self._loader.load_from_file(path, unsafe=True, trusted_as_template=True) or {}

    def _role_getter(self, role, task_vars):
        """``get(name, default)`` for a role that is not loaded in this play (site.yml's validate
        play): the role's vars, then the host's variables, then the role's defaults, the order in
        which they win when the role runs (role defaults < inventory/play/extra vars < role vars)."""
        defaults = self._role_file(role, "defaults", "main.yml")
        role_vars = self._role_file(role, "vars", "main.yml")
        merged = dict(defaults)
        merged.update(task_vars)
        merged.update(role_vars)
        templar = self._templar.copy_with_new_env(available_variables=merged)

        def get(name, default=None):
            if name not in merged:
                return default
            return templar.template(merged[name])
        return get

    def _argument_spec_errors(self, role, config):
        """The role's argument specs (entry point main) against the values it would run with,
        as Ansible checks them when the role starts (validate_argument_spec)."""
        options = role_inputs.argument_spec(role)
        provided = dict((name, config[name]) for name in options if name in config)
        outcome = ArgumentSpecValidator(options).validate(provided)
        return list(outcome.error_messages)

    def _run_roles(self, result, roles, task_vars):
        """Every enabled role of a host, in one task: argument specs, then the role's validator,
        then the declared state across roles (validate_declared) and the root-written files."""
        if not isinstance(roles, list) or not all(r in role_inputs.ROLES for r in roles):
            raise AnsibleActionFail("validate: 'roles' must be a list of %s, got %r" % (", ".join(role_inputs.ROLES), roles))
        errors, warnings, normalized, secrets = [], [], {}, []
        for role in roles:
            get = self._role_getter(role, task_vars)
            config = role_inputs.collect(role, get)
            if role == "gpu_tuning" and "nvidia_driver" in roles:
                # both roles write the one nvidia-persistenced drop-in: gpu_tuning's values are
                # checked against what the driver play will write (its defaults included)
                config["__nvidia_driver_declared"] = role_inputs.nvidia_driver_persistenced(
                    self._role_getter("nvidia_driver", task_vars))
            role_secrets = _secret_values(dict((k, v) for k, v in config.items() if not str(k).startswith("__")))
            secrets.extend(role_secrets)
            spec_errors = self._argument_spec_errors(role, config)
            if spec_errors:
                # wrong types: the value validators would only repeat them less clearly
                errors.extend("%s: %s" % (role, e) for e in spec_errors)
                continue
            outcome = VALIDATORS[role].validate(config)
            validate_files.check(config, outcome)
            errors.extend(outcome.errors)
            warnings.extend(outcome.warnings)
            normalized[role] = outcome.normalized

        def host_get(name, default=None):
            if name not in task_vars:
                return default
            return self._templar.template(task_vars[name])
        if not errors:
            declared = validate_declared.validate(_declared_config(host_get, roles, normalized))
            errors.extend(declared.errors)
            warnings.extend(declared.warnings)
        files = validate_files.validate(self._collect("files", task_vars))
        errors.extend(files.errors)
        warnings.extend(files.warnings)
        result["roles"] = list(roles)
        return self._finish(result, "roles (%s)" % ", ".join(roles), errors, warnings, normalized, secrets)

    def _finish(self, result, label, errors, warnings, normalized, secrets):
        errors, warnings = _unique(errors), _unique(warnings)
        result["secrets_hidden"] = bool(secrets)  # for tasks that pass the result on (no_log)
        if secrets:
            # a password/secret/token/keyStore value: never shown in the output, -v or the callbacks
            result["_ansible_no_log"] = True
            self._task.no_log = True  # ansible-core 2.21 takes the task's no_log, not the result key
        errors = [_mask(e, secrets) for e in errors]
        warnings = [_mask(w, secrets) for w in warnings]
        for warning in warnings:
            self._display.warning(warning)
        result["changed"] = False
        result["warnings_found"] = list(warnings)
        if errors:
            result["failed"] = True
            result["errors"] = list(errors)
            result["msg"] = "%d invalid setting(s) for %s:\n- %s" % (len(errors), label, "\n- ".join(errors))
            return result
        result["normalized"] = normalized
        result["msg"] = "%s settings are valid" % label
        return result

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        area = args.get("area")
        config = args.get("config")
        if area == "roles":
            return self._run_roles(result, args.get("roles"), task_vars or {})
        validator = VALIDATORS.get(area) if isinstance(area, str) else None
        if validator is None:
            raise AnsibleActionFail("validate: no validator for area %r; allowed: %s" % (area, ", ".join(sorted(VALIDATORS))))
        if config is None:
            config = self._collect(area, task_vars or {})
        if not isinstance(config, dict):
            raise AnsibleActionFail("validate: 'config' must be a dictionary, got %r" % (type(config).__name__,))

        secrets = _secret_values(dict((k, v) for k, v in config.items() if not str(k).startswith("__")))
        outcome = validator.validate(config)
        if area != "files":
            # paths and modes of root-written files, whatever role passes them (validate_files)
            validate_files.check(config, outcome)
        return self._finish(result, area, outcome.errors, outcome.warnings, outcome.normalized, secrets)
