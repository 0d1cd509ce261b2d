# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validator and settings builder of the ``dgxops.fleet.spark_rapids`` role.

``validate(config)`` is called on the controller by ``dgxops.fleet.validate``
(area ``spark_rapids``) before any host is touched.  ``config`` holds the
role's public variables under their own names (``spark_rapids_*``), the GPU
facts and the role's private tables (key catalog, profiles) from
``roles/spark_rapids/vars/main.yml``.  On success ``normalized`` holds the
final ``settings`` (key -> the exact string Spark must read back), the
``sizing`` behind them and the spark-env.sh entries; the role's template
only prints them.

Why the role keeps its own key list: Spark silently accepts any misspelled
``spark.*`` key, keeps quotes and ``# comments`` inside values, and
spark-rapids ignores ``spark.rapids.memory.gpu.pooling.enabled`` since 25.04
(see the role README).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

from ansible_collections.dgxops.fleet.plugins.plugin_utils import spark_sizing
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, as_bool, as_int, is_bool, is_int

string_types = (str,)

PROFILES = ("production", "benchmark")
SHUFFLE_MODES = ("none", "MULTITHREADED", "UCX", "CACHE_ONLY")
DA_SHUFFLE = ("auto", "service", "tracking")
CLUSTER_MANAGERS = ("standalone", "yarn", "kubernetes")
DEPRECATED_POLICIES = ("translate", "refuse")
MIG_ADDRESS = ("index", "uuid")

SPARK_VERSION_RE = re.compile(r"^([0-9]+)\.([0-9]+)\.([0-9]+)$")
PLUGIN_VERSION_RE = re.compile(r"^([0-9]{2})\.([0-9]{2})(?:\.([0-9]+))?(?:-SNAPSHOT)?$")
# "/" appears in node-selector labels and YARN resource types (yarn.io/gpu).
KEY_RE = re.compile(r"^spark\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-/]+)*$")
BYTES_RE = re.compile(r"^[0-9]+(b|k|kb|m|mb|g|gb|t|tb|p|pb)$", re.IGNORECASE)
BYTES_SIZE_RE = re.compile(r"^([0-9]+)(b|k|kb|m|mb|g|gb|t|tb|p|pb)$", re.IGNORECASE)
TIME_RE = re.compile(r"^[0-9]+(us|ms|s|m|min|h|d)$", re.IGNORECASE)
INT_RE = re.compile(r"^-?[0-9]+$")
CLASS_RE = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)+$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RAPIDS_SHUFFLE_RE = re.compile(r"^com\.nvidia\.spark\.rapids\.(spark[0-9]+[a-z0-9]*)\.RapidsShuffleManager$")
CHECKSUM_RE = re.compile(r"^(md5|sha1|sha224|sha256|sha384|sha512):[0-9a-fA-F]+$")
MAX_DIRECT_RE = re.compile(r"-XX:MaxDirectMemorySize=([0-9]+[kKmMgGtT]?)(?:\s|$)")

BYTES_ALLOWED = "a whole number with a unit suffix b, k, kb, m, mb, g, gb, t, tb, p or pb (binary), e.g. 256m or 8g"
TIME_ALLOWED = "a whole number with a unit suffix us, ms, s, m, min, h or d, e.g. 60s or 0s"
_UNIT_SHIFT = {"b": 0, "k": 10, "kb": 10, "m": 20, "mb": 20, "g": 30, "gb": 30,
               "t": 40, "tb": 40, "p": 50, "pb": 50}

SQL_PLUGIN = "com.nvidia.spark.SQLPlugin"


def _vtuple(text):
    return tuple(int(p) for p in re.findall(r"[0-9]+", str(text)))


def bytes_of(text):
    """Bytes of a Spark byte string with a suffix (binary units), or None."""
    match = BYTES_SIZE_RE.match(str(text).strip())
    if not match:
        return None
    return int(match.group(1)) << _UNIT_SHIFT[match.group(2).lower()]


def _jvm_bytes(text):
    """Bytes of a JVM size such as 8g (suffix k, m, g, t; none = bytes)."""
    match = re.match(r"^([0-9]+)([kKmMgGtT]?)$", text)
    if not match:
        return None
    shift = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match.group(2).lower()]
    return int(match.group(1)) << shift


def shuffle_manager_class(spark_version):
    """RapidsShuffleManager class for a Spark version: 3.5.1 -> ...spark351.RapidsShuffleManager."""
    digits = "".join(str(p) for p in _vtuple(spark_version)[:3])
    return "com.nvidia.spark.rapids.spark%s.RapidsShuffleManager" % digits


class _Builder:
    """Collects errors while building the final settings."""

    def __init__(self, config, result):
        self.config = config
        self.result = result
        self.catalog = config.get("__spark_rapids_key_catalog") or {}
        self.prefixes = config.get("__spark_rapids_key_prefixes") or {}
        self.hints = config.get("__spark_rapids_key_hints") or {}
        self.profiles = config.get("__spark_rapids_profiles") or {}
        self.spark_version = None
        self.plugin_version = None
        self.extra_exact = set()
        self.extra_prefixes = []
        self.manager = None

    # ------------------------------------------------------------------ helpers
    def err(self, variable, value, allowed):
        self.result.error(variable, value, allowed)

    def var(self, name, default=None):
        value = self.config.get(name, default)
        return default if value is None else value

    def _choice(self, name, choices, default):
        value = self.var(name, default)
        if value not in choices:
            self.err(name, value, "one of %s" % ", ".join(choices))
            return default
        return value

    def _optional_positive_int(self, name):
        value = self.config.get(name)
        if value is None or value == "" or value == 0:
            return None
        return as_int(name, value, self.result, minimum=1, allowed="a positive whole number, or null to use the GPU facts")

    # --------------------------------------------------------------- key rules
    def spec_for(self, key):
        if key in self.catalog:
            return self.catalog[key], None
        for prefix, spec in self.prefixes.items():
            if key.startswith(prefix):
                suffix = key[len(prefix):]
                pattern = spec.get("name_pattern")
                if pattern and not re.match(pattern, suffix):
                    return None, "the part after %s must match %s" % (prefix, pattern)
                return spec, None
        if key in self.extra_exact or any(key.startswith(p) for p in self.extra_prefixes):
            return {"type": "string"}, None
        return None, None

    def unknown_key_message(self, key):
        hint = self.hints.get(key)
        if not hint:
            close = difflib.get_close_matches(key, list(self.catalog), n=1, cutoff=0.85)
            hint = close[0] if close else None
        allowed = ("a key known to this role for Spark %s / spark-rapids %s, or a name listed in "
                   "spark_rapids_allowed_extra_keys (Spark silently ignores misspelled keys)"
                   % (self.spark_version_text, self.plugin_version_text))
        if hint:
            allowed = "did you mean %s? Otherwise: %s" % (hint, allowed)
        return allowed

    @property
    def spark_version_text(self):
        return self.var("spark_rapids_spark_version", "?")

    @property
    def plugin_version_text(self):
        return self.var("spark_rapids_plugin_version", "?")

    def check_value(self, variable, key, spec, value):
        """Type-check one value; return the string Spark must read back, or None."""
        if isinstance(value, (dict, list, tuple)) or value is None:
            self.err(variable, value, "a string, number or boolean (rendered as `%s <value>`)" % key)
            return None
        kind = spec.get("type", "string")
        if is_bool(value):
            if kind != "bool":
                self.err(variable, value, "a %s value, not a boolean" % kind)
                return None
            return "true" if value else "false"
        if isinstance(value, float):
            text = repr(value)
        else:
            text = str(value)
        # Hygiene that applies to every value (how java.util.Properties reads the file).
        if "\n" in text or "\r" in text or any(ord(c) < 32 and c != "\t" for c in text):
            self.err(variable, text, "a single line without control characters")
            return None
        if text != text.strip():
            self.err(variable, text, "no leading or trailing whitespace (Spark trims it, so the value would change)")
            return None
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            self.err(variable, text, "an unquoted value: Spark keeps quotes literally; write %s%s"
                     % (text[1:-1] or "an empty string", "" if text[1:-1] else " ('')"))
            return None
        if re.search(r"\s#", text):
            self.err(variable, text, "no inline comment: Spark keeps ' # ...' as part of the value; "
                                     "put comments in their own lines")
            return None
        checker = getattr(self, "_type_" + kind, None)
        if checker is None:
            self.err(variable, kind, "a known type in the key catalog")
            return None
        return checker(variable, key, spec, value, text)

    def _type_string(self, variable, key, spec, value, text):
        return text

    def _type_path(self, variable, key, spec, value, text):
        if not text.startswith("/") or re.search(r"\s", text):
            self.err(variable, text, "an absolute path without spaces")
            return None
        return text

    def _type_bool(self, variable, key, spec, value, text):
        if text.lower() not in ("true", "false"):
            self.err(variable, text, "true or false (Spark rejects other words such as yes/no at startup)")
            return None
        return text

    def _type_int(self, variable, key, spec, value, text):
        if not (is_int(value) or INT_RE.match(text)):
            self.err(variable, text, "a whole number")
            return None
        number = int(text)
        low, high = spec.get("min"), spec.get("max")
        if (low is not None and number < low) or (high is not None and number > high):
            if key == "spark.executor.resource.gpu.amount":
                allowed = "1: the RAPIDS Accelerator supports exactly one GPU per executor"
            else:
                allowed = "a whole number %s" % (
                    "from %s to %s" % (low, high) if high is not None else ">= %s" % low)
            self.err(variable, text, allowed)
            return None
        return str(number)

    def _type_bytes(self, variable, key, spec, value, text):
        if spec.get("allow_zero") and text == "0":
            return text
        if spec.get("allow_minus_one") and text == "-1":
            return text
        if is_int(value) or INT_RE.match(text):
            self.err(variable, text,
                     BYTES_ALLOWED + " (a bare number means MiB in some Spark code paths and bytes in others, so a suffix is required)")
            return None
        if not BYTES_RE.match(text):
            self.err(variable, text, BYTES_ALLOWED)
            return None
        return text

    def _type_time(self, variable, key, spec, value, text):
        if not TIME_RE.match(text):
            self.err(variable, text, TIME_ALLOWED)
            return None
        return text

    def _number(self, text):
        try:
            return float(text)
        except ValueError:
            return None

    def _type_fraction(self, variable, key, spec, value, text):
        number = self._number(text)
        if spec.get("allow_zero"):
            if number is None or not 0 <= number <= 1:
                self.err(variable, text, "a number from 0 to 1")
                return None
            return text
        if number is None or not 0 < number <= 1:
            self.err(variable, text, "a number greater than 0 and at most 1")
            return None
        return text

    def _type_gpu_fraction(self, variable, key, spec, value, text):
        number = self._number(text)
        if number is None or number <= 0 or (number > 0.5 and number != 1):
            self.err(variable, text, "a fraction <= 0.5 (tasks per GPU = floor(1/amount)) or 1; "
                                     "Spark rejects other values and an executor has exactly one GPU")
            return None
        return text

    def _type_enum(self, variable, key, spec, value, text):
        choices = spec.get("choices") or []
        if spec.get("case_sensitive", True):
            ok = text in choices
        else:
            ok = text.upper() in [c.upper() for c in choices]
        if not ok:
            suffix = " (case-sensitive)" if spec.get("case_sensitive", True) else ""
            self.err(variable, text, "one of %s%s" % (", ".join(choices), suffix))
            return None
        return text

    def _type_class_list(self, variable, key, spec, value, text):
        names = [n.strip() for n in text.split(",")]
        if not all(CLASS_RE.match(n) for n in names):
            self.err(variable, text, "a comma-separated list of fully qualified Java class names")
            return None
        return text

    def _type_java_opts(self, variable, key, spec, value, text):
        if re.search(r"(^|\s)-Xmx", text):
            self.err(variable, text, "JVM options without -Xmx: set the heap with spark.%s.memory"
                     % ("driver" if ".driver." in key else "executor"))
            return None
        if re.search(r"(^|\s)-Dspark\.", text):
            self.err(variable, text, "JVM options without -Dspark.*: Spark refuses them at startup; "
                                     "set Spark keys in spark_rapids_settings")
            return None
        return text

    def check_version_rules(self, variable, key, spec, value_text, out, origins):
        """Version gates, deprecations and translations. Returns False to drop the key."""
        sv, pv = self.spark_version, self.plugin_version
        if sv and spec.get("spark_min") and sv < _vtuple(spec["spark_min"]):
            self.err(variable, key, "needs Spark >= %s; spark_rapids_spark_version is %s"
                     % (spec["spark_min"], self.spark_version_text))
            return False
        if sv and spec.get("spark_removed") and sv >= _vtuple(spec["spark_removed"]):
            self.err(variable, key, "removed in Spark %s%s" % (
                spec["spark_removed"], "; use %s" % spec["replacement"] if spec.get("replacement") else ""))
            return False
        if pv and spec.get("rapids_min") and pv < _vtuple(spec["rapids_min"]):
            self.err(variable, key, "needs spark-rapids >= %s; spark_rapids_plugin_version is %s"
                     % (spec["rapids_min"], self.plugin_version_text))
            return False
        if spec.get("deprecated"):
            self.result.warn("%s: %s is %s" % (variable, key, spec["deprecated"]))
        removed = spec.get("rapids_removed")
        if not removed:
            return True
        replacement = spec.get("replacement")
        if pv and pv < _vtuple(removed):
            self.result.warn("%s: %s is deprecated (ignored from spark-rapids %s); use %s"
                             % (variable, key, removed, replacement))
            return True
        policy = self.var("spark_rapids_deprecated_keys", "translate")
        translate = spec.get("translate") or {}
        new_value = translate.get(value_text.lower()) if value_text is not None else None
        if policy == "refuse" or new_value is None or not replacement:
            self.err(variable, key, "not %s: spark-rapids %s ignores it (removed in %s); use %s instead"
                     % (key, self.plugin_version_text, removed, replacement))
            return False
        existing = out.get(replacement)
        if existing is not None and origins.get(replacement) == "spark_rapids_settings" \
                and existing.upper() != new_value.upper():
            self.err(variable, key, "%s=%s translates to %s=%s, which conflicts with %s=%s also set; keep only %s"
                     % (key, value_text, replacement, new_value, replacement, existing, replacement))
            return False
        out[replacement] = new_value
        origins[replacement] = "translated from %s" % key
        self.result.warn("%s: %s is ignored by spark-rapids >= %s; translated to %s=%s"
                         % (variable, key, removed, replacement, new_value))
        return False

    def add(self, out, origins, variable, key, value, origin):
        if not isinstance(key, string_types) or not KEY_RE.match(key):
            self.err(variable, key, "a Spark key: starts with 'spark.', dot-separated names of letters, "
                                    "digits, '_' or '-' (no spaces, '=' or ':')")
            return
        spec, problem = self.spec_for(key)
        if spec is None:
            self.err("%s[%r]" % (variable, key), key, problem or self.unknown_key_message(key))
            return
        item_var = "%s[%r]" % (variable, key)
        wanted = spec.get("cluster_manager")
        if wanted and self.manager and wanted != self.manager:
            self.err(item_var, key, "a key of the cluster manager in use: %s is read only by %s, and "
                                    "spark_rapids_cluster_manager is %s" % (key, wanted, self.manager))
            return
        text = self.check_value(item_var, key, spec, value)
        if text is None:
            return
        if not self.check_version_rules(item_var, key, spec, text, out, origins):
            return
        out[key] = text
        origins[key] = origin


def _facts_gpus(builder, nvsmi):
    """(gpu_count, min memory MiB, mig_enabled_indexes) from the facts, with errors."""
    gpus = nvsmi.get("gpus") if isinstance(nvsmi, dict) else None
    if not isinstance(gpus, list) or not gpus:
        count = nvsmi.get("gpu_count") if isinstance(nvsmi, dict) else None
        return (count if is_int(count) else None), None, []
    memories, mig = [], []
    for gpu in gpus:
        if not isinstance(gpu, dict):
            continue
        if gpu.get("mig_mode_current") == "Enabled":
            mig.append(gpu.get("index"))
        mem = gpu.get("memory_total_mib")
        if is_int(mem) and mem > 0:
            memories.append(mem)
    if memories and len(set(memories)) > 1:
        builder.result.warn("GPUs on this node differ in memory (%s MiB); sizing uses the smallest"
                            % ", ".join(str(m) for m in sorted(set(memories))))
    return len(gpus), (min(memories) if memories else None), mig


def supported_shims(config, plugin_version):
    """Spark releases the spark-rapids release ships a shim for (from __spark_rapids_shims), or None."""
    table = config.get("__spark_rapids_shims") or {}
    parts = _vtuple(plugin_version)
    if len(parts) < 2:
        return None
    versions = table.get("%02d.%02d" % parts[:2])
    return [str(v) for v in versions] if versions is not None else None


def _check_shim(b, config, spark_version, plugin_version):
    """Refuse a Spark / spark-rapids pair the plugin has no shim for (nothing would start)."""
    table = config.get("__spark_rapids_shims") or {}
    shims = supported_shims(config, plugin_version)
    if shims is None:
        b.err("spark_rapids_plugin_version", plugin_version,
              "a spark-rapids release in the role's shim table (%s; roles/spark_rapids/vars/main.yml "
              "__spark_rapids_shims, from each release's download.md), so the Spark version can be checked "
              "against the shims it ships" % ", ".join(sorted(table)))
        return False
    if str(spark_version) not in shims:
        b.err("spark_rapids_spark_version", spark_version,
              "a Spark release spark-rapids %s ships a shim for: %s (without a shim the plugin does not "
              "start and com.nvidia.spark.rapids.spark%s.RapidsShuffleManager does not exist)"
              % (plugin_version, ", ".join(shims), "".join(str(p) for p in _vtuple(spark_version)[:3])))
        return False
    return True


def _cluster_nodes(b, config):
    """Nodes in the Spark cluster: spark_rapids_cluster_nodes, else the hosts of
    spark_rapids_cluster_group, else the hosts of the play. A run narrowed by --limit
    must not size the whole cluster's executors from the hosts it happens to reach."""
    nodes = b._optional_positive_int("spark_rapids_cluster_nodes")
    if nodes is not None:
        return nodes
    group = config.get("spark_rapids_cluster_group")
    if group not in (None, ""):
        size = config.get("__cluster_group_size")
        if not isinstance(group, string_types):
            b.err("spark_rapids_cluster_group", group, "the name of an inventory group, or null")
        elif size is None:
            b.err("spark_rapids_cluster_group", group, "the name of a group in this inventory")
        elif not is_int(size) or size < 1:
            b.err("spark_rapids_cluster_group", group, "an inventory group with at least one host")
        else:
            return size
        return 1
    limit = config.get("__limit")
    if limit not in (None, ""):
        b.err("spark_rapids_cluster_nodes", None,
              "a number of nodes, or spark_rapids_cluster_group naming the cluster's inventory group, "
              "when the run is narrowed with --limit %s: the hosts of the play are then not the whole "
              "cluster, and maxExecutors, executor.instances and shuffle partitions would shrink" % (limit,))
        return 1
    play_hosts = config.get("__play_hosts_count")
    return play_hosts if is_int(play_hosts) and play_hosts > 0 else 1


def validate(config):
    result = ValidationResult()
    b = _Builder(config, result)

    # ---------------------------------------------------------------- scalars
    spark_version = b.var("spark_rapids_spark_version", "")
    match = SPARK_VERSION_RE.match(str(spark_version))
    supported = config.get("__spark_rapids_supported_spark") or []
    if not match:
        b.err("spark_rapids_spark_version", spark_version, "a Spark release such as 3.5.1 or 4.0.0 (major.minor.patch)")
    else:
        b.spark_version = _vtuple(spark_version)
    plugin_version = b.var("spark_rapids_plugin_version", "")
    min_plugin = config.get("__spark_rapids_min_plugin") or "23.02"
    if not PLUGIN_VERSION_RE.match(str(plugin_version)):
        b.err("spark_rapids_plugin_version", plugin_version, "a spark-rapids release such as 25.08.0 (YY.MM[.patch])")
    elif _vtuple(plugin_version) < _vtuple(min_plugin):
        b.err("spark_rapids_plugin_version", plugin_version, "spark-rapids %s or later" % min_plugin)
    else:
        b.plugin_version = _vtuple(plugin_version)

    profile = b._choice("spark_rapids_profile", PROFILES, "production")
    shuffle_mode = b._choice("spark_rapids_shuffle_mode", SHUFFLE_MODES, "MULTITHREADED")
    da_shuffle = b._choice("spark_rapids_dynamic_allocation_shuffle", DA_SHUFFLE, "auto")
    manager = b._choice("spark_rapids_cluster_manager", CLUSTER_MANAGERS, "standalone")
    b.manager = manager
    b._choice("spark_rapids_deprecated_keys", DEPRECATED_POLICIES, "translate")
    mig_address = b._choice("spark_rapids_discovery_mig_address", MIG_ADDRESS, "index")
    plugin_enabled = b.var("spark_rapids_plugin_enabled", True)
    if as_bool("spark_rapids_plugin_enabled", plugin_enabled, b.result, strict=True) is None:
        plugin_enabled = True

    if b.spark_version and (plugin_enabled or shuffle_mode != "none"):
        # The plugin runs only on the Spark releases its shims cover (stricter than the lines below).
        if b.plugin_version and not _check_shim(b, config, spark_version, plugin_version):
            b.spark_version = None
    elif b.spark_version and supported and "%d.%d" % b.spark_version[:2] not in supported:
        b.err("spark_rapids_spark_version", spark_version, "a Spark release of %s" % ", ".join(supported))
        b.spark_version = None

    script = b.var("spark_rapids_discovery_script_path", "")
    if not isinstance(script, string_types) or not script.startswith("/") or re.search(r"\s", script):
        b.err("spark_rapids_discovery_script_path", script, "an absolute path without spaces")
    jar_path = b.var("spark_rapids_jar_path", "")
    if jar_path and (not isinstance(jar_path, string_types) or not jar_path.startswith("/")
                     or not jar_path.endswith(".jar") or re.search(r"\s", jar_path)):
        b.err("spark_rapids_jar_path", jar_path, "an absolute path to the RAPIDS .jar on the nodes, or ''")

    _check_install(b)

    extra = b.var("spark_rapids_allowed_extra_keys", [])
    if not isinstance(extra, list):
        b.err("spark_rapids_allowed_extra_keys", extra, "a list of spark.* key names (a trailing '*' allows a prefix)")
        extra = []
    for name in extra:
        if not isinstance(name, string_types) or not name.startswith("spark."):
            b.err("spark_rapids_allowed_extra_keys", name, "spark.* key names (a trailing '*' allows a prefix)")
        elif name.endswith("*"):
            b.extra_prefixes.append(name[:-1])
        else:
            b.extra_exact.add(name)

    cluster_nodes = _cluster_nodes(b, config)
    gpus_override = b._optional_positive_int("spark_rapids_gpus_per_node")
    mem_override = b._optional_positive_int("spark_rapids_gpu_memory_mib")
    cpus = b._optional_positive_int("spark_rapids_cpus_per_node")
    host_mem = b._optional_positive_int("spark_rapids_host_memory_mib")
    facts_cpus = config.get("__facts_vcpus")
    facts_mem = config.get("__facts_memtotal_mb")
    if cpus is None and is_int(facts_cpus) and facts_cpus > 0:
        cpus = facts_cpus
    if host_mem is None and is_int(facts_mem) and facts_mem > 0:
        host_mem = facts_mem

    # ------------------------------------------------------------ GPU facts
    nvsmi = config.get("__nvidia_smi_facts") or {}
    if not isinstance(nvsmi, dict):
        nvsmi = {}
    f_count, f_mem, mig = _facts_gpus(b, nvsmi)
    if mig:
        if manager == "standalone":
            b.err("spark_rapids_cluster_manager", manager,
                  "yarn or kubernetes while MIG is enabled (GPUs %s): CUDA enumerates only one MIG device "
                  "per process, so executors need container isolation; a standalone worker would put every "
                  "executor on the same MIG device" % ", ".join(str(i) for i in mig))
        if mem_override is None or gpus_override is None:
            b.err("spark_rapids_gpu_memory_mib" if mem_override is None else "spark_rapids_gpus_per_node", None,
                  "the memory of one MIG device in MiB and the number of MIG devices per node: MIG is "
                  "enabled on GPUs %s and the facts report only whole-GPU memory"
                  % ", ".join(str(i) for i in mig))
    gpus_per_node = gpus_override or f_count
    gpu_mem = mem_override or f_mem
    # Unified memory (DGX Spark / GB10): one pool for GPU and host, sized from the host memory.
    unified = bool(nvsmi.get("unified_memory")) and not mig
    if unified:
        if (gpus_per_node or 1) != 1:
            b.err("spark_rapids_gpus_per_node", gpus_per_node,
                  "1 on a unified-memory node (one GPU sharing the system memory)")
        if not host_mem:
            b.err("spark_rapids_host_memory_mib", None,
                  "the node's memory in MiB: on a unified-memory node (DGX Spark) the GPU and the executors "
                  "share it, and the sizing splits it between them (ansible_facts.memtotal_mb is missing)")
        elif mem_override and mem_override * 2 > host_mem:
            b.err("spark_rapids_gpu_memory_mib", mem_override,
                  "at most half of the node's %d MiB on a unified-memory node: the RAPIDS pool and the "
                  "executor JVM come out of the same memory" % host_mem)
        gpu_mem = gpu_mem or 1
    if not gpus_per_node:
        b.err("spark_rapids_gpus_per_node", None,
              "a positive number: ansible_facts.nvidia_smi.gpu_count is missing (run "
              "dgxops.fleet.nvidia_smi_facts first or set spark_rapids_gpus_per_node)")
    if not gpu_mem:
        b.err("spark_rapids_gpu_memory_mib", None,
              "GPU memory in MiB (e.g. 81920 for an A100 80GB): ansible_facts.nvidia_smi.gpus[].memory_total_mib "
              "is missing or null (unified-memory systems such as DGX Spark must set it)")

    if not result.ok:
        return result

    # ---------------------------------------------------------------- sizing
    user = b.var("spark_rapids_settings", {})
    if not isinstance(user, dict):
        b.err("spark_rapids_settings", user, "a dictionary of spark.* key to value")
        return result
    base = config.get("__spark_rapids_base_settings") or {}

    # Direct memory cap from the effective executor JVM options, for the overhead rule.
    java_opts = str(user.get("spark.executor.extraJavaOptions", base.get("spark.executor.extraJavaOptions", "")))
    direct = MAX_DIRECT_RE.search(java_opts)
    direct_gib = 0
    if direct:
        direct_gib = -(-(_jvm_bytes(direct.group(1)) or 0) // (1 << 30))
    if unified:
        sizing = spark_sizing.size_unified(host_mem, cpus_per_node=cpus, cluster_nodes=cluster_nodes,
                                           direct_memory_gib=direct_gib, gpu_budget_mib=mem_override)
    else:
        sizing = spark_sizing.size(gpus_per_node, gpu_mem, cpus_per_node=cpus, host_memory_mib=host_mem,
                                   cluster_nodes=cluster_nodes)
    if direct and not unified:
        overhead = sizing["pinned_pool_gib"] + max(-(-sizing["executor_memory_gib"] // 10), direct_gib)
        sizing["memory_overhead_gib"] = overhead
        sizing["memory_overhead"] = "%dg" % overhead
        sizing["node_memory_needed_gib"] = sizing["executors_per_node"] * (sizing["executor_memory_gib"] + overhead)
    sizing["direct_memory_gib"] = direct_gib

    if da_shuffle == "auto":
        # The RAPIDS shuffle in UCX and CACHE_ONLY mode cannot work with the external shuffle service.
        da_shuffle = "tracking" if (shuffle_mode in ("UCX", "CACHE_ONLY") or manager == "kubernetes") else "service"

    computed = {
        "spark.executor.memory": sizing["executor_memory"],
        "spark.executor.memoryOverhead": sizing["memory_overhead"],
        "spark.executor.cores": str(sizing["executor_cores"]),
        "spark.executor.resource.gpu.amount": "1",
        "spark.executor.resource.gpu.discoveryScript": script,
        "spark.task.resource.gpu.amount": sizing["task_gpu_amount"],
        "spark.sql.shuffle.partitions": str(sizing["shuffle_partitions"]),
        "spark.rapids.sql.concurrentGpuTasks": str(sizing["concurrent_gpu_tasks"]),
        "spark.rapids.memory.pinnedPool.size": sizing["pinned_pool"],
    }
    if unified:
        # The RAPIDS pool takes its share of the one memory, not (nearly) all of what CUDA reports.
        computed["spark.rapids.memory.gpu.allocFraction"] = sizing["gpu_alloc_fraction"]
        computed["spark.rapids.memory.gpu.maxAllocFraction"] = sizing["gpu_alloc_fraction"]
        if float(sizing["gpu_alloc_fraction"]) < 0.25:
            computed["spark.rapids.memory.gpu.minAllocFraction"] = sizing["gpu_alloc_fraction"]
    if manager == "standalone":
        computed["spark.worker.resource.gpu.amount"] = str(sizing["gpus_per_node"])
        computed["spark.worker.resource.gpu.discoveryScript"] = script
    if plugin_enabled:
        computed["spark.plugins"] = SQL_PLUGIN
    if jar_path:
        computed["spark.driver.extraClassPath"] = jar_path
        computed["spark.executor.extraClassPath"] = jar_path
    profile_data = (b.profiles.get(profile) or {})
    if profile_data.get("dynamic_allocation"):
        if da_shuffle == "service":
            computed["spark.shuffle.service.enabled"] = "true"
            computed["spark.dynamicAllocation.shuffleTracking.enabled"] = "false"
        else:
            computed["spark.shuffle.service.enabled"] = "false"
            computed["spark.dynamicAllocation.shuffleTracking.enabled"] = "true"
    if shuffle_mode != "none":
        computed["spark.shuffle.manager"] = shuffle_manager_class(spark_version)
        computed["spark.rapids.shuffle.mode"] = shuffle_mode
        if shuffle_mode == "MULTITHREADED":
            computed["spark.rapids.shuffle.multiThreaded.reader.threads"] = str(sizing["shuffle_threads"])
            computed["spark.rapids.shuffle.multiThreaded.writer.threads"] = str(sizing["shuffle_threads"])
        if shuffle_mode == "CACHE_ONLY":
            computed["spark.shuffle.service.enabled"] = "false"
        if shuffle_mode == "UCX":
            computed["spark.shuffle.service.enabled"] = "false"
            ucx = dict(config.get("__spark_rapids_ucx_env") or {})
            user_ucx = b.var("spark_rapids_ucx_env", {})
            if not isinstance(user_ucx, dict):
                b.err("spark_rapids_ucx_env", user_ucx, "a dictionary of UCX_* variable to value")
                user_ucx = {}
            ucx.update(user_ucx)
            for name, value in ucx.items():
                if not ENV_NAME_RE.match(str(name)) or not str(name).startswith("UCX_"):
                    b.err("spark_rapids_ucx_env", name, "UCX_* environment variable names")
                    continue
                computed["spark.executorEnv.%s" % name] = value

    # ------------------------------------------------------- merge + validate
    out, origins = {}, {}
    layers = [("base", base), ("profile %s" % profile, profile_data.get("settings") or {}),
              ("sizing", computed), ("spark_rapids_settings", user)]
    for origin, layer in layers:
        variable = {"base": "__spark_rapids_base_settings", "sizing": "spark_rapids (computed sizing)",
                    "spark_rapids_settings": "spark_rapids_settings"}.get(origin, "__spark_rapids_profiles.%s" % profile)
        for key in sorted(layer):
            value = layer[key]
            if isinstance(value, string_types) and value.startswith("@"):
                name = value[1:]
                if name not in sizing:
                    b.err(variable, value, "a computed sizing value: %s" % ", ".join(sorted(sizing)))
                    continue
                value = str(sizing[name])
            b.add(out, origins, variable, key, value, origin)
    if not result.ok:
        return result

    # -------------------------------------------------------- cross-key rules
    _cross_rules(b, out, origins, sizing, shuffle_mode, manager, spark_version)
    if not result.ok:
        return result

    overridden = sorted(k for k, v in computed.items() if k in out and origins.get(k) == "spark_rapids_settings"
                        and out[k] != str(v))
    env = b.var("spark_rapids_env", {})
    spark_env = {}
    if not isinstance(env, dict):
        b.err("spark_rapids_env", env, "a dictionary of environment variable name to value for spark-env.sh")
    else:
        for name in sorted(env):
            value = env[name]
            if not ENV_NAME_RE.match(str(name)):
                b.err("spark_rapids_env", name, "shell variable names (letters, digits, '_')")
            elif isinstance(value, (dict, list)) or value is None or "\n" in str(value):
                b.err("spark_rapids_env[%r]" % name, value, "a single-line string or number")
            else:
                spark_env[str(name)] = ("true" if value else "false") if is_bool(value) else str(value)
    if not result.ok:
        return result

    if host_mem and sizing["node_memory_needed_gib"] * 1024 > host_mem:
        result.warn("spark_rapids: %d executors x (%s heap + %s overhead) = %d GiB exceeds this node's memory "
                    "(%d MiB); lower spark.executor.memory or the executors per node"
                    % (sizing["executors_per_node"], sizing["executor_memory"], sizing["memory_overhead"],
                       sizing["node_memory_needed_gib"], host_mem))

    result.normalized = {
        "settings": dict(sorted(out.items())),
        "origins": dict(sorted(origins.items())),
        "sizing": sizing,
        "overridden": overridden,
        "spark_env": spark_env,
        "profile": profile,
        "shuffle_mode": shuffle_mode,
        "dynamic_allocation_shuffle": da_shuffle if profile_data.get("dynamic_allocation") else "off",
        "cluster_manager": manager,
        "discovery": {"path": script, "mig_address": mig_address},
        "jar_classes": sorted(k for k in out if (b.spec_for(k)[0] or {}).get("requires_jar")
                              or (k == "spark.plugins" and SQL_PLUGIN in out[k])),
    }
    return result


def _cross_rules(b, out, origins, sizing, shuffle_mode, manager, spark_version):
    var = "spark_rapids_settings"

    def flag(key):
        return out.get(key, "").lower() == "true"

    # One task per GPU fraction must fit the executor's cores.
    task_amount = out.get("spark.task.resource.gpu.amount")
    cores = out.get("spark.executor.cores")
    if task_amount and cores:
        amount = float(task_amount)
        if amount < 1 and int(1 / amount + 1e-9) < int(cores):
            b.result.warn("%s['spark.task.resource.gpu.amount']=%s lets only %d tasks share a GPU while the "
                          "executor has %s cores; the recommended value is 1/%s"
                          % (var, task_amount, int(1 / amount + 1e-9), cores, cores))
    # Dynamic allocation needs a way to keep shuffle files.
    if flag("spark.dynamicAllocation.enabled"):
        tracking = out.get("spark.dynamicAllocation.shuffleTracking.enabled")
        tracking_on = tracking.lower() == "true" if tracking else _vtuple(spark_version) >= (3, 4)
        if not flag("spark.shuffle.service.enabled") and not tracking_on:
            b.err("%s['spark.dynamicAllocation.enabled']" % var, "true",
                  "dynamic allocation with spark.shuffle.service.enabled=true (and the external shuffle "
                  "service running) or spark.dynamicAllocation.shuffleTracking.enabled=true")
        if flag("spark.shuffle.service.enabled") and manager == "kubernetes":
            b.err("%s['spark.shuffle.service.enabled']" % var, "true",
                  "false on Kubernetes (no external shuffle service there); use shuffle tracking")
        low = out.get("spark.dynamicAllocation.minExecutors")
        high = out.get("spark.dynamicAllocation.maxExecutors")
        if low and high and int(low) > int(high):
            b.err("%s['spark.dynamicAllocation.minExecutors']" % var, low,
                  "at most spark.dynamicAllocation.maxExecutors (%s)" % high)
    # RAPIDS shuffle.
    mode = out.get("spark.rapids.shuffle.mode")
    manager_class = out.get("spark.shuffle.manager", "")
    rapids_manager = RAPIDS_SHUFFLE_RE.match(manager_class)
    if rapids_manager and manager_class != shuffle_manager_class(spark_version):
        b.err("%s['spark.shuffle.manager']" % var, manager_class,
              "%s (the shim must match spark_rapids_spark_version %s)"
              % (shuffle_manager_class(spark_version), spark_version))
    if mode in ("UCX", "CACHE_ONLY"):
        if not rapids_manager:
            b.err("%s['spark.rapids.shuffle.mode']" % var, mode,
                  "%s only together with spark.shuffle.manager=%s" % (mode, shuffle_manager_class(spark_version)))
        if flag("spark.shuffle.service.enabled"):
            b.err("%s['spark.shuffle.service.enabled']" % var, "true",
                  "false with %s shuffle: spark-rapids silently falls back to Spark's shuffle when the "
                  "external shuffle service is on" % mode)
        if flag("spark.authenticate"):
            b.err("%s['spark.authenticate']" % var, "true",
                  "false with %s shuffle: spark-rapids silently falls back to Spark's shuffle with it on" % mode)
    if mode == "UCX":
        if flag("spark.dynamicAllocation.enabled"):
            b.result.warn("UCX shuffle with dynamic allocation (shuffle tracking) is untested by NVIDIA; "
                          "their docs say to disable dynamic allocation with UCX (use profile benchmark)")
    # GPU allocator fractions.
    fr = {k: float(out[k]) for k in ("spark.rapids.memory.gpu.minAllocFraction",
                                     "spark.rapids.memory.gpu.allocFraction",
                                     "spark.rapids.memory.gpu.maxAllocFraction") if k in out}
    low = fr.get("spark.rapids.memory.gpu.minAllocFraction", 0.25)
    mid = fr.get("spark.rapids.memory.gpu.allocFraction", 1.0)
    high = fr.get("spark.rapids.memory.gpu.maxAllocFraction", 1.0)
    if not low <= mid <= high:
        b.err("%s['spark.rapids.memory.gpu.allocFraction']" % var, mid,
              "minAllocFraction (%s) <= allocFraction <= maxAllocFraction (%s)" % (low, high))
    # Overhead must hold the pinned pool (YARN and Kubernetes kill containers that exceed it).
    pinned = bytes_of(out.get("spark.rapids.memory.pinnedPool.size", "0b")) or 0
    overhead = bytes_of(out.get("spark.executor.memoryOverhead", "0b"))
    if overhead is not None and pinned and overhead < pinned:
        b.err("%s['spark.executor.memoryOverhead']" % var, out["spark.executor.memoryOverhead"],
              "at least spark.rapids.memory.pinnedPool.size (%s): the pinned pool is off-heap memory "
              "counted in the overhead" % out["spark.rapids.memory.pinnedPool.size"])
    # Classes from the RAPIDS jar must be loadable by the driver and the executors.
    needs_jar = [k for k in ("spark.plugins", "spark.shuffle.manager")
                 if (k == "spark.plugins" and SQL_PLUGIN in out.get(k, "")) or (k == "spark.shuffle.manager" and rapids_manager)]
    if needs_jar and not out.get("spark.executor.extraClassPath") and "spark.jars" not in out:
        b.result.warn("%s name classes from the RAPIDS jar: put it in $SPARK_HOME/jars or set spark_rapids_jar_path "
                      "(the RAPIDS shuffle manager needs it on spark.driver/executor.extraClassPath)"
                      % " and ".join(needs_jar))


def _check_install(b):
    """Tarball / jar download variables: a URL always needs a checksum."""
    install = b.var("spark_rapids_install", False)
    if as_bool("spark_rapids_install", install, b.result, strict=True) is None:
        install = False
    tarball = b.var("spark_rapids_spark_tarball", "")
    checksum = b.var("spark_rapids_spark_tarball_checksum", "")
    if install:
        if not tarball or not isinstance(tarball, string_types):
            b.err("spark_rapids_spark_tarball", tarball,
                  "a Spark .tgz URL or controller path when spark_rapids_install is true")
        elif re.match(r"^[a-z]+://", tarball) and not CHECKSUM_RE.match(str(checksum)):
            b.err("spark_rapids_spark_tarball_checksum", checksum,
                  "<algorithm>:<hex digest> (e.g. sha256:...) for a downloaded tarball")
    jar_url = b.var("spark_rapids_jar_url", "")
    if jar_url:
        if not b.var("spark_rapids_jar_path", ""):
            b.err("spark_rapids_jar_path", "", "the path to download spark_rapids_jar_url to")
        jar_sum = b.var("spark_rapids_jar_checksum", "")
        if not CHECKSUM_RE.match(str(jar_sum)):
            b.err("spark_rapids_jar_checksum", jar_sum,
                  "<algorithm>:<hex digest> (e.g. sha256:...) for the downloaded jar")
