# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validator of the ``gpu_tuning`` role (``dgxops.fleet.validate area=gpu_tuning``).

The option checks are the module's own (:func:`nvidia_gpu_state.check_options` with the
``gpu_tuning_`` prefix), so a message reads the same on the controller and on the node.
On top of them come the role-only variables and the static limits of the platform
(``vars/<platform>.yml``: power range, graphics clock range).  The exact limits of each GPU
(its power range, its supported clock pairs) need the hardware and are checked by the
``nvidia_gpu`` module on the node, still before any GPU is touched.

``config`` holds the role's variables plus ``gpu_tuning_platform_data`` (the platform data).
``normalized`` returns the effective settings (platform defaults filled in for nulls).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.dgxops.fleet.plugins.module_utils.nvidia_gpu_state import check_options
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_bool, as_int, int_allowed, is_int

PREFIX = "gpu_tuning_"
PLATFORMS = ("dgx_a100", "dgx_h100", "dgx_h200", "dgx_spark", "generic")
SETTING_VARS = ("persistence_mode", "power_limit_watts", "power_limit_percent", "power_limit_percent_of",
                "application_clocks", "locked_clocks", "compute_mode", "ecc_mode", "auto_boost_default",
                "application_clock_permissions")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
_BUS_RE = re.compile(r"^(?:[0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]$")
_UNIT_RE = re.compile(r"^[A-Za-z0-9:_.@-]+\.(service|target|socket|mount|timer)$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


def _selector_ok(sel):
    if is_int(sel):
        return 0 <= sel <= 63
    if not isinstance(sel, str):
        return False
    text = sel.strip()
    if text == "all":
        return True
    if re.match(r"^\d{1,2}$", text):
        return int(text) <= 63
    return bool(_UUID_RE.match(text) or _BUS_RE.match(text))


def validate(config):
    result = ValidationResult()
    get = config.get

    platform = get("gpu_tuning_platform")
    if platform not in PLATFORMS:
        result.error("gpu_tuning_platform", platform, "auto, " + ", ".join(PLATFORMS)
                     + " (auto is resolved before validation)")
    data = get("gpu_tuning_platform_data") or {}
    if not isinstance(data, dict):
        result.error("gpu_tuning_platform_data", data, "the dictionary loaded from vars/<platform>.yml")
        data = {}

    gpus = get("gpu_tuning_gpus")
    if not isinstance(gpus, list) or not gpus:
        result.error("gpu_tuning_gpus", gpus, "a non-empty list: [all] or indexes, UUIDs (GPU-...) or PCI bus ids")
    else:
        for i, sel in enumerate(gpus):
            if not _selector_ok(sel):
                result.error("gpu_tuning_gpus[%d]" % i, sel,
                             "'all', an index 0-63, a UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) "
                             "or a PCI bus id (00000000:07:00.0)")
        if "all" in gpus and len(gpus) > 1:
            result.error("gpu_tuning_gpus", gpus, "'all' alone, or a list of selectors without 'all'")
        count = data.get("gpu_count")
        if count:
            for i, sel in enumerate(gpus):
                idx = sel if is_int(sel) else (
                    int(sel) if isinstance(sel, str) and sel.strip().isdigit() else None)
                if idx is not None and idx >= count:
                    result.error("gpu_tuning_gpus[%d]" % i, sel, "an index 0-%d (%s has %d GPUs)"
                                 % (count - 1, data.get("name", platform), count))

    # The module's option checks, with the role's variable names.
    params = dict((name, get(PREFIX + name)) for name in SETTING_VARS)
    if params["power_limit_percent_of"] is None:
        params["power_limit_percent_of"] = "default"
    for key in ("power_limit_watts", "power_limit_percent"):
        value = params[key]
        if isinstance(value, str):
            try:
                params[key] = float(value)
            except ValueError:
                pass
    desired, errors = check_options(params, prefix=PREFIX)
    result.errors.extend(errors)

    method = get("gpu_tuning_persistence_method")
    if method not in ("auto", "daemon", "legacy"):
        result.error("gpu_tuning_persistence_method", method, "auto, daemon or legacy")
    user = get("gpu_tuning_persistenced_user")
    if user is not None and (not isinstance(user, str) or not _USER_RE.match(user)):
        result.error("gpu_tuning_persistenced_user", user, "a user name (for example nvidia-persistenced) or null")
    path = get("gpu_tuning_persistenced_path")
    if not isinstance(path, str) or not path.startswith("/"):
        result.error("gpu_tuning_persistenced_path", path, "an absolute path")
    if get("gpu_tuning_on_unsupported") not in ("warn", "fail"):
        result.error("gpu_tuning_on_unsupported", get("gpu_tuning_on_unsupported"), "warn or fail")
    as_bool("gpu_tuning_boot_unit_enabled", get("gpu_tuning_boot_unit_enabled"), result, strict=True)
    before = get("gpu_tuning_boot_unit_before")
    if not isinstance(before, list) or not all(isinstance(u, str) and _UNIT_RE.match(u) for u in before):
        result.error("gpu_tuning_boot_unit_before", before, "a list of systemd unit names (for example slurmd.service)")
    # strict: the boot unit's template writes it as it is (TimeoutStartSec=)
    as_int("gpu_tuning_boot_unit_timeout", get("gpu_tuning_boot_unit_timeout"), result, 10, 3600, strict=True,
           allowed=int_allowed(10, 3600, "whole seconds"))

    # Static platform limits (the module checks each GPU's exact limits on the node).
    name = data.get("name", platform)
    power = data.get("power_limit_w")
    spec = desired.get("power_limit")
    if spec and isinstance(power, dict):
        if "watts" in spec and not power["min"] <= spec["watts"] <= power["max"]:
            result.error("gpu_tuning_power_limit_watts", get("gpu_tuning_power_limit_watts"),
                         "%s-%s W on %s (power.min_limit-power.max_limit)" % (power["min"], power["max"], name))
        elif "percent" in spec:
            base = power["default"] if spec["of"] == "default" else power["max"]
            watts = int(base * spec["percent"] / 100.0 + 0.5)
            if watts < power["min"]:
                low = 100.0 * power["min"] / base
                result.error("gpu_tuning_power_limit_percent", get("gpu_tuning_power_limit_percent"),
                             "%.1f-100 %% of the %s limit on %s (%s%% would be %d W, below power.min_limit %s W)"
                             % (low, spec["of"], name, get("gpu_tuning_power_limit_percent"), watts, power["min"]))
    elif spec and data.get("power_management_supported") is False:
        result.warn("gpu_tuning_power_limit_*: %s does not support power limits (nvidia-smi reports power.limit "
                    "as [N/A]); the module will report it as unsupported" % name)
    clocks = data.get("graphics_clock_mhz")
    if isinstance(clocks, dict):
        app = desired.get("application_clocks")
        if isinstance(app, dict) and not clocks["min"] <= app["graphics_mhz"] <= clocks["max"]:
            result.error("gpu_tuning_application_clocks.graphics_mhz", app["graphics_mhz"],
                         "%d-%d MHz on %s, in the steps listed by nvidia-smi -q -d SUPPORTED_CLOCKS"
                         % (clocks["min"], clocks["max"], name))
        locked = desired.get("locked_clocks")
        if isinstance(locked, dict):
            for key in ("min_mhz", "max_mhz"):
                if not clocks["min"] <= locked[key] <= clocks["max"]:
                    result.error("gpu_tuning_locked_clocks.%s" % key, locked[key],
                                 "%d-%d MHz on %s" % (clocks["min"], clocks["max"], name))
    if "application_clock_permissions" in desired:
        result.warn("gpu_tuning_application_clock_permissions: nvidia-smi -acp was removed in the R5xx drivers; "
                    "the setting will be reported as unsupported (since then only root may change application "
                    "clocks). Remove the variable.")
    if desired.get("persistence_mode") is True and data.get("persistence_supported") is False:
        result.warn("gpu_tuning_persistence_mode: %s reports persistence mode as not supported" % name)

    # Effective settings: platform defaults for what the user left null.
    effective = dict(desired)
    for key, value in (data.get("defaults") or {}).items():
        if key not in effective and get(PREFIX + key) is None:
            effective[key] = value
    check_driver_persistenced(result, config, effective.get("persistence_mode"))
    result.normalized = {
        "platform": platform,
        "platform_name": name,
        "fabric_manager": bool(data.get("fabric_manager")),
        "gpus": [str(s) for s in gpus] if isinstance(gpus, list) else gpus,
        "settings": effective,
        "module_args": _module_args(effective),
    }
    return result


def _same_user(a, b):
    return (a or "") == (b or "")


def check_driver_persistenced(result, config, persistence_mode):
    """Both roles write the one nvidia-persistenced drop-in: where the host also declares the
    nvidia_driver values (``__nvidia_driver_declared``: those of nvidia_driver_persistence_mode,
    _persistenced_user and _persistenced_path defined for the host), values that differ from
    gpu_tuning's would rewrite the file on every run. Checked wherever the daemon may keep
    persistence mode (a managed persistence mode, method auto or daemon), before any change."""
    if persistence_mode is None or config.get("gpu_tuning_persistence_method") == "legacy":
        return
    declared = config.get("__nvidia_driver_declared") or {}
    if not declared:
        return
    mode = declared.get("nvidia_driver_persistence_mode", persistence_mode)
    user = declared.get("nvidia_driver_persistenced_user", config.get("gpu_tuning_persistenced_user"))
    path = declared.get("nvidia_driver_persistenced_path", config.get("gpu_tuning_persistenced_path"))
    if (bool(mode) == bool(persistence_mode) and _same_user(user, config.get("gpu_tuning_persistenced_user"))
            and path == config.get("gpu_tuning_persistenced_path")):
        return

    def shown(name):
        return json.dumps(declared[name]) if name in declared else '"unset"'
    result.error_text(
        "gpu_tuning_persistence_mode / gpu_tuning_persistenced_user / gpu_tuning_persistenced_path (%s, %s, %s) "
        "differ from nvidia_driver_persistence_mode / _persistenced_user / _persistenced_path (%s, %s, %s) on "
        "this host; both roles write the one nvidia-persistenced drop-in; allowed: the same values in both roles"
        % (json.dumps(persistence_mode), json.dumps(config.get("gpu_tuning_persistenced_user")),
           json.dumps(config.get("gpu_tuning_persistenced_path")), shown("nvidia_driver_persistence_mode"),
           shown("nvidia_driver_persistenced_user"), shown("nvidia_driver_persistenced_path")))


def _module_args(effective):
    """The nvidia_gpu module options for the effective settings; a setting that is not managed
    is absent (tasks pass ``| default(omit)``), never null."""
    args = {"power_limit_percent_of": "default"}
    for key in ("persistence_mode", "ecc_mode", "auto_boost_default", "compute_mode",
                "application_clock_permissions", "application_clocks", "locked_clocks"):
        if effective.get(key) is not None:
            args[key] = effective[key]
    spec = effective.get("power_limit")
    if spec and "watts" in spec:
        args["power_limit_watts"] = spec["watts"]
    elif spec:
        args["power_limit_percent"] = spec["percent"]
        args["power_limit_percent_of"] = spec["of"]
    return args
