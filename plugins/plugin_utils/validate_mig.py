# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the ``mig`` role variables (``area: mig``).

Resolves the layout the host gets (``mig_layout`` when given, else the named layout
``mig_layout_name`` from the user's ``mig_layouts`` over the role's built-in layouts for the
host's GPU model) and checks its structure with the same code the ``nvidia_mig`` module uses.
Whether the profiles exist and fit is checked on the node against the GPU's own tables, by the
module, before any GPU is changed.

``normalized``: ``layout`` (the resolved layout, as the module takes it), ``layout_name``,
``stop_services`` (de-duplicated), and the scalar settings; with ``mig_device_access`` in the
config, ``device_access`` (see ``validate_mig_devices``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_layout as ml
from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_mig_devices
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_bool, as_int, int_allowed

GPU_MODELS = ("a100-40gb", "a100-80gb", "h100", "h200")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$")
_UNIT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@_.:-]*(\.service)?$")
BOOLS = ("mig_force", "mig_allow_reset", "mig_reboot", "mig_boot_unit")


def _layout_errors(result, variable, layout):
    try:
        return ml.normalize_layout(layout, variable)
    except ml.LayoutError as exc:
        result.error_text(str(exc))
        return None


def validate(config):
    result = ValidationResult()
    # strict: the tasks read these as they are (when: mig_reboot, TimeoutStartSec={{ mig_boot_timeout }},
    # mig_reboot_timeout + 300), where a string the argument spec accepts ("no", "300") misbehaves
    for key in BOOLS:
        if key in config:
            as_bool(key, config[key], result, strict=True)
    for key, low, high in (("mig_boot_timeout", 30, 3600), ("mig_reboot_timeout", 60, 7200)):
        if key in config:
            as_int(key, config[key], result, low, high, strict=True,
                   allowed=int_allowed(low, high, "an integer number of seconds"))

    model = config.get("mig_gpu_model")
    if model not in GPU_MODELS:
        result.error("mig_gpu_model", model, ", ".join(GPU_MODELS)
                     + " (set it, or gather dgxops.fleet.nvidia_smi_facts so the role can tell)")

    services = config.get("mig_stop_services", [])
    stop = []
    if not isinstance(services, list):
        result.error("mig_stop_services", services, "a list of systemd unit names")
    else:
        for pos, unit in enumerate(services):
            if not isinstance(unit, str) or not _UNIT_RE.match(unit):
                result.error("mig_stop_services[%d]" % pos, unit, "a systemd unit name such as nvidia-dcgm.service")
            elif unit not in stop:
                stop.append(unit)

    user_layouts = config.get("mig_layouts", {})
    builtin = config.get("mig_builtin_layouts", {}) or {}
    if not isinstance(user_layouts, dict):
        result.error("mig_layouts", user_layouts, "a dictionary of layout name to layout list")
        user_layouts = {}
    for name in sorted(user_layouts, key=str):
        if not isinstance(name, str) or not _NAME_RE.match(name):
            result.error("mig_layouts key", name, "1-64 letters, digits, '.', '_', '+', '-'")
            continue
        _layout_errors(result, "mig_layouts[%s]" % name, user_layouts[name])

    explicit = config.get("mig_layout") or []
    name = config.get("mig_layout_name") or ""
    layout = None
    chosen = None
    if explicit:
        layout = _layout_errors(result, "mig_layout", explicit)
        chosen = "(mig_layout)"
    elif not isinstance(name, str) or not name:
        result.error("mig_layout_name", name, "the name of a layout (%s), or set mig_layout" % (
            ", ".join(sorted(set(builtin.get(model, {})) | set(user_layouts))) or "none defined"))
    else:
        available = dict(builtin.get(model, {}) if model in GPU_MODELS else {})
        available.update(user_layouts)
        if name not in available:
            result.error("mig_layout_name", name, "a layout defined for %s: %s" % (
                model, ", ".join(sorted(available)) or "none"))
        else:
            layout = _layout_errors(result, "mig_layouts[%s]" % name, available[name])
            chosen = name
    result.normalized = {
        "layout": explicit if explicit else (available[name] if layout is not None else []),
        "layout_name": chosen,
        "stop_services": stop,
    }
    if "mig_device_access" in config or "mig_device_restrict_unassigned" in config:
        result.normalized["device_access"] = validate_mig_devices.check(config, result)
    if layout is not None and not any(e["mig"] for e in layout) and config.get("mig_boot_unit"):
        result.warn("mig layout %s disables MIG on every GPU it selects; the boot unit will only keep "
                    "MIG disabled" % chosen)
    return result
