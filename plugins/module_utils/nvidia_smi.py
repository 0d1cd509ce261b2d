# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command layer and fact gathering for nvidia-smi / NVML (stdlib only, Python >= 3.9).

* Every nvidia-smi call goes through :class:`NvidiaSmi.run`: ``module.run_command``
  with an argv list (never a shell), ``LC_ALL=C``/``LANG=C``, and a timeout.
  ``AnsibleModule.run_command`` has no timeout argument on the supported
  ansible-core versions, so the argv is wrapped with coreutils ``timeout -k 5 N``
  when that binary exists (exit 124 = timed out, 137 = had to be killed).  Without
  it the call runs unbounded and ``timeout_enforced`` is reported false.  A process
  stuck in uninterruptible sleep (a wedged GPU) cannot be killed by anyone; use the
  task-level ``timeout:`` keyword as the last line of defence.
* Exit codes follow the nvidia-smi man page (RETURN VALUE) and map to a reason
  code, a message and a fix (:data:`EXIT_CODES`).
* :func:`gather` builds ``ansible_facts.nvidia_smi`` (the contract in
  docs/development.md).  The default subset costs one nvidia-smi process.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P

C_LOCALE = {"LC_ALL": "C", "LANG": "C"}

# Where nvidia-smi is looked for after PATH, in every module (option nvidia_smi_path): driver
# packages install /usr/bin/nvidia-smi, .run installers and containers /usr/local/bin or
# /usr/local/nvidia/bin.
NVIDIA_SMI_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin", "/usr/sbin", "/bin")
# The shared option: ``nvidia_smi_path=dict(NVIDIA_SMI_PATH_SPEC)``; ``nvidia_smi`` is its old name
# in nvidia_mig and nvidia_mig_devices.
NVIDIA_SMI_PATH_SPEC = {"type": "path", "aliases": ["nvidia_smi"]}


def find_nvidia_smi(module, name_or_path=None):
    """The nvidia-smi to run: a path (with a ``/``) as given; a name (default ``nvidia-smi``)
    looked up on PATH first (``module.get_bin_path``, which adds the sbin directories), then in
    :data:`NVIDIA_SMI_DIRS`.  None when not found."""
    name = name_or_path or "nvidia-smi"
    if os.path.sep in name:
        return name
    return module.get_bin_path(name) or module.get_bin_path(name, opt_dirs=list(NVIDIA_SMI_DIRS))


# rc -> (reason code, message, fix)
EXIT_CODES = {
    2: ("invalid_argument", "nvidia-smi rejected an argument or query field (exit 2)",
        "Check the query fields against `nvidia-smi --help-query-gpu` for this driver."),
    3: ("not_supported", "the requested operation is not available on this GPU (exit 3)",
        "Nothing to fix on the node; the feature is not supported by this GPU/driver."),
    4: ("no_permission", "insufficient permissions for the requested operation (exit 4)",
        "Run the task with become: true."),
    6: ("no_devices", "nvidia-smi found no GPUs (exit 6: 'No devices were found')",
        "Check `lspci -d 10de:` for the GPUs, the nvidia kernel module (`grep nvidia /proc/modules`), "
        "and that the GPUs are not excluded or passed through elsewhere."),
    8: ("power_cables", "a GPU's external power cables are not attached (exit 8)",
        "Reseat the GPU power cables; this needs physical access."),
    9: ("driver_not_loaded", "the NVIDIA driver is not loaded (exit 9: nvidia-smi couldn't communicate with the NVIDIA driver)",
        "Load it with `modprobe nvidia` and check `dmesg | grep NVRM`; if the module is missing for "
        "`uname -r`, install kernel headers and rebuild (DKMS) or reinstall the driver, then reboot."),
    10: ("irq_issue", "the NVIDIA kernel detected an interrupt issue with a GPU (exit 10)",
         "Check `dmesg | grep NVRM` for the failing GPU; try `pci=nommconf` / BIOS MSI settings and reboot."),
    12: ("nvml_missing", "the NVML shared library (libnvidia-ml.so.1) could not be found or loaded (exit 12)",
         "Reinstall the driver's user-space libraries (package libnvidia-compute-<branch> / nvidia-driver-<branch>) "
         "so they match the kernel module."),
    13: ("nvml_function_missing", "the local NVML library lacks a function nvidia-smi needs (exit 13)",
         "nvidia-smi and libnvidia-ml.so are from different driver versions; reinstall one consistent driver."),
    14: ("inforom_corrupted", "a GPU's infoROM is corrupted (exit 14)",
         "Open an RMA with NVIDIA or the system vendor; the GPU needs an infoROM update/replacement."),
    15: ("gpu_lost", "a GPU has fallen off the bus or is otherwise inaccessible (exit 15)",
         "Check `dmesg | grep -E 'NVRM|Xid'` (Xid 79 = fallen off the bus); drain the node, then reset "
         "the GPU or power-cycle the node; repeated falls need hardware service."),
    255: ("other_error", "nvidia-smi failed with an internal or unknown error (exit 255)",
          "Check `dmesg | grep NVRM` and `nvidia-smi -q` by hand; reboot if the driver is wedged."),
    124: ("timeout", "nvidia-smi did not answer within the timeout",
          "The driver or a GPU is hung: check `dmesg | grep -E 'NVRM|Xid'`; enable persistence "
          "(nvidia-persistenced) to avoid slow initialisation; reset the GPU or reboot the node."),
    137: ("timeout", "nvidia-smi did not answer within the timeout and had to be killed",
          "The driver or a GPU is hung: check `dmesg | grep -E 'NVRM|Xid'`; reset the GPU or reboot the node."),
    127: ("not_installed", "nvidia-smi is not installed or not on PATH",
          "Install the NVIDIA driver utilities (nvidia-utils-<branch> / nvidia-driver-<branch>)."),
}

_DRIVER_TEXT = "couldn't communicate with the NVIDIA driver"


def classify(rc, stdout="", stderr=""):
    """Map an nvidia-smi result to ``None`` (success) or ``{code, message, fix, rc}``.

    Text is checked as well as the exit code: error text is printed on stdout, and
    some failures (for example ``No devices were found``) are recognisable by text.
    """
    text = "%s\n%s" % (stdout or "", stderr or "")
    if rc == 0:
        if "No devices were found" in text:
            code, message, fix = EXIT_CODES[6]
            return {"code": code, "message": message, "fix": fix, "rc": rc}
        return None
    if rc is None:
        code, message, fix = EXIT_CODES[127]
        return {"code": code, "message": message, "fix": fix, "rc": None}
    entry = EXIT_CODES.get(rc)
    if entry is None:
        if _DRIVER_TEXT in text:
            entry = EXIT_CODES[9]
        elif "GPU is lost" in text:
            entry = EXIT_CODES[15]
        elif "No devices were found" in text:
            entry = EXIT_CODES[6]
        else:
            entry = ("other_error", "nvidia-smi failed with exit code %s" % rc, EXIT_CODES[255][2])
    code, message, fix = entry
    first = next((ln.strip() for ln in (stdout or stderr or "").splitlines() if ln.strip()), "")
    if first and code not in ("timeout",):
        message = "%s; nvidia-smi said: %s" % (message, first)
    return {"code": code, "message": message, "fix": fix, "rc": rc}


class SmiResult:
    """One nvidia-smi invocation."""

    def __init__(self, argv, rc, stdout, stderr, duration_ms, error):
        self.argv = argv
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.duration_ms = duration_ms
        self.error = error

    @property
    def ok(self):
        return self.error is None

    def record(self):
        return {"argv": self.argv, "rc": self.rc, "duration_ms": round(self.duration_ms, 1),
                "error": self.error["code"] if self.error else None}


class NvidiaSmi:
    """Runs nvidia-smi through ``module.run_command`` with C locale and a timeout."""

    def __init__(self, module, binary=None, timeout=30):
        self.module = module
        self.timeout = timeout
        self.binary = find_nvidia_smi(module, binary)
        self.timeout_bin = module.get_bin_path("timeout") if timeout else None
        self.history = []

    @property
    def timeout_enforced(self):
        return bool(self.timeout_bin)

    def argv(self, args):
        cmd = [self.binary] + list(args)
        if self.timeout_bin:
            cmd = [self.timeout_bin, "-k", "5", str(int(self.timeout))] + cmd
        return cmd

    def run(self, args):
        if not self.binary or not os.path.exists(self.binary):
            res = SmiResult(["nvidia-smi"] + list(args), None, "", "", 0.0, classify(None))
            self.history.append(res)
            return res
        cmd = self.argv(args)
        start = time.monotonic()
        rc, out, err = self.module.run_command(cmd, environ_update=C_LOCALE)
        duration = (time.monotonic() - start) * 1000.0
        res = SmiResult(cmd, rc, out, err, duration, classify(rc, out, err))
        self.history.append(res)
        return res


def read_file(path):
    try:
        with open(path, "r") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def scan_nvswitch(sys_pci="/sys/bus/pci/devices", proc_dir="/proc/driver/nvidia-nvswitch/devices"):
    """NVSwitch devices visible to this OS: NVIDIA PCI class 0x0680 devices or nvswitch proc entries."""
    entries = []
    try:
        names = os.listdir(sys_pci)
    except OSError:
        names = []
    for name in names:
        base = os.path.join(sys_pci, name)
        vendor = read_file(os.path.join(base, "vendor"))
        if (vendor or "").strip().lower() != P.NVIDIA_PCI_VENDOR:
            continue
        entries.append((name, vendor, read_file(os.path.join(base, "class"))))
    found = P.nvswitch_pci_devices(entries)
    try:
        proc = sorted(os.listdir(proc_dir))
    except OSError:
        proc = []
    return {"pci": found, "proc": proc}


def cuda_version_from_libcuda():
    """CUDA driver API version via ``cuDriverGetVersion`` (ctypes, no context; ~2 ms measured).

    Returns e.g. ``"13.0"`` or None when libcuda.so.1 cannot be loaded.
    """
    try:
        import ctypes
        lib = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(value)) != 0 or value.value <= 0:
            return None
        return "%d.%d" % (value.value // 1000, (value.value % 1000) // 10)
    except Exception:  # pylint: disable=broad-except  # any load failure means "unknown"
        return None


# ---------------------------------------------------------------------------
# Subsets
# ---------------------------------------------------------------------------

SUBSETS = ("min", "gpus", "clocks", "health", "topology", "mig", "versions", "processes")
DEFAULT_SUBSETS = ("gpus",)


def resolve_subsets(requested):
    """Ansible-style gather_subset: names, ``all``, ``!name``.  Returns (set, errors)."""
    chosen = set()
    excluded = set()
    errors = []
    for item in requested or DEFAULT_SUBSETS:
        item = str(item).strip()
        neg = item.startswith("!")
        name = item[1:] if neg else item
        if name == "all":
            (excluded if neg else chosen).update(SUBSETS)
        elif name == "default":
            (excluded if neg else chosen).update(DEFAULT_SUBSETS)
        elif name in SUBSETS:
            (excluded if neg else chosen).add(name)
        else:
            errors.append("gather_subset: invalid value %r; allowed: all, default, %s (each may be negated with '!')"
                          % (item, ", ".join(SUBSETS)))
    if not chosen and excluded:
        chosen.update(DEFAULT_SUBSETS)
    chosen -= excluded
    chosen.add("min")
    if chosen & {"clocks", "health", "topology", "mig", "processes"}:
        chosen.add("gpus")
    return chosen, errors


def query_fields(subsets):
    fields = list(P.FIELDS_GPUS)
    if "clocks" in subsets:
        fields += list(P.FIELDS_CLOCKS)
    if "health" in subsets:
        fields += list(P.FIELDS_HEALTH)
    return fields


# ---------------------------------------------------------------------------
# Facts skeleton and summaries
# ---------------------------------------------------------------------------

def empty_facts():
    return {
        "gpu_count": 0, "driver_version": None, "driver_branch": None, "cuda_version": None,
        "cuda_version_source": None, "nvml_version": None, "kernel_module_version": None,
        "kernel_module_flavour": None, "kernel_module_loaded": False, "model_family": None,
        "model_families": [], "nvswitch": False, "nvswitch_count": 0, "nvswitch_source": None,
        "fabric_attached": False, "mig_capable": False, "mig_enabled": False,
        "unified_memory": False, "gpus": [],
        "health": {"ok": False, "reason": None, "rc": None, "code": None, "fix": None,
                   "issues": [], "warnings": []},
        "collection": {"backend": None, "subsets": [], "commands": [], "duration_ms": None,
                       "timeout_s": None, "timeout_enforced": None, "warnings": []},
    }


_FABRIC_ATTACHED = ("completed", "in progress", "in_progress")
_RECOVERY_OK = ("none", "")


def summarise(facts):
    """Fill the derived keys roles read (model_family, mig_capable, unified_memory, ...)."""
    gpus = facts["gpus"]
    facts["gpu_count"] = len(gpus)
    families = []
    for gpu in gpus:
        fam = P.model_family(gpu.get("name"))
        gpu["model_family"] = fam
        if fam and fam not in families:
            families.append(fam)
        gpu["mig_capable"] = gpu.get("mig_mode_current") in ("Enabled", "Disabled")
        unified = fam in P.UNIFIED_MEMORY_FAMILIES or (
            gpu.get("memory_total_mib") is None
            and (gpu.get("unavailable") or {}).get("memory_total_mib") in ("not_available", "not_supported"))
        gpu["unified_memory"] = bool(unified)
        if unified:
            gpu["memory_total_mib"] = None
    facts["model_families"] = families
    facts["model_family"] = families[0] if families else None
    facts["mig_capable"] = bool(gpus) and all(g["mig_capable"] for g in gpus)
    facts["mig_enabled"] = any(g.get("mig_mode_current") == "Enabled" for g in gpus)
    facts["unified_memory"] = bool(gpus) and any(g["unified_memory"] for g in gpus)
    facts["fabric_attached"] = any((g.get("fabric_state") or "").lower() in _FABRIC_ATTACHED for g in gpus)
    if not facts["nvswitch"] and facts["fabric_attached"]:
        facts["nvswitch"] = True
        facts["nvswitch_source"] = "gpu_fabric_state"
    facts["driver_branch"] = P.driver_branch(facts["driver_version"])
    return facts


def health_from_gpus(facts):
    """Per-GPU findings that make a node unhealthy (issues) or need attention (warnings)."""
    issues, warnings = [], []
    for gpu in facts["gpus"]:
        label = "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id"))
        action = gpu.get("recovery_action")
        if action is not None and action.strip().lower() not in _RECOVERY_OK:
            issues.append("%s: driver requests recovery action %r" % (label, action))
        if gpu.get("remapped_rows_failure"):
            issues.append("%s: row remapping failed (needs RMA)" % label)
        if gpu.get("remapped_rows_pending"):
            warnings.append("%s: row remapping pending (reset the GPU)" % label)
        if gpu.get("ecc_errors_uncorrected_volatile"):
            warnings.append("%s: %s uncorrected volatile ECC errors" % (label, gpu["ecc_errors_uncorrected_volatile"]))
        cur, pend = gpu.get("mig_mode_current"), gpu.get("mig_mode_pending")
        if cur and pend and cur != pend:
            warnings.append("%s: MIG mode %s, pending %s (reset or reboot to apply)" % (label, cur, pend))
        state = (gpu.get("fabric_state") or "").lower()
        status = (gpu.get("fabric_status") or "").lower()
        if state and state not in ("completed", "not supported") and state != "n/a":
            warnings.append("%s: NVSwitch fabric registration state %r" % (label, gpu.get("fabric_state")))
        elif state == "completed" and status and status != "success":
            issues.append("%s: NVSwitch fabric status %r (check nvidia-fabricmanager)" % (label, gpu.get("fabric_status")))
    return issues, warnings


# ---------------------------------------------------------------------------
# NVML backend (nvidia-ml-py, optional)
# ---------------------------------------------------------------------------

def import_pynvml():
    try:
        import pynvml  # pylint: disable=import-error
        return pynvml
    except Exception:  # pylint: disable=broad-except  # ImportError or a broken binding
        return None


def _nv(fn, *args):
    """Call an NVML function -> (value, reason)."""
    try:
        return fn(*args), None
    except Exception as exc:  # pylint: disable=broad-except  # pynvml.NVMLError and AttributeError
        text = str(exc).lower()
        if "not supported" in text:
            return None, "not_supported"
        if "function not found" in text or isinstance(exc, AttributeError):
            return None, "nvml_function_missing"
        if "no permission" in text:
            return None, "insufficient_permissions"
        return None, re.sub(r"[^a-z0-9]+", "_", text).strip("_") or "nvml_error"


def _s(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _milliwatts(value):
    return round(value / 1000.0, 2)


def _mode(value):
    if value is None:
        return None
    return "Enabled" if value else "Disabled"


_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def nvml_collect(nv, subsets):
    """Collect the same per-GPU keys as the CSV path through NVML.  Raises on nvmlInit failure."""
    nv.nvmlInit()
    try:
        out = {"driver_version": _s(_nv(nv.nvmlSystemGetDriverVersion)[0]),
               "nvml_version": _s(_nv(nv.nvmlSystemGetNVMLVersion)[0]),
               "cuda_version": None, "gpus": []}
        cuda = _nv(getattr(nv, "nvmlSystemGetCudaDriverVersion_v2", None) or nv.nvmlSystemGetCudaDriverVersion)[0]
        if cuda:
            out["cuda_version"] = "%d.%d" % (cuda // 1000, (cuda % 1000) // 10)
        count = nv.nvmlDeviceGetCount()
        for i in range(count):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            gpu = {"unavailable": {}}

            def put(key, value_reason, conv=None):
                value, reason = value_reason
                if value is not None and conv is not None:
                    value = conv(value)
                gpu[key] = value
                if value is None:
                    gpu["unavailable"][key] = reason or "not_available"

            put("index", (i, None))
            put("uuid", _nv(nv.nvmlDeviceGetUUID, h), _s)
            put("name", _nv(nv.nvmlDeviceGetName, h), _s)
            pci, reason = _nv(nv.nvmlDeviceGetPciInfo, h)
            bus = _s(getattr(pci, "busId", None)) if pci is not None else None
            if bus and len(bus.split(":")[0]) == 4:  # v1 struct gives 0000:xx:yy.z
                bus = "0000" + bus
            put("pci_bus_id", (bus, reason))
            put("pci_device_id", (("0x%08X" % pci.pciDeviceId) if pci is not None else None, reason))
            put("serial", _nv(nv.nvmlDeviceGetSerial, h), _s)
            put("vbios_version", _nv(nv.nvmlDeviceGetVbiosVersion, h), _s)
            put("driver_version", (out["driver_version"], None))
            put("persistence_mode", _nv(nv.nvmlDeviceGetPersistenceMode, h), bool)
            put("compute_mode", _nv(nv.nvmlDeviceGetComputeMode, h), lambda v: _COMPUTE_MODES.get(v, str(v)))
            put("compute_capability", _nv(nv.nvmlDeviceGetCudaComputeCapability, h), lambda v: "%d.%d" % tuple(v))
            mem, reason = _nv(nv.nvmlDeviceGetMemoryInfo, h)
            put("memory_total_mib", ((mem.total // (1024 * 1024)) if mem is not None else None, reason))
            put("power_limit_w", _nv(nv.nvmlDeviceGetPowerManagementLimit, h), _milliwatts)
            put("power_enforced_limit_w", _nv(nv.nvmlDeviceGetEnforcedPowerLimit, h), _milliwatts)
            put("power_default_limit_w", _nv(nv.nvmlDeviceGetPowerManagementDefaultLimit, h), _milliwatts)
            cons, reason = _nv(nv.nvmlDeviceGetPowerManagementLimitConstraints, h)
            put("power_min_limit_w", (_milliwatts(cons[0]) if cons else None, reason))
            put("power_max_limit_w", (_milliwatts(cons[1]) if cons else None, reason))
            mig, reason = _nv(nv.nvmlDeviceGetMigMode, h)
            put("mig_mode_current", (_mode(mig[0]) if mig else None, reason))
            put("mig_mode_pending", (_mode(mig[1]) if mig else None, reason))
            ecc, reason = _nv(nv.nvmlDeviceGetEccMode, h)
            put("ecc_mode_current", (_mode(ecc[0]) if ecc else None, reason))
            put("ecc_mode_pending", (_mode(ecc[1]) if ecc else None, reason))
            # nvidia-smi-only fields: present (null) so templates never meet an undefined key.
            for key in ("fabric_state", "fabric_status", "recovery_action"):
                put(key, (None, "not_collected_by_nvml"))
            if "clocks" in subsets:
                put("clocks_applications_graphics_mhz", _nv(nv.nvmlDeviceGetApplicationsClock, h, nv.NVML_CLOCK_GRAPHICS))
                put("clocks_applications_memory_mhz", _nv(nv.nvmlDeviceGetApplicationsClock, h, nv.NVML_CLOCK_MEM))
                put("clocks_default_applications_graphics_mhz", _nv(nv.nvmlDeviceGetDefaultApplicationsClock, h, nv.NVML_CLOCK_GRAPHICS))
                put("clocks_default_applications_memory_mhz", _nv(nv.nvmlDeviceGetDefaultApplicationsClock, h, nv.NVML_CLOCK_MEM))
                put("clocks_max_graphics_mhz", _nv(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_GRAPHICS))
                put("clocks_max_sm_mhz", _nv(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM))
                put("clocks_max_memory_mhz", _nv(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM))
            if "health" in subsets:
                put("temperature_c", _nv(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU))
                put("pstate", _nv(nv.nvmlDeviceGetPerformanceState, h), lambda v: "P%d" % v)
            out["gpus"].append(gpu)
        return out
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:  # pylint: disable=broad-except
            pass


# ---------------------------------------------------------------------------
# Gather
# ---------------------------------------------------------------------------

def _fail_health(facts, error):
    facts["health"].update({"ok": False, "code": error["code"], "reason": error["message"],
                            "rc": error.get("rc"), "fix": error["fix"]})


def gather(module, subsets, backend="auto", timeout=30, binary=None, proc_root="/proc",
           sys_root="/sys", pynvml_module=None, cuda_probe=None, expected_gpu_count=None, want_cuda=True):
    """Collect ``ansible_facts.nvidia_smi``.  Never raises for node-side failures."""
    start = time.monotonic()
    facts = empty_facts()
    col = facts["collection"]
    col["subsets"] = sorted(subsets)
    smi = NvidiaSmi(module, binary=binary, timeout=timeout)
    col["timeout_s"] = timeout
    col["timeout_enforced"] = smi.timeout_enforced

    # Files only: no process.
    proc_version = read_file(os.path.join(proc_root, "driver/nvidia/version"))
    drv = P.parse_proc_driver_version(proc_version)
    facts["kernel_module_flavour"] = drv["flavour"]
    facts["kernel_module_version"] = drv["version"]
    modules = P.parse_proc_modules(read_file(os.path.join(proc_root, "modules")) or "")
    facts["kernel_module_loaded"] = "nvidia" in modules or proc_version is not None
    switches = scan_nvswitch(os.path.join(sys_root, "bus/pci/devices"),
                             os.path.join(proc_root, "driver/nvidia-nvswitch/devices"))
    if switches["pci"] or switches["proc"]:
        facts["nvswitch"] = True
        facts["nvswitch_count"] = max(len(switches["pci"]), len(switches["proc"]))
        facts["nvswitch_source"] = "pci" if switches["pci"] else "proc"
    facts["driver_version"] = drv["version"]

    error = None
    if "gpus" in subsets:
        nv = None
        if backend in ("auto", "nvml"):
            nv = pynvml_module if pynvml_module is not None else import_pynvml()
            if nv is None and backend == "nvml":
                col["warnings"].append("backend=nvml but nvidia-ml-py (pynvml) is not importable; used nvidia-smi")
        data = None
        if nv is not None:
            try:
                data = nvml_collect(nv, subsets)
                col["backend"] = "nvml"
            except Exception as exc:  # pylint: disable=broad-except  # NVML init failure -> nvidia-smi
                col["warnings"].append("NVML failed (%s); fell back to nvidia-smi" % exc)
        if data is not None:
            facts["gpus"] = data["gpus"]
            facts["driver_version"] = data["driver_version"] or facts["driver_version"]
            facts["nvml_version"] = data["nvml_version"]
            if data["cuda_version"]:
                facts["cuda_version"], facts["cuda_version_source"] = data["cuda_version"], "nvml"
        else:
            col["backend"] = "nvidia-smi"
            error = _gather_csv(smi, facts, subsets)
    if "topology" in subsets and error is None:
        _gather_topology(smi, facts)
    if "mig" in subsets and error is None:
        _gather_mig(smi, facts)
    if "processes" in subsets and error is None:
        _gather_processes(smi, facts)
    if want_cuda and facts["cuda_version"] is None and "versions" not in subsets and error is None:
        # No process: ~2 ms through libcuda's cuDriverGetVersion (measured on the H200).
        cuda = (cuda_probe or cuda_version_from_libcuda)()
        if cuda:
            facts["cuda_version"], facts["cuda_version_source"] = cuda, "libcuda"
    need_version = "versions" in subsets or (want_cuda and "gpus" in subsets and facts["cuda_version"] is None)
    if need_version and error is None:
        res = smi.run(["--version"])
        if res.ok:
            ver = P.parse_version(res.stdout)
            facts["nvml_version"] = facts["nvml_version"] or ver["nvml_version"]
            facts["driver_version"] = facts["driver_version"] or ver["driver_version"]
            facts["nvidia_smi_version"] = ver["nvidia_smi_version"]
            if ver["cuda_version"] and facts["cuda_version_source"] in (None, "libcuda"):
                facts["cuda_version"], facts["cuda_version_source"] = ver["cuda_version"], "nvidia-smi --version"

    summarise(facts)
    if error is not None:
        _fail_health(facts, error)
    elif "gpus" in subsets:
        issues, warnings = health_from_gpus(facts)
        if expected_gpu_count is not None and facts["gpu_count"] != expected_gpu_count:
            issues.insert(0, "expected %d GPUs, nvidia-smi reports %d (a GPU fell off the bus or is excluded?)"
                          % (expected_gpu_count, facts["gpu_count"]))
        facts["health"]["issues"], facts["health"]["warnings"] = issues, warnings
        if issues:
            facts["health"].update({"ok": False, "code": "gpu_issues", "reason": "; ".join(issues), "rc": 0,
                                    "fix": "See health.issues; drain the node and follow the driver's recovery action."})
        else:
            facts["health"].update({"ok": True, "code": None, "reason": None, "rc": 0, "fix": None})
    else:
        ok = facts["kernel_module_loaded"]
        facts["health"].update({"ok": ok, "code": None if ok else "driver_not_loaded",
                                "reason": None if ok else "the nvidia kernel module is not loaded (/proc/driver/nvidia/version missing)",
                                "rc": None, "fix": None if ok else EXIT_CODES[9][2]})
    col["commands"] = [r.record() for r in smi.history]
    failed = [r for r in smi.history if not r.ok]
    col["last_failure"] = ({"argv": failed[-1].argv, "rc": failed[-1].rc, "stdout": failed[-1].stdout,
                            "stderr": failed[-1].stderr} if failed else None)
    col["duration_ms"] = round((time.monotonic() - start) * 1000.0, 1)
    return facts


def _gather_csv(smi, facts, subsets):
    fields = query_fields(subsets)
    dropped = []
    for _attempt in range(3):
        res = smi.run(["--query-gpu=" + ",".join(fields), "--format=csv,nounits"])
        if res.rc == 2:
            bad = [f for f in P.invalid_query_fields(res.stdout + res.stderr) if f in fields]
            if bad:
                # Older drivers lack some fields: drop them and ask again.
                fields = [f for f in fields if f not in bad]
                dropped.extend(bad)
                continue
        break
    if dropped:
        facts["collection"]["warnings"].append("this driver does not know the query fields %s; they are null"
                                               % ", ".join(dropped))
    if not res.ok:
        return res.error
    gpus, errors = P.gpus_from_query(res.stdout, fields, header=True)
    for gpu in gpus:
        for field in dropped:
            key = P.QUERY_FIELDS.get(field, (field,))[0]
            gpu[key] = None
            gpu["unavailable"][key] = "field_unknown_to_driver"
    facts["collection"]["warnings"].extend(errors)
    facts["gpus"] = gpus
    if gpus and gpus[0].get("driver_version"):
        facts["driver_version"] = gpus[0]["driver_version"]
    return None


def _gather_topology(smi, facts):
    res = smi.run(["topo", "-m"])
    if not res.ok:
        facts["topology"] = {"error": res.error["code"]}
        return
    topo = P.parse_topo(res.stdout)
    facts["topology"] = {k: topo[k] for k in ("matrix", "nvlink_pairs", "cpu_affinity", "numa_affinity",
                                              "gpu_numa_id", "nics")}
    if topo["errors"]:
        facts["collection"]["warnings"].extend(topo["errors"])
    for gpu in facts["gpus"]:
        label = "GPU%s" % gpu.get("index")
        gpu["cpu_affinity"] = topo["cpu_affinity"].get(label)
        gpu["numa_node"] = topo["numa_affinity"].get(label)
        peers = {}
        for pair in topo["nvlink_pairs"]:
            if pair["a"] == gpu.get("index"):
                peers[pair["b"]] = pair["links"]
            elif pair["b"] == gpu.get("index"):
                peers[pair["a"]] = pair["links"]
        gpu["nvlink_peers"] = peers


def _gather_mig(smi, facts):
    capable = [g for g in facts["gpus"] if g.get("mig_mode_current") in ("Enabled", "Disabled")]
    for gpu in facts["gpus"]:
        gpu.update({"mig_profiles": [], "mig_placements": [], "mig_instances": [], "mig_devices": []})
    if not capable:
        return
    lgip = smi.run(["mig", "-lgip"])
    profiles = P.parse_mig_lgip(lgip.stdout) if lgip.ok else []
    placements = []
    if profiles:
        lgipp = smi.run(["mig", "-lgipp"])
        placements = P.parse_mig_lgipp(lgipp.stdout) if lgipp.ok else []
    instances, devices = [], []
    if any(g.get("mig_mode_current") == "Enabled" for g in capable):
        lgi = smi.run(["mig", "-lgi"])
        instances = P.parse_mig_lgi(lgi.stdout) if lgi.ok else []
        listing = smi.run(["-L"])
        devices = P.parse_list(listing.stdout) if listing.ok else []
    reason = None if profiles else (P.mig_status_message(lgip.stdout) or (lgip.error or {}).get("code"))
    by_uuid = {d["uuid"]: d["mig_devices"] for d in devices}
    for gpu in capable:
        idx = gpu.get("index")
        gpu["mig_profiles"] = [{k: v for k, v in p.items() if k != "gpu"} for p in profiles if p["gpu"] == idx]
        gpu["mig_placements"] = [{k: v for k, v in p.items() if k != "gpu"} for p in placements if p["gpu"] == idx]
        gpu["mig_instances"] = [{k: v for k, v in p.items() if k != "gpu"} for p in instances if p["gpu"] == idx]
        gpu["mig_devices"] = by_uuid.get(gpu.get("uuid"), [])
        if reason:
            gpu["mig_profiles_reason"] = reason


def _gather_processes(smi, facts):
    fields = ["gpu_uuid", "pid", "process_name", "used_gpu_memory"]
    res = smi.run(["--query-compute-apps=" + ",".join(fields), "--format=csv,nounits"])
    if not res.ok:
        facts["processes"] = []
        return
    parsed = P.parse_csv(res.stdout, fields, header=True, free_text_col=2)
    procs = []
    for row in parsed["rows"]:
        pid, _u, _r = P.parse_number(row["pid"], int)
        mem, _u, _r = P.parse_number(row["used_gpu_memory"], int)
        procs.append({"gpu_uuid": row["gpu_uuid"], "pid": pid, "process_name": row["process_name"],
                      "used_gpu_memory_mib": mem})
    facts["processes"] = procs
