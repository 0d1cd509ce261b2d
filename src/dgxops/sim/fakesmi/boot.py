"""What happens when a simulated node boots: `dgxops-sim boot`, run by dgxops-sim-boot.service.

A simulated node is a container running systemd. ``shutdown -r`` (``ansible.builtin.reboot``)
makes systemd leave, the container's restart policy starts it again, and this early unit plays
the parts of the firmware, the bootloader and the kernel that a container does not have:

* a **new boot id**: ``/proc/sys/kernel/random/boot_id`` is the host kernel's in a container, so
  a fresh id is bind-mounted over it (the reboot module's default ``boot_time_command`` reads it);
* the **booted kernel**: GRUB's default, the newest ``/boot/vmlinuz-<K>`` (stand-in kernel
  packages), else the running kernel; written to ``/run/dgxops-sim/kernel``. ``uname -r`` stays
  the host's (a container shares it): this is the one thing a simulated reboot cannot change;
* **Secure Boot**: the ``SecureBoot-8be4df61-...`` EFI variable under a tmpfs on
  ``/sys/firmware/efi/efivars`` when the node's firmware has it (``dgxops-sim secure-boot``);
* the **driver load**: the nvidia module DKMS built for the booted kernel is "loaded" (its
  version and flavour go to ``/proc/driver/nvidia/version``, on a tmpfs over ``/proc/driver``,
  with the real file's first line); no module for that kernel, a module Secure Boot refuses, or
  the ``driver-load-fails`` fault leaves the driver unloaded, and nvidia-smi exits 9;
* the **GPU reboot semantics** of :func:`state.reboot` (what ``dgxops-sim reset`` does);
* the ``no-boot`` fault: the node stops during this boot and stays down (``systemctl exit 0``:
  the container exits 0, which the ``on-failure`` restart policy leaves stopped), until
  ``docker start <node>`` (or ``SimFleet.start``).
"""
import glob
import os
import re
import time

# subprocess and uuid are imported where they are used: nvidia-smi loads this module on every
# call (library_versions), and only boot and mount need them.

from .state import Store

RUN_DIR = "/run/dgxops-sim"
EFI_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
BUILD_STAMP = {
    # first-line build stamps of the real /proc/driver/nvidia/version (captures in tests/fixtures)
    "open": "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:39:57 UTC 2025",
    "proprietary": "Tue Apr  8 12:37:52 UTC 2025",
}
GCC_LINE = "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) "


def on_node():
    """Inside a simulated node (the image's /opt/dgxops-sim in a container): only there does a
    boot mount anything or write outside the state directory."""
    return os.path.isdir("/opt/dgxops-sim/dgxops") and os.path.exists("/.dockerenv") and "DGXOPS_SIM_ROOT" not in os.environ


def _root():
    """/ on a node; elsewhere (unit tests, a developer's machine) a directory beside the state,
    or DGXOPS_SIM_ROOT: a boot there never touches the machine's own /proc, /sys or /run."""
    if on_node():
        return "/"
    from .state import state_dir
    return os.environ.get("DGXOPS_SIM_ROOT") or os.path.join(state_dir(), "root")


def path(*parts):
    return os.path.join(_root(), *[p.lstrip("/") for p in parts])


def _version_key(text):
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", text)]


def booted_kernel():
    """GRUB's default entry: the newest installed kernel image, else the running kernel."""
    # (off a node, only images under the sandbox root count)
    images = [os.path.basename(p)[len("vmlinuz-"):] for p in glob.glob(path("boot", "vmlinuz-*"))]
    if images:
        return sorted(images, key=_version_key)[-1]
    return os.uname().release


def machine():
    return os.uname().machine


def built_modules(kernel):
    """{version: flavour} of the nvidia modules DKMS built for ``kernel``."""
    found = {}
    for mod_dir in glob.glob(path("var/lib/dkms/nvidia", "*", kernel, "*", "module")):
        version = mod_dir.split(os.sep)[-4]
        try:
            with open(os.path.join(mod_dir, "flavour")) as fh:
                flavour = fh.read().strip()
        except OSError:
            flavour = "proprietary"
        found[version] = flavour
    return found


def library_versions():
    """Versions of the installed user-space driver (libnvidia-ml.so.<version>)."""
    out = set()
    for lib in glob.glob(path("usr/lib", "*-linux-gnu", "libnvidia-ml.so.*")):
        m = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", lib)
        if m:
            out.add(m.group(1))
    return sorted(out, key=_version_key)


def proc_version_text(version, flavour, arch=None):
    arch = arch or machine()
    if flavour == "open":
        first = "NVRM version: NVIDIA UNIX Open Kernel Module for %s  %s  %s" % (arch, version, BUILD_STAMP["open"])
    else:
        first = "NVRM version: NVIDIA UNIX %s Kernel Module  %s  %s" % (arch, version, BUILD_STAMP["proprietary"])
    return "%s\n%s\n" % (first, GCC_LINE)


def decide_load(state, kernel):
    """(version, flavour, None) of the driver that loads at this boot, or (None, None, reason)."""
    faults = state.get("faults", {})
    modules = built_modules(kernel)
    if not modules:
        if not glob.glob(path("var/lib/dkms/nvidia", "*")) and state.get("preloaded_driver"):
            # a node initialised without packages (legacy state): its driver is built in
            return state["preloaded_driver"], state.get("flavour") or "proprietary", None
        return None, None, "no nvidia module for the booted kernel %s (dkms status -k %s)" % (kernel, kernel)
    libs = library_versions()
    candidates = [v for v in modules if v in libs] or list(modules)
    version = sorted(candidates, key=_version_key)[-1]
    flavour = modules[version]
    if faults.get("driver_load_fails"):
        return None, None, "modprobe nvidia failed at boot (injected fault driver-load-fails)"
    fw = state.get("firmware", {})
    if fw.get("secure_boot") and not fw.get("mok_enrolled"):
        return None, None, ("Secure Boot is on and the DKMS-built nvidia %s module is not signed with an "
                            "enrolled key: 'Loading of unsigned module is rejected'" % version)
    return version, flavour, None


def _mount(*argv):
    import subprocess

    return subprocess.run(["mount", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)


def _mounted(target, source):
    """Whether our own tmpfs (named ``source``) is on ``target`` (Docker masks /sys/firmware
    with a read-only tmpfs of its own, which does not count)."""
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                fields = line.split()
                if fields[4] == target and source in fields[fields.index("-") + 2:fields.index("-") + 3]:
                    return True
    except (OSError, ValueError):
        pass
    return False


def _write(p, text, mode=0o644):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as fh:
        fh.write(text)
    os.chmod(p, mode)


def new_boot_id(real=True):
    """The node's PID 1 (dgxops-sim-pid1) bind-mounted a fresh one before systemd started."""
    target = path(RUN_DIR, "boot_id")
    if real and _root() == "/" and os.path.exists(target):
        with open(target) as fh:
            return fh.read().strip()
    import uuid

    boot_id = str(uuid.uuid4())
    _write(target, boot_id + "\n", 0o444)
    if real and _root() == "/":
        _mount("--bind", target, "/proc/sys/kernel/random/boot_id")
    return boot_id


def publish_proc(version, flavour, real=True):
    """/proc/driver/nvidia/version while a driver is loaded (a tmpfs over /proc/driver)."""
    base = path("proc/driver") if not (real and _root() == "/") else "/proc/driver"
    if real and _root() == "/" and not _mounted("/proc/driver", "dgxsim-proc-driver"):
        _mount("-t", "tmpfs", "-o", "mode=0555,size=1m", "dgxsim-proc-driver", "/proc/driver")
    version_file = os.path.join(base, "nvidia", "version")
    if version:
        _write(version_file, proc_version_text(version, flavour), 0o444)
    elif os.path.exists(version_file):
        os.unlink(version_file)


def publish_efivar(state, real=True):
    fw = state.get("firmware", {})
    if not fw.get("efi", True):
        return
    base = "/sys/firmware" if (real and _root() == "/") else path("sys/firmware")
    if real and _root() == "/" and not _mounted("/sys/firmware", "dgxsim-firmware"):
        _mount("-t", "tmpfs", "-o", "mode=0755,size=1m", "dgxsim-firmware", "/sys/firmware")
    var = os.path.join(base, "efi", "efivars", "SecureBoot-" + EFI_GUID)
    os.makedirs(os.path.dirname(var), exist_ok=True)
    with open(var, "wb") as fh:
        # 4 bytes of attributes (NV+BS+RT = 6), then the state byte
        fh.write(bytes([6, 0, 0, 0, 1 if fw.get("secure_boot") else 0]))


def resolve_own_name(real=True):
    """The node resolves its own name, as a real one does (sudo warns otherwise); Docker's
    /etc/hosts of a --network none container lacks it."""
    hosts = path("etc/hosts")
    name = os.uname().nodename
    try:
        with open(hosts) as fh:
            text = fh.read()
    except OSError:
        text = ""
    if not re.search(r"(?m)^\S+\s+(.*\s)?%s(\s|$)" % re.escape(name), text):
        with open(hosts, "a") as fh:
            fh.write("127.0.1.1\t%s\n" % name)


def boot(real=True, first=False):
    """Run the boot of a node; returns a summary dict. ``first``: the state was just created."""
    if real and _root() == "/":
        resolve_own_name()
    summary = {"boot_id": new_boot_id(real), "kernel": booted_kernel()}
    _write(path(RUN_DIR, "kernel"), summary["kernel"] + "\n")
    with Store(write=True, create=False) as st:
        state = st.state
        if state is None:
            # not initialised yet (the image's first start, before `dgxops sim up` runs init)
            publish_proc(None, None, real)
            summary["driver"] = None
            summary["reason"] = "node not initialised"
            return summary
        from .state import reboot
        faults = state.setdefault("faults", {})
        if faults.pop("no_boot", None):
            st.save()
            summary["halt"] = True
        if not first:
            reboot(state)
        state["boots"] = state.get("boots", 0) + 1
        state["kernel"] = summary["kernel"]
        version, flavour, reason = decide_load(state, summary["kernel"])
        state["driver_loaded"] = version is not None
        state["load_error"] = reason
        if version:
            state["driver"] = version
            state["flavour"] = flavour
        st.save()
        publish_efivar(state, real)
        publish_proc(version, flavour, real)
        summary.update(driver=version, flavour=flavour, reason=reason)
    _write(path(RUN_DIR, "boot.json"), _json(summary))
    if summary.get("halt") and real and _root() == "/":
        # stay down: systemd leaves with exit code 0, which the on-failure restart policy keeps stopped
        time.sleep(0.2)
        import subprocess

        subprocess.run(["systemctl", "--no-block", "exit", "0"], check=False)
    return summary


def _json(data):
    import json
    return json.dumps(data, sort_keys=True) + "\n"
