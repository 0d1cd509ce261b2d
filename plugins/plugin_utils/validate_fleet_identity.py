# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validator for the fleet_identity role."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")
NODE_ROLES = ("compute", "spark-driver", "login", "storage")


def validate(config):
    result = ValidationResult()
    name = config.get("fleet_identity_fleet_name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        result.error("fleet_identity_fleet_name", name,
                     "1-63 characters of letters, digits, '.', '_' and '-', starting with a letter or digit")
    role = config.get("fleet_identity_node_role")
    if role not in NODE_ROLES:
        result.error("fleet_identity_node_role", role, ", ".join(NODE_ROLES))
    labels = config.get("fleet_identity_labels")
    if not isinstance(labels, dict):
        result.error("fleet_identity_labels", labels, "a dictionary of string keys to string values")
    else:
        for key, value in sorted(labels.items(), key=lambda kv: str(kv[0])):
            if not isinstance(key, str) or not LABEL_KEY_RE.match(key):
                result.error("fleet_identity_labels key", key,
                             "1-63 characters of letters, digits, '.', '_', '/' and '-'")
            if not isinstance(value, str):
                result.error("fleet_identity_labels[%s]" % key, value, "a string (quote numbers and booleans)")
    result.normalized = dict(config)
    return result
