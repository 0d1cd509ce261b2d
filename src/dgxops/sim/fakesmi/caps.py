"""The driver's nvidia-caps files, written next to the state for the simulated node.

A real driver (``nvidia.ko``, ``kernel-open/nvidia/nv-caps.c``) publishes:

* ``/proc/devices``: the character major of ``nvidia-caps`` (``alloc_chrdev_region``: dynamic;
  the MIG user guide shows 508 and 238). ``nvidia`` itself is the fixed major 195.
* ``/proc/driver/nvidia-caps/mig-minors``: a *static* table of every MIG capability the driver
  can ever create and the minor of its ``/dev/nvidia-caps/nvidia-cap<minor>`` node. The minors
  are handed out once at module load, in table order, from one counter: ``fabric-mgmt`` (the
  nvlink table, listed in ``nvlink-minors``) 0, ``config`` 1, ``monitor`` 2, then for
  ``gpu0`` .. ``gpu31`` (the GPU *device minor*, not the nvidia-smi index) and GPU instance ids
  ``gi0`` .. ``gi14``: ``gpuG/giI/access`` followed by ``gpuG/giI/ci0/access`` ..
  ``ci7/access``. So ``minor(gpuG/giI/access) = 3 + 135*G + 9*I`` and
  ``minor(gpuG/giI/ciC/access) = 4 + 135*G + 9*I + C``; the last line is
  ``gpu31/gi14/ci7/access 4322`` (as in the MIG user guide, "Device Nodes and Capabilities").
  The file does not change when instances are created or destroyed.
* ``/proc/driver/nvidia/capabilities/gpuG/mig/giI/access`` (and ``.../ciC/access``): exists
  only while that GPU / compute instance exists; reads ``DeviceFileMinor: N``,
  ``DeviceFileMode: 292`` (0444) and ``DeviceFileModify: 1`` (``NVreg_ModifyDeviceFiles``).
  Writing ``DeviceFileModify: 0`` to it makes ``nvidia-modprobe -f`` leave the node's mode and
  owner alone; a new instance gets a new entry with ``DeviceFileModify: 1`` again.
  ``mig/config`` (mode 256 = 0400) and ``mig/monitor`` (292) always exist.

Stand-ins here live under ``$DGXOPS_SIM_STATE_DIR/proc/...`` with the same relative paths. They
are plain files: a write of ``DeviceFileModify: 0`` replaces the file's text, and the next
state write (any nvidia-smi setter or MIG change) rewrites it in the driver's three-line form
keeping the written flag (the kernel keeps the other two lines itself). The simulator does not play nvidia-modprobe: it
never creates ``/dev`` nodes.
"""
import os
import re

NVIDIA_MAJOR = 195
CAPS_MAJOR = 508          # the MIG user guide's example; any dynamic major would do
UVM_MAJOR = 510
MAX_GPUS = 32
MAX_GI = 15
MAX_CI = 8
MODE_ACCESS = 292         # 0444
MODE_CONFIG = 256         # 0400

_MODIFY = re.compile(r"DeviceFileModify:\s*(\d+)")


def proc_root(state_dir):
    return os.path.join(state_dir, "proc")


def gi_minor(gpu_minor, gi):
    return 3 + 135 * gpu_minor + 9 * gi


def ci_minor(gpu_minor, gi, ci):
    return 4 + 135 * gpu_minor + 9 * gi + ci


def mig_minors_text():
    lines = ["config 1", "monitor 2"]
    for g in range(MAX_GPUS):
        for i in range(MAX_GI):
            lines.append("gpu%d/gi%d/access %d" % (g, i, gi_minor(g, i)))
            for c in range(MAX_CI):
                lines.append("gpu%d/gi%d/ci%d/access %d" % (g, i, c, ci_minor(g, i, c)))
    return "\n".join(lines) + "\n"


def proc_devices_text():
    return ("Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n  5 /dev/console\n"
            "  5 /dev/ptmx\n 10 misc\n 13 input\n%3d nvidia-frontend\n%3d nvidia-uvm\n%3d nvidia-caps\n"
            "\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n" % (NVIDIA_MAJOR, UVM_MAJOR, CAPS_MAJOR))


def cap_text(minor, mode, modify):
    return "DeviceFileMinor: %d\nDeviceFileMode: %d\nDeviceFileModify: %d\n" % (minor, mode, modify)


def _write_if_changed(path, text):
    try:
        with open(path) as fh:
            if fh.read() == text:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def _current_modify(path):
    try:
        with open(path) as fh:
            match = _MODIFY.search(fh.read())
    except OSError:
        return None
    return int(match.group(1)) if match else None


def gpu_minor(g):
    """The simulated GPU's device minor (`Minor Number` in -q): its index."""
    return g["index"]


def expected_caps(state):
    """{relative path under capabilities/: (minor, mode)} for the instances that exist now."""
    caps = {"mig/config": (1, MODE_CONFIG), "mig/monitor": (2, MODE_ACCESS)}
    for g in state.get("gpus", []):
        gm = gpu_minor(g)
        if gm >= MAX_GPUS:
            continue
        for gi in g.get("gpu_instances", []):
            base = "gpu%d/mig/gi%d" % (gm, gi["id"])
            caps[base + "/access"] = (gi_minor(gm, gi["id"]), MODE_ACCESS)
            for ci in gi.get("compute_instances", []):
                caps["%s/ci%d/access" % (base, ci["id"])] = (ci_minor(gm, gi["id"], ci["id"]), MODE_ACCESS)
    return caps


def sync(state, state_dir):
    """Bring the proc stand-ins in line with the state (called on every state write)."""
    root = proc_root(state_dir)
    _write_if_changed(os.path.join(root, "devices"), proc_devices_text())
    minors = os.path.join(root, "driver", "nvidia-caps", "mig-minors")
    if not os.path.exists(minors):
        _write_if_changed(minors, mig_minors_text())
    capdir = os.path.join(root, "driver", "nvidia", "capabilities")
    want = expected_caps(state)
    for rel, (minor, mode) in want.items():
        path = os.path.join(capdir, rel)
        modify = _current_modify(path)
        _write_if_changed(path, cap_text(minor, mode, 1 if modify is None else modify))
    # instances that are gone lose their entries (and a later instance starts with Modify 1)
    if os.path.isdir(capdir):
        for dirpath, _dirnames, filenames in os.walk(capdir, topdown=False):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if os.path.relpath(path, capdir) not in want:
                    os.unlink(path)
            if dirpath != capdir and not os.listdir(dirpath):
                os.rmdir(dirpath)
