# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cross-role validation of a host's *declared* state against its facts (``area: declared``).

Each role's validator checks its own variables; this one checks what only the combination
shows, against the state the run will produce rather than the state the node is in now:

* the declared MIG layout against the GPU's profile table: the facts' table when the driver
  lists it, else the collection's per-model table (:mod:`mig_profiles`; drivers before R550
  list profiles only with MIG on), so ``1g.20gb`` on an A100-40GB, ``8 x 1g`` on a 7-slice GPU,
  a profile id that does not exist or two ``+me`` instances are refused before any GPU changes;
* GPU indexes (MIG layout, ``gpu_tuning_gpus``) against the node's GPU count;
* MIG declared (enabled after this run) with Spark in standalone mode: refused, as the Spark
  validator refuses it when MIG is already on;
* tenant CPU lists against the node's CPU count (when the facts carry it);
* values a user would want refused or warned: ``spark.rapids.sql.concurrentGpuTasks`` beyond
  what a GPU runs usefully, dynamic allocation with the benchmark profile, monitoring listening
  on every address.

config: ``facts`` (``ansible_facts.nvidia_smi``), ``vcpus`` (``ansible_facts.processor_vcpus``
or None), ``enabled`` (list of enabled roles), ``mig_layout`` (the mig role's resolved layout,
``[]`` when MIG is not declared), ``mig_gpu_model`` (optional override), ``gpu_tuning_gpus``,
``spark_rapids_cluster_manager``, ``spark_rapids_profile``, ``spark_rapids_settings``,
``tenant_isolation_tenants``, ``monitoring_listen_address``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.dgxops.fleet.plugins.module_utils import driver_support
from ansible_collections.dgxops.fleet.plugins.module_utils import mig_layout as ml
from ansible_collections.dgxops.fleet.plugins.plugin_utils import mig_profiles
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, is_int

# spark-rapids docs (tuning guide, "Number of Concurrent Tasks per GPU"): 2-4 is the useful
# range; beyond the executor cores it never helps.  More than this is refused as a typo.
CONCURRENT_GPU_TASKS_MAX = 64
_ANY_ADDRESS = ("0.0.0.0", "::", "[::]", "*", "")
_CPU_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _gpus(facts):
    return [g for g in (facts.get("gpus") or []) if isinstance(g, dict) and isinstance(g.get("index"), int)]


def _model(config, facts):
    override = config.get("mig_gpu_model") or ""
    if override:
        return override
    gpus = _gpus(facts)
    memory = gpus[0].get("memory_total_mib") if gpus else None
    return mig_profiles.model_key(facts.get("model_family"), memory)


def check_mig(result, config, facts):
    """The declared MIG layout against each GPU's profile table; returns True when MIG is declared on."""
    layout = config.get("mig_layout") or []
    if not layout:
        return False
    try:
        entries = ml.normalize_layout(layout, "mig_layout")
    except ml.LayoutError as exc:
        result.error_text(str(exc))
        return False
    declared_on = any(e["mig"] for e in entries)
    gpus = _gpus(facts)
    if not gpus:
        return declared_on
    try:
        chosen = ml.select_gpus(entries, gpus)
    except ml.LayoutError as exc:
        result.error_text("mig_layout: %s (the node has %d GPU(s))" % (exc, len(gpus)))
        return declared_on
    model = _model(config, facts)
    fallback = mig_profiles.table(model) if model else None
    for gpu in gpus:
        entry = chosen.get(gpu["index"])
        if entry is None or not entry["mig"]:
            continue
        label = "GPU %d (%s)" % (gpu["index"], gpu.get("name") or "unknown model")
        if gpu.get("mig_mode_current") not in ("Enabled", "Disabled"):
            result.error_text("mig_layout: %s does not support MIG; allowed: mig: false for it, or "
                              "leave it out of the layout" % label)
            continue
        table = mig_profiles.table_from_facts(gpu)
        source = "the GPU's own table"
        if table is None:
            table = fallback
            source = "the %s table (the driver lists profiles only with MIG on)" % model
        if table is None:
            result.warn("mig_layout: no MIG profile table is known for %s (model %r); the layout is "
                        "checked on the node" % (label, model))
            continue
        where = "mig_layout: %s: layout[%d].instances" % (label, entries.index(entry))
        try:
            want = ml.desired_instances(table, entry["instances"], where)
            ml.plan_gpu(table, want, [], "mig_layout: %s" % label)
        except ml.LayoutError as exc:
            result.error_text("%s [checked against %s]" % (exc, source))
    return declared_on


def check_gpu_indexes(result, variable, selectors, facts):
    count = facts.get("gpu_count")
    if not is_int(count) or not isinstance(selectors, list):
        return
    for item in selectors:
        index = None
        if is_int(item):
            index = item
        elif isinstance(item, str) and item.strip().isdigit():
            index = int(item)
        if index is not None and index >= count:
            result.error(variable, item, "a GPU index from 0 to %d (the node has %d GPU(s)), a UUID, "
                         "a PCI bus id or 'all'" % (count - 1, count))


def _cpu_max(text):
    top = -1
    for part in str(text).replace(" ", "").split(","):
        match = _CPU_RANGE.match(part)
        if not match:
            return None
        top = max(top, int(match.group(2) or match.group(1)))
    return top


def check_tenants(result, tenants, vcpus):
    if not isinstance(tenants, list) or not is_int(vcpus) or vcpus < 1:
        return
    for pos, tenant in enumerate(tenants):
        if not isinstance(tenant, dict) or tenant.get("allowed_cpus") is None:
            continue
        top = _cpu_max(tenant["allowed_cpus"])
        if top is not None and top >= vcpus:
            result.error("tenant_isolation_tenants[%d].allowed_cpus" % pos, tenant["allowed_cpus"],
                         "CPUs 0-%d (the node has %d CPUs)" % (vcpus - 1, vcpus))


def check_spark(result, config, mig_on):
    manager = config.get("spark_rapids_cluster_manager")
    if mig_on and manager == "standalone":
        result.error("spark_rapids_cluster_manager", manager,
                     "yarn or kubernetes on a host whose declared MIG layout enables MIG (mig_layout/"
                     "mig_layout_name): Spark standalone gives every executor the same first MIG device. "
                     "Set spark_rapids_cluster_manager, or dgxops_enable_spark: false for this host")
    settings = config.get("spark_rapids_settings") or {}
    if not isinstance(settings, dict):
        return
    tasks = settings.get("spark.rapids.sql.concurrentGpuTasks")
    if tasks is not None:
        try:
            number = int(str(tasks).strip())
        except ValueError:
            number = None
        if number is not None and number > CONCURRENT_GPU_TASKS_MAX:
            result.error("spark_rapids_settings['spark.rapids.sql.concurrentGpuTasks']", tasks,
                         "1 to %d (spark-rapids tuning guide: 2-4 is the useful range; more tasks only "
                         "add GPU memory pressure)" % CONCURRENT_GPU_TASKS_MAX)
    dyn = str(settings.get("spark.dynamicAllocation.enabled", "")).strip().lower()
    if config.get("spark_rapids_profile") == "benchmark" and dyn == "true":
        result.warn("spark_rapids_settings['spark.dynamicAllocation.enabled'] is true with "
                    "spark_rapids_profile: benchmark: executors come and go during the run, so the "
                    "figures are not comparable; the benchmark profile expects a fixed executor count")


def check_monitoring(result, address):
    if address is None:
        return
    if str(address).strip() in _ANY_ADDRESS:
        result.warn("monitoring_listen_address: %r makes node exporter and DCGM exporter listen on every "
                    "address of the node, unauthenticated; prefer 127.0.0.1 or the management "
                    "network's address" % (address,))


def check_driver(result, facts, enabled):
    """The installed driver branch against the GPU family, when this run does not install one."""
    branch = facts.get("driver_branch")
    family = facts.get("model_family")
    minimum = driver_support.unsupported(branch, family)
    if minimum is not None and "nvidia_driver" not in enabled:
        result.error_text("the installed NVIDIA driver (branch R%s, %s) does not support %s GPUs; allowed: "
                          "branch %d or newer. Fix: install it (nvidia_driver_branch: \"%d\" with "
                          "dgxops_enable_driver: true); `dgxops doctor` shows the same verdict"
                          % (branch, facts.get("driver_version"), family, minimum, minimum))


def validate(config):
    result = ValidationResult()
    facts = config.get("facts") or {}
    if not isinstance(facts, dict):
        facts = {}
    enabled = config.get("enabled") or []
    check_driver(result, facts, enabled)
    mig_on = False
    if "mig" in enabled:
        mig_on = check_mig(result, config, facts)
    if "gpu_tuning" in enabled:
        check_gpu_indexes(result, "gpu_tuning_gpus", config.get("gpu_tuning_gpus"), facts)
    if "tenant_isolation" in enabled:
        check_tenants(result, config.get("tenant_isolation_tenants"), config.get("vcpus"))
    if "spark_rapids" in enabled:
        check_spark(result, config, mig_on)
    if "monitoring" in enabled:
        check_monitoring(result, config.get("monitoring_listen_address"))
    result.normalized = {"mig_declared_on": mig_on}
    return result
