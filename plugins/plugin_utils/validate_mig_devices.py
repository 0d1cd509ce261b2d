# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the ``mig`` role's device permissions (``area: mig_devices``).

``mig_device_access``: a list of grants ``{name, gpus, profiles, placements, owner, group, mode}``
(see ``mig_devices.normalize_access``); ``mig_device_restrict_unassigned``: bool. Whether the GPUs,
instances, users and groups exist is checked on the node by ``dgxops.fleet.nvidia_mig_devices``.

``normalized``: ``access`` (entries with ``gpus`` as ``"all"`` or a list, ``mode`` as an int) and
``restrict_unassigned``. ``validate_mig`` runs the same checks when its config carries the keys.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_devices as md
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_bool


def check(config, result):
    """Add errors and warnings to ``result``; return the normalised settings."""
    restrict = config.get("mig_device_restrict_unassigned", True)
    as_bool("mig_device_restrict_unassigned", restrict, result, strict=True)
    try:
        entries, warnings = md.normalize_access(config.get("mig_device_access", []), "mig_device_access")
    except md.DeviceAccessError as exc:
        result.error_text(str(exc))
        entries, warnings = [], []
    for warning in warnings:
        result.warn(warning)
    return {"access": entries, "restrict_unassigned": restrict is True}


def validate(config):
    result = ValidationResult()
    result.normalized = check(config, result)
    return result
