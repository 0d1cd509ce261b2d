# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib
import re

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.dgxops.fleet.plugins.module_utils import validate_files

_AREA_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class ActionModule(ActionBase):
    """Controller-only action: no connection to the host is made."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        area = args.get("area")
        config = args.get("config")
        if not isinstance(area, str) or not _AREA_RE.match(area):
            raise AnsibleActionFail("validate: 'area' must be a validator name, got %r" % (area,))
        if not isinstance(config, dict):
            raise AnsibleActionFail("validate: 'config' must be a dictionary, got %r" % (type(config).__name__,))
        try:
            validator = importlib.import_module(
                "ansible_collections.dgxops.fleet.plugins.module_utils.validate_%s" % area
            )
        except ImportError as exc:
            raise AnsibleActionFail("validate: no validator for area %r (%s)" % (area, exc))

        outcome = validator.validate(config)
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
