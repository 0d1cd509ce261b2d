"""Text renderers: banner, -L, topo -m, MIG tables, --version, -q, -q -x."""
import datetime
import re

from . import captured
from . import mig as migmod
from .models import MODELS, PROFILE_ORDER, cuda_version, supported_clocks
from .values import DEPRECATED, branch_of, gpu_processes, memory_used, values

# ---------------------------------------------------------------------------- --version / -L


def version_text(state):
    d = state["driver"]
    b = branch_of(state)
    nvml = ".".join(d.split(".")[:2])
    if b >= 600:
        return ("NVIDIA-SMI version  : %s\nNVML version        : %s\n"
                'DRIVER version      : Deprecated, see "KMD version" instead\n'
                'CUDA version        : Deprecated, see "CUDA UMD version" instead\n'
                "KMD version         : %s\nCUDA UMD version    : %s\n" % (d, nvml, d, cuda_version(b)))
    return ("NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\n"
            "CUDA Version        : %s\n" % (d, nvml, d, cuda_version(b)))


def list_gpus(state, gpus):
    b = branch_of(state)
    m = MODELS[state["model"]]
    out = []
    for g in gpus:
        name = m["gpu_name"] if b >= 470 else m["old_name"]
        out.append("GPU %d: %s (UUID: %s)" % (g["index"], name, g["uuid"]))
        if g["mig_current"]:
            for dev, gi, ci in migmod.mig_devices(state, g):
                out.append("  MIG %-12sDevice %2d: (UUID: %s)" % (migmod.ci_name(state, gi, ci), dev, ci["uuid"]))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- topo -m

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo_matrix(state):
    m = MODELS[state["model"]]
    gpus = state["gpus"]
    n = len(gpus)
    head = "\t\x1b[4m" + "\t".join(["GPU%d" % i for i in range(n)] +
                                   ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]) + "\x1b[0m"
    rows = [head]
    for i in range(n):
        cells = []
        for j in range(n):
            if i == j:
                cells.append(" X ")
            elif m["link"]:
                cells.append(m["link"])
            else:
                cells.append("SYS")
        cpu, numa = m["affinity"][i]
        rows.append("GPU%d\t" % i + "\t".join(cells) + "\t%s\t%s\t\tN/A" % (cpu, numa))
    return "\n".join(rows) + "\n" + LEGEND


# ---------------------------------------------------------------------------- MIG tables

LGIP_TOP = "+" + "-" * 79 + "+"


def lgip(state, gpus):
    lines = [LGIP_TOP,
             "| GPU instance profiles:" + " " * 56 + "|",
             "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
             "|                                Free/Total   GiB              CE    JPEG  OFA  |",
             "|" + "=" * 79 + "|"]
    first = True
    for g in gpus:
        table = migmod.profiles(state)
        for pid in PROFILE_ORDER:
            p = table[pid]
            if not first:
                lines.append(LGIP_TOP)
            first = False
            free = migmod.remaining_capacity(state, g, p)
            lines.append("|%4d  %-18s%4d     %-11s%-11s%-7s%-7s%-6s%-4s|" % (
                g["index"], "MIG " + p["name"], pid, "%d/%d" % (free, p["max"]), "%.2f" % p["gib"], "No",
                p["sm"], p["dec"], p["enc"]))
            lines.append("|" + " " * 63 + "%-6s%-6s%-4s|" % (p["ce"], p["jpeg"], p["ofa"]))
    lines.append(LGIP_TOP)
    return "\n".join(lines) + "\n"


def lgipp(state, gpus):
    out = []
    for g in gpus:
        table = migmod.profiles(state)
        for pid in PROFILE_ORDER:
            p = table[pid]
            word = "Placements:" if len(p["placements"]) > 1 else "Placement :"
            out.append("GPU %2d Profile ID %2d %s {%s}:%d" % (
                g["index"], pid, word, ",".join(str(s) for s in p["placements"]), p["mem_slots"]))
    return "\n".join(out) + "\n"


LGI_TOP = "+" + "-" * 55 + "+"


def lgi(state, gpus):
    rows = []
    for g in gpus:
        for gi in sorted(g["gpu_instances"], key=lambda x: x["id"]):
            p = migmod.profiles(state)[gi["profile"]]
            rows.append("|%4d  %-19s%3d%9d          %-8s|" % (
                g["index"], "MIG " + p["name"], p["id"], gi["id"], "%d:%d" % (gi["start"], gi["size"])))
    if not rows:
        return None
    lines = [LGI_TOP,
             "| GPU instances:" + " " * 40 + "|",
             "| GPU   Name             Profile  Instance   Placement  |",
             "|                          ID       ID       Start:Size |",
             "|" + "=" * 55 + "|"]
    lines += rows
    lines.append(LGI_TOP)
    return "\n".join(lines) + "\n"


LCI_TOP = "+" + "-" * 70 + "+"


def lci(state, gpus, gi_filter=None):
    rows = []
    for g in gpus:
        for gi in sorted(g["gpu_instances"], key=lambda x: x["id"]):
            if gi_filter is not None and gi["id"] not in gi_filter:
                continue
            for ci in gi["compute_instances"]:
                rows.append("|%4d%7d       %-21s%3d%10d          %-8s|" % (
                    g["index"], gi["id"], "MIG " + migmod.ci_name(state, gi, ci), ci["profile"], ci["id"],
                    "%d:%d" % (ci["start"], ci["slices"])))
    if not rows:
        return None
    lines = [LCI_TOP,
             "| Compute instances:" + " " * 51 + "|",
             "| GPU     GPU       Name                Profile   Instance   Placement |",
             "|       Instance                          ID        ID      Start:Size |",
             "|         ID                                                           |",
             "|" + "=" * 70 + "|"]
    lines += rows
    lines.append(LCI_TOP)
    return "\n".join(lines) + "\n"


def lcip(state, gpus, gi_filter=None):
    blocks = []
    for g in gpus:
        for gi in sorted(g["gpu_instances"], key=lambda x: x["id"]):
            if gi_filter is not None and gi["id"] not in gi_filter:
                continue
            p = migmod.profiles(state)[gi["profile"]]
            used = sum(c["slices"] for c in gi["compute_instances"])
            for pid, slices, name in migmod.ci_profiles_for(state, gi):
                total = p["g"] // slices
                free = (p["g"] - used) // slices
                sm = p["sm"] * slices // p["g"]
                blocks.append((
                    "|%4d%7d       %-17s%4d%-2s%5s%15d%10d%6d%6d   |" % (
                        g["index"], gi["id"], "MIG " + name, pid, "*" if slices == p["g"] else "",
                        "%d/%d" % (free, total), sm, p["dec"], p["enc"], p["ofa"]),
                    "|" + " " * 69 + "%-6d%-6d     |" % (p["ce"], p["jpeg"])))
    if not blocks:
        return None
    top = "+" + "-" * 86 + "+"
    lines = [top, "| Compute instance profiles:" + " " * 59 + "|",
             "| GPU     GPU       Name             Profile  Instances   Exclusive       Shared       |",
             "|       Instance                       ID     Free/Total     SM       DEC   ENC   OFA  |",
             "|         ID                                                          CE    JPEG       |",
             "|" + "=" * 86 + "|"]
    for i, (r1, r2) in enumerate(blocks):
        if i:
            lines.append(top)
        lines += [r1, r2]
    lines.append(top)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- banner


def banner(state, gpus):
    m = MODELS[state["model"]]
    b = branch_of(state)
    d = state["driver"]
    now = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y").replace(" 0", "  ", 1)
    bar = "+" + "-" * 89 + "+"
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    if b >= 600:
        top = "| NVIDIA-SMI %-23sKMD Version: %-15sCUDA UMD Version: %-9s|" % (d, d, cuda_version(b))
    else:
        top = "| NVIDIA-SMI %-23sDriver Version: %-15sCUDA Version: %-9s|" % (d, d, cuda_version(b))
    out = [now + "       ", bar, top[:89] + "|" if len(top) > 91 else top, sep,
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for g in gpus:
        v = values(state, g)
        pm = "On" if g["persistence_mode"] else "Off"
        if not m["ecc"]:
            ecc = "N/A"
        elif g["mig_current"]:
            ecc = "On"
        else:
            ecc = "0" if g["ecc_current"] else "Off"
        out.append("|%4d  %-29s%4s  |   %16s Off |%21s |" % (g["index"], m["gpu_name"][:29], pm, g["bus_id"], ecc))
        draw = "%dW" % float(v["power.draw"].split()[0])
        cap = "%dW" % g["power_limit"] if m["power_max"] else "N/A"
        if m["unified_memory"]:
            mem = " %-23s" % "Not Supported"
        else:
            mem = "%11s / %9s " % ("%dMiB" % memory_used(state, g), "%dMiB" % m["memory_total"])
        util = "N/A" if g["mig_current"] else v["utilization.gpu"].replace(" ", "")
        out.append("| N/A %5s    P0%16s /  %-4s |%s|%8s%13s |" % (
            v["temperature.gpu"] + "C", draw, cap, mem, util, g["compute_mode"]))
        migm = ("Enabled" if g["mig_current"] else "Disabled") if m["mig"] else "N/A"
        out.append("|                                         |                        |%21s |" % migm)
        out.append(sep)
    out.append("")
    migrows = []
    for g in gpus:
        if not g["mig_current"]:
            continue
        p_by = migmod.profiles(state)
        for dev, gi, ci in migmod.mig_devices(state, g):
            p = p_by[gi["profile"]]
            total = int(p["gib"] * 1024)
            migrows.append("|%3d%5d%4d%4d  |%19s / %-12s|%3d%7d |%3d%4d%5d%5d%5d |" % (
                g["index"], gi["id"], ci["id"], dev, "%dMiB" % 11, "%dMiB" % total,
                p["sm"] * ci["slices"] // p["g"], 0, p["ce"], p["enc"], p["dec"], p["ofa"], p["jpeg"]))
            migrows.append("|                  |%19s / %-12s|           |                       |" % (
                "0MiB", "%dMiB" % int(total * 0.83)))
            migrows.append("+------------------+----------------------------------+-----------+-----------------------+")
    if migrows:
        out += [bar,
                "| MIG devices:" + " " * 76 + "|",
                "+------------------+----------------------------------+-----------+-----------------------+",
                "| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |",
                "|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |",
                "|                  |                                  |        ECC|                       |",
                "|==================+==================================+===========+=======================|"]
        out += migrows
        out.append("")
    out += [bar,
            "| Processes:" + " " * 78 + "|",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|" + "=" * 89 + "|"]
    procs = [p for g in gpus for p in gpu_processes(state, g)]
    if not procs:
        out.append("|  No running processes found" + " " * 61 + "|")
    for p in procs:
        prefix = "|%5d   N/A  N/A%16d      C   " % (p["gpu"], p["pid"])
        memtxt = "%dMiB" % p.get("used_mib", 0)
        name = p.get("name", "python3")[:40]
        out.append(prefix + name + " " * max(1, 89 - len(prefix) - len(name) - len(memtxt) - 1) + memtxt + " |")
    out.append(bar)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- -q (text)

_QLINE = re.compile(r"^( *)(\S.*?)\s*(?: : (.*))?$")
LABEL_WIDTH = 55


def _qline(indent, label, value=None):
    pad = " " * indent + label
    if value is None:
        return pad
    return pad.ljust(LABEL_WIDTH) + ": " + value


def _parse_template(text):
    """[(indent, label, value_or_None)] from real -q output."""
    out = []
    for line in text.split("\n"):
        if not line.strip():
            out.append(None)
            continue
        if ": " in line and len(line) > LABEL_WIDTH and line[LABEL_WIDTH:LABEL_WIDTH + 2] == ": ":
            lab = line[:LABEL_WIDTH].rstrip()
            indent = len(lab) - len(lab.lstrip())
            out.append((indent, lab.strip(), line[LABEL_WIDTH + 2:]))
        else:
            indent = len(line) - len(line.lstrip())
            out.append((indent, line[indent:], None))  # real labels may keep a trailing space
    return out


_GPU_TEMPLATE = None


def _gpu_template():
    global _GPU_TEMPLATE
    if _GPU_TEMPLATE is None:
        lines = _parse_template(captured.QTEXT)
        start = next(i for i, x in enumerate(lines) if x and x[1].startswith("GPU 0000"))
        _GPU_TEMPLATE = lines[start + 1:]
    return _GPU_TEMPLATE


def _q_values(state, g):
    """Map 'Section/Sub/Label' -> value for the -q text of one GPU."""
    m = MODELS[state["model"]]
    v = values(state, g)
    b = branch_of(state)
    strip = (lambda s: s[1:-1] if s.startswith("[") and s.endswith("]") else s)
    q = {
        "Product Name": v["name"], "Product Architecture": m["arch"],
        "Persistence Mode": v["persistence_mode"],
        "MIG Mode/Current": strip(v["mig.mode.current"]), "MIG Mode/Pending": strip(v["mig.mode.pending"]),
        "Serial Number": strip(v["serial"]), "GPU UUID": g["uuid"], "Minor Number": str(g["index"]),
        "VBIOS Version": m["vbios"], "Board ID": "0x" + g["bus_id"][9:11].lstrip("0").lower() if True else "",
        "Board Part Number": m["board_part"], "Platform Info/Module Id": v["platform.module_id"],
        "Inforom Version/Image Version": m["inforom_img"],
        "GSP Firmware Version": state["driver"],
        "PCI/Bus": v["pci.bus"], "PCI/Device": v["pci.device"], "PCI/Domain": v["pci.domain"],
        "PCI/Device Id": m["device_id"], "PCI/Bus Id": g["bus_id"], "PCI/Sub System Id": m["sub_device_id"],
        "PCI/GPU Link Info/PCIe Generation/Max": str(m["pcie_gen"]),
        "PCI/GPU Link Info/PCIe Generation/Current": str(m["pcie_gen"]),
        "PCI/GPU Link Info/PCIe Generation/Device Current": str(m["pcie_gen"]),
        "PCI/GPU Link Info/PCIe Generation/Device Max": str(m["pcie_gen"]),
        "Clocks Event Reasons/Idle": v["clocks_event_reasons.gpu_idle"],
        "Compute Mode": g["compute_mode"],
        "ECC Mode/Current": strip(v["ecc.mode.current"]), "ECC Mode/Pending": strip(v["ecc.mode.pending"]),
        "Temperature/GPU Current Temp": v["temperature.gpu"] + " C",
        "Temperature/Memory Current Temp": v["temperature.memory"] + " C",
        "Clocks/Graphics": v["clocks.current.graphics"], "Clocks/SM": v["clocks.current.sm"],
        "Clocks/Memory": v["clocks.current.memory"], "Clocks/Video": v["clocks.current.video"],
        "Applications Clocks/Graphics": strip(v["clocks.applications.graphics"]),
        "Applications Clocks/Memory": strip(v["clocks.applications.memory"]),
        "Default Applications Clocks/Graphics": strip(v["clocks.default_applications.graphics"]),
        "Default Applications Clocks/Memory": strip(v["clocks.default_applications.memory"]),
        "Max Clocks/Graphics": v["clocks.max.graphics"], "Max Clocks/SM": v["clocks.max.sm"],
        "Max Clocks/Memory": v["clocks.max.memory"], "Max Clocks/Video": "%d MHz" % m["video_max"],
        "Max Customer Boost Clocks/Graphics": v["clocks.max.graphics"],
    }
    for util, key in (("GPU", "utilization.gpu"), ("Memory", "utilization.memory"),
                      ("Encoder", "utilization.encoder"), ("Decoder", "utilization.decoder"),
                      ("JPEG", "utilization.jpeg"), ("OFA", "utilization.ofa")):
        q["Utilization/" + util] = strip(v[key])
    for lab, key in (("Total", "memory.total"), ("Reserved", "memory.reserved"), ("Used", "memory.used"),
                     ("Free", "memory.free")):
        q["FB Memory Usage/" + lab] = strip(v[key])
    if m["bar1"] is None:
        for lab in ("Total", "Used", "Free"):
            q["BAR1 Memory Usage/" + lab] = "N/A"
    else:
        q["BAR1 Memory Usage/Total"] = "%d MiB" % m["bar1"]
        q["BAR1 Memory Usage/Used"] = "1 MiB"
        q["BAR1 Memory Usage/Free"] = "%d MiB" % (m["bar1"] - 1)
    pw = "GPU Power Readings/"
    q[pw + "Average Power Draw"] = v["power.draw.average"]
    q[pw + "Instantaneous Power Draw"] = v["power.draw.instant"]
    for lab, key in (("Current Power Limit", "enforced.power.limit"), ("Requested Power Limit", "power.limit"),
                     ("Default Power Limit", "power.default_limit"), ("Min Power Limit", "power.min_limit"),
                     ("Max Power Limit", "power.max_limit")):
        q[pw + lab] = strip(v[key])
    if not m["fabric"]:
        for k in ("State", "Status", "CliqueId", "ClusterUUID"):
            q["Fabric/" + k] = "N/A"
    if m["unified_memory"]:
        q["Addressing Mode"] = "ATS"
        q["GPU C2C Mode"] = "Enabled"
    if b >= 590:
        q["Display Mode"] = "Requested functionality has been deprecated"
    return q


def _power_section_for_branch(b, q, indent):
    """Rebuild the power readings block the way older drivers print it."""
    pw = "GPU Power Readings/"
    if b >= 570:
        return None
    draw = q[pw + "Average Power Draw"]
    if b >= 535:
        return [(indent, "GPU Power Readings", None), (indent + 4, "Power State", "P0"),
                (indent + 4, "Power Draw", draw)] + [
            (indent + 4, lab, q[pw + lab]) for lab in ("Current Power Limit", "Requested Power Limit",
                                                        "Default Power Limit", "Min Power Limit",
                                                        "Max Power Limit")]
    return [(indent, "Power Readings", None), (indent + 4, "Power Management", "Supported"),
            (indent + 4, "Power Draw", draw), (indent + 4, "Power Limit", q[pw + "Requested Power Limit"]),
            (indent + 4, "Default Power Limit", q[pw + "Default Power Limit"]),
            (indent + 4, "Enforced Power Limit", q[pw + "Current Power Limit"]),
            (indent + 4, "Min Power Limit", q[pw + "Min Power Limit"]),
            (indent + 4, "Max Power Limit", q[pw + "Max Power Limit"])]


def _mig_device_lines(state, g):
    out = []
    table = migmod.profiles(state)
    for dev, gi, ci in migmod.mig_devices(state, g):
        p = table[gi["profile"]]
        total = int(p["gib"] * 1024)
        bar1 = int(total * 0.83)
        out += [(4, "MIG Device", None), (8, "Index", str(dev)), (8, "GPU Instance ID", str(gi["id"])),
                (8, "Compute Instance ID", str(ci["id"])), (8, "Device Attributes", None), (12, "Shared", None),
                (16, "Multiprocessor count", str(p["sm"] * ci["slices"] // p["g"])),
                (16, "Copy Engine count", str(p["ce"])), (16, "Encoder count", str(p["enc"])),
                (16, "Decoder count", str(p["dec"])), (16, "OFA count", str(p["ofa"])),
                (16, "JPG count", str(p["jpeg"])), (8, "ECC Errors", None), (12, "Volatile", None),
                (16, "SRAM Uncorrectable", "0"), (8, "Shared FB Memory Usage", None),
                (12, "Total", "%d MiB" % total), (12, "Reserved", "0 MiB"), (12, "Used", "11 MiB"),
                (12, "Free", "%d MiB" % (total - 12)), (8, "Shared BAR1 Memory", None),
                (12, "Total", "%d MiB" % bar1), (12, "Used", "0 MiB"), (12, "Free", "%d MiB" % bar1)]
    return out


DISPLAY_SECTIONS = {
    "MEMORY": ("FB Memory Usage", "BAR1 Memory Usage", "Conf Compute Protected Memory Usage"),
    "UTILIZATION": ("Utilization",),
    "ECC": ("ECC Mode", "ECC Errors"),
    "TEMPERATURE": ("Temperature",),
    "POWER": ("GPU Power Readings", "Power Readings", "GPU Memory Power Readings", "Module Power Readings"),
    "CLOCK": ("Clocks", "Applications Clocks", "Default Applications Clocks", "Deferred Clocks", "Max Clocks",
              "Max Customer Boost Clocks", "Clock Policy"),
    "COMPUTE": ("Compute Mode",),
    "PIDS": ("Processes",),
    "PERFORMANCE": ("Performance State", "Clocks Event Reasons", "Clocks Event Reasons Counters",
                    "Clocks Throttle Reasons", "Sparse Operation Mode"),
    "SUPPORTED_CLOCKS": (),
}


def gpu_query_lines(state, g, display=None):
    m = MODELS[state["model"]]
    b = branch_of(state)
    q = _q_values(state, g)
    out = []
    path = []
    skip_power = False
    section = None
    for item in _gpu_template():
        if item is None:
            continue
        indent, label, value = item
        level = indent // 4 - 1
        path = path[:level] + [label.strip()]
        key = "/".join(path)
        if level == 0:
            section = label.strip()
            skip_power = False
            if label == "GPU Power Readings":
                alt = _power_section_for_branch(b, q, indent)
                if alt is not None:
                    if display is None or "POWER" in display:
                        out += alt
                    skip_power = True
            if label == "Accounting Mode" and g["mig_current"] and display is None:
                out += _mig_device_lines(state, g)
        if skip_power:
            continue
        if display is not None:
            wanted = set()
            for d in display:
                wanted.update(DISPLAY_SECTIONS.get(d, ()))
            if section not in wanted:
                continue
        if section == "Remapped Rows" and g["mig_current"]:
            if level == 0:
                out.append((indent, label, "N/A"))
            continue
        if b < 535 and section.startswith("Clocks Event Reasons"):
            label = label.replace("Clocks Event Reasons", "Clocks Throttle Reasons")
        if value is not None:
            value = q.get(key, value)
        if label == "Processes" and level == 0:
            procs = gpu_processes(state, g)
            if procs:
                out.append((indent, label, None))
                for p in procs:
                    out += [(indent + 4, "GPU instance ID", "N/A"), (indent + 4, "Compute instance ID", "N/A"),
                            (indent + 4, "Process ID", str(p["pid"])), (indent + 4, "Type", "C"),
                            (indent + 4, "Name", p.get("name", "python3")),
                            (indent + 4, "Used GPU Memory", "%d MiB" % p.get("used_mib", 0))]
                continue
        if m["unified_memory"] and section in ("FB Memory Usage",) and value is not None:
            value = "N/A"
        out.append((indent, label, value))
        if display is not None and label == "GPU Power Readings" and "POWER" in display and b >= 570:
            pass
    if display is not None and "SUPPORTED_CLOCKS" in display:
        out.append((4, "Supported Clocks", None))
        for mem, grs in supported_clocks(state["model"]):
            out.append((8, "Memory", "%d MHz" % mem))
            for gr in grs:
                out.append((12, "Graphics", "%d MHz" % gr))
    return out


def query_text(state, gpus, display=None):
    b = branch_of(state)
    now = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y").replace(" 0", "  ", 1)
    out = ["", "==============NVSMI LOG==============", "", _qline(0, "Timestamp", now)]
    if b >= 600:
        out.append(_qline(0, "Driver Version", "%s [Deprecated; will be removed in CUDA 14.0. Use KMD Version "
                                               "instead]" % state["driver"]))
        out.append(_qline(0, "KMD Version", state["driver"]))
        out.append(_qline(0, "CUDA UMD Version", cuda_version(b)))
    else:
        out.append(_qline(0, "Driver Version", state["driver"]))
        out.append(_qline(0, "CUDA Version", cuda_version(b)))
    out += ["", _qline(0, "Attached GPUs", str(len(state["gpus"])))]
    for g in gpus:
        out.append("GPU " + g["bus_id"])
        for indent, label, value in gpu_query_lines(state, g, display):
            out.append(_qline(indent, label, value))
        out.append("")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- -q -x


def _xml_gpu_block():
    x = captured.XMLTEXT
    start = x.index("\t<gpu id=")
    end = x.index("\t</gpu>") + len("\t</gpu>")
    return x[start:end]


def _set_tag(block, path, value):
    """Replace the text of the element at 'a/b/c' (first match, nested in order)."""
    pos = 0
    parts = path.split("/")
    for tag in parts:
        idx = block.find("<%s>" % tag, pos)
        if idx < 0:
            return block
        pos = idx + len(tag) + 2
    end = block.find("</%s>" % parts[-1], pos)
    return block[:pos] + _xml_escape(value) + block[end:]


def _xml_escape(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def query_xml(state, gpus):
    m = MODELS[state["model"]]
    b = branch_of(state)
    dtd = "nvsmi_device_v13.dtd" if b >= 570 else ("nvsmi_device_v12.dtd" if b >= 535 else "nvsmi_device_v11.dtd")
    now = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y").replace(" 0", "  ", 1)
    head = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "%s">' % dtd, "<nvidia_smi_log>",
            "\t<timestamp>%s</timestamp>" % now, "\t<driver_version>%s</driver_version>" % state["driver"],
            "\t<cuda_version>%s</cuda_version>" % cuda_version(b),
            "\t<attached_gpus>%d</attached_gpus>" % len(state["gpus"])]
    blocks = []
    for g in gpus:
        q = _q_values(state, g)
        blk = _xml_gpu_block().replace('<gpu id="00000000:00:06.0">', '<gpu id="%s">' % g["bus_id"])
        sets = {
            "product_name": q["Product Name"], "product_architecture": m["arch"],
            "persistence_mode": q["Persistence Mode"], "mig_mode/current_mig": q["MIG Mode/Current"],
            "mig_mode/pending_mig": q["MIG Mode/Pending"], "serial": q["Serial Number"], "uuid": g["uuid"],
            "minor_number": str(g["index"]), "vbios_version": m["vbios"], "board_part_number": m["board_part"],
            "platformInfo/module_id": q["Platform Info/Module Id"], "gsp_firmware_version": state["driver"],
            "inforom_version/img_version": m["inforom_img"],
            "pci/pci_bus": g["bus_id"][9:11], "pci/pci_device": g["bus_id"][12:14],
            "pci/pci_domain": g["bus_id"][4:8], "pci/pci_device_id": m["device_id"][2:],
            "pci/pci_bus_id": g["bus_id"], "pci/pci_sub_system_id": m["sub_device_id"][2:],
            "pci/max_link_gen": str(m["pcie_gen"]), "pci/current_link_gen": str(m["pcie_gen"]),
            "pci/device_current_link_gen": str(m["pcie_gen"]), "pci/max_device_link_gen": str(m["pcie_gen"]),
            "clocks_event_reasons/clocks_event_reason_gpu_idle": q["Clocks Event Reasons/Idle"],
            "fb_memory_usage/total": q["FB Memory Usage/Total"],
            "fb_memory_usage/reserved": q["FB Memory Usage/Reserved"],
            "fb_memory_usage/used": q["FB Memory Usage/Used"], "fb_memory_usage/free": q["FB Memory Usage/Free"],
            "bar1_memory_usage/total": q["BAR1 Memory Usage/Total"],
            "bar1_memory_usage/used": q["BAR1 Memory Usage/Used"],
            "bar1_memory_usage/free": q["BAR1 Memory Usage/Free"],
            "compute_mode": g["compute_mode"],
            "utilization/gpu_util": q["Utilization/GPU"], "utilization/memory_util": q["Utilization/Memory"],
            "utilization/encoder_util": q["Utilization/Encoder"],
            "utilization/decoder_util": q["Utilization/Decoder"],
            "utilization/jpeg_util": q["Utilization/JPEG"], "utilization/ofa_util": q["Utilization/OFA"],
            "ecc_mode/current_ecc": q["ECC Mode/Current"], "ecc_mode/pending_ecc": q["ECC Mode/Pending"],
            "temperature/gpu_temp": q["Temperature/GPU Current Temp"],
            "temperature/memory_temp": q["Temperature/Memory Current Temp"],
            "gpu_power_readings/average_power_draw": q["GPU Power Readings/Average Power Draw"],
            "gpu_power_readings/instant_power_draw": q["GPU Power Readings/Instantaneous Power Draw"],
            "gpu_power_readings/current_power_limit": q["GPU Power Readings/Current Power Limit"],
            "gpu_power_readings/requested_power_limit": q["GPU Power Readings/Requested Power Limit"],
            "gpu_power_readings/default_power_limit": q["GPU Power Readings/Default Power Limit"],
            "gpu_power_readings/min_power_limit": q["GPU Power Readings/Min Power Limit"],
            "gpu_power_readings/max_power_limit": q["GPU Power Readings/Max Power Limit"],
            "clocks/graphics_clock": q["Clocks/Graphics"], "clocks/sm_clock": q["Clocks/SM"],
            "clocks/mem_clock": q["Clocks/Memory"], "clocks/video_clock": q["Clocks/Video"],
            "applications_clocks/graphics_clock": q["Applications Clocks/Graphics"],
            "applications_clocks/mem_clock": q["Applications Clocks/Memory"],
            "default_applications_clocks/graphics_clock": q["Default Applications Clocks/Graphics"],
            "default_applications_clocks/mem_clock": q["Default Applications Clocks/Memory"],
            "max_clocks/graphics_clock": q["Max Clocks/Graphics"], "max_clocks/sm_clock": q["Max Clocks/SM"],
            "max_clocks/mem_clock": q["Max Clocks/Memory"], "max_clocks/video_clock": q["Max Clocks/Video"],
            "max_customer_boost_clocks/graphics_clock": q["Max Customer Boost Clocks/Graphics"],
        }
        if m["fabric"]:
            sets.update({"fabric/state": "Completed", "fabric/status": "Success", "fabric/cliqueId": "0",
                         "fabric/clusterUuid": "00000000-0000-0000-0000-000000000000"})
        if m["unified_memory"]:
            sets.update({"addressing_mode": "ATS", "c2c_mode": "Enabled"})
        for path, val in sets.items():
            blk = _set_tag(blk, path, val)
        # supported clocks
        sc = []
        for mem, grs in supported_clocks(state["model"]):
            sc.append("\n\t\t\t<supported_mem_clock>\n\t\t\t\t<value>%d MHz</value>" % mem)
            for gr in grs:
                sc.append("\n\t\t\t\t<supported_graphics_clock>%d MHz</supported_graphics_clock>" % gr)
            sc.append("\n\t\t\t</supported_mem_clock>")
        blk = blk.replace("@SUPPORTED_CLOCKS@", "".join(sc) + "\n\t\t")
        # MIG devices
        devs = migmod.mig_devices(state, g)
        if devs:
            table = migmod.profiles(state)
            parts = ["<mig_devices>"]
            for dev, gi, ci in devs:
                p = table[gi["profile"]]
                total = int(p["gib"] * 1024)
                bar1 = int(total * 0.83)
                parts.append(
                    "\n\t\t\t<mig_device>\n\t\t\t\t<index>%d</index>\n\t\t\t\t<gpu_instance_id>%d</gpu_instance_id>"
                    "\n\t\t\t\t<compute_instance_id>%d</compute_instance_id>\n\t\t\t\t<device_attributes>"
                    "\n\t\t\t\t\t<shared>\n\t\t\t\t\t\t<multiprocessor_count>%d</multiprocessor_count>"
                    "\n\t\t\t\t\t\t<copy_engine_count>%d</copy_engine_count>\n\t\t\t\t\t\t<encoder_count>%d"
                    "</encoder_count>\n\t\t\t\t\t\t<decoder_count>%d</decoder_count>\n\t\t\t\t\t\t<ofa_count>%d"
                    "</ofa_count>\n\t\t\t\t\t\t<jpg_count>%d</jpg_count>\n\t\t\t\t\t</shared>"
                    "\n\t\t\t\t</device_attributes>\n\t\t\t\t<ecc_error_count>\n\t\t\t\t\t<volatile_count>"
                    "\n\t\t\t\t\t\t<sram_uncorrectable>0</sram_uncorrectable>\n\t\t\t\t\t</volatile_count>"
                    "\n\t\t\t\t</ecc_error_count>\n\t\t\t\t<fb_memory_usage>\n\t\t\t\t\t<total>%d MiB</total>"
                    "\n\t\t\t\t\t<reserved>0 MiB</reserved>\n\t\t\t\t\t<used>11 MiB</used>\n\t\t\t\t\t<free>%d MiB"
                    "</free>\n\t\t\t\t</fb_memory_usage>\n\t\t\t\t<bar1_memory_usage>\n\t\t\t\t\t<total>%d MiB"
                    "</total>\n\t\t\t\t\t<used>0 MiB</used>\n\t\t\t\t\t<free>%d MiB</free>"
                    "\n\t\t\t\t</bar1_memory_usage>\n\t\t\t</mig_device>" % (
                        dev, gi["id"], ci["id"], p["sm"] * ci["slices"] // p["g"], p["ce"], p["enc"], p["dec"],
                        p["ofa"], p["jpeg"], total, total - 12, bar1, bar1))
            parts.append("\n\t\t</mig_devices>")
            mig_xml = "".join(parts)
            blk = re.sub(r"<mig_devices>\s*None\s*</mig_devices>", lambda _m, text=mig_xml: text, blk)
        procs = gpu_processes(state, g)
        if procs:
            pp = ["<processes>"]
            for p in procs:
                pp.append("\n\t\t\t<process_info>\n\t\t\t\t<gpu_instance_id>N/A</gpu_instance_id>"
                          "\n\t\t\t\t<compute_instance_id>N/A</compute_instance_id>\n\t\t\t\t<pid>%d</pid>"
                          "\n\t\t\t\t<type>C</type>\n\t\t\t\t<process_name>%s</process_name>"
                          "\n\t\t\t\t<used_memory>%d MiB</used_memory>\n\t\t\t</process_info>" % (
                              p["pid"], _xml_escape(p.get("name", "python3")), p.get("used_mib", 0)))
            pp.append("\n\t\t</processes>")
            procs_xml = "".join(pp)
            blk = re.sub(r"<processes>\s*</processes>", lambda _m, text=procs_xml: text, blk)
        blk = _xml_for_branch(blk, b, q)
        blocks.append(blk)
    return "\n".join(head) + "\n" + "\n".join(blocks) + "\n\n</nvidia_smi_log>\n"


def _xml_for_branch(blk, b, q):
    if b < 535:
        blk = blk.replace("clocks_event_reason", "clocks_throttle_reason")
    if b < 570:
        draw = q["GPU Power Readings/Average Power Draw"]
        blk = re.sub(r"\t\t\t<average_power_draw>.*?</average_power_draw>\n\t\t\t<instant_power_draw>.*?"
                     r"</instant_power_draw>\n",
                     "\t\t\t<power_draw>%s</power_draw>\n" % draw, blk, count=1)
        blk = blk.replace("<average_power_draw>N/A</average_power_draw>\n\t\t\t<instant_power_draw>N/A"
                          "</instant_power_draw>", "<power_draw>N/A</power_draw>")
        blk = re.sub(r"\t\t<gpu_memory_power_readings>.*?</gpu_memory_power_readings>\n", "", blk, flags=re.S)
    if b < 535:
        blk = re.sub(r"\t\t<module_power_readings>.*?</module_power_readings>\n", "", blk, flags=re.S)
        blk = blk.replace("<gpu_power_readings>", "<power_readings>").replace(
            "</gpu_power_readings>", "</power_readings>")
        blk = blk.replace("<current_power_limit>", "<enforced_power_limit>").replace(
            "</current_power_limit>", "</enforced_power_limit>")
        blk = blk.replace("<requested_power_limit>", "<power_limit>").replace(
            "</requested_power_limit>", "</power_limit>")
        blk = blk.replace("<power_readings>\n", "<power_readings>\n\t\t\t<power_management>Supported"
                                               "</power_management>\n", 1)
    return blk


__all__ = ["DEPRECATED"]
