"""Current values of one simulated GPU, as --query-gpu prints them (with units)."""
import datetime

from . import captured
from .fieldtable import ALIASES, FIELD_LISTS, UNITS
from .models import MODELS, field_generation

DEPRECATED = "[Requested functionality has been deprecated]"
NA = "[N/A]"
NOT_SUPPORTED = "[Not Supported]"


def branch_of(state):
    return int(state["driver"].split(".")[0])


def timestamp_now():
    now = datetime.datetime.now()
    return now.strftime("%Y/%m/%d %H:%M:%S.") + "%03d" % (now.microsecond // 1000)


def valid_fields(branch):
    """(ordered canonical names, alias->canonical) for a driver branch."""
    names = list(FIELD_LISTS[field_generation(branch)])
    aliases = dict(ALIASES)
    if branch < 535:
        # before R535 the event reasons were the canonical "throttle" reasons
        names = [n.replace("clocks_event_reasons", "clocks_throttle_reasons") for n in names]
        for a, c in list(aliases.items()):
            if c.startswith("clocks_event_reasons"):
                del aliases[a]  # the event names did not exist yet
    return names, aliases


def unit_of(name):
    return UNITS.get(name.replace("clocks_throttle_reasons", "clocks_event_reasons"))


def w(x):
    return "%.2f W" % x


def mib(x):
    return "%d MiB" % x


def mhz(x):
    return "%d MHz" % x


def gpu_processes(state, g):
    return [p for p in state.get("processes", []) if p["gpu"] == g["index"]]


def memory_used(state, g):
    used = sum(p.get("used_mib", 0) for p in gpu_processes(state, g))
    if g["mig_current"]:
        used += 11 * len(g.get("gpu_instances", []))
    return used


def effective_app_clocks(state, g):
    m = MODELS[state["model"]]
    if g.get("app_clocks"):
        return g["app_clocks"][0], g["app_clocks"][1]
    return m["mem_clock"], m["gr_default_app"]


def values(state, g):
    """Dict canonical field name -> value string exactly as CSV prints it (units included)."""
    m = MODELS[state["model"]]
    b = branch_of(state)
    v = dict(captured.TEMPLATE_ROW)
    busy = bool(gpu_processes(state, g))
    mig = g["mig_current"]
    v.update({
        "timestamp": timestamp_now(),
        "driver_version": state["driver"],
        "kmd_version": state["driver"],
        "count": str(len(state["gpus"])),
        "name": m["gpu_name"] if b >= 470 else m["old_name"],
        "serial": g["serial"],
        "uuid": g["uuid"],
        "pci.bus_id": g["bus_id"],
        "pci.domain": "0x" + g["bus_id"][4:8] if m["bus_ids"] is None else "0x0000",
        "pci.bus": "0x" + g["bus_id"][9:11],
        "pci.device": "0x" + g["bus_id"][12:14],
        "pci.device_id": m["device_id"],
        "pci.sub_device_id": m["sub_device_id"],
        "index": str(g["index"]),
        "persistence_mode": "Enabled" if g["persistence_mode"] else "Disabled",
        "vbios_version": m["vbios"],
        "inforom.img": m["inforom_img"] if m["inforom_img"] != "N/A" else NA,
        "pcie.link.gen.current": str(m["pcie_gen"]),
        "pcie.link.gen.gpucurrent": str(m["pcie_gen"]),
        "pcie.link.gen.max": str(m["pcie_gen"]),
        "pcie.link.gen.gpumax": str(m["pcie_gen"]),
        "compute_mode": g["compute_mode"],
        "compute_cap": m["compute_cap"],
        "platform.module_id": str(g.get("module_id", g["index"] + 1)),
        "hostname": NA,
        "pstate": "P0",
        "clocks.current.memory": mhz(m["mem_clock"]),
        "clocks.current.graphics": mhz(m["gr_max"] if busy else m["idle_gr"]),
        "clocks.current.sm": mhz(m["gr_max"] if busy else m["idle_gr"]),
        "clocks.current.video": mhz(m["video_max"] if busy else m["idle_video"]),
        "clocks.max.graphics": mhz(m["gr_max"]),
        "clocks.max.sm": mhz(m["gr_max"]),
        "clocks.max.memory": mhz(m["mem_clock"]),
        "clocks_event_reasons.active": "0x0000000000000000" if busy else "0x0000000000000001",
        "clocks_event_reasons.gpu_idle": "Not Active" if busy else "Active",
        "temperature.gpu": "%d" % (34 + g["index"] + (25 if busy else 0)),
        "temperature.memory": "%d" % (36 + g["index"] + (20 if busy else 0)),
        "utilization.gpu": "%d %%" % (97 if busy else 0),
        "utilization.memory": "%d %%" % (41 if busy else 0),
    })
    # memory
    if m["unified_memory"]:
        for f in ("memory.total", "memory.reserved", "memory.used", "memory.free", "utilization.memory"):
            v[f] = NA
        for f in ("protected_memory.total", "protected_memory.used", "protected_memory.free"):
            v[f] = NA
    else:
        used = memory_used(state, g)
        v["memory.total"] = mib(m["memory_total"])
        v["memory.reserved"] = mib(m["memory_reserved"])
        v["memory.used"] = mib(used)
        v["memory.free"] = mib(m["memory_total"] - m["memory_reserved"] - used)
    # power
    draw = m["idle_power"] + g["index"] * 0.37 + (420.0 if busy and m["power_max"] else 0.0)
    if m["power_max"] is not None:
        draw = min(draw, g["power_limit"])
    v["power.draw"] = w(draw)
    v["power.draw.average"] = w(draw)
    v["power.draw.instant"] = w(draw - 0.21)
    if m["power_max"] is None:
        for f in ("power.limit", "enforced.power.limit", "power.default_limit", "power.min_limit",
                  "power.max_limit"):
            v[f] = NA
        v["power.management"] = NOT_SUPPORTED
    else:
        v["power.limit"] = w(g["power_limit"])
        v["enforced.power.limit"] = w(g["power_limit"])
        v["power.default_limit"] = w(m["power_default"])
        v["power.min_limit"] = w(m["power_min"])
        v["power.max_limit"] = w(m["power_max"])
        v["power.management"] = DEPRECATED if b >= 590 else "Enabled"
    # application clocks: deprecated from R590 (real 590/595/610 captures)
    if b >= 590:
        for f in ("clocks.applications.graphics", "clocks.applications.memory",
                  "clocks.default_applications.graphics", "clocks.default_applications.memory"):
            v[f] = DEPRECATED
    else:
        mem, gr = effective_app_clocks(state, g)
        v["clocks.applications.graphics"] = mhz(gr)
        v["clocks.applications.memory"] = mhz(mem)
        v["clocks.default_applications.graphics"] = mhz(m["gr_default_app"])
        v["clocks.default_applications.memory"] = mhz(m["mem_clock"])
    # MIG
    if m["mig"]:
        v["mig.mode.current"] = "Enabled" if g["mig_current"] else "Disabled"
        v["mig.mode.pending"] = "Enabled" if g["mig_pending"] else "Disabled"
    else:
        v["mig.mode.current"] = v["mig.mode.pending"] = NA
    if mig:
        # with MIG on, row-remapper counters are per instance and the GPU-level ones read N/A
        for f in ("remapped_rows.correctable", "remapped_rows.uncorrectable", "remapped_rows.pending",
                  "remapped_rows.failure", "remapped_rows.correctable_inactive",
                  "remapped_rows.uncorrectable_inactive"):
            v[f] = NA
        for f in ("utilization.gpu", "utilization.memory", "utilization.encoder", "utilization.decoder",
                  "utilization.jpeg", "utilization.ofa"):
            v[f] = NA
    # ECC
    if m["ecc"]:
        v["ecc.mode.current"] = "Enabled" if g["ecc_current"] else "Disabled"
        v["ecc.mode.pending"] = "Enabled" if g["ecc_pending"] else "Disabled"
    else:
        v["ecc.mode.current"] = v["ecc.mode.pending"] = NA
        for f in list(v):
            if f.startswith("ecc.errors.") or f.startswith("remapped_rows."):
                v[f] = NA
    # fabric (NVSwitch systems report a completed fabric registration on R590 captures)
    if m["fabric"]:
        # NVSwitch systems with fabric manager running report a completed registration
        v.update({"fabric.state": "Completed", "fabric.status": "Success", "fabric.cliqueId": "0",
                  "fabric.clusterUuid": "00000000-0000-0000-0000-000000000000"})
    else:
        for f in list(v):
            if f.startswith("fabric."):
                v[f] = "N/A"
        v["c2c.mode"] = "Enabled" if m["unified_memory"] else NA
        v["fan.speed"] = NA
    if m["unified_memory"]:
        v["addressing_mode"] = "ATS"
        v["pcie.link.width.current"] = v["pcie.link.width.max"] = NA
    return v


def apply_unknown_error_faults(state, g, v):
    for f in state.get("faults", {}).get("unknown_error", []):
        if f.get("gpu") in (None, g["index"]):
            field = f["field"]
            field = ALIASES.get(field, field)
            if field in v:
                v[field] = "[Unknown Error]"
    return v


def hostname():
    import socket

    return socket.gethostname()
