# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the playbook-level ``dgxops_*`` variables (``area: dgxops``).

``site.yml`` and the per-area playbooks read ``dgxops_serial``, ``dgxops_max_fail_percentage``
and ``dgxops_enable_<area>`` as play keywords and ``| bool`` conditions: a bad value there either
crashes ansible-core while it templates the play (``serial: lots``: rc 250, no variable named)
or silently switches an area off (``"maybe" | bool`` is false).  The validate play checks them
here, before any host changes, like role variables.

config keys: ``dgxops_serial``, ``dgxops_max_fail_percentage`` (either may be absent),
``enable`` (``{variable name: value}`` of every ``dgxops_enable_*`` variable defined for the
host), ``dgxops_task_timeout`` (optional).

``normalized``: ``enable`` (``{area: bool}``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_bool, as_int, is_int

AREAS = ("identity", "driver", "gpu_tuning", "storage", "nccl", "mig", "isolation", "spark", "monitoring")
_PERCENT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_INT_RE = re.compile(r"^\s*\d+\s*$")
SERIAL_ALLOWED = ("a positive integer (hosts per batch), a percentage such as '25%' (1-100%), or a "
                  "list of those (growing batches, e.g. [1, '10%', '100%'])")


def _serial_item_ok(item):
    # what ansible-core's batching reads (int() of a string, not the argument specs' int: "2.0"
    # would crash it), so not validation.to_int
    if is_int(item):
        return item >= 1
    if isinstance(item, str):
        if _INT_RE.match(item):
            return int(item) >= 1
        match = _PERCENT_RE.match(item)
        return bool(match) and 0 < float(match.group(1)) <= 100
    return False


def check_serial(result, value):
    items = value if isinstance(value, list) else [value]
    if not items or not all(_serial_item_ok(i) for i in items):
        result.error("dgxops_serial", value, SERIAL_ALLOWED)


def check_max_fail(result, value):
    as_int("dgxops_max_fail_percentage", value, result, 0, 100,
           allowed="an integer percentage from 0 to 100 (abort an area when more than this share of a batch fails)")


def collect(names, get):
    """The config of this area from the variables defined for a host: every ``dgxops_enable_*``
    switch under ``enable``, ``dgxops_serial`` and ``dgxops_max_fail_percentage`` as they are.
    ``names``: the defined variable names; ``get(name)``: a variable's value."""
    config = {"enable": {}}
    for name in names:
        if name.startswith("dgxops_enable_"):
            config["enable"][name] = get(name)
        elif name in ("dgxops_serial", "dgxops_max_fail_percentage"):
            config[name] = get(name)
    return config


def validate(config):
    result = ValidationResult()
    if "dgxops_serial" in config:
        check_serial(result, config["dgxops_serial"])
    if "dgxops_max_fail_percentage" in config:
        check_max_fail(result, config["dgxops_max_fail_percentage"])
    enable = config.get("enable") or {}
    if not isinstance(enable, dict):
        result.error("dgxops_enable_*", enable, "a mapping of dgxops_enable_<area> to true/false")
        enable = {}
    normalized = {}
    for name in sorted(enable):
        area = name[len("dgxops_enable_"):] if name.startswith("dgxops_enable_") else name
        if area not in AREAS:
            result.error(name, enable[name], "no such area; the dgxops_enable_<area> variables are "
                         + ", ".join("dgxops_enable_" + a for a in AREAS))
            continue
        flag = as_bool(name, enable[name], result, "true or false (also yes/no, on/off, 1/0)")
        if flag is None:
            continue
        normalized[area] = flag
    result.normalized = {"enable": normalized}
    return result
