# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure parsers for nvidia-smi output (no Ansible imports, stdlib only, Python >= 3.9).

Every function takes text and returns plain dicts/lists, so it can be tested on
captured output and reused by modules, action plugins and scripts.

Rules learnt from real output (see docs/facts.md and the captures under
tests/fixtures/nvidia-smi/):

* ``--query-gpu`` CSV is not quoted; cells are joined by ``", "``.  Columns are
  mapped by position (the header canonicalises aliases), never by header name.
* A value of the form ``[...]`` (``[N/A]``, ``[Not Supported]``, ``[Unknown Error]``,
  ``[Requested functionality has been deprecated]``) means "unavailable"; some
  fields print a bare ``N/A`` or an empty cell.  All become ``None`` and the reason
  is recorded, instead of crashing on ``float('[N/A]')`` as gpustat/GPUtil did.
* ``-q -x`` moved power data between driver generations: ``<power_readings>``
  (power_limit / enforced_power_limit, <= R525), ``<gpu_power_readings>``
  (current_power_limit = enforced, requested_power_limit = software limit, R535+),
  ``<power_draw>`` replaced by ``<average_power_draw>`` (R570+).
* ``topo -m`` is TAB separated, wraps its header in ANSI codes even when not a TTY,
  and data rows carry an extra empty cell before ``GPU NUMA ID``.
* ``mig -lgip`` box width and GiB values drift between drivers: parse with
  whitespace regexes, never fixed columns.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import xml.etree.ElementTree as ET

# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------

_BRACKETED = re.compile(r"^\[(.*)\]$")
_REASONS = {
    "n/a": "not_available",
    "na": "not_available",
    "not supported": "not_supported",
    "unknown error": "unknown_error",
    "requested functionality has been deprecated": "deprecated",
    "insufficient permissions": "insufficient_permissions",
    "no permission": "insufficient_permissions",
    "gpu is lost": "gpu_lost",
    "gpu requires reset": "gpu_requires_reset",
    "not found": "not_found",
    "none": None,
}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def strip_ansi(text):
    """Remove ANSI escape sequences (``topo -m`` underlines its header)."""
    return _ANSI.sub("", text or "")


def unavailable_reason(raw):
    """Return a machine-readable reason when ``raw`` is an "unavailable" marker, else None.

    ``[N/A]``/``N/A`` -> ``not_available``; ``[Not Supported]`` -> ``not_supported``;
    ``[Unknown Error]`` -> ``unknown_error``; ``[Requested functionality has been
    deprecated]`` -> ``deprecated``; an empty cell -> ``empty``; any other ``[...]``
    -> its lower-cased text with spaces as underscores.
    """
    if raw is None:
        return "missing"
    text = raw.strip()
    if text == "":
        return "empty"
    match = _BRACKETED.match(text)
    inner = match.group(1).strip() if match else text
    key = inner.lower()
    if key in _REASONS and key != "none":
        return _REASONS[key]
    if match:
        return re.sub(r"[^a-z0-9]+", "_", key).strip("_") or "unavailable"
    if key.startswith("requested functionality has been deprecated"):
        return "deprecated"
    return None


_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)\s*$")


def parse_number(raw, kind=float):
    """Parse ``"700.00 W"``, ``"143771 MiB"``, ``"1980"`` -> (value, unit, reason).

    Unavailable markers return ``(None, None, reason)``.  Text that is not a number
    returns ``(None, None, "unparsable")``.
    """
    reason = unavailable_reason(raw)
    if reason is not None:
        return None, None, reason
    match = _NUMBER.match(raw)
    if not match:
        return None, None, "unparsable"
    number = float(match.group(1))
    if kind is int:
        number = int(round(number))
    return number, (match.group(2) or None), None


def parse_enabled(raw):
    """``Enabled``/``Disabled``/``Yes``/``No``/``On``/``Off`` -> (bool, reason)."""
    reason = unavailable_reason(raw)
    if reason is not None:
        return None, reason
    key = raw.strip().lower()
    if key in ("enabled", "yes", "on", "active", "true", "1"):
        return True, None
    if key in ("disabled", "no", "off", "not active", "false", "0"):
        return False, None
    return None, "unparsable"


def parse_mode(raw):
    """MIG/ECC mode text -> ``"Enabled"``/``"Disabled"`` or None (with reason)."""
    reason = unavailable_reason(raw)
    if reason is not None:
        return None, reason
    key = raw.strip().lower()
    if key == "enabled":
        return "Enabled", None
    if key == "disabled":
        return "Disabled", None
    return None, "unparsable"


def parse_text(raw):
    """Free text; unavailable markers -> (None, reason)."""
    reason = unavailable_reason(raw)
    if reason is not None:
        return None, reason
    return raw.strip(), None


_VERSION_RE = re.compile(r"(\d+(?:\.\d+)+)")


def clean_version(raw):
    """``"610.43.02 [Deprecated; ...]"`` -> ``"610.43.02"``; unavailable -> None."""
    if raw is None:
        return None
    if unavailable_reason(raw) is not None:
        return None
    match = _VERSION_RE.search(raw)
    return match.group(1) if match else None


def driver_branch(version):
    """``"580.95.05"`` -> 580; None/garbage -> None."""
    if not version:
        return None
    match = re.match(r"^\s*(\d+)", str(version))
    return int(match.group(1)) if match else None


# ---------------------------------------------------------------------------
# --query-gpu CSV
# ---------------------------------------------------------------------------

# field -> (output key, kind).  kind: int, float, bool, mode, text, version, hexint
QUERY_FIELDS = {
    "index": ("index", "int"),
    "uuid": ("uuid", "text"),
    "name": ("name", "text"),
    "pci.bus_id": ("pci_bus_id", "text"),
    "pci.device_id": ("pci_device_id", "text"),
    "serial": ("serial", "text"),
    "vbios_version": ("vbios_version", "text"),
    "driver_version": ("driver_version", "version"),
    "kmd_version": ("kmd_version", "version"),
    "persistence_mode": ("persistence_mode", "bool"),
    "compute_mode": ("compute_mode", "text"),
    "compute_cap": ("compute_capability", "text"),
    "memory.total": ("memory_total_mib", "int"),
    "memory.used": ("memory_used_mib", "int"),
    "power.limit": ("power_limit_w", "float"),
    "enforced.power.limit": ("power_enforced_limit_w", "float"),
    "power.default_limit": ("power_default_limit_w", "float"),
    "power.min_limit": ("power_min_limit_w", "float"),
    "power.max_limit": ("power_max_limit_w", "float"),
    "power.draw": ("power_draw_w", "float"),
    "clocks.applications.graphics": ("clocks_applications_graphics_mhz", "int"),
    "clocks.applications.memory": ("clocks_applications_memory_mhz", "int"),
    "clocks.default_applications.graphics": ("clocks_default_applications_graphics_mhz", "int"),
    "clocks.default_applications.memory": ("clocks_default_applications_memory_mhz", "int"),
    "clocks.max.graphics": ("clocks_max_graphics_mhz", "int"),
    "clocks.max.sm": ("clocks_max_sm_mhz", "int"),
    "clocks.max.memory": ("clocks_max_memory_mhz", "int"),
    "mig.mode.current": ("mig_mode_current", "mode"),
    "mig.mode.pending": ("mig_mode_pending", "mode"),
    "ecc.mode.current": ("ecc_mode_current", "mode"),
    "ecc.mode.pending": ("ecc_mode_pending", "mode"),
    "fabric.state": ("fabric_state", "text"),
    "fabric.status": ("fabric_status", "text"),
    "gpu_recovery_action": ("recovery_action", "text"),
    "ecc.errors.uncorrected.volatile.total": ("ecc_errors_uncorrected_volatile", "int"),
    "remapped_rows.pending": ("remapped_rows_pending", "bool"),
    "remapped_rows.failure": ("remapped_rows_failure", "bool"),
    "temperature.gpu": ("temperature_c", "int"),
    "pstate": ("pstate", "text"),
    "addressing_mode": ("addressing_mode", "text"),
}

# Field groups used by the facts module's gather_subset.  Chosen from per-field
# timings on a real H200 (tests/fixtures/nvidia-smi/device-h200/field-timing.txt):
# identity/config/power/mig/ecc fields cost ~0-3 ms each; each clock field costs
# ~5-7 ms and each health counter ~3-5 ms, so those are opt-in subsets.
FIELDS_GPUS = (
    "index", "uuid", "name", "pci.bus_id", "pci.device_id", "serial", "vbios_version",
    "driver_version", "persistence_mode", "compute_mode", "compute_cap", "memory.total",
    "power.limit", "enforced.power.limit", "power.default_limit", "power.min_limit",
    "power.max_limit", "mig.mode.current", "mig.mode.pending", "ecc.mode.current",
    "ecc.mode.pending", "fabric.state", "fabric.status", "gpu_recovery_action",
)
FIELDS_CLOCKS = (
    "clocks.applications.graphics", "clocks.applications.memory",
    "clocks.default_applications.graphics", "clocks.default_applications.memory",
    "clocks.max.graphics", "clocks.max.sm", "clocks.max.memory",
)
FIELDS_HEALTH = (
    "ecc.errors.uncorrected.volatile.total", "remapped_rows.pending",
    "remapped_rows.failure", "temperature.gpu", "pstate",
)

_HEADER_UNIT = re.compile(r"^(.*?)\s*\[([^\]]+)\]$")
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def invalid_query_fields(text):
    """Fields nvidia-smi rejected: ``Field "x" is not a valid field to query.``"""
    return _INVALID_FIELD.findall(text or "")


def split_csv_row(line, ncols=None, free_text_col=None):
    """Split one unquoted nvidia-smi CSV row on ``", "``.

    When ``free_text_col`` is given and the row has too many cells (a process name
    containing ``", "``), the surplus cells are joined back into that column.
    """
    cells = line.split(", ")
    if ncols is not None and free_text_col is not None and len(cells) > ncols:
        extra = len(cells) - ncols
        cells = (cells[:free_text_col]
                 + [", ".join(cells[free_text_col:free_text_col + extra + 1])]
                 + cells[free_text_col + extra + 1:])
    # The last cell of a row may carry trailing whitespace.
    return [c.strip() for c in cells]


def parse_csv(text, fields, header=True, free_text_col=None):
    """Parse ``--format=csv[,noheader][,nounits]`` output for ``fields`` (in order).

    Returns ``{"rows": [{field: raw}], "units": {field: unit}, "errors": [str]}``.
    Rows whose cell count differs from ``len(fields)`` are rejected into ``errors``
    (there is no quoting, so such a row cannot be mapped safely).
    """
    lines = [ln.rstrip("\r") for ln in (text or "").splitlines() if ln.strip() != ""]
    result = {"rows": [], "units": {}, "errors": []}
    if header:
        if not lines:
            result["errors"].append("no header line in nvidia-smi CSV output")
            return result
        head = split_csv_row(lines[0])
        if len(head) != len(fields):
            result["errors"].append(
                "CSV header has %d columns, expected %d: %r" % (len(head), len(fields), lines[0]))
            return result
        for field, token in zip(fields, head):
            match = _HEADER_UNIT.match(token)
            if match:
                result["units"][field] = match.group(2)
        lines = lines[1:]
    for line in lines:
        cells = split_csv_row(line, len(fields), free_text_col)
        if len(cells) != len(fields):
            result["errors"].append(
                "CSV row has %d cells, expected %d: %r" % (len(cells), len(fields), line))
            continue
        result["rows"].append(dict(zip(fields, cells)))
    return result


def convert_field(field, raw):
    """Convert one CSV cell to (key, value, reason) using :data:`QUERY_FIELDS`."""
    key, kind = QUERY_FIELDS.get(field, (field.replace(".", "_"), "text"))
    if kind == "int":
        value, _unit, reason = parse_number(raw, int)
    elif kind == "float":
        value, _unit, reason = parse_number(raw, float)
    elif kind == "bool":
        value, reason = parse_enabled(raw)
    elif kind == "mode":
        value, reason = parse_mode(raw)
    elif kind == "version":
        value = clean_version(raw)
        reason = None if value else (unavailable_reason(raw) or "unparsable")
    else:
        value, reason = parse_text(raw)
    return key, value, reason


def gpus_from_query(text, fields, header=True):
    """``--query-gpu`` output -> (list of normalised GPU dicts, list of errors).

    Each GPU dict has one key per field (see :data:`QUERY_FIELDS`) plus
    ``unavailable``: ``{key: reason}`` for every value that came back as None.
    """
    parsed = parse_csv(text, fields, header=header)
    gpus = []
    for row in parsed["rows"]:
        gpu = {"unavailable": {}}
        for field in fields:
            key, value, reason = convert_field(field, row[field])
            gpu[key] = value
            if value is None:
                gpu["unavailable"][key] = reason
        gpus.append(gpu)
    return gpus, parsed["errors"]


# ---------------------------------------------------------------------------
# --version
# ---------------------------------------------------------------------------

def parse_version(text):
    """``nvidia-smi --version`` -> dict of versions.

    R610 prints ``DRIVER version : Deprecated, see "KMD version" instead`` and
    adds ``KMD version``/``CUDA UMD version``; those are used as the driver and
    CUDA versions when the old lines are deprecated.
    """
    raw = {}
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        key, _sep, value = line.partition(":")
        raw[key.strip().lower()] = value.strip()
    driver = clean_version(raw.get("driver version")) if "deprecated" not in raw.get("driver version", "").lower() else None
    cuda = clean_version(raw.get("cuda version")) if "deprecated" not in raw.get("cuda version", "").lower() else None
    kmd = clean_version(raw.get("kmd version"))
    cuda_umd = clean_version(raw.get("cuda umd version"))
    return {
        "nvidia_smi_version": clean_version(raw.get("nvidia-smi version")),
        "nvml_version": clean_version(raw.get("nvml version")),
        "driver_version": driver or kmd,
        "cuda_version": cuda or cuda_umd,
        "kmd_version": kmd,
        "cuda_umd_version": cuda_umd,
    }


# ---------------------------------------------------------------------------
# -L
# ---------------------------------------------------------------------------

_L_GPU = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s+\(UUID:\s*([^)]+)\)\s*$")
_L_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*([^)]+)\)\s*$")


def parse_list(text):
    """``nvidia-smi -L`` -> list of ``{index, name, uuid, mig_devices: [...]}``.

    MIG lines (``  MIG 3g.40gb     Device  0: (UUID: MIG-...)``) attach to the GPU
    above them.  Works for R450-era ``MIG-GPU-<uuid>/<gi>/<ci>`` identifiers too.
    """
    gpus = []
    for line in (text or "").splitlines():
        match = _L_GPU.match(line)
        if match:
            gpus.append({"index": int(match.group(1)), "name": match.group(2),
                         "uuid": match.group(3).strip(), "mig_devices": []})
            continue
        match = _L_MIG.match(line)
        if match and gpus:
            gpus[-1]["mig_devices"].append({"profile": match.group(1),
                                            "device_index": int(match.group(2)),
                                            "uuid": match.group(3).strip()})
    return gpus


# ---------------------------------------------------------------------------
# topo -m
# ---------------------------------------------------------------------------

_LINK_TOKEN = re.compile(r"NV\d+|SYS|NODE|PHB|PXB|PIX|X")
_ATTR_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def _split_glued(cells, want):
    """Split cells like ``PXBNODE`` (seen in one B200 capture) into link tokens."""
    out = []
    for cell in cells:
        if len(out) >= want:
            out.append(cell)
            continue
        tokens = _LINK_TOKEN.findall(cell.strip())
        if len(tokens) > 1 and "".join(tokens) == cell.strip():
            out.extend(tokens)
        else:
            out.append(cell)
    return out if len(out) >= want else cells


def _cpu_list(text):
    """``"0-55,112-167"`` -> [0..55, 112..167]; empty/N/A -> []."""
    cpus = []
    if not text or unavailable_reason(text) is not None:
        return cpus
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, _sep, hi = part.partition("-")
            if lo.isdigit() and hi.isdigit():
                cpus.extend(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            cpus.append(int(part))
    return cpus


def parse_topo(text):
    """``nvidia-smi topo -m`` -> topology dict.

    Returns ``{"devices": [...], "gpus": [...], "nics": {"NIC0": "mlx5_0"},
    "matrix": {row: {col: link}}, "nvlink_pairs": [{"a": 0, "b": 1, "links": 18}],
    "cpu_affinity": {gpu: "0-55"}, "numa_affinity": {gpu: 0|None},
    "gpu_numa_id": {gpu: int|None}, "errors": [...]}``.
    """
    result = {"devices": [], "gpus": [], "nics": {}, "matrix": {}, "nvlink_pairs": [],
              "cpu_affinity": {}, "numa_affinity": {}, "gpu_numa_id": {}, "errors": []}
    lines = [strip_ansi(ln).rstrip("\r\n") for ln in (text or "").splitlines()]
    start = None
    for i, line in enumerate(lines):
        if line.startswith("\t") and "GPU0" in line:
            start = i
            break
    if start is None:
        result["errors"].append("no topology header (a line starting with TAB and naming GPU0)")
        return result
    header = [c.strip() for c in lines[start].split("\t")][1:]
    attrs = [c for c in header if c in _ATTR_COLUMNS]
    devices = [c for c in header if c and c not in _ATTR_COLUMNS]
    result["devices"] = devices
    result["gpus"] = [d for d in devices if re.match(r"^GPU\d+$", d)]
    for line in lines[start + 1:]:
        if line.strip() == "":
            break
        cells = line.split("\t")
        name = cells[0].strip()
        rest = _split_glued(cells[1:], len(devices))
        links = rest[:len(devices)]
        tail = rest[len(devices):]
        if len(links) < len(devices):
            result["errors"].append("topology row %r has %d link cells, expected %d"
                                    % (name, len(links), len(devices)))
            continue
        result["matrix"][name] = dict(zip(devices, (c.strip() for c in links[:len(devices)])))
        if not re.match(r"^GPU\d+$", name):
            continue
        # Data rows carry one extra empty cell before the last attribute column.
        values = {}
        if attrs:
            if len(tail) > len(attrs):
                head_vals = tail[:len(attrs) - 1]
                values = dict(zip(attrs[:-1], head_vals))
                values[attrs[-1]] = tail[-1]
            else:
                values = dict(zip(attrs, tail))
        cpu = (values.get("CPU Affinity") or "").strip()
        result["cpu_affinity"][name] = cpu or None
        numa = (values.get("NUMA Affinity") or "").strip()
        result["numa_affinity"][name] = int(numa) if numa.isdigit() else None
        gnid = (values.get("GPU NUMA ID") or "").strip()
        result["gpu_numa_id"][name] = int(gnid) if gnid.isdigit() else None
    # NIC legend
    in_nic = False
    for line in lines:
        if line.strip() == "NIC Legend:":
            in_nic = True
            continue
        if in_nic:
            match = re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line)
            if match:
                result["nics"][match.group(1)] = match.group(2)
            elif line.strip():
                in_nic = False
    gpus = result["gpus"]
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            link = result["matrix"].get(a, {}).get(b, "")
            match = re.match(r"^NV(\d+)$", link)
            if match:
                result["nvlink_pairs"].append({"a": int(a[3:]), "b": int(b[3:]),
                                               "links": int(match.group(1))})
    return result


# ---------------------------------------------------------------------------
# mig -lgip / -lgipp / -lgi
# ---------------------------------------------------------------------------

MIG_NOT_ENABLED = "No MIG-enabled devices found."
MIG_NOT_SUPPORTED = "No MIG-supported devices found."

_LGIP_ROW = re.compile(
    r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*$")
_LGIP_CONT = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*$")


def mig_status_message(text):
    """Map the MIG "nothing here" messages to a reason code (or None)."""
    text = text or ""
    if MIG_NOT_SUPPORTED in text:
        return "mig_not_supported"
    if MIG_NOT_ENABLED in text:
        return "mig_not_enabled"
    if "No GPU instances found" in text:
        return "no_gpu_instances"
    if "Invalid combination of input arguments" in text:
        return "mig_unsupported_by_driver"
    return None


def parse_mig_lgip(text):
    """``nvidia-smi mig -lgip`` -> list of profile dicts.

    Each: ``{gpu, name ("1g.10gb"), id, instances_free, instances_total,
    memory_gib, p2p, sm, dec, enc, ce, jpeg, ofa}``.
    """
    profiles = []
    for line in (text or "").splitlines():
        match = _LGIP_ROW.match(line.rstrip())
        if match:
            profiles.append({
                "gpu": int(match.group(1)), "name": match.group(2), "id": int(match.group(3)),
                "instances_free": int(match.group(4)), "instances_total": int(match.group(5)),
                "memory_gib": float(match.group(6)), "p2p": match.group(7).lower() == "yes",
                "sm": int(match.group(8)), "dec": int(match.group(9)), "enc": int(match.group(10)),
                "ce": None, "jpeg": None, "ofa": None,
            })
            continue
        match = _LGIP_CONT.match(line.rstrip())
        if match and profiles and profiles[-1]["ce"] is None:
            profiles[-1]["ce"] = int(match.group(1))
            profiles[-1]["jpeg"] = int(match.group(2))
            profiles[-1]["ofa"] = int(match.group(3))
    return profiles


_LGIPP = re.compile(r"^GPU\s+(\d+)\s+Profile\s+ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}:(\d+)\s*$")


def parse_mig_lgipp(text):
    """``nvidia-smi mig -lgipp`` -> ``[{gpu, profile_id, starts: [..], size}]``."""
    out = []
    for line in (text or "").splitlines():
        match = _LGIPP.match(line.strip())
        if match:
            starts = [int(s) for s in match.group(3).replace(" ", "").split(",") if s != ""]
            out.append({"gpu": int(match.group(1)), "profile_id": int(match.group(2)),
                        "starts": starts, "size": int(match.group(4))})
    return out


_LGI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|\s*$")


def parse_mig_lgi(text):
    """``nvidia-smi mig -lgi`` -> ``[{gpu, name, profile_id, instance_id, placement_start, placement_size}]``."""
    out = []
    for line in (text or "").splitlines():
        match = _LGI_ROW.match(line.rstrip())
        if match:
            out.append({"gpu": int(match.group(1)), "name": match.group(2),
                        "profile_id": int(match.group(3)), "instance_id": int(match.group(4)),
                        "placement_start": int(match.group(5)),
                        "placement_size": int(match.group(6))})
    return out


# ---------------------------------------------------------------------------
# -q (text) and -q -x (XML), normalised to the same per-GPU shape
# ---------------------------------------------------------------------------

_LCI_ROW = re.compile(
    r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|\s*$")


def parse_mig_lci(text):
    """``nvidia-smi mig -lci`` -> ``[{gpu, gi_id, name, profile_id, ci_id, start, size}]``."""
    out = []
    for line in (text or "").splitlines():
        match = _LCI_ROW.match(line.rstrip())
        if match:
            out.append({"gpu": int(match.group(1)), "gi_id": int(match.group(2)),
                        "name": match.group(3).lower(), "profile_id": int(match.group(4)),
                        "ci_id": int(match.group(5)), "start": int(match.group(6)),
                        "size": int(match.group(7))})
    return out


_LCIP_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)(\*?)\s+\d+/\d+")


def parse_mig_lcip(text):
    """``nvidia-smi mig -lcip`` -> ``[{gpu, gi_id, name, id, preferred}]`` (``*`` marks the preferred one)."""
    out = []
    for line in (text or "").splitlines():
        match = _LCIP_ROW.match(line)
        if match:
            out.append({"gpu": int(match.group(1)), "gi_id": int(match.group(2)),
                        "name": match.group(3).lower(), "id": int(match.group(4)),
                        "preferred": bool(match.group(5))})
    return out


_Q_KV = re.compile(r"^(\s*)(\S.*?)\s+:\s?(.*)$")


def parse_query_text(text):
    """``nvidia-smi -q`` -> nested dict.  Repeated section names become lists.

    Top-level keys as printed (``"Driver Version"``), GPUs under ``"GPU <busid>"``.
    """
    root = {}
    stack = [(-1, root)]
    started = False
    for line in (text or "").splitlines():
        if "NVSMI LOG" in line:
            started = True
            continue
        if not started or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        match = _Q_KV.match(line)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if match:
            key, value = match.group(2).strip(), match.group(3).strip()
            _q_add(parent, key, value)
        else:
            key = line.strip()
            node = {}
            _q_add(parent, key, node)
            stack.append((indent, node))
    return root


_Q_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def clock_details_from_query_text(text):
    """``nvidia-smi -q -d CLOCK,SUPPORTED_CLOCKS`` -> ``{bus_id: {"supported": {mem: set(gr)},
    "auto_boost_default": bool | None}}``.

    ``parse_query_text`` folds the repeated ``Memory``/``Graphics`` lines of ``Supported Clocks``
    into two lists and so loses which graphics clocks belong to which memory clock; here each
    ``Graphics`` line belongs to the ``Memory`` line above it.  (``--query-supported-clocks``
    would be the CSV route, but the simulator does not implement it.)
    """
    out = {}
    gpu = None
    section = None
    mem = None
    for line in (text or "").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _Q_GPU.match(line.strip()) if not line.startswith(" ") else None
        if match:
            gpu = out.setdefault(match.group(1).upper(), {"supported": {}, "auto_boost_default": None})
            section, mem = None, None
            continue
        if gpu is None:
            continue
        indent = len(line) - len(line.lstrip(" "))
        kv = _Q_KV.match(line)
        if indent <= 4:
            section = (kv.group(2) if kv else line).strip()
            mem = None
            continue
        if kv is None:
            continue
        key, value = kv.group(2).strip(), kv.group(3).strip()
        if section == "Clock Policy" and key == "Auto Boost Default":
            gpu["auto_boost_default"] = parse_enabled(value)[0]
        elif section == "Supported Clocks":
            number = parse_number(value, int)[0]
            if key == "Memory":
                mem = number
                if mem is not None:
                    gpu["supported"].setdefault(mem, set())
            elif key == "Graphics" and mem is not None and number is not None:
                gpu["supported"][mem].add(number)
    return out


def _q_add(parent, key, value):
    if key in parent:
        existing = parent[key]
        if isinstance(existing, list) and isinstance(value, dict) and existing and isinstance(existing[0], dict):
            existing.append(value)
        else:
            parent[key] = [existing, value]
    else:
        parent[key] = value


def _num(raw, kind=float):
    if not isinstance(raw, str):
        return None
    value, _unit, _reason = parse_number(raw, kind)
    return value


def _first_number(*raws):
    """First value that parses as a number (``N/A`` average draw falls back to instant draw)."""
    for raw in raws:
        value = _num(raw)
        if value is not None:
            return value
    return None


def _xt(elem, path):
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    return " ".join(found.text.split())


def details_from_xml(text):
    """``nvidia-smi -q -x`` -> normalised details.

    ``{"driver_version", "cuda_version", "attached_gpus", "gpus": [{pci_bus_id, name,
    architecture, uuid, serial, vbios_version, minor_number, persistence_mode,
    addressing_mode, mig_mode_current, mig_mode_pending, mig_devices: [...],
    memory_total_mib, compute_mode, ecc_mode_current, ecc_mode_pending, power_*_w,
    clocks_*_mhz, fabric_state, fabric_status}]}``

    Raises ValueError when the text is not XML (error text printed instead).
    """
    try:
        root = ET.fromstring((text or "").strip().encode("utf-8"))
    except ET.ParseError as exc:
        raise ValueError("nvidia-smi -q -x did not return XML: %s" % exc)
    driver = _xt(root, "kmd_version") or _xt(root, "driver_version")
    cuda = _xt(root, "cuda_umd_version") or _xt(root, "cuda_version")
    out = {"driver_version": clean_version(driver), "cuda_version": clean_version(cuda),
           "attached_gpus": _num(_xt(root, "attached_gpus"), int), "gpus": []}
    for gpu_el in root.findall("gpu"):
        mig_devices = []
        for dev in gpu_el.findall("mig_devices/mig_device"):
            mig_devices.append({
                "index": _num(_xt(dev, "index"), int),
                "gpu_instance_id": _num(_xt(dev, "gpu_instance_id"), int),
                "compute_instance_id": _num(_xt(dev, "compute_instance_id"), int),
                "sm_count": _num(_xt(dev, "device_attributes/shared/multiprocessor_count"), int),
                "memory_total_mib": _num(_xt(dev, "fb_memory_usage/total"), int),
            })
        power = gpu_el.find("gpu_power_readings")
        if power is not None:
            # R535+: current = what is enforced, requested = the software limit (-pl).
            limit = _xt(power, "requested_power_limit") or _xt(power, "gpu_ceiling_power_limit/requested_power_limit")
            enforced = _xt(power, "current_power_limit") or _xt(power, "gpu_ceiling_power_limit/current_power_limit")
            default = _xt(power, "default_power_limit") or _xt(power, "gpu_ceiling_power_limit/default_power_limit")
        else:
            power = gpu_el.find("power_readings")
            limit = _xt(power, "power_limit")
            enforced = _xt(power, "enforced_power_limit")
            default = _xt(power, "default_power_limit")
        draw = _first_number(_xt(power, "average_power_draw"), _xt(power, "power_draw"),
                             _xt(power, "instant_power_draw"))
        gpu = {
            "pci_bus_id": _xt(gpu_el, "pci/pci_bus_id") or gpu_el.get("id"),
            "name": _xt(gpu_el, "product_name"),
            "architecture": _xt(gpu_el, "product_architecture"),
            "uuid": _xt(gpu_el, "uuid"),
            "serial": parse_text(_xt(gpu_el, "serial") or "")[0],
            "vbios_version": _xt(gpu_el, "vbios_version"),
            "minor_number": _num(_xt(gpu_el, "minor_number"), int),
            "persistence_mode": parse_enabled(_xt(gpu_el, "persistence_mode") or "")[0],
            "addressing_mode": parse_text(_xt(gpu_el, "addressing_mode") or "")[0],
            "mig_mode_current": parse_mode(_xt(gpu_el, "mig_mode/current_mig") or "")[0],
            "mig_mode_pending": parse_mode(_xt(gpu_el, "mig_mode/pending_mig") or "")[0],
            "mig_devices": mig_devices,
            "memory_total_mib": _num(_xt(gpu_el, "fb_memory_usage/total"), int),
            "compute_mode": parse_text(_xt(gpu_el, "compute_mode") or "")[0],
            "ecc_mode_current": parse_mode(_xt(gpu_el, "ecc_mode/current_ecc") or "")[0],
            "ecc_mode_pending": parse_mode(_xt(gpu_el, "ecc_mode/pending_ecc") or "")[0],
            "power_limit_w": _num(limit),
            "power_enforced_limit_w": _num(enforced),
            "power_default_limit_w": _num(default),
            "power_min_limit_w": _num(_xt(power, "min_power_limit")),
            "power_max_limit_w": _num(_xt(power, "max_power_limit")),
            "power_draw_w": draw,
            "clocks_applications_graphics_mhz": _num(_xt(gpu_el, "applications_clocks/graphics_clock"), int),
            "clocks_applications_memory_mhz": _num(_xt(gpu_el, "applications_clocks/mem_clock"), int),
            "clocks_default_applications_graphics_mhz": _num(_xt(gpu_el, "default_applications_clocks/graphics_clock"), int),
            "clocks_default_applications_memory_mhz": _num(_xt(gpu_el, "default_applications_clocks/mem_clock"), int),
            "clocks_max_graphics_mhz": _num(_xt(gpu_el, "max_clocks/graphics_clock"), int),
            "clocks_max_sm_mhz": _num(_xt(gpu_el, "max_clocks/sm_clock"), int),
            "clocks_max_memory_mhz": _num(_xt(gpu_el, "max_clocks/mem_clock"), int),
            "fabric_state": parse_text(_xt(gpu_el, "fabric/state") or "")[0],
            "fabric_status": parse_text(_xt(gpu_el, "fabric/status") or "")[0],
        }
        out["gpus"].append(gpu)
    return out


# ---------------------------------------------------------------------------
# Driver files and derived summaries
# ---------------------------------------------------------------------------

def parse_proc_driver_version(text):
    """``/proc/driver/nvidia/version`` -> ``{"flavour": "open"|"proprietary"|None, "version"}``.

    Open:        ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...``
    Proprietary: ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 ...``
    """
    first = ""
    for line in (text or "").splitlines():
        if line.startswith("NVRM version:"):
            first = line
            break
    if not first:
        return {"flavour": None, "version": None}
    flavour = "open" if "Open Kernel Module" in first else (
        "proprietary" if "Kernel Module" in first else None)
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", first)
    return {"flavour": flavour, "version": match.group(1) if match else None}


def flavour_from_license(text):
    """``modinfo -F license nvidia`` -> kernel-module flavour: ``Dual MIT/GPL`` -> open,
    ``NVIDIA`` -> proprietary, anything else (no module installed, no modinfo) -> None."""
    text = (text or "").strip()
    if text == "Dual MIT/GPL":
        return "open"
    if text == "NVIDIA":
        return "proprietary"
    return None


def parse_proc_modules(text):
    """``/proc/modules`` (or ``lsmod``) -> {module name: {"size": int, "used_by": [..], "state": str}}."""
    mods = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if not parts or parts[0] == "Module":
            continue
        name = parts[0]
        info = {"size": int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None,
                "used_by": [], "state": None}
        if len(parts) >= 5 and parts[4] in ("Live", "Loading", "Unloading"):
            info["state"] = parts[4]
            if parts[3] not in ("-", ""):
                info["used_by"] = [m for m in parts[3].split(",") if m]
        elif len(parts) >= 4:
            info["used_by"] = [m for m in parts[3].split(",") if m]
            info["state"] = "Live"
        else:
            info["state"] = "Live"
        mods[name] = info
    return mods


def parse_driver_params(text):
    """``/proc/driver/nvidia/params`` -> {name: value-string}."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


# Ordered: more specific names first (GH200 before H200, L40S before L40, A100 before A10).
_FAMILIES = (
    ("gb300", r"GB300"), ("gb200", r"GB200"), ("gb10", r"GB10"), ("gh200", r"GH200"),
    ("b300", r"B300"), ("b200", r"B200"), ("b100", r"B100"),
    ("h200", r"H200"), ("h100", r"H100"), ("h800", r"H800"), ("h20", r"H20"),
    ("a100", r"A100"), ("a800", r"A800"), ("a40", r"A40"), ("a30", r"A30"), ("a10", r"A10G?"),
    ("l40s", r"L40S"), ("l40", r"L40"), ("l4", r"L4"),
    ("v100", r"V100"), ("t4", r"T4"),
    ("rtx_pro", r"RTX\s+PRO"), ("geforce", r"GEFORCE"), ("rtx", r"RTX"),
)


def model_family(name):
    """GPU product name -> family id (``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``), else None."""
    if not name:
        return None
    upper = name.upper()
    for family, pattern in _FAMILIES:
        if re.search(r"(?<![A-Z0-9])" + pattern + r"(?![A-Z0-9])", upper):
            return family
    return None


# GPUs whose memory is the system's (no dedicated framebuffer): nvidia-smi reports
# memory.total as [N/A] and NVML's memory query is unsupported.
UNIFIED_MEMORY_FAMILIES = ("gb10",)

NVIDIA_PCI_VENDOR = "0x10de"
# PCI class 0x0680 ("other bridge") is how NVSwitch ASICs enumerate; GPUs are 0x0300/0x0302.
NVSWITCH_PCI_CLASS_PREFIX = "0x0680"


def nvswitch_pci_devices(entries):
    """``[(address, vendor, class), ...]`` (sysfs values) -> addresses of NVSwitch devices."""
    out = []
    for address, vendor, pclass in entries:
        if (vendor or "").strip().lower() == NVIDIA_PCI_VENDOR and (pclass or "").strip().lower().startswith(NVSWITCH_PCI_CLASS_PREFIX):
            out.append(address)
    return sorted(out)
