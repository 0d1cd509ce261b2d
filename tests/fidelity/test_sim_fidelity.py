"""The simulator against real nvidia-smi captures.

For every capture file (the exporter's public captures and our own real H200 capture), run the
same command on the matching simulated model and driver and assert the same columns, header,
units, layout and value formats (numbers may differ).  A simulated node is trimmed to one GPU
so that counts match the single-GPU capture machines.
"""
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "sim"))
sys.path.insert(0, os.path.join(ROOT, "src"))

from capture_sections import sections  # noqa: E402
from simhelp import Node  # noqa: E402

PUB = os.path.join(ROOT, "tests", "fixtures", "nvidia-smi", "public")
OWN = os.path.join(ROOT, "tests", "sim", "captures")


def _captures():
    out = []
    for path in sorted(glob.glob(os.path.join(PUB, "*.txt")) + glob.glob(os.path.join(OWN, "*_capture.txt"))):
        base = os.path.basename(path)
        if base.startswith("h200_580"):
            out.append((path, "dgx-h200", "580.159.04", False, True))
            continue
        m = re.match(r"linux-x86_64__nvidia-(.+)__([\d.]+)\.txt$", base)
        gpu, driver = m.group(1), m.group(2)
        mig = gpu.endswith("-mig")
        if gpu.startswith("h200"):
            out.append((path, "dgx-h200", driver, mig, True))
        elif gpu.startswith("h100"):
            out.append((path, "dgx-h100", driver, mig, True))
        else:
            # no simulated model for this GPU: only the driver-dependent field list and units are compared
            out.append((path, "dgx-h100", driver, False, False))
    return out


CAPTURES = _captures()
IDS = [os.path.basename(c[0]) for c in CAPTURES]


def _node(tmp_path, model, driver, mig, capture_secs):
    node = Node(tmp_path, model=model, driver=driver, gpus=1)
    assert node.smi("-pm", "1")[0] == 0
    if mig:
        # recreate the capture's MIG layout from its `nvidia-smi -L` lines
        assert node.smi("-i", "0", "-mig", "1")[0] == 0
        listing = _first(capture_secs, lambda c: c == "nvidia-smi -L") if capture_secs else None
        names = [re.match(r"^\s+MIG (\S+)", x).group(1) for x in (listing.lines if listing else []) if "Device" in x]
        names = names or ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
        last = None
        for name in names:
            m = re.match(r"^(\d)c\.(.+)$", name)
            if m:
                if last != m.group(2):
                    rc, out, _ = node.smi("mig", "-cgi", m.group(2))
                    assert rc == 0, out
                    gi = re.search(r"GPU instance ID\s+(\d+)", out).group(1)
                    last = m.group(2)
                rc, out, _ = node.smi("mig", "-cci", "%dc.%s" % (int(m.group(1)), m.group(2)), "-gi", gi)
                assert rc == 0, out
            else:
                last = None
                rc, out, _ = node.smi("mig", "-cgi", name, "-C")
                assert rc == 0, out
    return node


def shape(value):
    """Value format class: numbers collapse to 9, hex to H, UUIDs to U."""
    v = re.sub(r"(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", r"\1-U", value)
    v = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "U", v)
    v = re.sub(r"0x[0-9A-Fa-f]+", "0xH", v)
    if re.fullmatch(r"[0-9A-F]+(\.[0-9A-F]+)+", v):  # VBIOS-style dotted hex
        return re.sub(r"[0-9A-F]+", "H", v)
    v = re.sub(r"\d+", "9", v)
    return v


# Columns whose value legitimately depends on machine state or on the capture machine's
# platform, not on format: (field -> reason).
STATEFUL = {
    "pstate": "idle vs busy P-state", "clocks_event_reasons.active": "bitmask of current reasons",
    "clocks_event_reasons.gpu_idle": "Active/Not Active",
    "fabric.state": "capture machines are VMs without NVSwitch fabric; DGX reports the fabric",
    "fabric.status": "as fabric.state", "fabric.cliqueId": "as fabric.state",
    "fabric.clusterUuid": "as fabric.state", "persistence_mode": "set by the test",
    "serial": "masked in public captures", "platform.module_id": "slot dependent",
}


def _cmd_args(cmd):
    return cmd.split()[1:]


def _first(secs, pred):
    for s in secs:
        if pred(s.cmd):
            return s
    return None


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_query_gpu_header_units_and_value_formats(tmp_path, capture):
    path, model, driver, mig, same_gpu = capture
    secs = sections(path)
    sec = _first(secs, lambda c: c.startswith("nvidia-smi --query-gpu=timestamp") and c.endswith("--format=csv"))
    assert sec is not None
    node = _node(tmp_path, model, driver, mig, secs)
    rc, out, _ = node.smi(*_cmd_args(sec.cmd))
    assert rc == 0, out
    got = out.rstrip("\n").split("\n")
    assert got[0].split(", ") == sec.lines[0].split(", ")  # same columns, canonical names and units
    if not same_gpu:
        return
    hdr = [re.sub(r" \[.*\]$", "", h) for h in sec.lines[0].split(", ")]
    real = sec.lines[1].split(", ")
    ours = got[1].split(", ")
    assert len(ours) == len(real) == len(hdr)
    bad = []
    for name, r, o in zip(hdr, real, ours):
        if name in STATEFUL or name == "timestamp" and shape(r) == shape(o):
            continue
        if shape(r) != shape(o):
            bad.append((name, r, o))
    assert not bad, "value formats differ from the real capture: %r" % bad


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_query_gpu_noheader_nounits(tmp_path, capture):
    path, model, driver, mig, same_gpu = capture
    secs = sections(path)
    sec = _first(secs, lambda c: c.startswith("nvidia-smi --query-gpu=") and "nounits" in c)
    if sec is None:
        pytest.skip("capture has no nounits query")
    node = _node(tmp_path, model, driver, mig, secs)
    rc, out, _ = node.smi(*_cmd_args(sec.cmd))
    assert rc == 0
    got = out.rstrip("\n").split("\n")
    if "noheader" in sec.cmd:
        assert len(got) == len(sec.lines)
        real, ours = sec.lines[0].split(", "), got[0].split(", ")
    else:
        assert got[0] == sec.lines[0]
        real, ours = sec.lines[1].split(", "), got[1].split(", ")
    assert len(real) == len(ours)
    for r, o in zip(real, ours):
        assert (" W" in r, " MHz" in r, " MiB" in r) == (" W" in o, " MHz" in o, " MiB" in o)


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_list_gpus(tmp_path, capture):
    path, model, driver, mig, same_gpu = capture
    if not same_gpu:
        pytest.skip("no simulated model for this GPU")
    secs = sections(path)
    sec = _first(secs, lambda c: c == "nvidia-smi -L")
    node = _node(tmp_path, model, driver, mig, secs)
    rc, out, _ = node.smi("-L")
    assert rc == 0
    got = out.rstrip("\n").split("\n")
    assert [shape(x) for x in got] == [shape(x) for x in sec.lines]


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_topo_matrix(tmp_path, capture):
    path, model, driver, mig, same_gpu = capture
    if not same_gpu:
        pytest.skip("no simulated model for this GPU")
    secs = sections(path)
    sec = _first(secs, lambda c: c == "nvidia-smi topo -m")
    node = _node(tmp_path, model, driver, mig, secs)
    rc, out, _ = node.smi("topo", "-m")
    assert rc == 0
    got = out.rstrip("\n").split("\n")
    assert got[0] == sec.lines[0]  # header with its ANSI underline, tab separated
    real_row, our_row = sec.lines[1].split("\t"), got[1].split("\t")
    assert len(real_row) == len(our_row)
    assert our_row[:2] == real_row[:2] and our_row[-2:] == real_row[-2:]
    assert re.match(r"^[\d,-]+$", our_row[2]) and re.match(r"^\d+$", our_row[3])
    assert got[2:] == sec.lines[2:]  # legend verbatim


def _qlabels(lines):
    out = []
    for line in lines:
        if not line.strip() or line.startswith("Timestamp") or line.startswith("=="):
            continue
        if line.startswith("GPU 0000"):
            line = "GPU <bus id>"
        label = line[:55].rstrip() if line[55:57] == ": " else line.rstrip()
        out.append(label)
    return out


@pytest.mark.parametrize("capture", CAPTURES, ids=IDS)
def test_query_text_sections(tmp_path, capture):
    path, model, driver, mig, same_gpu = capture
    if not same_gpu:
        pytest.skip("no simulated model for this GPU")
    secs = sections(path)
    sec = _first(secs, lambda c: c == "nvidia-smi -q")
    node = _node(tmp_path, model, driver, mig, secs)
    rc, out, _ = node.smi("-q")
    assert rc == 0
    real, ours = _qlabels(sec.lines), _qlabels(out.split("\n"))
    if driver.startswith("580"):
        assert ours == real  # same driver as the capture: every label, indent and order
    else:
        # other branches: every section a parser uses exists, with the same sub-labels
        for top in ("    Product Name", "    Persistence Mode", "    MIG Mode", "        Current",
                    "    GPU UUID", "    FB Memory Usage", "    ECC Mode", "    GPU Power Readings",
                    "        Current Power Limit", "        Requested Power Limit", "        Min Power Limit",
                    "    Clocks", "    Max Clocks", "    Compute Mode", "    Clocks Event Reasons"):
            assert top in ours
    if mig:
        def mig_block(labels):
            i = labels.index("    MIG Device")
            j = labels.index("    Accounting Mode")
            return labels[i:j]
        assert mig_block(ours) == mig_block(real)
    # values carry the same formats for the lines parsers read
    vals = {}
    for line in out.split("\n"):
        if line[55:57] == ": ":
            vals.setdefault(line[:55].strip(), line[57:])
    assert re.match(r"^\d+\.\d\d W$", vals["Requested Power Limit"])
    assert re.match(r"^\d+ MiB$", vals["Total"])


def _xml_paths(elem, prefix=""):
    out = set()
    for child in elem:
        p = prefix + "/" + child.tag
        out.add(p)
        out |= _xml_paths(child, p)
    return out


def test_query_xml_matches_real_580_h200(tmp_path):
    path = os.path.join(OWN, "h200_580_capture.txt")
    node = Node(tmp_path, model="dgx-h200", driver="580.159.04", gpus=1)
    rc, out, _ = node.smi("-q", "-x")
    assert rc == 0
    with open(os.path.join(OWN, "h200_580_qx.xml")) as fh:
        real = ET.fromstring(fh.read().split("\n", 2)[2])
    ours = ET.fromstring(out.split("\n", 2)[2])
    assert out.split("\n")[1] == '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">'
    assert _xml_paths(ours) == _xml_paths(real)
    g = ours.find("gpu")
    assert g.find("gpu_power_readings/requested_power_limit").text == "700.00 W"
    assert g.find("mig_devices").text.strip() == "None"
    assert path  # the capture this XML came with


def test_query_xml_mig_devices_like_real_layout(tmp_path):
    node = _node(tmp_path, "dgx-h200", "580.159.04", True, None)
    rc, out, _ = node.smi("-q", "-x")
    g = ET.fromstring(out.split("\n", 2)[2]).find("gpu")
    devs = g.findall("mig_devices/mig_device")
    assert [(d.find("gpu_instance_id").text, d.find("compute_instance_id").text) for d in devs] == \
        [("1", "0"), ("1", "1"), ("2", "0"), ("3", "0"), ("4", "0")]
    assert devs[0].find("fb_memory_usage/total").text == "71424 MiB"  # same as the real 3g.71gb device


EXACT_CMDS = (
    "nvidia-smi mig -lgip", "nvidia-smi mig -lgipp", "nvidia-smi mig -lgi", "nvidia-smi mig -lci",
    "nvidia-smi mig -lgip -i 0", "nvidia-smi -i 7 --query-gpu=index --format=csv",
    "nvidia-smi -i GPU-00000000-0000-0000-0000-000000000000 --query-gpu=index --format=csv",
    "nvidia-smi --query-gpu=index,bogus.field --format=csv", "nvidia-smi --query-gpu=index --format=json",
    "nvidia-smi --query-gpu=index", "nvidia-smi --query-gpu=index --format=csv,bogus",
    "nvidia-smi --bogus-flag", "nvidia-smi topo -m -i 0", "nvidia-smi -q -x -d POWER",
    "nvidia-smi -i 0,7 --query-gpu=index --format=csv", "nvidia-smi -L -i 0",
    "nvidia-smi --query-gpu=index,name,power.limit,mig.mode.current --format=csv",
    "nvidia-smi --query-gpu=index,name,power.limit,mig.mode.current --format=csv,nounits",
    "nvidia-smi --query-compute-apps=timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,"
    "used_gpu_memory --format=csv",
    "nvidia-smi --query-gpu=gpu_name,clocks.gr,clocks.mem,clocks_throttle_reasons.active,"
    "gpu.power.requested_limit,inforom.image --format=csv",
)


@pytest.mark.parametrize("cmd", EXACT_CMDS)
def test_real_580_h200_output_and_exit_code(tmp_path, cmd):
    """Our own real H200 capture (580.159.04): same stdout lines and the same exit code."""
    secs = {s.cmd: s for s in sections(os.path.join(OWN, "h200_580_capture.txt"))}
    sec = secs[cmd]
    node = Node(tmp_path, model="dgx-h200", driver="580.159.04", gpus=1)
    rc, out, _ = node.smi(*_cmd_args(cmd))
    assert rc == sec.rc
    got = out.split("\n")[:-1] if out else []
    assert [shape(x) for x in got] == [shape(x) for x in sec.lines]


def test_help_query_gpu_lists_every_capture_field(tmp_path):
    """Every field of a driver's real --help-query-gpu is accepted by the same simulated branch."""
    for path, model, driver, _mig, _same in CAPTURES:
        real = [m.group(1) for line in _first(sections(path), lambda c: c == "nvidia-smi --help-query-gpu").lines
                for m in [re.match(r'^"([a-z][A-Za-z0-9_.]*)"', line)] if m]
        (tmp_path / driver).mkdir(exist_ok=True)
        node = Node(tmp_path / driver, model=model, driver=driver, gpus=1)
        rc, out, _ = node.smi("--help-query-gpu")
        ours = re.findall(r'^"([a-z][A-Za-z0-9_.]*)"', out, flags=re.M)
        assert ours == real, path


def test_banner_layout_matches_real_580(tmp_path):
    secs = {s.cmd: s for s in sections(os.path.join(OWN, "h200_580_capture.txt"))}
    real = secs["nvidia-smi"].lines
    node = Node(tmp_path, model="dgx-h200", driver="580.159.04", gpus=1)
    node.smi("-pm", "1")
    rc, out, _ = node.smi()
    got = out.rstrip("\n").split("\n")
    assert rc == 0
    assert [len(x) for x in got[1:]] == [len(x) for x in real[1:]]
    assert [shape(x) for x in got[1:]] == [shape(x) for x in real[1:]]
