# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
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

# area -> validator (plugins/plugin_utils/validate_<area>.py); an area not listed here is refused
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

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        area = args.get("area")
        config = args.get("config")
        validator = VALIDATORS.get(area) if isinstance(area, str) else None
        if validator is None:
            raise AnsibleActionFail("validate: no validator for area %r; allowed: %s" % (area, ", ".join(sorted(VALIDATORS))))
        if config is None:
            config = self._collect(area, task_vars or {})
        if not isinstance(config, dict):
            raise AnsibleActionFail("validate: 'config' must be a dictionary, got %r" % (type(config).__name__,))

        secrets = _secret_values(dict((k, v) for k, v in config.items() if not str(k).startswith("__")))
        if secrets:
            # a password/secret/token/keyStore value: never shown in the output, -v or the callbacks
            result["_ansible_no_log"] = True
            self._task.no_log = True  # ansible-core 2.21 takes the task's no_log, not the result key
        outcome = validator.validate(config)
        outcome.errors = [_mask(e, secrets) for e in outcome.errors]
        outcome.warnings = [_mask(w, secrets) for w in outcome.warnings]
        if area != "files":
            # paths and modes of root-written files, whatever role passes them (validate_files)
            validate_files.check(config, outcome)
        for warning in outcome.warnings:
            self._display.warning(warning)
        result["changed"] = False
        result["warnings_found"] = list(outcome.warnings)
        if outcome.errors:
            result["failed"] = True
            result["errors"] = list(outcome.errors)
            result["msg"] = "%d invalid setting(s) for %s:\n- %s" % (
                len(outcome.errors), area, "\n- ".join(outcome.errors))
            return result
        result["normalized"] = outcome.normalized
        result["msg"] = "%s settings are valid" % area
        return result
