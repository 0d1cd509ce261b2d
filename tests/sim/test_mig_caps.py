"""The simulator's stand-ins for the driver's nvidia-caps files (mig-minors, capabilities/, devices)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from simhelp import Node  # noqa: E402


@pytest.fixture
def a100(tmp_path):
    node = Node(tmp_path, model="dgx-a100-40gb", driver="535.247.01")
    for idx in ("0", "1"):
        assert node.smi("-i", idx, "-mig", "1")[0] == 0
        assert node.smi("-r", "-i", idx)[0] == 0
    return node


def proc(node, *rel):
    return os.path.join(node.dir, "proc", *rel)


def read(path):
    with open(path) as fh:
        return fh.read()


def caps_files(node):
    root = proc(node, "driver", "nvidia", "capabilities")
    out = []
    for dirpath, _dirs, files in os.walk(root):
        out.extend(os.path.relpath(os.path.join(dirpath, f), root) for f in files)
    return sorted(out)


def test_mig_minors_is_the_drivers_static_table(a100):
    lines = read(proc(a100, "driver", "nvidia-caps", "mig-minors")).splitlines()
    # config, monitor, then 32 GPUs x 15 GPU instances x (1 + 8 compute instances)
    assert len(lines) == 2 + 32 * 15 * 9
    assert lines[:5] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4",
                         "gpu0/gi0/ci1/access 5"]
    table = dict(line.rsplit(" ", 1) for line in lines)
    # the MIG user guide's example (GI 1 of GPU 0 -> nvidia-cap12, its CIs 13-15) and the last line
    assert [table["gpu0/gi1/access"], table["gpu0/gi1/ci0/access"], table["gpu0/gi1/ci2/access"]] == ["12", "13", "15"]
    assert table["gpu0/gi2/access"] == "21"   # container-engine-accelerators' fixture: gi2 -> 21, ci0 -> 22
    assert table["gpu0/gi2/ci0/access"] == "22"
    assert lines[-1] == "gpu31/gi14/ci7/access 4322"
    assert len(set(table.values())) == len(table)


def test_mig_minors_does_not_change_with_instances(a100):
    before = read(proc(a100, "driver", "nvidia-caps", "mig-minors"))
    assert a100.smi("mig", "-i", "0", "-cgi", "9,19", "-C")[0] == 0
    assert read(proc(a100, "driver", "nvidia-caps", "mig-minors")) == before


def test_proc_devices_lists_the_nvidia_caps_major(a100):
    text = read(proc(a100, "devices"))
    chars = text.split("\n\n")[0].splitlines()
    assert chars[0] == "Character devices:"
    assert dict(reversed(line.split()) for line in chars[1:])["nvidia-caps"] == "508"
    assert "195 nvidia-frontend" in text


def test_capability_files_follow_the_instances(a100):
    assert caps_files(a100) == ["mig/config", "mig/monitor"]
    assert read(proc(a100, "driver", "nvidia", "capabilities", "mig", "config")) == \
        "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    assert a100.smi("mig", "-i", "0", "-cgi", "9,19", "-C")[0] == 0
    assert a100.smi("mig", "-i", "1", "-cgi", "19")[0] == 0          # no compute instance yet
    gi_ids = sorted(gi["id"] for gi in a100.state()["gpus"][0]["gpu_instances"])
    assert gi_ids == [1, 2]
    assert caps_files(a100) == ["gpu0/mig/gi1/access", "gpu0/mig/gi1/ci0/access", "gpu0/mig/gi2/access",
                                "gpu0/mig/gi2/ci0/access", "gpu1/mig/gi1/access", "mig/config", "mig/monitor"]
    assert read(proc(a100, "driver", "nvidia", "capabilities", "gpu0", "mig", "gi2", "ci0", "access")) == \
        "DeviceFileMinor: 22\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    assert read(proc(a100, "driver", "nvidia", "capabilities", "gpu1", "mig", "gi1", "access")).startswith(
        "DeviceFileMinor: %d\n" % (3 + 135 + 9))
    # destroying GPU 0's instances removes their entries; a reboot removes the rest
    assert a100.smi("mig", "-i", "0", "-dci")[0] == 0
    assert a100.smi("mig", "-i", "0", "-dgi")[0] == 0
    assert caps_files(a100) == ["gpu1/mig/gi1/access", "mig/config", "mig/monitor"]
    assert a100.admin("reset")[0] == 0
    assert caps_files(a100) == ["mig/config", "mig/monitor"]


def test_device_file_modify_written_by_root_is_kept_until_the_instance_is_gone(a100):
    assert a100.smi("mig", "-i", "0", "-cgi", "19", "-C")[0] == 0
    path = proc(a100, "driver", "nvidia", "capabilities", "gpu0", "mig", "gi1", "access")
    with open(path, "w") as fh:   # what `echo "DeviceFileModify: 0" > .../access` does
        fh.write("DeviceFileModify: 0\n")
    assert a100.smi("mig", "-i", "0", "-cgi", "19")[0] == 0   # any state write
    assert read(path) == "DeviceFileMinor: 12\nDeviceFileMode: 292\nDeviceFileModify: 0\n"
    # a new instance with the same id is a new /proc entry: NVreg_ModifyDeviceFiles (1) again
    assert a100.smi("mig", "-i", "0", "-dci", "-gi", "1")[0] == 0
    assert a100.smi("mig", "-i", "0", "-dgi", "-gi", "1")[0] == 0
    assert not os.path.exists(path)
    assert a100.smi("mig", "-i", "0", "-cgi", "19:0", "-C")[0] == 0
    gi = [g for g in a100.state()["gpus"][0]["gpu_instances"] if g["start"] == 0][0]
    assert gi["id"] == 1
    assert read(path).endswith("DeviceFileModify: 1\n")
