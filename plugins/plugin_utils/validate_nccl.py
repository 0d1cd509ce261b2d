# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side validation of the ``dgxops.fleet.nccl`` role's variables.

Why NCCL needs its own validator (behaviour verified on libnccl 2.32.3, see
``../shared/notes/spark-nccl-storage-reference.md`` section 3):

* ``nccl.conf`` lines are split at the first ``=`` with no trimming and no
  unquoting, so ``NCCL_DEBUG = INFO`` or ``NCCL_DEBUG="INFO"`` silently
  define a different variable or a different value.
* integers are read with ``strtoll(value, NULL, 0)``: ``abc`` becomes 0 and
  ``8k`` becomes 8, without a warning.
* ``NCCL_NSOCKS_PERTHREAD`` x ``NCCL_SOCKET_NTHREADS`` above 64 is cut down
  with a log line nobody reads.
* a misspelled variable name is simply never read.

``validate(config)`` returns a :class:`ValidationResult` whose ``normalized``
dict is what the role renders (``settings`` as strings, sorted), so the file
on the node is exactly what was checked here.

Standard library and ansible-core only (runs on the controller).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import os
import re
from xml.etree import ElementTree

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validation import ValidationResult, is_bool, is_int

# NCCL cuts keys and values at 1023 characters (src/misc/param.cc).
MAX_VALUE_LEN = 1023
# net_socket.cc: MAX_THREADS=16, MAX_SOCKETS=64.
MAX_SOCKET_THREADS = 16
MAX_SOCKETS = 64
# env.rst: "a fixed upper limit of 32 Host Channel Adapter (HCA) devices".
MAX_HCAS = 32

ALGORITHMS = ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
# Function names accepted before ':' in the per-function syntax (NCCL >= 2.24).
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE", "ABORT", "ATTN")
DEBUG_SUBSYSTEMS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC",
                    "ALLOC_HOST", "CALL", "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE",
                    "RAS", "DESTROY", "ALL")
PATH_LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")
# What ncclGetLevel (src/graph/paths.cc) accepts for NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL: the path
# type names of topoPathTypeStr up to SYS (LOC NVL NVB C2C PIX PXB PXN P2C PHB SYS; NET and DIS are
# not levels) and the legacy integers 0-5 (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4/5 SYS). NCCL 2.32 source,
# read 2026-12-03.
PATH_LEVEL_NAMES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "PXN", "P2C", "PHB", "SYS")
PATH_LEVEL_INTS = (0, 1, 2, 3, 4, 5)
# NCCL's MAXCHANNELS (src/include/device.h): the channel count limit.
MAX_CHANNELS = 64
# NCCL_SOCKET_NTHREADS rendered beside a lone NCCL_NSOCKS_PERTHREAD (NCCL's suggestion for
# generic 100G networks is 4 threads); capped so that threads x sockets <= MAX_SOCKETS.
DEFAULT_SOCKET_THREADS = 4

_NAME_RE = re.compile(r"^NCCL_[A-Z0-9_]+$")
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_MCA_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_MCA_COMPONENT_LIST_RE = re.compile(r"^\^?[a-z0-9_]+(,[a-z0-9_]+)*$")
_MCA_LIST_KEYS = ("btl", "pml", "mtl", "osc", "coll", "plm", "oob", "rmaps", "ras", "routed")
_INT_RE = re.compile(r"^-?[0-9]+$")
_IFNAME_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.:@-]+$")
_HCA_TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]*(:[0-9]*(:[0-9]*)?)?)?$")
_PLUGIN_RE = re.compile(r"^[A-Za-z0-9_./+-]+$")
_HOSTPORT_RE = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$")

# Settings NCCL's documentation lists under "Debugging": "should not be used in
# production nor retained in scripts" (env.rst).  Allowed, with a warning.
DEBUG_ONLY = {
    "NCCL_ALGO": "forcing algorithms stops NCCL choosing by topology and size; from 2.24 a "
                 "function left without a usable algorithm fails instead of falling back to Ring",
    "NCCL_PROTO": "forcing protocols stops NCCL choosing by message size",
    "NCCL_GRAPH_FILE": "an expert setting read in src/graph/search.cc and not documented in env.rst",
    "NCCL_P2P_DISABLE": "it disables NVLink/PCIe peer-to-peer between GPUs",
    "NCCL_P2P_LEVEL": "it overrides NCCL's own peer-to-peer distance choice",
    "NCCL_SHM_DISABLE": "it disables the shared-memory transport",
    "NCCL_NTHREADS": "it overrides the CUDA threads per block",
    "NCCL_BUFFSIZE": "it changes every connection's buffer size (GPU memory per peer)",
    "NCCL_MAX_NCHANNELS": "deprecated since 2.17 in favour of NCCL_MAX_CTAS",
    "NCCL_MIN_NCHANNELS": "deprecated since 2.17 in favour of NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS": "it caps the CTAs NCCL may use",
    "NCCL_MIN_CTAS": "it forces a minimum number of CTAs",
    "NCCL_NET_GDR_LEVEL": "it overrides NCCL's GPUDirect RDMA distance choice",
    "NCCL_IB_DISABLE": "it forces traffic off InfiniBand/RoCE onto another transport",
    "NCCL_CHECK_POINTERS": "deprecated in 2.29.7 (use NCCL_CHECK_MODE)",
    "NCCL_LAUNCH_MODE": "GROUP is deprecated since 2.9",
    "NCCL_CUMEM_ENABLE": "it overrides NCCL's cuMem auto-detection",
    "NCCL_NVLS_ENABLE": "it overrides NVLink SHARP auto-detection",
}

# Names that must never be written to nccl.conf.
FORBIDDEN = {
    "NCCL_CONF_FILE": "NCCL reads NCCL_CONF_FILE from the process environment before it opens any "
                      "configuration file, so setting it inside one has no effect",
    "NCCL_COMM_ID": "it names one job's rendezvous address; a fleet-wide value would make unrelated "
                    "jobs rendezvous with each other",
    "NCCL_HOSTID": "it must differ between hosts; a fleet-wide value would make every node look like "
                   "one host",
    "NCCL_PSK": "a pre-shared key does not belong in a world-readable file",
}

# Variables removed from NCCL: writing them does nothing on current versions.
REMOVED = {
    "NCCL_LL_THRESHOLD": "removed in NCCL 2.5 (use NCCL_PROTO)",
    "NCCL_TREE_THRESHOLD": "removed in NCCL 2.5 (use NCCL_ALGO)",
    "NCCL_SINGLE_RING_THRESHOLD": "removed in NCCL 2.3",
    "NCCL_IB_CUDA_SUPPORT": "removed in NCCL 2.4 (use NCCL_NET_GDR_LEVEL)",
    "NCCL_IB_GDR_LEVEL": "renamed NCCL_NET_GDR_LEVEL in NCCL 2.4",
    "NCCL_CHECKS_DISABLE": "deprecated in NCCL 2.2.12 and ignored",
}


def _int(lo=None, hi=None, choices=None):
    return {"type": "int", "min": lo, "max": hi, "choices": choices}


def _enum(*choices, **kw):
    return {"type": "enum", "choices": choices, "case": kw.get("case", False)}


BOOL01 = _int(choices=(0, 1))

# The known variables (env.rst at v2.30.7 plus NCCL_GRAPH_FILE/NCCL_GRAPH_DUMP_FILE
# from the source), each with its value rule.  Every name here is also present
# in libnccl 2.32.3 (checked by tests/fidelity/test_nccl_consumer.py).
KNOWN = {
    # --- system configuration ---
    "NCCL_SOCKET_IFNAME": {"type": "iflist"},
    "NCCL_SOCKET_FAMILY": _enum("AF_INET", "AF_INET6", case=True),
    "NCCL_SOCKET_RETRY_CNT": _int(1),
    "NCCL_SOCKET_RETRY_SLEEP_MSEC": _int(1),
    "NCCL_SOCKET_POLL_TIMEOUT_MSEC": _int(0),
    # 0 = NCCL's automatic choice (which is 0 threads, so no effect, on ordinary NICs)
    "NCCL_SOCKET_NTHREADS": _int(0, MAX_SOCKET_THREADS),
    "NCCL_NSOCKS_PERTHREAD": _int(1, MAX_SOCKETS),
    "NCCL_CROSS_NIC": _int(choices=(0, 1, 2)),
    "NCCL_IB_HCA": {"type": "hcalist"},
    "NCCL_IB_TIMEOUT": _int(0, 31),
    "NCCL_IB_RETRY_CNT": _int(0, 7),
    "NCCL_IB_GID_INDEX": _int(-1, 255),
    "NCCL_IB_ADDR_FAMILY": _enum("AF_INET", "AF_INET6", case=True),
    "NCCL_IB_ADDR_RANGE": {"type": "string"},
    "NCCL_IB_ROCE_VERSION_NUM": _int(choices=(1, 2)),
    "NCCL_IB_PKEY": _int(0, 65535),
    "NCCL_IB_SL": _int(0, 15),
    "NCCL_IB_TC": _int(0, 255),
    "NCCL_IB_FIFO_TC": _int(0, 255),
    "NCCL_IB_RETURN_ASYNC_EVENTS": BOOL01,
    "NCCL_IB_QPS_PER_CONNECTION": _int(1, 128),
    "NCCL_IB_SPLIT_DATA_ON_QPS": BOOL01,
    "NCCL_IB_PCI_RELAXED_ORDERING": _int(choices=(0, 1, 2)),
    "NCCL_IB_ADAPTIVE_ROUTING": BOOL01,
    "NCCL_IB_ECE_ENABLE": BOOL01,
    "NCCL_IB_AR_THRESHOLD": _int(0),
    "NCCL_IB_MERGE_NICS": BOOL01,
    "NCCL_IB_DISABLE": BOOL01,
    "NCCL_OOB_NET_ENABLE": BOOL01,
    "NCCL_OOB_NET_IFNAME": {"type": "iflist"},
    "NCCL_UID_STAGGER_THRESHOLD": _int(1),
    "NCCL_UID_STAGGER_RATE": _int(1),
    "NCCL_NET": {"type": "netname"},
    "NCCL_NET_PLUGIN": {"type": "plugin"},
    "NCCL_TUNER_PLUGIN": {"type": "plugin"},
    "NCCL_PROFILER_PLUGIN": {"type": "plugin"},
    "NCCL_ENV_PLUGIN": {"type": "plugin"},
    "NCCL_IGNORE_CPU_AFFINITY": BOOL01,
    "NCCL_DEBUG": _enum(*DEBUG_LEVELS),
    "NCCL_DEBUG_SUBSYS": {"type": "subsys"},
    "NCCL_DEBUG_FILE": {"type": "path"},
    "NCCL_DEBUG_LEVELS": {"type": "string"},
    "NCCL_DEBUG_TIMESTAMP_FORMAT": {"type": "string", "empty": True},
    "NCCL_DEBUG_TIMESTAMP_LEVELS": {"type": "string", "empty": True},
    "NCCL_COLLNET_ENABLE": BOOL01,
    "NCCL_COLLNET_NODE_THRESHOLD": _int(1),
    "NCCL_CTA_POLICY": {"type": "string"},
    "NCCL_NETDEVS_POLICY": {"type": "string"},
    "NCCL_TOPO_FILE": {"type": "xmlpath"},
    "NCCL_TOPO_DUMP_FILE": {"type": "path"},
    "NCCL_SET_THREAD_NAME": BOOL01,
    "NCCL_RAS_ENABLE": BOOL01,
    "NCCL_RAS_ADDR": {"type": "hostport"},
    "NCCL_MNNVL_ENABLE": _int(choices=(0, 1, 2)),
    "NCCL_NET_MERGE_POLICY": _enum("ALL", "RAIL", case=True),
    "NCCL_IB_RAIL_POLICY": {"type": "string"},
    # --- "Debugging" section of env.rst ---
    "NCCL_ALGO": {"type": "algo"},
    "NCCL_PROTO": {"type": "proto"},
    "NCCL_GRAPH_FILE": {"type": "xmlpath"},
    "NCCL_GRAPH_DUMP_FILE": {"type": "path"},
    "NCCL_P2P_DISABLE": BOOL01,
    "NCCL_P2P_LEVEL": {"type": "pathlevel"},
    "NCCL_P2P_DIRECT_DISABLE": BOOL01,
    "NCCL_SHM_DISABLE": BOOL01,
    "NCCL_BUFFSIZE": _int(1),
    "NCCL_NTHREADS": _int(choices=(64, 128, 256, 512)),
    "NCCL_MAX_NCHANNELS": _int(1, MAX_CHANNELS),
    "NCCL_MIN_NCHANNELS": _int(1, MAX_CHANNELS),
    "NCCL_MAX_CTAS": _int(1, 64),
    "NCCL_MIN_CTAS": _int(1, 64),
    "NCCL_CHECK_POINTERS": BOOL01,
    "NCCL_CHECK_MODE": _enum("DEFAULT", "DEBUG_LOCAL", "DEBUG_GLOBAL", case=True),
    "NCCL_LAUNCH_MODE": _enum("PARALLEL", "GROUP", case=True),
    "NCCL_NET_GDR_LEVEL": {"type": "pathlevel"},
    "NCCL_NET_GDR_READ": BOOL01,
    "NCCL_NET_GDR_C2C": BOOL01,
    "NCCL_NET_SHARED_BUFFERS": BOOL01,
    "NCCL_NET_SHARED_COMMS": BOOL01,
    "NCCL_CUMEM_ENABLE": BOOL01,
    "NCCL_CUMEM_HOST_ENABLE": BOOL01,
    "NCCL_MEM_SYNC_DOMAIN": _int(choices=(0, 1)),
    "NCCL_NVB_DISABLE": BOOL01,
    "NCCL_PXN_DISABLE": BOOL01,
    "NCCL_P2P_PXN_LEVEL": _int(choices=(0, 1, 2)),
    "NCCL_RUNTIME_CONNECT": BOOL01,
    "NCCL_GRAPH_REGISTER": BOOL01,
    "NCCL_LOCAL_REGISTER": BOOL01,
    "NCCL_SET_STACK_SIZE": BOOL01,
    "NCCL_GRAPH_MIXING_SUPPORT": BOOL01,
    "NCCL_DMABUF_ENABLE": BOOL01,
    "NCCL_P2P_NET_CHUNKSIZE": _int(1),
    "NCCL_P2P_LL_THRESHOLD": _int(0),
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS": BOOL01,
    "NCCL_COMM_BLOCKING": BOOL01,
    "NCCL_CGA_CLUSTER_SIZE": _int(0, 8),
    "NCCL_NVLS_ENABLE": _int(choices=(0, 1, 2)),
    "NCCL_LAUNCH_ORDER_IMPLICIT": BOOL01,
    "NCCL_LAUNCH_RACE_FATAL": BOOL01,
    "NCCL_IPC_USE_ABSTRACT_SOCKET": BOOL01,
}

PROFILE_KEYS = ("description", "settings", "mca_params")


def _suggest(name, candidates):
    close = difflib.get_close_matches(name.upper(), list(candidates), n=1, cutoff=0.75)
    return close[0] if close else None


class _Checker:
    """Validates one configuration into ``result``."""

    def __init__(self, result):
        self.r = result

    # ---------------------------------------------------------------- values
    def as_text(self, var, value, allow_empty=False):
        """Return the value as the exact text NCCL will see, or None after an error."""
        if is_bool(value):
            # YAML true/false would render as True/False; strtoll reads both as 0.
            return "1" if value else "0"
        if is_int(value):
            return str(value)
        if isinstance(value, float):
            self.r.error(var, value, "an integer or a string (NCCL parses numbers with strtoll, "
                                     "so %r would be read as %d)" % (value, int(value)))
            return None
        if not isinstance(value, str):
            self.r.error(var, value, "a string or an integer, not a %s" % type(value).__name__)
            return None
        if value == "" and not allow_empty:
            self.r.error(var, value, "a non-empty value (leave the variable out to keep NCCL's default)")
            return None
        if value != value.strip():
            self.r.error(var, value, "no leading or trailing whitespace: nccl.conf is split at the "
                                     "first '=' with no trimming, so NCCL would see %r" % value)
            return None
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            self.r.error(var, value, "no quotes: NCCL does not remove quotes, so it would see the "
                                     "quote characters as part of the value; write %s" % value[1:-1])
            return None
        if "\n" in value or "\r" in value or "\x00" in value:
            self.r.error(var, value, "a single line without control characters")
            return None
        if len(value) > MAX_VALUE_LEN:
            self.r.error(var, value[:40] + "...", "at most %d characters (NCCL truncates longer "
                                                  "values)" % MAX_VALUE_LEN)
            return None
        return value

    def check_int(self, var, value, spec):
        if is_bool(value):
            text = "1" if value else "0"
        elif is_int(value):
            text = str(value)
        elif isinstance(value, str) and _INT_RE.match(value):
            text = value
        else:
            self.r.error(var, value, "a decimal integer%s (NCCL reads numbers with strtoll: "
                                     "'abc' would become 0 and '8k' would become 8)" % _range_text(spec))
            return None
        number = int(text)
        if spec.get("choices") is not None and number not in spec["choices"]:
            self.r.error(var, value, "one of %s" % ", ".join(str(c) for c in spec["choices"]))
            return None
        lo, hi = spec.get("min"), spec.get("max")
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            self.r.error(var, value, "an integer%s" % _range_text(spec))
            return None
        return str(number)

    def check_pathlevel(self, var, value):
        """A path type name (case-sensitive) or a legacy integer level, as ncclGetLevel reads them."""
        if is_int(value):
            text = str(value)
        elif isinstance(value, str):
            text = value
        else:
            text = None
        if text is not None and text in PATH_LEVEL_NAMES:
            return text
        if text is not None and _INT_RE.match(text) and int(text) in PATH_LEVEL_INTS:
            return str(int(text))
        hint = ""
        if text is not None and text.upper() in PATH_LEVEL_NAMES:
            hint = " (case-sensitive: write %s)" % text.upper()
        self.r.error(var, value, "one of %s, or a legacy level 0-5%s"
                     % (", ".join(PATH_LEVEL_NAMES), hint))
        return None

    def check_enum(self, var, text, spec):
        choices = spec["choices"]
        if text in choices:
            return text
        upper = {c.upper(): c for c in choices}
        if not spec.get("case") and text.upper() in upper:
            return text
        hint = ""
        if text.upper() in upper:
            hint = " (this variable is case-sensitive: write %s)" % upper[text.upper()]
        self.r.error(var, text, "one of %s%s" % (", ".join(choices), hint))
        return None

    def check_selection(self, var, text, names, what):
        """NCCL_ALGO / NCCL_PROTO: [func:][^]item[,item...][;func:[^]item...]."""
        canon = {n.lower(): n for n in names}
        funcs = {f.lower(): f for f in FUNCTIONS}
        allowed = ("a comma-separated list of %s from %s (not case-sensitive), optionally starting "
                   "with ^ to exclude; from NCCL 2.24 also per function, e.g. "
                   "'%s;allreduce:%s' with functions %s"
                   % (what, ", ".join(names), names[0], names[1 % len(names)], ", ".join(FUNCTIONS)))
        entries = text.split(";")
        seen_funcs = set()
        for index, entry in enumerate(entries):
            func = None
            body = entry
            if ":" in entry:
                func, body = entry.split(":", 1)
                if func.lower() not in funcs:
                    self.r.error(var, text, "%s; %r is not a function name" % (allowed, func))
                    return None
                if func.lower() in seen_funcs:
                    self.r.error(var, text, "%s; function %r is given twice" % (allowed, func))
                    return None
                seen_funcs.add(func.lower())
            elif index > 0:
                self.r.error(var, text, "%s; only the first ';' entry may leave out the function "
                                        "name (%r has none)" % (allowed, entry))
                return None
            if body.startswith("^"):
                body = body[1:]
            items = body.split(",")
            for item in items:
                if item.lower() not in canon:
                    extra = ""
                    if item.strip().lower() in canon:
                        extra = " (remove the spaces around %r)" % item.strip()
                    elif item.lower() == "collnet":
                        extra = " (CollNet was split into CollNetDirect and CollNetChain in 2.14)"
                    else:
                        near = difflib.get_close_matches(item.lower(), list(canon), n=1, cutoff=0.6)
                        if near:
                            extra = " (did you mean %s?)" % canon[near[0]]
                    self.r.error(var, text, "%s; %r is not one of them%s; NCCL >= 2.24 fails on an "
                                            "unknown token" % (allowed, item, extra))
                    return None
        if var.endswith("NCCL_PROTO") and re.search(r"(^|[,:])ll128(,|;|$)", text.lower()) \
                and "^" not in text:
            self.r.warn("%s=%s enables LL128 explicitly: NCCL documents that forcing LL128 on "
                        "platforms that do not support it can corrupt data" % (var, text))
        return text

    def check_iflist(self, var, text):
        body = text
        if body.startswith("^"):
            body = body[1:]
        if body.startswith("="):
            body = body[1:]
        tokens = body.split(",")
        if not body or any(not _IFNAME_TOKEN_RE.match(t) for t in tokens):
            self.r.error(var, text, "a comma-separated list of interface name prefixes, optionally "
                                    "starting with ^ (exclude) and/or = (exact names), e.g. "
                                    "'=enp1s0f1np1' or '^docker,lo'; no spaces")
            return None
        return text

    def check_hcalist(self, var, text):
        body = text
        if body.startswith("^"):
            body = body[1:]
        exact = body.startswith("=")
        if exact:
            body = body[1:]
        tokens = body.split(",")
        if not body or any(not _HCA_TOKEN_RE.match(t) for t in tokens):
            self.r.error(var, text, "a comma-separated list of <hca>[:<port>[:<rail>[:<plane>]]], "
                                    "optionally starting with ^ (exclude) and/or = (exact names), "
                                    "e.g. '=mlx5_0:1,mlx5_1:1'; no spaces")
            return None
        if len(tokens) > MAX_HCAS:
            self.r.error(var, text, "at most %d HCAs (NCCL's fixed limit); got %d" % (MAX_HCAS, len(tokens)))
            return None
        if not exact and any(re.search(r"_[0-9]$", t.split(":")[0]) for t in tokens):
            self.r.warn("%s=%s has no '=' prefix, so NCCL treats each name as a prefix: %s also "
                        "matches %s0-%s9; write '%s=%s' for exact names"
                        % (var, text, tokens[0].split(":")[0], tokens[0].split(":")[0],
                           tokens[0].split(":")[0], "^" if text.startswith("^") else "", body))
        return text

    def check_path(self, var, text):
        if text.startswith("~") or not text.startswith("/") or re.search(r"\s", text):
            self.r.error(var, text, "an absolute path without spaces (NCCL does not expand '~' "
                                    "and a relative path would depend on each process's "
                                    "working directory)")
            return None
        return text

    def check_value(self, var, name, value):
        spec = KNOWN.get(name, {"type": "string"})
        kind = spec["type"]
        if kind == "int":
            return self.check_int(var, value, spec)
        if kind == "pathlevel":
            return self.check_pathlevel(var, value)
        text = self.as_text(var, value, allow_empty=spec.get("empty", False))
        if text is None:
            return None
        if kind == "enum":
            return self.check_enum(var, text, spec)
        if kind == "algo":
            return self.check_selection(var, text, ALGORITHMS, "algorithms")
        if kind == "proto":
            return self.check_selection(var, text, PROTOCOLS, "protocols")
        if kind == "iflist":
            return self.check_iflist(var, text)
        if kind == "hcalist":
            return self.check_hcalist(var, text)
        if kind in ("path", "xmlpath"):
            return self.check_path(var, text)
        if kind == "plugin":
            if not _PLUGIN_RE.match(text):
                self.r.error(var, text, "a plugin suffix, a library file name or 'none'")
                return None
            return text
        if kind == "netname":
            if not re.match(r"^[A-Za-z0-9_-]+$", text):
                self.r.error(var, text, "a network name: IB, Socket or an external plugin's name")
                return None
            return text
        if kind == "hostport":
            if not _HOSTPORT_RE.match(text):
                self.r.error(var, text, "host:port, e.g. localhost:28028 or [::1]:28028")
                return None
            return text
        if kind == "subsys":
            items = text.split(",")
            for item in items:
                bare = item[1:] if item.startswith("^") else item
                if bare.upper() not in DEBUG_SUBSYSTEMS:
                    self.r.error(var, text, "a comma-separated list of %s, each optionally "
                                            "prefixed with ^" % ", ".join(DEBUG_SUBSYSTEMS))
                    return None
            return text
        return text


def _range_text(spec):
    if spec.get("choices") is not None:
        return " (one of %s)" % ", ".join(str(c) for c in spec["choices"])
    lo, hi = spec.get("min"), spec.get("max")
    if lo is not None and hi is not None:
        return " from %d to %d" % (lo, hi)
    if lo is not None:
        return " >= %d" % lo
    if hi is not None:
        return " <= %d" % hi
    return ""


def _check_name(r, var, name, allow_unknown):
    if not isinstance(name, str):
        r.error(var, name, "an NCCL variable name (a string such as NCCL_DEBUG)")
        return False
    if name in FORBIDDEN:
        r.error(var, name, "a variable other than %s: %s" % (name, FORBIDDEN[name]))
        return False
    if name in REMOVED:
        r.error(var, name, "a current variable: %s is %s" % (name, REMOVED[name]))
        return False
    if name in KNOWN:
        return True
    if not _NAME_RE.match(name):
        hint = ""
        if name.strip().upper() in KNOWN:
            hint = " (did you mean %s?)" % name.strip().upper()
        r.error(var, name, "a name matching NCCL_[A-Z0-9_]+ (upper case, no spaces; NCCL's "
                           "variable names are case-sensitive)%s" % hint)
        return False
    if name in allow_unknown:
        r.warn("%s: %s is not in the role's list of known NCCL variables; rendered because "
               "nccl_allow_unknown lists it, its value is only checked for quoting and whitespace"
               % (var, name))
        return True
    near = _suggest(name, KNOWN)
    r.error(var, name, "a known NCCL variable%s; add it to nccl_allow_unknown if your NCCL "
                       "version really reads it" % (" (did you mean %s?)" % near if near else ""))
    return False


def _check_xml_src(r, var, path):
    if not isinstance(path, str) or not path:
        r.error(var, path, "a path on the controller to an XML file")
        return
    if not os.path.isfile(path):
        r.error(var, path, "an existing file on the controller")
        return
    try:
        ElementTree.parse(path)
    except ElementTree.ParseError as exc:
        r.error(var, path, "a well-formed XML file (%s)" % exc)


def _check_profiles(r, profiles):
    if not isinstance(profiles, dict):
        r.error("__nccl_profiles", type(profiles).__name__, "a dictionary of profiles")
        return {}
    return profiles


def _validate_mca(r, params, var="nccl_mpi_mca_params"):
    out = {}
    if params is None:
        return out
    if not isinstance(params, dict):
        r.error(var, params, "a dictionary of Open MPI MCA parameter name to value")
        return out
    for key in sorted(params, key=str):
        value = params[key]
        kvar = "%s.%s" % (var, key)
        if not isinstance(key, str) or not _MCA_NAME_RE.match(key):
            r.error(kvar, key, "an MCA parameter name: lower case letters, digits and '_' "
                               "(e.g. btl, btl_tcp_if_include); not the 'OMPI_MCA_' environment form")
            continue
        if is_bool(value):
            text = "1" if value else "0"
        elif is_int(value):
            text = str(value)
        elif isinstance(value, str):
            text = value
        else:
            r.error(kvar, value, "a string or an integer")
            continue
        if text == "" or text != text.strip() or "\n" in text or "#" in text:
            r.error(kvar, value, "a non-empty single-line value without surrounding whitespace or '#'")
            continue
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            r.error(kvar, value, "no quotes (Open MPI keeps them as part of the value); write %s"
                    % text[1:-1])
            continue
        if key in _MCA_LIST_KEYS and not _MCA_COMPONENT_LIST_RE.match(text):
            r.error(kvar, value, "a comma-separated list of component names, optionally starting "
                                 "with ^ to exclude them all, e.g. ^openib or ^uct,openib,ofi "
                                 "(no spaces; ^ only once, at the start)")
            continue
        out[key] = text
    return out


def _socket_threads(r, settings, sources):
    """NCCL_NSOCKS_PERTHREAD only works with helper threads: with NCCL_SOCKET_NTHREADS unset (or 0)
    NCCL picks the thread count itself, and that is 0 on ordinary NICs (only some cloud NICs get
    more), so the sockets setting is a no-op. Render a thread count that makes it take effect."""
    nsocks = settings.get("NCCL_NSOCKS_PERTHREAD")
    nthreads = settings.get("NCCL_SOCKET_NTHREADS")
    if nsocks is None or (nthreads is not None and int(nthreads) > 0):
        return
    threads = max(1, min(DEFAULT_SOCKET_THREADS, MAX_SOCKETS // int(nsocks)))
    if nthreads is None:
        settings["NCCL_SOCKET_NTHREADS"] = str(threads)
        sources["NCCL_SOCKET_NTHREADS"] = "%s (with NCCL_SOCKET_NTHREADS added)" % sources["NCCL_NSOCKS_PERTHREAD"]
        r.warn("%s=%s without NCCL_SOCKET_NTHREADS does nothing on ordinary NICs (NCCL's automatic "
               "thread count is 0 there); rendering NCCL_SOCKET_NTHREADS=%d with it (%d x %s = %d "
               "sockets, limit %d). Set NCCL_SOCKET_NTHREADS yourself to choose another count"
               % (sources["NCCL_NSOCKS_PERTHREAD"], nsocks, threads, threads, nsocks,
                  threads * int(nsocks), MAX_SOCKETS))
    else:
        r.warn("%s=%s with NCCL_SOCKET_NTHREADS=0 (automatic) does nothing on ordinary NICs, where "
               "NCCL's automatic thread count is 0; set NCCL_SOCKET_NTHREADS to 1-%d"
               % (sources["NCCL_NSOCKS_PERTHREAD"], nsocks, MAX_SOCKETS // int(nsocks)))


def _check_mca_rules(r, mca, sources):
    """Open MPI 4.1 rules: btl_tcp_if_include and btl_tcp_if_exclude are mutually exclusive (the TCP
    BTL disables itself when both are set: btl_tcp_component.c), wherever each one comes from;
    a btl selection without self breaks messages to the own process."""
    if "btl_tcp_if_include" in mca and "btl_tcp_if_exclude" in mca:
        r.error_text("%s.btl_tcp_if_include=%s and %s.btl_tcp_if_exclude=%s are both set; Open MPI "
                     "disables the TCP BTL when both are given; allowed: only one of them (set the "
                     "other to null in nccl_mpi_mca_params to drop a profile's value)"
                     % (sources["btl_tcp_if_include"], mca["btl_tcp_if_include"],
                        sources["btl_tcp_if_exclude"], mca["btl_tcp_if_exclude"]))
    btl = mca.get("btl")
    if btl is not None:
        names = btl.lstrip("^").split(",")
        drops_self = ("self" in names) if btl.startswith("^") else ("self" not in names)
        if drops_self:
            r.warn("%s.btl=%s leaves out the self BTL, which Open MPI needs for a process's messages to "
                   "itself; add self (e.g. btl: self,vader,tcp) or do not exclude it"
                   % (sources["btl"], btl))


def _validate_environment(r, env, var="nccl_mpi_environment"):
    out = {}
    if env is None:
        return out
    if not isinstance(env, dict):
        r.error(var, env, "a dictionary of environment variable name to value")
        return out
    for key in sorted(env, key=str):
        value = env[key]
        kvar = "%s.%s" % (var, key)
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            r.error(kvar, key, "an environment variable name matching [A-Z_][A-Z0-9_]*")
            continue
        if key.startswith("NCCL_"):
            r.error(kvar, key, "a non-NCCL variable: put NCCL settings in nccl_settings so they "
                               "reach every process through nccl.conf, not only login shells")
            continue
        if is_bool(value):
            text = "1" if value else "0"
        elif isinstance(value, (int, str)):
            text = str(value)
        else:
            r.error(kvar, value, "a string or an integer")
            continue
        if "\n" in text or "\x00" in text:
            r.error(kvar, value, "a single-line value")
            continue
        if key == "HOROVOD_MPI_ARGS":
            r.warn("%s: Horovod does not read HOROVOD_MPI_ARGS (horovodrun takes --mpi-args); "
                   "for '-mca btl ^openib' set nccl_mpi_mca_params: {btl: '^openib'} instead, "
                   "which every mpirun on the node reads" % kvar)
        out[key] = text
    return out


def validate(config):
    """Validate the nccl role's variables; see the module docstring."""
    r = ValidationResult()
    if not isinstance(config, dict):
        r.error("config", config, "a dictionary of the nccl role's variables")
        return r
    c = _Checker(r)

    profiles = _check_profiles(r, config.get("__nccl_profiles", {}))
    profile_name = config.get("nccl_profile") or ""
    profile = {}
    if profile_name:
        if not isinstance(profile_name, str) or profile_name not in profiles:
            r.error("nccl_profile", profile_name,
                    "one of %s, or '' for none" % ", ".join(sorted(profiles)))
        else:
            profile = profiles[profile_name] or {}
            unknown_keys = sorted(set(profile) - set(PROFILE_KEYS))
            if unknown_keys:
                r.error("__nccl_profiles.%s" % profile_name, unknown_keys,
                        "profile keys %s" % ", ".join(PROFILE_KEYS))

    allow_unknown = config.get("nccl_allow_unknown") or []
    if not isinstance(allow_unknown, list) or not all(isinstance(x, str) for x in allow_unknown):
        r.error("nccl_allow_unknown", allow_unknown, "a list of variable names")
        allow_unknown = []
    for name in allow_unknown:
        if not _NAME_RE.match(name):
            r.error("nccl_allow_unknown", name, "names matching NCCL_[A-Z0-9_]+")

    user = config.get("nccl_settings")
    if user is None:
        user = {}
    if not isinstance(user, dict):
        r.error("nccl_settings", user, "a dictionary of NCCL variable name to value")
        user = {}

    merged = []
    for name, value in sorted((profile.get("settings") or {}).items(), key=lambda kv: str(kv[0])):
        if name not in user:
            merged.append(("__nccl_profiles.%s.settings.%s" % (profile_name, name), name, value))
    for name in sorted(user, key=str):
        merged.append(("nccl_settings.%s" % name, name, user[name]))

    settings = {}
    sources = {}
    for var, name, value in merged:
        if not _check_name(r, var, name, allow_unknown):
            continue
        if value is None:
            # An explicit null removes a profile's setting.
            continue
        text = c.check_value(var, name, value)
        if text is None:
            continue
        settings[name] = text
        sources[name] = var
        if name in DEBUG_ONLY:
            r.warn("%s=%s is listed under 'Debugging' in NCCL's documentation (not recommended in "
                   "production): %s" % (name, text, DEBUG_ONLY[name]))

    # --- cross-field rules
    nthreads = settings.get("NCCL_SOCKET_NTHREADS")
    nsocks = settings.get("NCCL_NSOCKS_PERTHREAD")
    if nthreads is not None and nsocks is not None and int(nthreads) * int(nsocks) > MAX_SOCKETS:
        r.error_text(
            "%s=%s x %s=%s = %d sockets per connection exceeds NCCL's limit of %d "
            "(NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS must be <= %d); NCCL would silently "
            "lower NCCL_NSOCKS_PERTHREAD to %d; allowed: NCCL_NSOCKS_PERTHREAD <= %d with "
            "NCCL_SOCKET_NTHREADS=%s"
            % (sources["NCCL_NSOCKS_PERTHREAD"], nsocks, sources["NCCL_SOCKET_NTHREADS"], nthreads,
               int(nthreads) * int(nsocks), MAX_SOCKETS, MAX_SOCKETS, MAX_SOCKETS // int(nthreads),
               MAX_SOCKETS // int(nthreads), nthreads))
    _socket_threads(r, settings, sources)
    if settings.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        r.warn("NCCL_DEBUG=%s fleet-wide makes every NCCL process log at that level; WARN is the "
               "usual fleet setting" % settings["NCCL_DEBUG"])
    if settings.get("NCCL_DEBUG", "").upper() == "ATTN":
        r.warn("NCCL_DEBUG=ATTN is understood from NCCL 2.32 only; older versions log nothing. "
               "NCCL's docs suggest NCCL_DEBUG=WARN with NCCL_DEBUG_LEVELS=ATTN")
    for low, high in (("NCCL_MIN_CTAS", "NCCL_MAX_CTAS"), ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")):
        if low in settings and high in settings and int(settings[low]) > int(settings[high]):
            r.error_text("%s=%s is greater than %s=%s; allowed: %s <= %s"
                         % (sources[low], settings[low], sources[high], settings[high], low, high))

    # --- XML files deployed by the role
    xml_dir = config.get("nccl_xml_dir", "/etc/nccl")
    if not isinstance(xml_dir, str) or not xml_dir.startswith("/"):
        r.error("nccl_xml_dir", xml_dir, "an absolute directory path on the node")
        xml_dir = "/etc/nccl"
    files = []
    for var, setting, dest_name in (("nccl_topo_file_src", "NCCL_TOPO_FILE", "topo.xml"),
                                    ("nccl_graph_file_src", "NCCL_GRAPH_FILE", "graph.xml")):
        src = config.get(var) or ""
        if not src:
            continue
        _check_xml_src(r, var, src)
        dest = xml_dir.rstrip("/") + "/" + dest_name
        if setting in settings and settings[setting] != dest:
            r.error_text("%s=%s conflicts with %s: the role deploys that file to %s and sets %s "
                         "itself; remove one of the two"
                         % (sources[setting], settings[setting], var, dest, setting))
            continue
        if setting not in settings and setting in DEBUG_ONLY:
            r.warn("%s=%s is listed under 'Debugging' in NCCL's documentation (not recommended "
                   "in production): %s" % (setting, dest, DEBUG_ONLY[setting]))
        settings[setting] = dest
        sources[setting] = var
        files.append({"src": src, "dest": dest, "variable": setting})
    # Files referenced but not deployed by the role: the role checks they exist on the node.
    deployed = set(f["dest"] for f in files)
    must_exist = [{"variable": sources[k], "path": v} for k, v in sorted(settings.items())
                  if KNOWN.get(k, {}).get("type") == "xmlpath" and v not in deployed]

    conf_path = config.get("nccl_conf_path", "/etc/nccl.conf")
    if not isinstance(conf_path, str) or not conf_path.startswith("/") or conf_path.endswith("/"):
        r.error("nccl_conf_path", conf_path, "an absolute file path")

    mode = config.get("nccl_conf_mode", "0644")
    if not isinstance(mode, str) or not re.match(r"^0[0-7]{3}$", mode):
        r.error("nccl_conf_mode", mode, "a quoted octal string such as \"0644\" (an unquoted 0644 is "
                                        "read by YAML as the decimal number 420)")

    mca = {}
    mca_sources = {}
    profile_var = "__nccl_profiles.%s.mca_params" % profile_name
    user_mca = config.get("nccl_mpi_mca_params")
    removed = set()
    if isinstance(user_mca, dict):
        # an explicit null removes a profile's parameter (as in nccl_settings)
        removed = set(k for k, v in user_mca.items() if v is None)
        user_mca = dict((k, v) for k, v in user_mca.items() if v is not None)
    for var, layer in ((profile_var, profile.get("mca_params") or {}), ("nccl_mpi_mca_params", user_mca)):
        checked = _validate_mca(r, layer, var)
        for key in checked:
            if var == profile_var and key in removed:
                continue
            mca[key] = checked[key]
            mca_sources[key] = var
    _check_mca_rules(r, mca, mca_sources)
    absent = config.get("nccl_mpi_mca_params_absent") or []
    if not isinstance(absent, list) or not all(isinstance(a, str) and _MCA_NAME_RE.match(a) for a in absent):
        r.error("nccl_mpi_mca_params_absent", absent, "a list of MCA parameter names")
        absent = []
    for name in absent:
        if name in mca:
            r.error("nccl_mpi_mca_params_absent", name,
                    "names not also set in nccl_mpi_mca_params (the role cannot set and remove %s)" % name)
    env = _validate_environment(r, config.get("nccl_mpi_environment"))

    r.normalized = {
        "settings": dict(sorted(settings.items())),
        "sources": sources,
        "xml_files": files,
        "must_exist": must_exist,
        "mca_params": dict(sorted(mca.items())),
        "mca_params_absent": sorted(absent),
        "environment": dict(sorted(env.items())),
    }
    return r
