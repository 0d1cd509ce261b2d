"""``dgxops advise``: turn GPU and node metrics into per-host findings with the fix.

Guide 000 section 4.1 watches SM activity, memory bandwidth, PCIe throughput, NVLink errors and
storage I/O wait, and turns them into advice (SM activity < 60 % with memory bandwidth > 80 %:
memory-bandwidth bound; PCIe receive > 90 %: consider GPUDirect RDMA). Guide 001 asks for GPU
utilisation > 85 % in benchmarks and watches power with DCGM. This module holds those rules and
the few an operator adds (throttling from the clocks-event reasons, XID errors, ECC and row
remapping, NVLink recovery, configuration drift) in ONE table, :data:`RULES`, from which:

* ``rules_yaml()`` renders the Prometheus recording + alerting rules file that the
  ``dgxops.fleet.monitoring`` role deploys (``roles/monitoring/files/dgxops-gpu.rules.yml`` is
  this output, and a test keeps the two equal);
* ``advise_prometheus(url)`` asks a Prometheus HTTP API (loopback only) for each rule's
  expression, with recording-rule names expanded, so it also works against a Prometheus that
  does not load the rules file;
* ``advise_metrics_text(text)`` evaluates the same rules on one scrape of an exporter
  (Prometheus text format), for a node without Prometheus. One snapshot has no history: the
  5-minute averages are the current values, counters count since the exporter started, and
  rules that need a rate (I/O wait) are listed as not evaluated.

Metric names are the DCGM exporter's (``DCGM_FI_*``), the node exporter's (``node_*``) and the
monitoring role's textfile collector's (``dgxops_*``). Ratios from DCGM profiling fields
(``DCGM_FI_PROF_*``) are 0..1; ``DCGM_FI_DEV_GPU_UTIL`` is 0..100.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------

# Recording rules: name -> PromQL. Names follow level:metric:operations.
# PCIe: usable bytes per second per lane is 8 GT/s x 128/130 / 8 bits = 0.985 GB/s at Gen3 and
# doubles each generation (Gen4 1.97, Gen5 3.94 GB/s). Gen6 (FLIT mode) is ~4 % lower than this
# formula gives; Gen1/2 (8b/10b) do not occur on data-centre GPUs.
# Deprecated DCGM field names -> the current name (NVIDIA/DCGM dcgmlib/dcgm_fields.h, read
# 2026-12-03: "#define DCGM_FI_DEV_CLOCK_THROTTLE_REASONS DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
# "Deprecated: Use DCGM_FI_DEV_CLOCKS_EVENT_REASONS instead"). The rules and the role's field list
# use the current names; an exporter of an older DCGM (or a field list) that still emits the old
# name keeps working: the rules read both through a recording rule, the file mode maps the name.
FIELD_ALIASES = {
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
}

RECORDING = {
    "dgxops:gpu_clocks_event_reasons":
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS or DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "dgxops:gpu_sm_active:avg5m": "avg_over_time(DCGM_FI_PROF_SM_ACTIVE[5m])",
    "dgxops:gpu_dram_active:avg5m": "avg_over_time(DCGM_FI_PROF_DRAM_ACTIVE[5m])",
    "dgxops:gpu_util:avg5m": "avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m])",
    "dgxops:gpu_pcie_link:max_bytes_per_second":
        "DCGM_FI_DEV_PCIE_LINK_WIDTH * (1e9 * 128 / 130) * 2 ^ (DCGM_FI_DEV_PCIE_LINK_GEN - 3)",
    "dgxops:gpu_pcie_rx:ratio_avg5m":
        "avg_over_time(DCGM_FI_PROF_PCIE_RX_BYTES[5m]) / dgxops:gpu_pcie_link:max_bytes_per_second",
    "dgxops:gpu_pcie_tx:ratio_avg5m":
        "avg_over_time(DCGM_FI_PROF_PCIE_TX_BYTES[5m]) / dgxops:gpu_pcie_link:max_bytes_per_second",
    "dgxops:gpu_nvlink_errors:rate5m":
        "rate(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[5m])"
        " + rate(DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL[5m])"
        " + rate(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[5m])"
        " + rate(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[5m])",
    "dgxops:node_iowait:ratio_rate5m":
        "avg without (cpu, mode) (rate(node_cpu_seconds_total{mode=\"iowait\"}[5m]))",
}

# NVML clocks-event ("throttle") reasons, the bits of DCGM_FI_DEV_CLOCKS_EVENT_REASONS.
CLOCK_EVENT_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clocks_setting",
}

# XIDs that mean the GPU (or its memory/links/firmware) needs an operator, not the application.
FATAL_XIDS = (48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140)
XID_MEANING = {
    13: "graphics engine exception (usually an application bug or bad kernel launch)",
    31: "GPU memory page fault (usually an application out-of-bounds access)",
    43: "GPU stopped processing (an application fault; the GPU keeps working)",
    45: "preemptive cleanup after a previous error (a process was killed)",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapping recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


def _bit(mask_metric, bit):
    """PromQL for 'bit is set in the mask' (PromQL has no bitwise operators)."""
    return "floor(%s / %d) %% 2 == 1" % (mask_metric, bit)


_CER = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
_CER_Q = "dgxops:gpu_clocks_event_reasons"   # what the expressions read: current or deprecated name
_XID = "DCGM_FI_DEV_XID_ERRORS"
_XID_FATAL_EXPR = " or ".join("%s == %d" % (_XID, x) for x in FATAL_XIDS)
# DCGM_FI_DEV_XID_ERRORS is a last-value gauge: it keeps the last XID until the driver reloads or the
# exporter restarts, so an alert on its value fires forever after one XID. The XID rules fire only
# while a new XID is recent: the value changed within the window, or the series itself is new.
XID_WINDOW = "15m"
_XID_RECENT = "(changes(%s[%s]) > 0 or (%s unless %s offset %s))" % (_XID, XID_WINDOW, _XID, _XID, XID_WINDOW)


@dataclass(frozen=True)
class Rule:
    """One piece of advice: an alerting rule plus what the advisor prints."""

    name: str
    severity: str              # info | warning | critical
    expr: str                  # PromQL (may use the RECORDING names)
    for_: str                  # the alert's `for:` (the advisor reports the current state)
    summary: str               # Go-template subset: {{ $labels.X }}, {{ $value | humanize... }}
    fix: str
    source: str                # where the rule comes from (guide section or operator practice)
    scope: str = "gpu"         # gpu | series (node-level series)
    show: tuple = ()           # raw metrics printed next to the finding (name, label, kind)
    # file mode: a function of {metric: value} for one GPU/series -> value or None (no finding);
    # None: the rule needs history and is not evaluated from one snapshot.
    check: object = None
    metrics: tuple = ()        # raw metrics the rule reads (for the dashboard/exporter checks)


def _mask(g):
    v = g.get(_CER)
    return None if v is None else int(v)


def _has_bits(g, bits):
    m = _mask(g)
    return m is not None and any(m & b for b in bits)


def _xid(g):
    v = g.get(_XID)
    return None if v is None else int(v)


RULES = (
    Rule(
        name="DgxGpuMemoryBandwidthBound", severity="warning", for_="10m",
        expr="dgxops:gpu_dram_active:avg5m > 0.8 and dgxops:gpu_sm_active:avg5m < 0.6",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} is memory-bandwidth bound "
                "(memory bandwidth {{ $value | humanizePercentage }} busy, SM activity below 60%)",
        fix="Optimise the data access pattern: coalesce and reuse data in shared memory/L2, fuse "
            "kernels that stream the same tensors, move fewer bytes (BF16/FP8, compressed columns "
            "in RAPIDS), and profile the hot kernels with Nsight Compute's memory workload analysis. "
            "More SMs or clocks will not help.",
        source="guide 000 section 4.1",
        show=(("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "ratio"), ("dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", "ratio")),
        check=lambda g: (g["DCGM_FI_PROF_DRAM_ACTIVE"] if "DCGM_FI_PROF_DRAM_ACTIVE" in g and "DCGM_FI_PROF_SM_ACTIVE" in g
                         and g["DCGM_FI_PROF_DRAM_ACTIVE"] > 0.8 and g["DCGM_FI_PROF_SM_ACTIVE"] < 0.6 else None),
        metrics=("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE"),
    ),
    Rule(
        name="DgxGpuPcieRxSaturated", severity="warning", for_="10m",
        expr="dgxops:gpu_pcie_rx:ratio_avg5m > 0.9",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }}: PCIe receive at {{ $value | humanizePercentage }} "
                "of the link's bandwidth",
        fix="Keep data off the host path: enable GPUDirect RDMA for inter-node traffic (NCCL_NET_GDR_LEVEL "
            "left to NCCL, nvidia-peermem loaded) and GPUDirect Storage for reads; use pinned memory and "
            "overlap copies with compute; check the GPU negotiated its full PCIe generation and width.",
        source="guide 000 section 4.1",
        show=(("pcie_rx_bytes_per_second", "DCGM_FI_PROF_PCIE_RX_BYTES", "bytes"),
              ("pcie_link_gen", "DCGM_FI_DEV_PCIE_LINK_GEN", "number"),
              ("pcie_link_width", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "number")),
        check=lambda g: (_pcie_ratio(g) if _pcie_ratio(g) is not None and _pcie_ratio(g) > 0.9 else None),
        metrics=("DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH"),
    ),
    Rule(
        name="DgxGpuUnderutilised", severity="info", for_="15m",
        expr="dgxops:gpu_util:avg5m < 85 and avg_over_time(DCGM_FI_DEV_FB_USED[5m]) > 1024",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} holds memory but is busy only "
                "{{ $value | humanize }}% of the time",
        fix="The job is waiting on its input: profile with nsys, raise data-loader workers/prefetch, "
            "read from local NVMe or GPUDirect Storage, and move decoding/augmentation to the GPU (DALI, "
            "cuDF). Benchmarks should keep GPU utilisation above 85%.",
        source="guide 001 section 4.2 (GPU utilisation > 85%)",
        show=(("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "percent"), ("fb_used_mib", "DCGM_FI_DEV_FB_USED", "number")),
        check=lambda g: (g["DCGM_FI_DEV_GPU_UTIL"] if "DCGM_FI_DEV_GPU_UTIL" in g and g["DCGM_FI_DEV_GPU_UTIL"] < 85
                         and g.get("DCGM_FI_DEV_FB_USED", 0) > 1024 else None),
        metrics=("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"),
    ),
    Rule(
        name="DgxGpuThermalThrottling", severity="warning", for_="5m",
        expr="%s and (floor(%s / 32) %% 4 > 0)" % (_CER_Q, _CER_Q),
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} is slowing its clocks for temperature "
                "(clocks event reasons {{ $value }})",
        fix="Check the cooling: fan/airflow and inlet temperature of the chassis, blocked filters, and the "
            "BMC's thermal events; compare DCGM_FI_DEV_GPU_TEMP and DCGM_FI_DEV_MEMORY_TEMP with the other "
            "GPUs of the node. A single hot GPU is a hardware ticket.",
        source="operator practice (NVML clocks-event reasons 0x20, 0x40)",
        show=(("clocks_event_reasons", _CER, "mask"), ("gpu_temp_c", "DCGM_FI_DEV_GPU_TEMP", "number")),
        check=lambda g: (g[_CER] if _has_bits(g, (0x20, 0x40)) else None),
        metrics=(_CER,),
    ),
    Rule(
        name="DgxGpuHardwareSlowdown", severity="critical", for_="1m",
        expr="%s and ((%s) or (%s))" % (_CER_Q, _bit(_CER_Q, 8), _bit(_CER_Q, 128)),
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }}: hardware slowdown or power brake active "
                "(clocks event reasons {{ $value }})",
        fix="The board or the node's power delivery is forcing the clocks down: check the power supplies and "
            "the BMC event log, then run `dcgmi diag -r 3` on the drained node; repeated events need a "
            "hardware ticket.",
        source="operator practice (NVML clocks-event reasons 0x8, 0x80)",
        show=(("clocks_event_reasons", _CER, "mask"), ("power_w", "DCGM_FI_DEV_POWER_USAGE", "number")),
        check=lambda g: (g[_CER] if _has_bits(g, (0x8, 0x80)) else None),
        metrics=(_CER,),
    ),
    Rule(
        name="DgxGpuPowerCapped", severity="info", for_="15m",
        expr="%s and (%s)" % (_CER_Q, _bit(_CER_Q, 4)),
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} is held at its software power limit "
                "(clocks event reasons {{ $value }})",
        fix="Compare the enforced power limit with the GPU's default (dashboard 'Power'): a limit set below "
            "the default (gpu_tuning_power_limit_watts, the guide's `-pl 300`) caps performance; raise it "
            "back to the default unless the cap is intended for the site's power budget.",
        source="guide 001 section 5 (watch GPU power with DCGM)",
        show=(("clocks_event_reasons", _CER, "mask"), ("power_w", "DCGM_FI_DEV_POWER_USAGE", "number"),
              ("power_limit_w", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "number")),
        check=lambda g: (g[_CER] if _has_bits(g, (0x4,)) else None),
        metrics=(_CER,),
    ),
    Rule(
        name="DgxGpuXidFatal", severity="critical", for_="0m",
        expr="(%s) and %s" % (_XID_FATAL_EXPR, _XID_RECENT),
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} reported XID {{ $value }}",
        fix="Drain the node, save `nvidia-bug-report.sh`, reset the GPU (or reboot) and run "
            "`dcgmi diag -r 3` before returning it to service; an XID that comes back needs an RMA.",
        source="operator practice (NVIDIA XID catalogue)",
        show=(("xid", _XID, "xid"),),
        check=lambda g: (g[_XID] if _xid(g) in FATAL_XIDS else None),
        metrics=(_XID,),
    ),
    Rule(
        name="DgxGpuXidError", severity="warning", for_="0m",
        expr="(%s > 0 unless (%s)) and %s" % (_XID, _XID_FATAL_EXPR, _XID_RECENT),
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} reported XID {{ $value }}",
        fix="Usually the application's fault (bad memory access, killed kernel): check the job's logs at "
            "that time; the GPU keeps working. Recurring XIDs across jobs on one GPU point to hardware.",
        source="operator practice (NVIDIA XID catalogue)",
        show=(("xid", _XID, "xid"),),
        check=lambda g: (g[_XID] if _xid(g) and _xid(g) not in FATAL_XIDS else None),
        metrics=(_XID,),
    ),
    Rule(
        name="DgxGpuEccDoubleBit", severity="critical", for_="0m",
        expr="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }}: {{ $value }} uncorrectable (double-bit) ECC "
                "error(s) since the driver loaded",
        fix="Drain the node and reset the GPU so the driver remaps the row; jobs that ran on it may have "
            "read corrupt data. Check DCGM_FI_DEV_ROW_REMAP_FAILURE afterwards.",
        source="operator practice",
        show=(("ecc_dbe_volatile", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "number"),),
        check=lambda g: (g["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] if g.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0) > 0 else None),
        metrics=("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",),
    ),
    Rule(
        name="DgxGpuRowRemapFailure", severity="critical", for_="0m",
        expr="DCGM_FI_DEV_ROW_REMAP_FAILURE > 0",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} could not remap a failing memory row",
        fix="The GPU has run out of spare rows: take it out of service and open an RMA.",
        source="operator practice",
        show=(("uncorrectable_remapped_rows", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "number"),),
        check=lambda g: (g["DCGM_FI_DEV_ROW_REMAP_FAILURE"] if g.get("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0) > 0 else None),
        metrics=("DCGM_FI_DEV_ROW_REMAP_FAILURE",),
    ),
    Rule(
        name="DgxGpuRowRemapPending", severity="warning", for_="0m",
        expr="DCGM_FI_DEV_ROW_REMAP_PENDING > 0",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }} has a memory row remap pending",
        fix="Drain the node and reset the GPU (nvidia-smi -r, or reboot) so the pending remap takes effect.",
        source="operator practice",
        show=(),
        check=lambda g: (g["DCGM_FI_DEV_ROW_REMAP_PENDING"] if g.get("DCGM_FI_DEV_ROW_REMAP_PENDING", 0) > 0 else None),
        metrics=("DCGM_FI_DEV_ROW_REMAP_PENDING",),
    ),
    Rule(
        name="DgxGpuNvlinkErrors", severity="warning", for_="0m",
        expr="increase(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[10m]) > 0"
             " or increase(DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL[10m]) > 0"
             " or increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[10m]) > 0",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }}: {{ $value | humanize }} NVLink CRC/replay "
                "errors in 10 minutes",
        fix="Errors the link corrected, at a cost: run `nvidia-smi nvlink -e` and `dcgmi diag -r 2`, check "
            "the NVSwitch fabric manager log; a link whose count keeps rising needs the baseboard "
            "inspected. NCCL all-reduce bandwidth drops while this fires.",
        source="guide 000 section 4.1 (NVLink error rate)",
        show=(("nvlink_crc_flit_errors", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "number"),
              ("nvlink_replay_errors", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "number")),
        check=lambda g: (_nvlink_total(g) if _nvlink_total(g) else None),
        metrics=("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                 "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"),
    ),
    Rule(
        name="DgxGpuNvlinkRecoveryErrors", severity="critical", for_="0m",
        expr="increase(DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL[10m]) > 0",
        summary="GPU {{ $labels.gpu }} on {{ $labels.host }}: {{ $value | humanize }} NVLink recovery "
                "error(s) in 10 minutes",
        fix="A link went down and retrained: jobs on the node may hang in NCCL. Drain it, check the fabric "
            "manager log and `nvidia-smi nvlink -s`, and run `dcgmi diag -r 3`.",
        source="guide 000 section 4.1 (NVLink error rate)",
        show=(("nvlink_recovery_errors", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "number"),),
        check=lambda g: (g["DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"]
                         if g.get("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 0) > 0 else None),
        metrics=("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",),
    ),
    Rule(
        name="DgxNodeIoWaitHigh", severity="warning", for_="10m",
        expr="dgxops:node_iowait:ratio_rate5m > 0.1",
        summary="{{ $labels.host }} spends {{ $value | humanizePercentage }} of CPU time waiting for I/O",
        fix="Storage is holding the GPUs back: apply the storage_tuning role (read-ahead, scheduler, mount "
            "options), stage data on local NVMe, use more reader threads or GPUDirect Storage, and check the "
            "network filesystem's throughput.",
        source="guide 000 section 4.1 (storage I/O wait)",
        scope="series", check=None, metrics=("node_cpu_seconds_total",),
    ),
    Rule(
        name="DgxopsConfigDrift", severity="warning", for_="30m",
        expr="dgxops_drift > 0",
        summary="{{ $labels.host }}: {{ $labels.item }} differs from what dgxops declared "
                "(GPU {{ $labels.gpu }}: {{ $labels.detail }})",
        fix="Something changed the node outside Ansible (or a reboot lost a setting): see it with "
            "`dgxops check -l HOST` and put it back with `dgxops run site.yml -l HOST`.",
        source="dgxops facts (textfile collector)",
        scope="series", check=lambda g: (g["dgxops_drift"] if g.get("dgxops_drift", 0) > 0 else None),
        metrics=("dgxops_drift",),
    ),
    Rule(
        name="DgxopsTextfileStale", severity="warning", for_="5m",
        expr="time() - dgxops_collector_last_success_timestamp_seconds > 900",
        summary="{{ $labels.host }}: the dgxops textfile collector has not succeeded for "
                "{{ $value | humanize }}s",
        fix="Look at `systemctl status dgxops-textfile.service` and `journalctl -u dgxops-textfile` on the "
            "node (nvidia-smi hanging or failing is the usual cause).",
        source="dgxops facts (textfile collector)",
        scope="series",
        check=lambda g: ((time.time() - g["dgxops_collector_last_success_timestamp_seconds"])
                         if "dgxops_collector_last_success_timestamp_seconds" in g
                         and time.time() - g["dgxops_collector_last_success_timestamp_seconds"] > 900 else None),
        metrics=("dgxops_collector_last_success_timestamp_seconds",),
    ),
)

SEVERITIES = ("info", "warning", "critical")


def _pcie_ratio(g):
    try:
        gen, width, rx = g["DCGM_FI_DEV_PCIE_LINK_GEN"], g["DCGM_FI_DEV_PCIE_LINK_WIDTH"], g["DCGM_FI_PROF_PCIE_RX_BYTES"]
    except KeyError:
        return None
    cap = width * (1e9 * 128 / 130) * 2 ** (gen - 3)
    return rx / cap if cap > 0 else None


def _nvlink_total(g):
    return sum(g.get(m, 0) for m in ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                                     "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
                                     "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"))


# ---------------------------------------------------------------------------------------------
# Rules file
# ---------------------------------------------------------------------------------------------

_RECORD_RE = re.compile(r"dgxops:[a-z0-9_]+:[a-z0-9_]+")


def expand(expr: str) -> str:
    """Replace recording-rule names by their expressions (parenthesised), recursively."""
    for _ in range(5):
        new = _RECORD_RE.sub(lambda m: "(%s)" % expand_one(m.group(0)), expr)
        if new == expr:
            return new
        expr = new
    return expr


def expand_one(name):
    if name not in RECORDING:
        raise KeyError("unknown recording rule %s" % name)
    return RECORDING[name]


def metrics_used() -> set:
    """Every raw metric name the rules read (recording rules included)."""
    names = set()
    for text in list(RECORDING.values()) + [r.expr for r in RULES]:
        names.update(re.findall(r"(?<![:\w])((?:DCGM_FI|node|dgxops)_[A-Za-z0-9_]+)\b", text))
    # a deprecated alias is read only as a fallback for older exporters: the field is the current one
    return {FIELD_ALIASES.get(n, n) for n in names}


def rules_document() -> dict:
    recording = [{"record": name, "expr": expr} for name, expr in RECORDING.items()]
    alerts = []
    for r in RULES:
        alerts.append({
            "alert": r.name, "expr": r.expr, "for": r.for_,
            "labels": {"severity": r.severity, "dgxops_scope": r.scope},
            "annotations": {"summary": r.summary, "fix": r.fix, "source": r.source},
        })
    return {"groups": [
        {"name": "dgxops.recording", "rules": recording},
        {"name": "dgxops.advice", "rules": alerts},
    ]}


def rules_yaml() -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        def increase_indent(self, flow=False, indentless=False):  # indented lists (yamllint)
            return super().increase_indent(flow, False)

    header = ("---\n# Managed by dgxops (generated by `dgxops advise --emit-rules`; do not edit by hand).\n"
              "# Recording and alerting rules of the bottleneck advisor (guide 000 section 4.1).\n")
    return header + yaml.dump(rules_document(), Dumper=Dumper, sort_keys=False, width=100, allow_unicode=False)


# ---------------------------------------------------------------------------------------------
# Go-template subset (what the rules' summaries use), as Prometheus renders it
# ---------------------------------------------------------------------------------------------

def _go_float(v: float) -> str:
    """fmt %v of a float64 (strconv 'g' shortest, exponent when < -4 or >= 21)."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    text = repr(float(v))
    if "e" in text:
        mant, exp = text.split("e")
        exp_i = int(exp)
        if -4 <= exp_i < 21:
            return ("%f" % v).rstrip("0").rstrip(".")
        return "%se%s%02d" % (mant, "-" if exp_i < 0 else "+", abs(exp_i))
    return text


def _go_g4(v: float) -> str:
    text = "%.4g" % v
    m = re.match(r"^(-?[0-9.]+)e([+-])0*([0-9]+)$", text)
    if m:  # Go prints at least two exponent digits, like C
        text = "%se%s%02d" % (m.group(1), m.group(2), int(m.group(3)))
    return text


def humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return _go_g4(v)
    prefix = ""
    if abs(v) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix, v = p, v / 1000
        return _go_g4(v) + prefix
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix, v = p, v * 1000
    return _go_g4(v) + prefix


def humanize_percentage(v: float) -> str:
    return _go_g4(v * 100) + "%"


_TMPL_RE = re.compile(r"\{\{\s*(\$labels\.([A-Za-z_][A-Za-z0-9_]*)|\$value(?:\s*\|\s*([A-Za-z]+))?)\s*\}\}")


def render(template: str, labels: dict, value: float) -> str:
    def sub(m):
        if m.group(2):
            return str(labels.get(m.group(2), ""))
        fn = m.group(3)
        if fn is None:
            return _go_float(value)
        if fn == "humanize":
            return humanize(value)
        if fn == "humanizePercentage":
            return humanize_percentage(value)
        raise ValueError("template function %s is not supported" % fn)
    return _TMPL_RE.sub(sub, template)


# ---------------------------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------------------------

@dataclass
class Finding:
    host: str
    rule: str
    severity: str
    message: str
    fix: str
    value: float
    gpu: str | None = None
    uuid: str | None = None
    metrics: dict = field(default_factory=dict)

    def as_dict(self):
        return dict(self.__dict__)


@dataclass
class Advice:
    source: str
    hosts: dict                 # host -> [Finding]
    evaluated: list
    not_evaluated: list         # [{"rule": ..., "reason": ...}]

    def as_dict(self):
        return {
            "source": self.source,
            "hosts": {h: [f.as_dict() for f in fs] for h, fs in sorted(self.hosts.items())},
            "summary": {sev: sum(1 for fs in self.hosts.values() for f in fs if f.severity == sev) for sev in SEVERITIES},
            "rules_evaluated": list(self.evaluated),
            "rules_not_evaluated": list(self.not_evaluated),
        }

    def worst(self):
        order = {s: i for i, s in enumerate(SEVERITIES)}
        sevs = [f.severity for fs in self.hosts.values() for f in fs]
        return max(sevs, key=order.get) if sevs else None

    def text(self) -> str:
        lines = []
        for host in sorted(self.hosts):
            findings = self.hosts[host]
            if not findings:
                lines.append("%s: no findings" % host)
                continue
            lines.append("%s: %d finding(s)" % (host, len(findings)))
            for f in findings:
                extra = ", ".join("%s=%s" % (k, _fmt_metric(v, kind)) for k, (v, kind) in f.metrics.items())
                lines.append("  [%s] %s: %s%s" % (f.severity, f.rule, f.message, (" (%s)" % extra) if extra else ""))
                lines.append("      fix: %s" % f.fix)
        if self.not_evaluated:
            lines.append("not evaluated: " + "; ".join("%s (%s)" % (n["rule"], n["reason"]) for n in self.not_evaluated))
        if not self.hosts:
            lines.append("no hosts found in %s" % self.source)
        return "\n".join(lines)


def _fmt_metric(v, kind):
    if kind == "ratio":
        return humanize_percentage(v)
    if kind == "percent":
        return "%s%%" % _go_g4(v)
    if kind == "bytes":
        return humanize(v) + "B/s"
    if kind == "mask":
        return "0x%x (%s)" % (int(v), ", ".join(n for b, n in sorted(CLOCK_EVENT_BITS.items()) if int(v) & b) or "none")
    if kind == "xid":
        return "%d (%s)" % (int(v), XID_MEANING.get(int(v), "see NVIDIA's XID catalogue"))
    return _go_float(v)


# dcgm-exporter's host label: `Hostname` today, `hostname` in the releases that rename it; both
# are read (dcgm-exporter issue/PR renaming the label, checked 2026-12-03).
HOST_LABELS = ("host", "Hostname", "hostname")


def host_of(labels: dict) -> str:
    """The host a series belongs to: the scrape config's `host` label, DCGM's `Hostname` (or the
    renamed `hostname`), the instance."""
    for key in HOST_LABELS:
        if labels.get(key):
            return labels[key]
    inst = labels.get("instance", "")
    if inst.startswith("["):
        return inst.split("]")[0] + "]"
    return inst.rsplit(":", 1)[0] if inst.count(":") == 1 else (inst or "unknown")


def _gpu_key(labels):
    return (host_of(labels), labels.get("gpu"), labels.get("UUID") or labels.get("uuid"))


def _finding(rule: Rule, labels: dict, value: float, shown: dict) -> Finding:
    labels = dict(labels)
    labels.setdefault("host", host_of(labels))
    message = render(rule.summary, labels, value)
    if rule.name.startswith("DgxGpuXid"):
        message += ": " + XID_MEANING.get(int(value), "see NVIDIA's XID catalogue")
    return Finding(host=host_of(labels), rule=rule.name, severity=rule.severity, message=message, fix=rule.fix,
                   value=value, gpu=labels.get("gpu"), uuid=labels.get("UUID") or labels.get("uuid"), metrics=shown)


def _sort(hosts):
    order = {s: i for i, s in enumerate(SEVERITIES)}
    for fs in hosts.values():
        fs.sort(key=lambda f: (-order[f.severity], f.rule, f.gpu or ""))
    return hosts


# ---------------------------------------------------------------------------------------------
# Prometheus HTTP API (loopback only)
# ---------------------------------------------------------------------------------------------

class AdviseError(RuntimeError):
    pass


def check_loopback(url: str) -> str:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise AdviseError("--prometheus %r: use http://127.0.0.1:PORT (an http(s) URL on the loopback)" % url)
    host = parsed.hostname
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                raise ValueError
        except ValueError:
            raise AdviseError("--prometheus %r: only loopback addresses (127.0.0.0/8, ::1, localhost) are "
                              "queried; reach a remote Prometheus through a tunnel, e.g. "
                              "`ssh -L 9090:127.0.0.1:9090 HOST` and --prometheus http://127.0.0.1:9090" % url) from None
    return url.rstrip("/")


def _query(base: str, promql: str, timeout: float) -> list:
    data = urllib.parse.urlencode({"query": promql}).encode()
    req = urllib.request.Request(base + "/api/v1/query", data=data,
                                 headers={"Content-Type": "application/x-www-form-urlencoded"})
    # no proxy: a loopback URL must never leave the machine through an HTTP(S)_PROXY
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            body = json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read().decode())
        except ValueError:
            raise AdviseError("Prometheus %s answered HTTP %d" % (base, exc.code)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise AdviseError("cannot reach Prometheus at %s: %s" % (base, getattr(exc, "reason", exc))) from None
    if body.get("status") != "success":
        raise AdviseError("Prometheus %s rejected the query %s: %s" % (base, promql, body.get("error")))
    result = body["data"]
    if result.get("resultType") != "vector":
        raise AdviseError("query %s returned %s, not an instant vector" % (promql, result.get("resultType")))
    return [(s["metric"], float(s["value"][1])) for s in result["result"]]


def advise_prometheus(url: str, rules=RULES, timeout: float = 10.0) -> Advice:
    base = check_loopback(url)
    hosts: dict = {}
    for labels, _ in _query(base, 'count by (host, Hostname, hostname, instance) ({__name__=~"DCGM_FI_DEV_GPU_UTIL|'
                                  'DCGM_FI_PROF_SM_ACTIVE|node_cpu_seconds_total|dgxops_collector_last_success_timestamp_seconds"})',
                            timeout):
        hosts.setdefault(host_of(labels), [])
    shown_cache: dict = {}

    def shown(rule, labels):
        out = {}
        key = _gpu_key(labels)
        for label, metric, kind in rule.show:
            if metric not in shown_cache:
                shown_cache[metric] = {_gpu_key(lb): v for lb, v in _query(base, metric, timeout)}
            if key in shown_cache[metric]:
                out[label] = (shown_cache[metric][key], kind)
        return out

    for rule in rules:
        for labels, value in _query(base, expand(rule.expr), timeout):
            f = _finding(rule, labels, value, shown(rule, labels))
            hosts.setdefault(f.host, []).append(f)
    return Advice(source=base, hosts=_sort(hosts), evaluated=[r.name for r in rules], not_evaluated=[])


# ---------------------------------------------------------------------------------------------
# One scrape in the Prometheus text format
# ---------------------------------------------------------------------------------------------

def parse_metrics_text(text: str) -> list:
    """Samples of a Prometheus text exposition: [(name, labels, value)], parsed by
    prometheus_client's own parser (the exporters' format, escapes and UTF-8 label values)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        _raise_first_bad_line(text, exc)
    # The parser renames the samples of a `counter` family whose name does not end in a
    # lower-case `_total` (dcgm-exporter's DCGM_FI_DEV_*_TOTAL, DCGM_FI_PROF_*): it appends
    # `_total`. Keep the names the exporter served.
    served = {line.split("{", 1)[0].split(None, 1)[0]
              for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")}
    out = []
    for family in families:
        for s in family.samples:
            name = s.name
            if name not in served and name.endswith("_total") and name[:-len("_total")] in served:
                name = name[:-len("_total")]
            out.append((name, dict(s.labels), float(s.value)))
    return out


def _raise_first_bad_line(text: str, exc: Exception):
    """Raise a ValueError naming the first line that does not parse on its own."""
    from prometheus_client.parser import text_string_to_metric_families

    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except (ValueError, TypeError, IndexError, KeyError) as line_exc:
            raise ValueError("line %d is not a Prometheus sample (%s): %r" % (lineno, line_exc, line)) from None
    raise ValueError("not a Prometheus text exposition: %s" % exc) from None


def advise_metrics_text(text: str, source: str = "metrics file", default_host: str | None = None, rules=RULES) -> Advice:
    samples = parse_metrics_text(text)
    gpus: dict = {}
    series: list = []
    hosts: dict = {}
    for name, labels, value in samples:
        if default_host and not any(labels.get(k) for k in HOST_LABELS):
            labels = dict(labels, host=default_host)
        hosts.setdefault(host_of(labels), [])
        if name.startswith("DCGM_FI_") and ("gpu" in labels or "UUID" in labels):
            entry = gpus.setdefault(_gpu_key(labels), {"labels": {k: v for k, v in labels.items()}, "values": {}})
            if name in FIELD_ALIASES:   # the deprecated name, unless the current one is there too
                entry["values"].setdefault(FIELD_ALIASES[name], value)
            else:
                entry["values"][name] = value
        else:
            series.append((name, labels, value))
    not_evaluated = []
    evaluated = []
    for rule in rules:
        if rule.check is None:
            not_evaluated.append({"rule": rule.name, "reason": "needs a rate over time; query Prometheus instead"})
            continue
        evaluated.append(rule.name)
        if rule.scope == "gpu":
            for entry in gpus.values():
                value = rule.check(entry["values"])
                if value is not None:
                    shown = {label: (entry["values"][metric], kind) for label, metric, kind in rule.show
                             if metric in entry["values"]}
                    f = _finding(rule, entry["labels"], float(value), shown)
                    hosts.setdefault(f.host, []).append(f)
        else:
            for name, labels, value in series:
                if name in rule.metrics:
                    v = rule.check({name: value})
                    if v is not None:
                        f = _finding(rule, labels, float(v), {})
                        hosts.setdefault(f.host, []).append(f)
    return Advice(source=source, hosts=_sort(hosts), evaluated=evaluated, not_evaluated=not_evaluated)


def advise_metrics_file(path: str, default_host: str | None = None) -> Advice:
    with open(path) as fh:
        return advise_metrics_text(fh.read(), source=path, default_host=default_host)
