# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the dgxops.fleet.nvidia_driver role's settings.

Called by the ``dgxops.fleet.validate`` action (area ``nvidia_driver``) as the role's first
task, before any host is changed.  Checks:

* ``nvidia_driver_branch``: explicit and numeric (no default branch: stale defaults are the
  anchors' most common failure); whether the repository carries it is checked on the node with
  apt before any package changes;
* ``nvidia_driver_version``: empty or an upstream version inside the branch;
* ``nvidia_driver_flavour``: auto | open | proprietary, and whether the branch / GPU allows it;
* ``nvidia_driver_modprobe_options``: known ``NVreg_*`` names with typed values, unknown names
  only when listed in ``nvidia_driver_modprobe_allow_unknown``;
* the repository settings (URL scheme, signed unless a local ``file:`` repository).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.module_utils import driver_support
from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_nvidia_persistenced
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import (
    ValidationResult,
    as_bool,
    as_int,
    check_distribution,
    int_allowed,
    is_bool,
    is_int,
)

FLAVOURS = ("auto", "open", "proprietary")
LAYOUTS = ("", "ubuntu", "debian")
# first branch with open kernel modules (R515); first where NVIDIA makes them the default (R560)
OPEN_MIN_BRANCH = 515
OPEN_DEFAULT_BRANCH = 560
MIN_BRANCH = 470
# GPU families the proprietary modules do not support (Grace Hopper / Blackwell need the open ones)
OPEN_ONLY_FAMILIES = ("gh200", "gb10", "gb200", "gb300", "b100", "b200", "b300", "rtx_pro")

_BRANCH_RE = re.compile(r"^[0-9]{3}$")
_VERSION_RE = re.compile(r"^([0-9]{3})\.[0-9]{1,3}(\.[0-9]{1,3})?$")
_FPR_RE = re.compile(r"^[0-9A-F]{40}$")
_OPTION_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE_STRING_RE = re.compile(r"^[^\s\"'\\#]+$")

# Known nvidia.ko parameters: name -> (kind, detail).
#   bool01: 0/1 (YAML booleans accepted); uint: (min, max); enum: allowed ints; path; string
KNOWN_OPTIONS = {
    "NVreg_EnablePCIeGen3": ("bool01", None),
    "NVreg_UsePageAttributeTable": ("bool01", None),
    "NVreg_RestrictProfilingToAdminUsers": ("bool01", None),
    "NVreg_PreserveVideoMemoryAllocations": ("bool01", None),
    "NVreg_InitializeSystemMemoryAllocations": ("bool01", None),
    "NVreg_EnableStreamMemOPs": ("bool01", None),
    "NVreg_EnableMSI": ("bool01", None),
    "NVreg_EnableResizableBar": ("bool01", None),
    "NVreg_NvLinkDisable": ("bool01", None),
    "NVreg_OpenRmEnableUnsupportedGpus": ("bool01", None),
    "NVreg_EnableS0ixPowerManagement": ("bool01", None),
    "NVreg_ModifyDeviceFiles": ("bool01", None),
    "NVreg_EnableGpuFirmware": ("enum", (0, 1, 18)),
    "NVreg_DynamicPowerManagement": ("enum", (0, 1, 2, 3)),
    "NVreg_DeviceFileUID": ("uint", (0, 4294967294)),
    "NVreg_DeviceFileGID": ("uint", (0, 4294967294)),
    "NVreg_DeviceFileMode": ("mode", None),
    "NVreg_TemporaryFilePath": ("path", None),
    "NVreg_RegistryDwords": ("string", None),
    "NVreg_RmMsg": ("string", None),
}

# Advice that is outdated for data-centre GPUs: accepted, with a warning.
OUTDATED_OPTIONS = {
    "NVreg_EnablePCIeGen3": (
        "NVreg_EnablePCIeGen3 only forced PCIe Gen3 on Kepler-era GPUs behind chipsets the driver "
        "distrusted; A100/H100/H200 negotiate Gen4/Gen5 without it (guide 000 section 2.1 advice "
        "is outdated). Check the link with nvidia-smi -q (PCIe Generation)."),
}


def _branch(value):
    if is_bool(value):
        return None
    if isinstance(value, int):
        value = str(value)
    if isinstance(value, str) and _BRANCH_RE.match(value.strip()):
        return int(value.strip())
    return None


def _option_value(name, value, kind, detail, result, variable):
    """Return the rendered value or None after recording an error."""
    var = "%s[%s]" % (variable, name)
    if kind == "bool01":
        if is_bool(value):
            return "1" if value else "0"
        if is_int(value) and value in (0, 1):
            return str(value)
        if isinstance(value, str) and value.strip() in ("0", "1"):
            return value.strip()
        result.error(var, value, "0 or 1 (or a YAML boolean)")
        return None
    if kind in ("uint", "enum"):
        number = None
        if is_int(value):
            number = value
        elif isinstance(value, str) and re.match(r"^(0x[0-9a-fA-F]+|[0-9]+)$", value.strip()):
            number = int(value.strip(), 0) if value.strip().startswith("0x") else int(value.strip(), 10)
        if kind == "uint":
            low, high = detail
            if number is None or not low <= number <= high:
                result.error(var, value, "an integer from %d to %d" % (low, high))
                return None
        elif number is None or number not in detail:
            result.error(var, value, "one of %s" % ", ".join(str(d) for d in detail))
            return None
        return str(number)
    if kind == "mode":
        if is_int(value) and 0 <= value <= 0o777:
            # YAML 1.1 reads 0660 as octal 432; render it back in octal
            return "0%o" % value
        if isinstance(value, str) and re.match(r"^0[0-7]{3}$", value.strip()):
            return value.strip()
        result.error(var, value, "an octal file mode string such as \"0660\"")
        return None
    if kind == "path":
        if isinstance(value, str) and value.startswith("/") and _SAFE_STRING_RE.match(value):
            return value
        result.error(var, value, "an absolute path without spaces or quotes")
        return None
    # string
    if isinstance(value, str) and value and _SAFE_STRING_RE.match(value):
        return value
    if is_int(value):
        return str(value)
    result.error(var, value, "a non-empty string without whitespace, quotes, '#' or backslashes")
    return None


def validate_modprobe_options(options, allow_unknown, result,
                              variable="nvidia_driver_modprobe_options",
                              allow_variable="nvidia_driver_modprobe_allow_unknown"):
    rendered = {}
    if not isinstance(allow_unknown, list) or not all(
            isinstance(n, str) and _OPTION_NAME_RE.match(n) for n in allow_unknown):
        result.error(allow_variable, allow_unknown, "a list of kernel module parameter names")
        allow_unknown = []
    if options is None:
        options = {}
    if not isinstance(options, dict):
        result.error(variable, options, "a dictionary of nvidia.ko parameter name to value")
        return rendered
    for name in sorted(options, key=str):
        value = options[name]
        if not isinstance(name, str) or not _OPTION_NAME_RE.match(name):
            result.error(variable, name, "kernel module parameter names (letters, digits, _)")
            continue
        if name in KNOWN_OPTIONS:
            kind, detail = KNOWN_OPTIONS[name]
        elif name in allow_unknown:
            kind, detail = "string", None
        else:
            result.error("%s[%s]" % (variable, name), name,
                         "known nvidia.ko parameters (%s), or add the name to %s"
                         % (", ".join(sorted(KNOWN_OPTIONS)), allow_variable))
            continue
        if value is None:
            result.error("%s[%s]" % (variable, name), value, "a value (remove the key to drop the option)")
            continue
        text = _option_value(name, value, kind, detail, result, variable)
        if text is not None:
            rendered[name] = text
            if name in OUTDATED_OPTIONS:
                result.warn(OUTDATED_OPTIONS[name])
    return rendered


def check_branch_supports_gpu(result, raw_branch, branch, family):
    """Refuse a driver branch that does not support the node's GPU family (driver_support)."""
    minimum = driver_support.unsupported(branch, family)
    if minimum is not None:
        result.error("nvidia_driver_branch", raw_branch,
                     "a branch >= %d for %s GPUs (R%d does not support them: the kernel module would refuse "
                     "the GPU and nvidia-smi would show none)" % (minimum, family, branch))


def validate(config):
    result = ValidationResult()
    norm = {}
    check_distribution(result, config, config.get("__nvidia_driver_supported"),
                       config.get("__nvidia_driver_repo_arches") or {})

    raw_branch = config.get("nvidia_driver_branch")
    branch = _branch(raw_branch)
    if raw_branch in (None, "") or branch is None:
        result.error("nvidia_driver_branch", raw_branch,
                     "an explicit three-digit driver branch such as \"580\" (no default: pick the "
                     "branch your CUDA and fabric need; the repository is checked for it)")
    elif branch < MIN_BRANCH:
        result.error("nvidia_driver_branch", raw_branch, "a branch >= %d" % MIN_BRANCH)
        branch = None
    norm["branch"] = branch

    version = config.get("nvidia_driver_version") or ""
    if version:
        if not isinstance(version, str) or not _VERSION_RE.match(version):
            result.error("nvidia_driver_version", version,
                         "empty (newest of the branch) or an upstream version such as \"580.95.05\"")
            version = ""
        elif branch is not None and int(version.split(".")[0]) != branch:
            result.error("nvidia_driver_version", version,
                         "a version of branch %d (nvidia_driver_branch), e.g. \"%d.x.y\"" % (branch, branch))
            version = ""
    norm["version"] = version

    family = config.get("model_family") or None
    flavour = config.get("nvidia_driver_flavour", "auto")
    if flavour not in FLAVOURS:
        result.error("nvidia_driver_flavour", flavour, ", ".join(FLAVOURS))
        flavour = None
    elif branch is not None:
        if flavour == "open" and branch < OPEN_MIN_BRANCH:
            result.error("nvidia_driver_flavour", flavour,
                         "proprietary or auto for branch %d (open kernel modules start at R%d)"
                         % (branch, OPEN_MIN_BRANCH))
        if family in OPEN_ONLY_FAMILIES:
            if flavour == "proprietary":
                result.error("nvidia_driver_flavour", flavour,
                             "open or auto: %s GPUs are supported only by the open kernel modules" % family)
            if branch < OPEN_MIN_BRANCH:
                result.error("nvidia_driver_branch", raw_branch,
                             "a branch >= %d for %s GPUs (open kernel modules only)" % (OPEN_MIN_BRANCH, family))
    norm["flavour"] = flavour
    check_branch_supports_gpu(result, raw_branch, branch, family)
    # what auto picks when nothing is installed yet
    if branch is not None:
        norm["flavour_default"] = (
            "open" if branch >= OPEN_DEFAULT_BRANCH or family in OPEN_ONLY_FAMILIES else "proprietary")
        norm["open_supported"] = branch >= OPEN_MIN_BRANCH
        norm["proprietary_supported"] = family not in OPEN_ONLY_FAMILIES

    layout = config.get("nvidia_driver_package_layout", "")
    if layout not in LAYOUTS:
        result.error("nvidia_driver_package_layout", layout, "\"\" (from the distribution), ubuntu, debian")
    norm["layout"] = layout

    nvswitch = config.get("nvidia_driver_nvswitch")
    if nvswitch is not None:
        # strict: detect.yml uses the value as it is (a string "false" would be taken as true)
        as_bool("nvidia_driver_nvswitch", nvswitch, result, "null (from facts), true or false", strict=True)

    repo_url = config.get("nvidia_driver_repo_url") or ""
    trusted = config.get("nvidia_driver_repo_trusted", False)
    if as_bool("nvidia_driver_repo_trusted", trusted, result, strict=True) is None:
        trusted = False
    if repo_url:
        if not isinstance(repo_url, str) or not re.match(r"^(https?://[^\s/]+/\S*|file:/\S*)$", repo_url):
            result.error("nvidia_driver_repo_url", repo_url,
                         "empty (the CUDA repository for the node's distribution and architecture), "
                         "an http(s):// URL or a file:/ path")
            repo_url = ""
        elif not repo_url.endswith("/"):
            repo_url += "/"
    norm["repo_url"] = repo_url
    if trusted and not repo_url.startswith("file:"):
        result.error("nvidia_driver_repo_trusted", trusted,
                     "false unless nvidia_driver_repo_url is a local file:/ repository (network "
                     "repositories must be signed: set nvidia_driver_repo_key_url/_fingerprint)")
    norm["trusted"] = trusted
    # what the role uses: the repository (the CUDA repository of the node's distribution and
    # architecture unless nvidia_driver_repo_url overrides it) and the package layout's names
    distro, arch = config.get("__nvidia_driver_repo_distro"), (config.get("__nvidia_driver_repo_arches") or {}).get(
        config.get("__architecture"))
    base = config.get("__nvidia_driver_repo_base")
    norm["source_url"] = repo_url or ("%s/%s/%s/" % (base, distro, arch) if base and distro and arch else "")
    norm["layout_name"] = layout or config.get("__nvidia_driver_default_layout") or ""
    norm["layout_data"] = (config.get("__nvidia_driver_layouts") or {}).get(norm["layout_name"], {})
    fpr = config.get("nvidia_driver_repo_key_fingerprint") or ""
    fpr_norm = fpr.replace(" ", "").upper() if isinstance(fpr, str) else None
    if not trusted and (fpr_norm is None or not _FPR_RE.match(fpr_norm)):
        result.error("nvidia_driver_repo_key_fingerprint", fpr,
                     "the 40-hex-digit fingerprint of the repository signing key")
    norm["key_fingerprint"] = fpr_norm or ""

    for var, low, high in (("nvidia_driver_reboot_timeout", 60, 7200),):
        as_int(var, config.get(var, 900), result, low, high, strict=True,
               allowed=int_allowed(low, high, "an integer number of seconds"))
    for var in ("nvidia_driver_reboot", "nvidia_driver_upgrade_within_branch", "nvidia_driver_kernel_headers",
                "nvidia_driver_persistenced", "nvidia_driver_fail_on_secure_boot"):
        if var in config:
            as_bool(var, config[var], result, strict=True)

    if config.get("nvidia_driver_persistenced", True) is True:
        before = len(result.errors)
        validate_nvidia_persistenced.check(config, result)
        if len(result.errors) == before:
            # what tasks/persistenced.yml need not check again in this run
            norm["persistenced"] = {"path": config.get("nvidia_driver_persistenced_path"),
                                    "user": config.get("nvidia_driver_persistenced_user")}

    norm["modprobe_options"] = validate_modprobe_options(
        config.get("nvidia_driver_modprobe_options"), config.get("nvidia_driver_modprobe_allow_unknown", []),
        result)
    result.normalized = norm
    return result
