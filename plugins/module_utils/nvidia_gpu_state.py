# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Desired-versus-current logic of the ``dgxops.fleet.nvidia_gpu`` module (pure, stdlib only).

Nothing here runs a command: the module reads nvidia-smi through
``module_utils/nvidia_smi.py`` (argv, C locale, timeout, exit-code mapping), parses it
with ``module_utils/nvidia_smi_parse.py``, and hands the parsed rows to the functions
below, which

* normalise one ``--query-gpu`` row into the settings this module manages
  (:func:`current_settings`),
* check the requested options without any GPU (:func:`check_options`) and against each
  GPU's own limits (:func:`plan`), collecting *every* problem before anything is touched,
* decide per GPU what differs and how to apply it (:func:`plan`), grouping identical
  changes into one ``nvidia-smi -i a,b,c ...`` call (:func:`group_commands`),
* read a setter's output, which exits 0 even when it refused (``... is not supported for
  GPU ...`` + ``Treating as warning and moving on.``) (:func:`setter_problems`),
* compare the read-back state with the plan (:func:`verify`).

Facts these rules rest on are in /work/shared/notes/nvidia-smi-reference.md sections 1, 2
and 9 (setter texts, ``[Requested functionality has been deprecated]`` for application
clocks from R590, ``-acp`` removed from the R5xx ``nvidia-smi -h``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

try:
    from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P
except ImportError:  # the boot-time copy next to nvidia_smi_parse.py (gpu_tuning role)
    import nvidia_smi_parse as P

# One --query-gpu call reads everything this module compares (order matters: CSV is mapped
# by position).  Locked clocks and the auto-boost default have no --query-gpu field.
STATE_FIELDS = (
    "index", "uuid", "pci.bus_id", "name", "driver_version", "persistence_mode",
    "power.limit", "power.default_limit", "power.min_limit", "power.max_limit",
    "clocks.applications.graphics", "clocks.applications.memory",
    "clocks.default_applications.graphics", "clocks.default_applications.memory",
    "clocks.max.graphics", "clocks.max.memory",
    "compute_mode", "ecc.mode.current", "ecc.mode.pending",
)

# Order in which settings are applied: persistence first (so nothing is lost when the
# driver would otherwise unload between calls), ECC and compute mode, then power, clocks.
SETTINGS = (
    "persistence_mode", "ecc_mode", "compute_mode", "power_limit", "application_clocks",
    "locked_clocks", "auto_boost_default", "application_clock_permissions",
)

# Module option name(s) behind each setting, for messages.
OPTION_OF = {
    "persistence_mode": "persistence_mode",
    "ecc_mode": "ecc_mode",
    "compute_mode": "compute_mode",
    "power_limit": "power_limit_watts",
    "power_limit_w": "power_limit_watts",
    "application_clocks": "application_clocks",
    "locked_clocks": "locked_clocks",
    "auto_boost_default": "auto_boost_default",
    "application_clock_permissions": "application_clock_permissions",
}

COMPUTE_MODES = {"DEFAULT": "0", "PROHIBITED": "2", "EXCLUSIVE_PROCESS": "3"}
_COMPUTE_ALIASES = {"0": "DEFAULT", "2": "PROHIBITED", "3": "EXCLUSIVE_PROCESS",
                    "1": "EXCLUSIVE_THREAD", "EXCLUSIVE_THREAD": "EXCLUSIVE_THREAD"}

# The nvidia-smi man page changelog: "Removed support for -acp,--application-clock-permissions
# option" (R5xx); confirmed absent from `nvidia-smi -h` on 580.159.04 (reference note section 9).
ACP_REMOVED_BRANCH = 510
# Application clocks print "[Requested functionality has been deprecated]" from R590 (captures).
APP_CLOCKS_DEPRECATED_BRANCH = 590

POWER_TOLERANCE_W = 0.01
MAX_SANE_MHZ = 10000
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


# ---------------------------------------------------------------------------
# Declared setting -> nvidia-smi argv, and -> the read-back cell: declared once, used by the
# module's plan and apply and by the boot-time reapply (gpu_tuning's boot script runs a copy
# of this file).  Flags: nvidia-smi -h (reference note sections 1 and 2).
# ---------------------------------------------------------------------------

def _fmt_w(watts):
    return ("%d" % watts) if float(watts).is_integer() else ("%.2f" % watts)


def _as_bool(flag):
    return lambda value: [flag, "1" if value else "0"]


def _app_clocks_args(value):
    if value == "default":
        return ["-rac"]
    return ["-ac", "%d,%d" % (value["memory_mhz"], value["graphics_mhz"])]


def _locked_clocks_args(value):
    if value is None or value == "reset":
        return ["-rgc"]
    return ["-lgc", "%d,%d" % (value["min_mhz"], value["max_mhz"])]


SETTING_ARGV = {
    "persistence_mode": _as_bool("-pm"),
    "ecc_mode": _as_bool("-e"),
    "compute_mode": lambda value: ["-c", COMPUTE_MODES[value]],
    "power_limit_w": lambda value: ["-pl", _fmt_w(value)],
    "application_clocks": _app_clocks_args,
    "locked_clocks": _locked_clocks_args,
    "auto_boost_default": lambda value: ["--auto-boost-default=%s" % ("ENABLED" if value else "DISABLED")],
}

# Settings lost at reboot or driver reload, in the order the boot-time reapply sets them.
VOLATILE_SETTINGS = ("persistence_mode", "compute_mode", "power_limit_w", "application_clocks",
                     "locked_clocks", "auto_boost_default")

_COMPUTE_TEXT = {"DEFAULT": "Default", "PROHIBITED": "Prohibited", "EXCLUSIVE_PROCESS": "Exclusive_Process"}

# (setting, --query-gpu field, the value as ``--format=csv,noheader,nounits`` prints it, the
# value in a parsed settings dict).  Locked clocks and the auto-boost default have no field.
READBACK_COLUMNS = (
    ("persistence_mode", "persistence_mode", lambda value: "Enabled" if value else "Disabled"),
    ("compute_mode", "compute_mode", lambda value: _COMPUTE_TEXT.get(value, value)),
    ("power_limit_w", "power.limit", lambda value: "%.2f" % value),
    ("application_clocks", "clocks.applications.memory", lambda value: "%d" % value["memory_mhz"]),
    ("application_clocks", "clocks.applications.graphics", lambda value: "%d" % value["graphics_mhz"]),
)


def setting_argv(setting, value):
    """The nvidia-smi arguments (without ``-i``) that set ``setting`` to ``value``."""
    return list(SETTING_ARGV[setting](value))


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------

def _compute_mode(text):
    if text is None:
        return None
    key = text.strip().upper().replace(" ", "_")
    return _COMPUTE_ALIASES.get(key, key)


def _pair(gpu, mem_key, gr_key):
    mem, gr = gpu.get(mem_key), gpu.get(gr_key)
    if mem is None or gr is None:
        return None
    return {"memory_mhz": int(mem), "graphics_mhz": int(gr)}


def current_settings(gpu):
    """One parsed ``--query-gpu`` row (``nvidia_smi_parse.gpus_from_query``) -> settings dict.

    Values nvidia-smi reports as unavailable are None, with the reason in ``unavailable``
    (``not_supported``, ``not_available``, ``deprecated``, ``field_unknown_to_driver``).
    """
    unavailable = dict(gpu.get("unavailable") or {})
    ecc = None
    if gpu.get("ecc_mode_current") is not None or gpu.get("ecc_mode_pending") is not None:
        ecc = {"current": gpu.get("ecc_mode_current") == "Enabled",
               "pending": gpu.get("ecc_mode_pending") == "Enabled"}
    return {
        "index": gpu.get("index"),
        "uuid": gpu.get("uuid"),
        "pci_bus_id": gpu.get("pci_bus_id"),
        "name": gpu.get("name"),
        "driver_version": gpu.get("driver_version"),
        "persistence_mode": gpu.get("persistence_mode"),
        "power_limit_w": gpu.get("power_limit_w"),
        "power_default_limit_w": gpu.get("power_default_limit_w"),
        "power_min_limit_w": gpu.get("power_min_limit_w"),
        "power_max_limit_w": gpu.get("power_max_limit_w"),
        "application_clocks": _pair(gpu, "clocks_applications_memory_mhz", "clocks_applications_graphics_mhz"),
        "default_application_clocks": _pair(gpu, "clocks_default_applications_memory_mhz",
                                            "clocks_default_applications_graphics_mhz"),
        "max_clocks": _pair(gpu, "clocks_max_memory_mhz", "clocks_max_graphics_mhz"),
        "compute_mode": _compute_mode(gpu.get("compute_mode")),
        "ecc_mode": ecc,
        "unavailable": {
            "persistence_mode": unavailable.get("persistence_mode"),
            "power_limit": unavailable.get("power_limit_w"),
            "application_clocks": (unavailable.get("clocks_applications_graphics_mhz")
                                   or unavailable.get("clocks_applications_memory_mhz")),
            "compute_mode": unavailable.get("compute_mode"),
            "ecc_mode": unavailable.get("ecc_mode_current") or unavailable.get("ecc_mode_pending"),
        },
    }


def parse_state(text, fields=STATE_FIELDS):
    """``--query-gpu=<fields> --format=csv`` output -> (list of settings dicts, errors)."""
    gpus, errors = P.gpus_from_query(text, list(fields), header=True)
    return [current_settings(g) for g in gpus], errors


# ---------------------------------------------------------------------------
# Options without hardware
# ---------------------------------------------------------------------------

def _label(prefix, option):
    return "%s%s" % (prefix or "", option)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_options(params, prefix=""):
    """Validate the module options that need no GPU.  Returns (desired, errors).

    ``desired`` maps each requested setting to its normalised target:

    * ``persistence_mode``/``ecc_mode``/``auto_boost_default``: bool
    * ``compute_mode``: ``DEFAULT`` | ``EXCLUSIVE_PROCESS`` | ``PROHIBITED``
    * ``power_limit``: ``{"watts": w}`` or ``{"percent": p, "of": "default"|"max"}``
    * ``application_clocks``: ``{"memory_mhz", "graphics_mhz"}`` or ``"default"``
    * ``locked_clocks``: ``{"min_mhz", "max_mhz"}`` or ``"reset"``
    * ``application_clock_permissions``: ``"restricted"`` | ``"unrestricted"``
    """
    errors = []
    desired = {}

    def err(option, value, allowed):
        errors.append("%s: invalid value %r; allowed: %s" % (_label(prefix, option), value, allowed))

    for key in ("persistence_mode", "ecc_mode", "auto_boost_default"):
        value = params.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            err(key, value, "true or false")
        else:
            desired[key] = value

    mode = params.get("compute_mode")
    if mode is not None:
        norm = _compute_mode(str(mode))
        if norm == "EXCLUSIVE_THREAD":
            err("compute_mode", mode, "DEFAULT, EXCLUSIVE_PROCESS or PROHIBITED (EXCLUSIVE_THREAD was removed "
                                      "from CUDA and nvidia-smi marks it deprecated)")
        elif norm not in COMPUTE_MODES:
            err("compute_mode", mode, "DEFAULT, EXCLUSIVE_PROCESS or PROHIBITED")
        else:
            desired["compute_mode"] = norm

    watts = params.get("power_limit_watts")
    percent = params.get("power_limit_percent")
    if watts is not None and percent is not None:
        errors.append("%s and %s are mutually exclusive; set one of them" % (
            _label(prefix, "power_limit_watts"), _label(prefix, "power_limit_percent")))
    elif watts is not None:
        if not _is_number(watts) or watts <= 0:
            err("power_limit_watts", watts, "a number of watts greater than 0 (and within the GPU's "
                                            "power.min_limit..power.max_limit)")
        else:
            desired["power_limit"] = {"watts": float(watts)}
    elif percent is not None:
        of = params.get("power_limit_percent_of") or "default"
        if not _is_number(percent) or percent <= 0 or percent > 100:
            err("power_limit_percent", percent, "a percentage greater than 0 and at most 100")
        elif of not in ("default", "max"):
            err("power_limit_percent_of", of, "default or max")
        else:
            desired["power_limit"] = {"percent": float(percent), "of": of}

    app = params.get("application_clocks")
    if app is not None:
        if app == "default":
            desired["application_clocks"] = "default"
        elif isinstance(app, dict) and set(app) <= {"memory_mhz", "graphics_mhz"}:
            mem, gr = app.get("memory_mhz"), app.get("graphics_mhz")
            bad = False
            for sub, val in (("memory_mhz", mem), ("graphics_mhz", gr)):
                if not _is_number(val) or int(val) != val or val <= 0 or val > MAX_SANE_MHZ:
                    err("application_clocks.%s" % sub, val, "a positive whole number of MHz from the GPU's "
                                                            "supported clocks (nvidia-smi -q -d SUPPORTED_CLOCKS)")
                    bad = True
            if not bad:
                desired["application_clocks"] = {"memory_mhz": int(mem), "graphics_mhz": int(gr)}
        else:
            err("application_clocks", app, "'default' or a dictionary with memory_mhz and graphics_mhz")

    locked = params.get("locked_clocks")
    if locked is not None:
        if locked == "reset":
            desired["locked_clocks"] = "reset"
        elif isinstance(locked, dict) and set(locked) <= {"min_mhz", "max_mhz"}:
            lo, hi = locked.get("min_mhz"), locked.get("max_mhz")
            bad = False
            for sub, val in (("min_mhz", lo), ("max_mhz", hi)):
                if not _is_number(val) or int(val) != val or val <= 0 or val > MAX_SANE_MHZ:
                    err("locked_clocks.%s" % sub, val, "a positive whole number of MHz up to the GPU's clocks.max.graphics")
                    bad = True
            if not bad and lo > hi:
                err("locked_clocks", locked, "min_mhz less than or equal to max_mhz")
                bad = True
            if not bad:
                desired["locked_clocks"] = {"min_mhz": int(lo), "max_mhz": int(hi)}
        else:
            err("locked_clocks", locked, "'reset' or a dictionary with min_mhz and max_mhz")

    acp = params.get("application_clock_permissions")
    if acp is not None:
        if acp not in ("restricted", "unrestricted"):
            err("application_clock_permissions", acp, "restricted or unrestricted")
        else:
            desired["application_clock_permissions"] = acp
    return desired, errors


# ---------------------------------------------------------------------------
# Selecting GPUs
# ---------------------------------------------------------------------------

_BUS_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def _bus_key(text):
    match = _BUS_RE.match((text or "").strip())
    if not match:
        return None
    dom, bus, dev, fn = match.groups()
    return (int(dom or "0", 16), int(bus, 16), int(dev, 16), int(fn))


def select_gpus(gpus, selectors, prefix=""):
    """Resolve selectors (``all``, index, UUID, PCI bus id) -> (list of GPU dicts, errors)."""
    selectors = ["all"] if not selectors else list(selectors)
    if any(str(s).strip().lower() == "all" for s in selectors):
        if len(selectors) > 1:
            return [], ["%s: 'all' cannot be combined with other selectors, got %r" % (_label(prefix, "gpus"), selectors)]
        return list(gpus), []
    chosen, errors = [], []
    for sel in selectors:
        text = str(sel).strip()
        match = None
        if re.match(r"^\d+$", text) and len(text) <= 3:
            match = [g for g in gpus if g["index"] == int(text)]
        elif text.upper().startswith("GPU-"):
            match = [g for g in gpus if (g["uuid"] or "").lower() == text.lower()]
        elif _bus_key(text) is not None:
            match = [g for g in gpus if _bus_key(g["pci_bus_id"]) == _bus_key(text)]
        if not match:
            errors.append("%s: no GPU matches %r; allowed: 'all', an index (%s), a UUID (GPU-...) or a PCI bus id (%s)" % (
                _label(prefix, "gpus"), sel, describe_indices(gpus),
                ", ".join(g["pci_bus_id"] or "?" for g in gpus[:8]) + (", ..." if len(gpus) > 8 else "")))
            continue
        for g in match:
            if g not in chosen:
                chosen.append(g)
    chosen.sort(key=lambda g: g["index"])
    return chosen, errors


def describe_indices(gpus):
    idx = sorted(g["index"] for g in gpus if g["index"] is not None)
    if not idx:
        return "none: no GPU found"
    if idx == list(range(idx[0], idx[-1] + 1)) and len(idx) > 2:
        return "%d-%d" % (idx[0], idx[-1])
    return ", ".join(str(i) for i in idx)


# ---------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------

def gpu_label(gpu):
    return "GPU %s (%s, %s)" % (gpu["index"], gpu["pci_bus_id"], gpu["name"])


def resolve_power(spec, gpu):
    """Desired power limit in watts for one GPU, or (None, reason) when it cannot be resolved."""
    if "watts" in spec:
        return spec["watts"], None
    base = gpu["power_default_limit_w"] if spec["of"] == "default" else gpu["power_max_limit_w"]
    if base is None:
        return None, "the GPU reports no power.%s_limit" % spec["of"]
    # Whole watts: what a person would type, and what the boot unit re-applies.
    return float(int(base * spec["percent"] / 100.0 + 0.5)), None


def _unsupported_reason(setting, gpu, branch):
    """Why a setting cannot be managed on this GPU/driver, or None."""
    una = gpu["unavailable"]
    if setting == "application_clock_permissions":
        if branch is not None and branch >= ACP_REMOVED_BRANCH:
            return ("nvidia-smi -acp/--application-clock-permissions was removed in the R5xx drivers (driver %s "
                    "has no such option); since then only root may change application clocks, so there is "
                    "nothing to set" % branch)
        return ("application-clock permissions cannot be read back through nvidia-smi --query-gpu, so they "
                "cannot be managed idempotently; drivers from R%d removed the option" % ACP_REMOVED_BRANCH)
    if setting == "application_clocks":
        reason = una.get("application_clocks")
        if reason == "deprecated" or (branch is not None and branch >= APP_CLOCKS_DEPRECATED_BRANCH
                                      and gpu["application_clocks"] is None):
            return ("application clocks are deprecated on driver branch %s (nvidia-smi reports "
                    "'[Requested functionality has been deprecated]'); use locked_clocks instead" % branch)
        if gpu["application_clocks"] is None:
            return "the GPU reports application clocks as %s" % (reason or "unavailable")
        return None
    if setting == "power_limit":
        if gpu["power_limit_w"] is None or gpu["power_min_limit_w"] is None or gpu["power_max_limit_w"] is None:
            return ("the GPU reports its power limit as %s (power management is not available on this GPU)"
                    % (una.get("power_limit") or "unavailable"))
        return None
    if setting == "persistence_mode" and gpu["persistence_mode"] is None:
        return "the GPU reports persistence mode as %s" % (una.get("persistence_mode") or "unavailable")
    if setting == "ecc_mode" and gpu["ecc_mode"] is None:
        return "the GPU reports ECC mode as %s (no ECC memory)" % (una.get("ecc_mode") or "unavailable")
    if setting == "compute_mode" and gpu["compute_mode"] is None:
        return "the GPU reports compute mode as %s" % (una.get("compute_mode") or "unavailable")
    return None


def plan(gpus, desired, branch=None, supported_clocks=None, locked_record=None, auto_boost=None, prefix=""):
    """Decide what to change on each selected GPU.

    ``gpus``: selected settings dicts (:func:`current_settings`).
    ``supported_clocks``: ``{uuid: {mem: set(graphics)}}`` (needed for application clocks).
    ``locked_record``: ``{uuid: {"min_mhz", "max_mhz"} | None}``: what this module last locked
    in this boot (there is no nvidia-smi field for locked clocks); None = unknown.
    ``auto_boost``: ``{uuid: bool | None}`` current auto-boost default (None = not reported).

    Returns ``{"gpus": [...], "errors": [...], "unsupported": [...]}``.  Errors are limit
    violations: when there is any, the module must not touch any GPU.
    """
    supported_clocks = supported_clocks or {}
    locked_record = locked_record or {}
    auto_boost = auto_boost or {}
    keyed, unsupported, out = [], [], []

    def limit_error(text, gpu):
        """``text`` has a ``{gpu}`` placeholder; identical texts for several GPUs are merged."""
        keyed.append((text, gpu))

    for gpu in gpus:
        entry = {"index": gpu["index"], "uuid": gpu["uuid"], "pci_bus_id": gpu["pci_bus_id"],
                 "name": gpu["name"], "target": {}, "changes": [], "unsupported": [], "pending": []}
        for setting in SETTINGS:
            if setting not in desired:
                continue
            want = desired[setting]
            option = _label(prefix, OPTION_OF[setting])
            reason = _unsupported_reason(setting, gpu, branch)
            if setting == "auto_boost_default" and auto_boost.get(gpu["uuid"]) is None:
                reason = ("the GPU reports the auto-boost default as N/A: setting it is not supported on this "
                          "GPU (data-centre GPUs since Volta)")
            if reason:
                item = {"index": gpu["index"], "uuid": gpu["uuid"], "setting": setting, "reason": reason}
                entry["unsupported"].append(item)
                unsupported.append(item)
                continue

            if setting == "persistence_mode":
                entry["target"][setting] = want
                if gpu["persistence_mode"] != want:
                    entry["changes"].append(_change(setting, gpu["persistence_mode"], want, setting_argv(setting, want)))
            elif setting == "ecc_mode":
                entry["target"][setting] = want
                pending = gpu["ecc_mode"]["pending"]
                if pending != want:
                    entry["changes"].append(_change(setting, gpu["ecc_mode"]["current"], want, setting_argv(setting, want)))
                if gpu["ecc_mode"]["current"] != want:
                    entry["pending"].append("ecc_mode: %s now, %s after the GPU is reset or the node reboots"
                                            % (_onoff(gpu["ecc_mode"]["current"]), _onoff(want)))
            elif setting == "compute_mode":
                entry["target"][setting] = want
                if gpu["compute_mode"] != want:
                    entry["changes"].append(_change(setting, gpu["compute_mode"], want, setting_argv(setting, want)))
            elif setting == "power_limit":
                watts, why = resolve_power(want, gpu)
                if watts is None:
                    item = {"index": gpu["index"], "uuid": gpu["uuid"], "setting": setting, "reason": why}
                    entry["unsupported"].append(item)
                    unsupported.append(item)
                    continue
                lo, hi = gpu["power_min_limit_w"], gpu["power_max_limit_w"]
                if watts < lo - POWER_TOLERANCE_W or watts > hi + POWER_TOLERANCE_W:
                    shown = ("%s W" % _fmt_w(watts)) if "watts" in want else (
                        "%s%% of power.%s_limit = %s W" % (_fmt_w(want["percent"]), want["of"], _fmt_w(watts)))
                    opt = option if "watts" in want else _label(prefix, "power_limit_percent")
                    limit_error("%s: %s is outside the power limits of {gpu}; allowed: %.2f-%.2f W" % (
                        opt, shown, lo, hi), gpu)
                    continue
                entry["target"]["power_limit_w"] = watts
                if abs(gpu["power_limit_w"] - watts) > POWER_TOLERANCE_W:
                    entry["changes"].append(_change("power_limit_w", gpu["power_limit_w"], watts,
                                                    setting_argv("power_limit_w", watts)))
            elif setting == "application_clocks":
                if want == "default":
                    target = gpu["default_application_clocks"]
                    entry["target"][setting] = target
                    if target is not None and gpu["application_clocks"] != target:
                        entry["changes"].append(_change(setting, gpu["application_clocks"], target,
                                                        setting_argv(setting, "default")))
                    continue
                table = supported_clocks.get(gpu["uuid"])
                if table is not None:
                    graphics = table.get(want["memory_mhz"])
                    if graphics is None:
                        limit_error("%s: memory clock %d MHz is not supported by {gpu}; allowed memory clocks: %s MHz" % (
                            _label(prefix, "application_clocks.memory_mhz"), want["memory_mhz"],
                            ", ".join(str(m) for m in sorted(table, reverse=True))), gpu)
                        continue
                    if want["graphics_mhz"] not in graphics:
                        limit_error("%s: graphics clock %d MHz is not supported with memory %d MHz by {gpu}; "
                                    "allowed: %s MHz in the steps listed by nvidia-smi -q -d SUPPORTED_CLOCKS" % (
                                        _label(prefix, "application_clocks.graphics_mhz"), want["graphics_mhz"],
                                        want["memory_mhz"], _range_text(graphics)), gpu)
                        continue
                entry["target"][setting] = dict(want)
                if gpu["application_clocks"] != want:
                    entry["changes"].append(_change(setting, gpu["application_clocks"], dict(want),
                                                    setting_argv(setting, want)))
            elif setting == "locked_clocks":
                before = locked_record.get(gpu["uuid"])
                if want == "reset":
                    entry["target"][setting] = None
                    # Unknown history (None record) counts as locked: -rgc is harmless when nothing is locked,
                    # but only a known-unlocked GPU is reported unchanged.
                    if gpu["uuid"] not in locked_record or before is not None:
                        entry["changes"].append(_change(setting, before, None, setting_argv(setting, None)))
                    continue
                table = supported_clocks.get(gpu["uuid"])
                top = gpu["max_clocks"]["graphics_mhz"] if gpu["max_clocks"] else None
                allowed_gr = set()
                for grs in (table or {}).values():
                    allowed_gr |= grs
                lowest = min(allowed_gr) if allowed_gr else None
                if top is not None and want["max_mhz"] > top:
                    limit_error("%s: %d MHz is above the maximum graphics clock of {gpu}; allowed: %s-%d MHz" % (
                        _label(prefix, "locked_clocks.max_mhz"), want["max_mhz"], lowest or 0, top), gpu)
                    continue
                if lowest is not None and want["min_mhz"] < lowest:
                    limit_error("%s: %d MHz is below the lowest supported graphics clock of {gpu}; allowed: %s-%s MHz" % (
                        _label(prefix, "locked_clocks.min_mhz"), want["min_mhz"], lowest, top or "?"), gpu)
                    continue
                entry["target"][setting] = dict(want)
                if before != want:
                    entry["changes"].append(_change(setting, before, dict(want), setting_argv(setting, want)))
            elif setting == "auto_boost_default":
                entry["target"][setting] = want
                if auto_boost.get(gpu["uuid"]) != want:
                    entry["changes"].append(_change(setting, auto_boost.get(gpu["uuid"]), want,
                                                    setting_argv(setting, want)))
        out.append(entry)
    return {"gpus": out, "errors": merge_errors(keyed), "unsupported": unsupported}


def merge_errors(keyed):
    """[(text with {gpu}, gpu)] -> messages, one per distinct text, naming every GPU it applies to."""
    order, by_text = [], {}
    for text, gpu in keyed:
        if text not in by_text:
            order.append(text)
            by_text[text] = []
        by_text[text].append(gpu)
    messages = []
    for text in order:
        gpus = by_text[text]
        if len(gpus) == 1:
            label = gpu_label(gpus[0])
        else:
            names = sorted(set(g["name"] or "?" for g in gpus))
            label = "GPUs %s (%s)" % (describe_indices(gpus), ", ".join(names))
        messages.append(text.replace("{gpu}", label))
    return messages


def _range_text(values):
    vals = sorted(values)
    if len(vals) > 6:
        step = vals[1] - vals[0]
        if all(b - a == step for a, b in zip(vals, vals[1:])):
            return "%d-%d in steps of %d" % (vals[0], vals[-1], step)
        return "%d, %d, %d ... %d, %d" % (vals[0], vals[1], vals[2], vals[-2], vals[-1])
    return ", ".join(str(v) for v in vals)


def _onoff(value):
    return "enabled" if value else "disabled"


def _change(setting, before, after, args):
    return {"setting": setting, "before": before, "after": after, "args": list(args)}


def group_commands(planned):
    """Group identical changes: ``[(setting, args, [uuid, ...])]`` in apply order.

    ``nvidia-smi -i`` takes a comma-separated list, so eight GPUs going to 300 W cost one call.
    """
    order = list(SETTINGS) + ["power_limit_w"]
    groups = {}
    for gpu in planned["gpus"]:
        for change in gpu["changes"]:
            key = (change["setting"], tuple(change["args"]))
            groups.setdefault(key, []).append(gpu["uuid"])

    def rank(key):
        setting = key[0]
        return order.index("power_limit" if setting == "power_limit_w" else setting)

    return [(key[0], list(key[1]), groups[key]) for key in sorted(groups, key=lambda k: (rank(k), k[1]))]


def count_changes(planned):
    return sum(len(g["changes"]) for g in planned["gpus"])


# ---------------------------------------------------------------------------
# Setter output and read-back
# ---------------------------------------------------------------------------

_NOT_SUPPORTED = re.compile(r"not supported", re.IGNORECASE)
_PERMISSION = re.compile(r"Insufficient Permissions|does not have permission|No permission", re.IGNORECASE)
_REFUSED = re.compile(r"is not a valid|Terminating early|Invalid combination|is not supported for GPU|"
                      r"Unable to|Failed to|ERROR", re.IGNORECASE)


def setter_problems(rc, stdout, stderr):
    """Classify a setter's output: None (fine) or ``{kind, text}``.

    nvidia-smi setters exit 0 after ``... is not supported for GPU ...`` +
    ``Treating as warning and moving on.``; they print their errors on stdout.
    kind: ``not_supported`` | ``permission`` | ``refused``.
    """
    text = "\n".join(t for t in (stdout, stderr) if t)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    bad = [ln for ln in lines if _PERMISSION.search(ln) or _REFUSED.search(ln) or _NOT_SUPPORTED.search(ln)]
    if rc == 0 and not bad:
        return None
    summary = "; ".join(bad) if bad else "; ".join(lines) or "exit code %s" % rc
    if any(_PERMISSION.search(ln) for ln in lines) or rc == 4:
        return {"kind": "permission", "text": summary}
    if any(_NOT_SUPPORTED.search(ln) for ln in bad) and not any("Specified clock combination" in ln for ln in bad):
        return {"kind": "not_supported", "text": summary}
    return {"kind": "refused", "text": summary}


def readback_value(setting, gpu, locked_record=None, auto_boost=None):
    """The value of a planned setting as read back after applying."""
    if setting == "persistence_mode":
        return gpu["persistence_mode"]
    if setting == "ecc_mode":
        return gpu["ecc_mode"]["pending"] if gpu["ecc_mode"] else None
    if setting == "compute_mode":
        return gpu["compute_mode"]
    if setting == "power_limit_w":
        return gpu["power_limit_w"]
    if setting == "application_clocks":
        return gpu["application_clocks"]
    if setting == "locked_clocks":
        return (locked_record or {}).get(gpu["uuid"])
    if setting == "auto_boost_default":
        return (auto_boost or {}).get(gpu["uuid"])
    return None


def verify(planned, after_by_uuid, locked_record=None, auto_boost=None):
    """Compare the read-back state with the plan.  Returns a list of mismatch messages."""
    problems = []
    for entry in planned["gpus"]:
        gpu = after_by_uuid.get(entry["uuid"])
        if gpu is None:
            problems.append("GPU %s (%s) is missing from the read-back" % (entry["index"], entry["uuid"]))
            continue
        for change in entry["changes"]:
            setting = change["setting"]
            if setting == "locked_clocks":
                continue  # no nvidia-smi field reads it: the setter's output is the only evidence
            got = readback_value(setting, gpu, locked_record, auto_boost)
            want = change["after"]
            if setting == "power_limit_w":
                same = got is not None and abs(got - want) <= POWER_TOLERANCE_W
            elif setting == "auto_boost_default" and got is None:
                same = True  # not readable here
            else:
                same = got == want
            if not same:
                problems.append("%s: %s reads %r after setting %r" % (gpu_label(gpu), setting, got, want))
    return problems


def settings_view(gpu, locked=None, auto_boost=None):
    """The managed settings of one GPU, as returned in before/after."""
    view = {
        "persistence_mode": gpu["persistence_mode"],
        "power_limit_w": gpu["power_limit_w"],
        "power_default_limit_w": gpu["power_default_limit_w"],
        "power_min_limit_w": gpu["power_min_limit_w"],
        "power_max_limit_w": gpu["power_max_limit_w"],
        "application_clocks": gpu["application_clocks"],
        "compute_mode": gpu["compute_mode"],
        "ecc_mode_current": gpu["ecc_mode"]["current"] if gpu["ecc_mode"] else None,
        "ecc_mode_pending": gpu["ecc_mode"]["pending"] if gpu["ecc_mode"] else None,
    }
    if locked is not None:
        view["locked_clocks"] = locked
    if auto_boost is not None:
        view["auto_boost_default"] = auto_boost
    return view


def simulate_after(gpu_view, entry):
    """What the settings view will be once the planned changes are applied (check mode)."""
    after = dict(gpu_view)
    for change in entry["changes"]:
        setting = change["setting"]
        if setting == "ecc_mode":
            after["ecc_mode_pending"] = change["after"]
        elif setting in after or setting in ("locked_clocks", "auto_boost_default"):
            after[setting] = change["after"]
    return after


def diff_text(entries, key):
    """Render before/after per GPU as stable text for Ansible's diff callback."""
    lines = []
    for entry in entries:
        lines.append("# GPU %s %s %s" % (entry["index"], entry["uuid"], entry["pci_bus_id"]))
        view = entry[key]
        for name in sorted(view):
            lines.append("%s: %s" % (name, _diff_value(view[name])))
    return "\n".join(lines) + "\n"


def _diff_value(value):
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s: %s" % (k, value[k]) for k in sorted(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return "%.2f" % value
    return str(value)


# ---------------------------------------------------------------------------
# Locked-clocks record (no nvidia-smi field reports locked clocks)
# ---------------------------------------------------------------------------

def boot_id(path=BOOT_ID_PATH):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def load_locked_record(path, boot_id_path=BOOT_ID_PATH):
    """{uuid: pair|None} for this boot; {} when there is no record for this boot."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("boot_id") != boot_id(boot_id_path):
        return {}
    gpus = data.get("gpus")
    return dict(gpus) if isinstance(gpus, dict) else {}


def save_locked_record(path, record, boot_id_path=BOOT_ID_PATH):
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    tmp = "%s.tmp" % path
    with open(tmp, "w") as handle:
        json.dump({"boot_id": boot_id(boot_id_path), "gpus": record}, handle, indent=1, sort_keys=True)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


# ---------------------------------------------------------------------------
# Boot-time reapply: planned by the module (RV reapply), run by gpu_tuning's boot script
# ---------------------------------------------------------------------------

def readback_row(uuid, values, columns):
    """One ``csv,noheader,nounits`` row (uuid first) for ``values`` ({setting: value}), or None
    when a column's setting has no value."""
    cells = [uuid]
    for setting, _field, fmt in columns:
        value = values.get(setting)
        if value is None:
            return None
        cells.append(fmt(value))
    return ", ".join(cells)


def reapply_plan(planned):
    """Commands and read-back that restore the declared volatile settings after a reboot."""
    groups = {}
    for entry in planned["gpus"]:
        target = entry["target"]
        for setting in VOLATILE_SETTINGS:
            if setting not in target:
                continue
            if setting == "application_clocks" and target[setting] is None:
                continue
            args = setting_argv(setting, target[setting])
            groups.setdefault((setting, tuple(args)), []).append(entry["uuid"])
    commands = []
    for key in sorted(groups, key=lambda k: (VOLATILE_SETTINGS.index(k[0]), k[1])):
        commands.append(["-i", ",".join(groups[key])] + list(key[1]))
    used = [col for col in READBACK_COLUMNS
            if any(col[0] in e["target"] and e["target"][col[0]] is not None for e in planned["gpus"])]
    rows, verify_uuids = [], []
    for entry in planned["gpus"]:
        row = readback_row(entry["uuid"], entry["target"], used)
        if row is not None:
            rows.append(row)
            verify_uuids.append(entry["uuid"])
    locked = {}
    for entry in planned["gpus"]:
        if "locked_clocks" in entry["target"]:
            locked[entry["uuid"]] = entry["target"]["locked_clocks"]
    return {"commands": commands, "query_fields": ["uuid"] + [col[1] for col in used] if rows else [],
            "expected_rows": sorted(rows), "uuids": [e["uuid"] for e in planned["gpus"]],
            "verify_uuids": verify_uuids, "locked_clocks": locked}


def run_reapply(reapply, run, record_path, boot_id_path=BOOT_ID_PATH, log=None):
    """Run a :func:`reapply_plan` on the node (the gpu_tuning boot script).

    ``run(args)`` runs nvidia-smi with ``args`` and returns ``(rc, stdout, stderr)``.  Returns a
    list of problems (empty: the GPUs are in the declared state).  Setters are checked by their
    output as well as their exit code (:func:`setter_problems`); the read-back is parsed with
    ``nvidia_smi_parse`` and printed through :data:`READBACK_COLUMNS`, as the plan printed it.
    """
    log = log or (lambda _line: None)
    for args in reapply["commands"]:
        rc, out, err = run(args)
        for line in (out or "").splitlines():
            log(line)
        problem = setter_problems(rc, out, err)
        if problem is not None:
            return ["nvidia-smi %s: %s" % (" ".join(args), problem["text"])]
    if reapply.get("locked_clocks"):
        save_locked_record(record_path, reapply["locked_clocks"], boot_id_path)
    if not reapply.get("expected_rows"):
        return []
    fields = list(reapply["query_fields"])
    rc, out, err = run(["--query-gpu=" + ",".join(fields), "--format=csv", "-i", ",".join(reapply["verify_uuids"])])
    if rc != 0:
        return ["nvidia-smi --query-gpu failed (rc=%s): %s" % (rc, (err or out or "").strip())]
    gpus, errors = P.gpus_from_query(out, fields, header=True)
    if errors:
        return ["cannot parse the read-back: %s" % "; ".join(errors)]
    columns = [col for col in READBACK_COLUMNS if col[1] in fields]
    actual = []
    for gpu in gpus:
        row = readback_row(gpu["uuid"], current_settings(gpu), columns)
        actual.append(row if row is not None else "%s, (unreadable)" % gpu["uuid"])
    if sorted(actual) != reapply["expected_rows"]:
        return ["the GPUs are not in the declared state; declared (%s):\n%s\nread back:\n%s"
                % (",".join(fields), "\n".join(reapply["expected_rows"]), "\n".join(sorted(actual)))]
    return []
