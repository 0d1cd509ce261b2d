"""The HTML report as people see it: rendered by headless Chromium to a screenshot."""

import os
import shutil
import struct
import subprocess
import zlib

import pytest

from dgxops import report


def _chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _png_pixels(data: bytes):
    """(width, height, rows of RGB tuples) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, meta = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            meta = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _c, _f, interlace = meta
    assert depth == 8 and color in (2, 6) and interlace == 0, meta
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                line[i] = (line[i] + a) & 0xFF
            elif ftype == 2:
                line[i] = (line[i] + b) & 0xFF
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


FACTS = {
    "dgx-a100-1": {"nvidia_smi": {"driver_version": "550.163.01", "model_family": "a100", "gpu_count": 2,
                                  "health": {"ok": True}, "gpus": [
                                      {"index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920,
                                       "power_limit_w": 400.0, "persistence_mode": True, "mig_mode_current": "Disabled"}
                                      for i in range(2)]}},
    "dgx-broken": {"nvidia_smi": {"gpus": [], "health": {"ok": False, "reason": "driver not loaded"}}},
}


@pytest.mark.skipif(_chromium() is None and not os.environ.get("CI"), reason="no Chromium (scripts/bootstrap.sh installs it)")
def test_report_renders_in_headless_chromium(tmp_path):
    run = {"status": "successful", "rc": 0, "changed": 1, "failures": [],
           "changed_tasks": [{"host": "dgx-a100-1", "task": "Render nccl.conf"}],
           "hosts": {"dgx-a100-1": {"ok": 9, "changed": 1}}}
    page = tmp_path / "report.html"
    page.write_text(report.html_report(FACTS, [("converge", run)]), encoding="utf-8")
    shot = tmp_path / "report.png"
    proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--window-size=1200,900", "--screenshot=%s" % shot, page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False, env=dict(os.environ, HOME=str(tmp_path)))
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1200, 900)
    colours = {}
    for row in rows[::3]:
        for px in row[::3]:
            colours[px] = colours.get(px, 0) + 1
    total = sum(colours.values())
    near = lambda want, tol=12: sum(n for c, n in colours.items() if all(abs(c[i] - want[i]) <= tol for i in range(3)))  # noqa: E731
    # the page drew what the template says: the dark header band, green table headings,
    # the red cell of the broken node, and is not one flat colour
    assert near((0x1a, 0x1a, 0x1a)) > total * 0.03
    assert near((0x76, 0xb9, 0x00)) > total * 0.005
    assert near((0xfd, 0xe2, 0xe2), 4) > 0
    assert len(colours) > 50
