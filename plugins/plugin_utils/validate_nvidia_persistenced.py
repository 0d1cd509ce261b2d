# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The values of the nvidia-persistenced drop-in's ``ExecStart`` (role nvidia_driver).

Checked by the role's validator (main entry point, site.yml's validate play) and, for the
shared entry point ``tasks_from: persistenced`` called with other values, by one
``dgxops.fleet.validate`` task (area ``nvidia_persistenced``). Types and the start policy's
choices are the argument specs' (both entry points); what they cannot say is checked here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult

PATH_RE = re.compile(r"^/[A-Za-z0-9_.+@/-]+$")
USER_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*[$]?)?$")


def check(config, result):
    """Add an error to ``result`` for each bad value; the keys absent from ``config`` are not checked."""
    if "nvidia_driver_persistenced_path" in config:
        path = config["nvidia_driver_persistenced_path"]
        if not isinstance(path, str) or not PATH_RE.match(path):
            result.error("nvidia_driver_persistenced_path", path,
                         "an absolute path of letters, digits and _ . + @ / -, e.g. /usr/bin/nvidia-persistenced")
    if "nvidia_driver_persistenced_user" in config:
        user = config["nvidia_driver_persistenced_user"]
        if user is not None and (not isinstance(user, str) or not USER_RE.match(user)):
            result.error("nvidia_driver_persistenced_user", user,
                         "a user name such as nvidia-persistenced, or \"\" / null for no --user (the daemon stays root)")
    return result


def validate(config):
    result = check(config, ValidationResult())
    result.normalized = {}
    return result
