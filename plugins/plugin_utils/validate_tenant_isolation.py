# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the ``tenant_isolation`` role variables (``area: tenant_isolation``).

Each tenant becomes a systemd slice ``tenant-<name>.slice`` (a child of ``tenant.slice``: systemd
nests slices at the dashes of their names, so tenant names themselves may not contain dashes).
Formats follow systemd.resource-control(5):

* ``cpu_quota``: a percentage of one CPU, ``"400%"`` = 4 CPUs (``CPUQuota=``);
* ``cpu_weight``: 1-10000 or ``idle`` (``CPUWeight=``; ``idle`` needs cgroup v2);
* ``memory_high`` / ``memory_max``: bytes with an optional K/M/G/T suffix (base 1024), a
  percentage of RAM, or ``infinity`` (``MemoryHigh=`` is the throttle, ``MemoryMax=`` the
  backstop, so ``memory_high`` must not exceed ``memory_max``);
* ``allowed_cpus`` / ``allowed_memory_nodes``: lists such as ``0-15,32-47`` (cpuset, cgroup v2
  only); ``numa_nodes``: NUMA node ids whose CPUs and memory the tenant gets (read on the node);
  ``gpus``: GPU indexes whose CPU and NUMA affinity the tenant gets (from the facts or
  ``tenant_isolation_gpu_affinity``, computed by ``validate_tenant_gpu_affinity`` on each host);
* ``units``: services placed in the slice with a ``Slice=`` drop-in.

``normalized.tenants``: each tenant with ``slice``, ``properties`` (the ``[Slice]`` lines in
order, ``Key=value``; the NUMA- and GPU-derived ones are added per host), ``numa_nodes``, ``gpus``
and ``v2_only`` (the settings that need cgroup v2).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_bool, as_int, is_int

KEYS = ("name", "description", "cpu_quota", "cpu_weight", "memory_high", "memory_max",
        "allowed_cpus", "allowed_memory_nodes", "numa_nodes", "gpus", "tasks_max", "io_weight", "units")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,30}$")
_QUOTA = re.compile(r"^(\d+(?:\.\d+)?)%$")
_BYTES = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")
_PERCENT = re.compile(r"^(\d+(?:\.\d+)?)%$")
_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_UNIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@_.:-]*\.(service|scope)$")
_MULT = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}
MEMORY_ALLOWED = "bytes with an optional K, M, G or T suffix (base 1024, e.g. 64G), a percentage of RAM (e.g. 50%) or infinity"


def memory_bytes(value):
    """``"64G"`` -> 68719476736; percentages and ``infinity`` -> None; invalid -> ValueError."""
    text = str(value).strip()
    if text == "infinity" or _PERCENT.match(text):
        return None
    match = _BYTES.match(text)
    if not match:
        raise ValueError(text)
    return int(float(match.group(1)) * _MULT[match.group(2)])


def _cpulist_ok(text):
    if not isinstance(text, str) or not _CPULIST.match(text.replace(" ", "")):
        return False
    for part in text.replace(" ", "").split(","):
        if "-" in part:
            low, high = part.split("-")
            if int(low) > int(high):
                return False
    return True


def validate(config):
    result = ValidationResult()
    tenants = config.get("tenant_isolation_tenants", [])
    # strict: the tasks read both as they are (when: tenant_isolation_restart_units)
    for key in ("tenant_isolation_require_cgroup_v2", "tenant_isolation_restart_units"):
        if key in config:
            as_bool(key, config[key], result, strict=True)
    out = []
    if not isinstance(tenants, list):
        result.error("tenant_isolation_tenants", tenants, "a list of tenant dictionaries")
        tenants = []
    names = set()
    placed = {}
    for pos, tenant in enumerate(tenants):
        var = "tenant_isolation_tenants[%d]" % pos
        if not isinstance(tenant, dict):
            result.error(var, tenant, "a dictionary with at least 'name'")
            continue
        unknown = sorted(set(tenant) - set(KEYS))
        if unknown:
            result.error(var, ", ".join(unknown), "keys " + ", ".join(KEYS))
        name = tenant.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            result.error(var + ".name", name, "1-31 lowercase letters, digits and '_', starting with a "
                         "letter or digit (no '-': systemd nests slices at dashes)")
            continue
        if name in names:
            result.error(var + ".name", name, "a name not used by another tenant")
        names.add(name)
        var = "tenant_isolation_tenants[%s]" % name
        props = []
        v2_only = []
        desc = tenant.get("description", "dgxops tenant %s" % name)
        if not isinstance(desc, str) or "\n" in desc:
            result.error(var + ".description", desc, "a one-line string")
        quota = tenant.get("cpu_quota")
        if quota is not None:
            match = _QUOTA.match(str(quota).strip())
            if not match or float(match.group(1)) <= 0:
                result.error(var + ".cpu_quota", quota, "a percentage of one CPU above 0, e.g. '400%' for 4 CPUs")
            else:
                props.append(("CPUQuota", str(quota).strip()))
        weight = tenant.get("cpu_weight")
        if weight is not None:
            if weight == "idle":
                props.append(("CPUWeight", "idle"))
                v2_only.append("cpu_weight: idle")
            elif as_int(var + ".cpu_weight", weight, result, 1, 10000, strict=True,
                        allowed="an integer from 1 to 10000, or idle") is not None:
                props.append(("CPUWeight", str(weight)))
        values = {}
        for key, prop in (("memory_high", "MemoryHigh"), ("memory_max", "MemoryMax")):
            value = tenant.get(key)
            if value is None:
                continue
            try:
                values[key] = memory_bytes(value)
            except ValueError:
                result.error("%s.%s" % (var, key), value, MEMORY_ALLOWED)
                continue
            props.append((prop, str(value).strip()))
            if key == "memory_high":
                v2_only.append("memory_high")
        if values.get("memory_high") is not None and values.get("memory_max") is not None \
                and values["memory_high"] > values["memory_max"]:
            result.error(var + ".memory_high", tenant.get("memory_high"),
                         "at most memory_max (%s): MemoryHigh throttles, MemoryMax is the backstop"
                         % tenant.get("memory_max"))
        for key in ("tasks_max", "io_weight"):
            value = tenant.get(key)
            if value is None:
                continue
            high = 10000 if key == "io_weight" else 4194304
            if as_int("%s.%s" % (var, key), value, result, 1, high, strict=True) is not None:
                props.append(("TasksMax" if key == "tasks_max" else "IOWeight", str(value)))
                if key == "io_weight":
                    v2_only.append("io_weight")
        cpus = tenant.get("allowed_cpus")
        numa = tenant.get("numa_nodes")
        if cpus is not None and numa is not None:
            result.error(var + ".numa_nodes", numa, "either numa_nodes or allowed_cpus, not both")
        if cpus is not None:
            if not _cpulist_ok(str(cpus)):
                result.error(var + ".allowed_cpus", cpus, "a CPU list such as 0-15,32-47")
            else:
                props.append(("AllowedCPUs", str(cpus).replace(" ", "")))
                v2_only.append("allowed_cpus")
        mems = tenant.get("allowed_memory_nodes")
        if mems is not None:
            if not _cpulist_ok(str(mems)):
                result.error(var + ".allowed_memory_nodes", mems, "a NUMA node list such as 0 or 0-1")
            else:
                props.append(("AllowedMemoryNodes", str(mems).replace(" ", "")))
                v2_only.append("allowed_memory_nodes")
        gpus = tenant.get("gpus")
        gpu_list = []
        if gpus is not None:
            others = [k for k in ("allowed_cpus", "allowed_memory_nodes", "numa_nodes") if tenant.get(k) is not None]
            if others:
                result.error(var + ".gpus", gpus, "either gpus or %s, not both (gpus sets AllowedCPUs and "
                             "AllowedMemoryNodes from the GPUs' affinity)" % " / ".join(others))
            if not isinstance(gpus, list) or not gpus or not all(
                    is_int(g) and 0 <= g < 64 for g in gpus):
                result.error(var + ".gpus", gpus, "a non-empty list of GPU indexes such as [0, 1]")
            else:
                gpu_list = sorted(set(gpus))
                v2_only.append("gpus")
        numa_nodes = []
        if numa is not None:
            if not isinstance(numa, list) or not numa or not all(
                    is_int(n) and 0 <= n < 64 for n in numa):
                result.error(var + ".numa_nodes", numa, "a non-empty list of NUMA node ids such as [0] or [0, 1]")
            else:
                numa_nodes = sorted(set(numa))
                v2_only.append("numa_nodes")
        units = tenant.get("units", [])
        if not isinstance(units, list):
            result.error(var + ".units", units, "a list of service names such as spark-worker.service")
            units = []
        for upos, unit in enumerate(units):
            if not isinstance(unit, str) or not _UNIT.match(unit):
                result.error("%s.units[%d]" % (var, upos), unit, "a service unit name ending in .service")
            elif unit in placed:
                result.error("%s.units[%d]" % (var, upos), unit,
                             "a unit not already placed in tenant %s" % placed[unit])
            else:
                placed[unit] = name
        out.append({"name": name, "slice": "tenant-%s.slice" % name, "description": desc,
                    "properties": ["%s=%s" % kv for kv in props], "numa_nodes": numa_nodes, "gpus": gpu_list,
                    "v2_only": v2_only,
                    "units": [u for u in units if isinstance(u, str)]})
    result.normalized = {"tenants": out}
    return result
