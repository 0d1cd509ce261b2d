# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-host CPU and memory placement of tenants by GPU affinity (``area: tenant_gpu_affinity``).

A tenant of ``tenant_isolation`` that says ``gpus: [0, 1]`` gets ``AllowedCPUs=`` (the union of the
GPUs' CPU affinity) and ``AllowedMemoryNodes=`` (their NUMA nodes), as ``nvidia-smi topo -m``
reports them. The affinity comes from ``tenant_isolation_gpu_affinity`` when set (a list of
``{index, cpu_affinity, numa_node}``, the shape of ``ansible_facts.nvidia_smi.gpus``), else from
the facts (``dgxops.fleet.nvidia_smi_facts`` with ``gather_subset: [default, topology]``).

config: ``tenants`` (the normalised tenants of ``validate_tenant_isolation``),
``tenant_isolation_gpu_affinity``, ``gpu_facts`` (``ansible_facts.nvidia_smi.gpus`` or []),
``host``. ``normalized.tenants``: ``{name: {gpus, allowed_cpus, allowed_memory_nodes,
properties}}`` for the tenants with ``gpus``; ``source``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, is_int

OVERRIDE = "tenant_isolation_gpu_affinity"
_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def expand(text):
    """``"0-3,8"`` -> {0, 1, 2, 3, 8}; raises ValueError."""
    text = str(text).replace(" ", "")
    if not _CPULIST.match(text):
        raise ValueError(text)
    out = set()
    for part in text.split(","):
        low, _sep, high = part.partition("-")
        low, high = int(low), int(high or low)
        if low > high:
            raise ValueError(text)
        out.update(range(low, high + 1))
    return out


def compact(numbers):
    """{0, 1, 2, 3, 8} -> ``"0-3,8"``."""
    out = []
    for n in sorted(numbers):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ",".join("%d" % a if a == b else "%d-%d" % (a, b) for a, b in out)


def _rows(result, rows, source):
    """{index: (cpu set or None, numa node or None)} from override rows or facts."""
    table = {}
    if not isinstance(rows, list):
        result.error(source, rows, "a list of {index, cpu_affinity, numa_node} (the shape of ansible_facts.nvidia_smi.gpus)")
        return table
    for pos, row in enumerate(rows):
        here = "%s[%d]" % (source, pos)
        if not isinstance(row, dict):
            result.error(here, row, "a dictionary with index, cpu_affinity and numa_node")
            continue
        index = row.get("index")
        if not is_int(index) or index < 0:
            result.error(here + ".index", index, "a GPU index (0, 1, ...)")
            continue
        cpus = row.get("cpu_affinity")
        cpu_set = None
        if cpus not in (None, "", "N/A"):
            try:
                cpu_set = expand(cpus)
            except ValueError:
                result.error(here + ".cpu_affinity", cpus, "a CPU list such as 0-55,112-167")
                continue
        numa = row.get("numa_node")
        if numa in ("", "N/A"):
            numa = None
        if isinstance(numa, str) and numa.isdigit():
            numa = int(numa)
        if numa is not None and (not is_int(numa) or numa < 0):
            result.error(here + ".numa_node", numa, "a NUMA node id (0, 1, ...) or null")
            continue
        table[index] = (cpu_set, numa)
    return table


def validate(config):
    result = ValidationResult()
    host = config.get("host") or "this host"
    tenants = [t for t in config.get("tenants", []) if t.get("gpus")]
    override = config.get(OVERRIDE) or []
    if override:
        source = OVERRIDE
        table = _rows(result, override, OVERRIDE)
    else:
        source = "ansible_facts.nvidia_smi.gpus"
        facts = [g for g in (config.get("gpu_facts") or []) if isinstance(g, dict)]
        have_topology = any("cpu_affinity" in g or "numa_node" in g for g in facts)
        table = _rows(result, facts, source) if have_topology else {}
    out = {}
    for tenant in tenants:
        var = "tenant_isolation_tenants[%s].gpus" % tenant["name"]
        if not table:
            result.error(var, tenant["gpus"], "GPU indexes whose CPU/NUMA affinity is known, but %s has none: run "
                         "dgxops.fleet.nvidia_smi_facts with gather_subset [default, topology] before the role, or "
                         "set %s" % (host, OVERRIDE))
            continue
        unknown = [g for g in tenant["gpus"] if g not in table]
        if unknown:
            result.error(var, unknown, "GPU indexes of %s (from %s): %s" % (
                host, source, ", ".join(str(i) for i in sorted(table))))
            continue
        no_cpus = [g for g in tenant["gpus"] if table[g][0] is None]
        if no_cpus:
            result.error(var, no_cpus, "GPUs with a CPU affinity; %s reports none for GPU(s) %s (%s)" % (
                source, ", ".join(str(g) for g in no_cpus), host))
            continue
        cpus = set()
        for g in tenant["gpus"]:
            cpus |= table[g][0]
        nodes = set(table[g][1] for g in tenant["gpus"] if table[g][1] is not None)
        props = ["AllowedCPUs=%s" % compact(cpus)]
        mems = None
        if nodes:
            mems = compact(nodes)
            props.append("AllowedMemoryNodes=%s" % mems)
        if len(nodes) < len(set(tenant["gpus"])) and any(table[g][1] is None for g in tenant["gpus"]):
            result.warn("%s: %s has no NUMA node for GPU(s) %s; AllowedMemoryNodes %s" % (
                var, source, ", ".join(str(g) for g in tenant["gpus"] if table[g][1] is None),
                "covers the others only" if nodes else "is not set"))
        out[tenant["name"]] = {"gpus": tenant["gpus"], "allowed_cpus": compact(cpus),
                               "allowed_memory_nodes": mems, "properties": props}
    result.normalized = {"tenants": out, "source": source}
    return result
