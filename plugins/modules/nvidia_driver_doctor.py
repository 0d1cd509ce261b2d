#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_doctor
short_description: Diagnose why nvidia-smi fails on a node and say how to fix it
version_added: 0.1.0
description:
  - Automates the "nvidia-smi has failed" troubleshooting flow of guide 000 section 5.1 and extends it.
  - "Checks, each returned as a finding with C(status) (C(ok), C(warn), C(fail), C(skip)), a message,
    the evidence and the fix: C(nvidia_smi) (runs the default facts query), C(kernel_module)
    (C(/proc/modules), a module built for C(uname -r)), C(nouveau), C(nvrm_log) (NVRM and Xid lines in the
    kernel log), C(version_mismatch) (kernel module vs user-space library), C(device_nodes)
    (C(/dev/nvidia*) present, character devices, modes matching C(/proc/driver/nvidia/params)),
    C(kernel_headers) (for the running kernel, needed by DKMS builds), C(driver_packages) (open and
    proprietary flavours, or two branches, installed together), C(persistence) (nvidia-persistenced
    running), C(fabric_manager) (nvidia-fabricmanager running where NVSwitches are visible),
    C(driver_support) (the driver branch supports the GPU family, for example R470 does not support H100)."
  - Returns C(verdict) with C(status) (C(healthy), C(degraded), C(broken)), the most likely C(cause) and its C(fix).
  - Read-only; never loads modules, restarts services or changes GPU state.
options:
  timeout:
    description: Seconds each command may take (nvidia-smi, dmesg, package queries).
    type: int
    default: 30
  proc_root:
    description: Where C(/proc) is mounted; point it at a copy (for example from an nvidia-bug-report) to analyse offline.
    type: path
    default: /proc
  sys_root:
    description: Where C(/sys) is mounted.
    type: path
    default: /sys
  dev_root:
    description: Where C(/dev) is mounted.
    type: path
    default: /dev
  modules_root:
    description: Where C(/lib/modules) is.
    type: path
    default: /lib/modules
  kernel_log:
    description:
      - A file to read the kernel log from instead of running C(dmesg) (falling back to C(journalctl -k -b)).
    type: path
  expected_gpu_count:
    description: GPUs this node must show; fewer is a failed C(nvidia_smi) check.
    type: int
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.nvidia_smi
attributes:
  check_mode:
    support: full
    details: Only reads; the result is the same in check mode.
  diff_mode:
    support: none
notes:
  - Run with become so that C(dmesg) is readable (kernel.dmesg_restrict).
  - When nvidia-smi answers but C(/proc/modules) or C(/dev) disagree (a container that shares the host's
    driver), those findings are warnings, not failures.
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Diagnose the GPU driver
  dgxops.fleet.nvidia_driver_doctor:
  become: true
  register: doctor

- name: Show the verdict
  ansible.builtin.debug:
    msg: "{{ doctor.verdict.status }}: {{ doctor.verdict.cause }} -- fix: {{ doctor.verdict.fix }}"
"""

RETURN = r"""
verdict:
  description: Overall result.
  returned: always
  type: dict
  sample: {"status": "broken", "cause": "the nvidia kernel module is not loaded and none is built for kernel 6.8.0-45-generic",
           "fix": "apt-get install linux-headers-6.8.0-45-generic && dkms autoinstall, then modprobe nvidia", "check": "kernel_module"}
findings:
  description: One entry per check (C(check), C(status), C(message), C(fix), C(evidence)).
  returned: always
  type: list
  elements: dict
nvidia_smi:
  description: The facts C(dgxops.fleet.nvidia_smi_facts) would return for the default subset.
  returned: always
  type: dict
"""

import glob
import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import driver_support
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi as smi
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P

# Xid codes that mean hardware/driver trouble needing action (NVIDIA Xid catalogue).
XID_FATAL = {
    48: "double-bit ECC error", 63: "ECC page retirement / row remap event", 64: "ECC page retirement / row remap failure",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC rate", 94: "contained ECC error",
    95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error", 140: "ECC unrecovered error",
}

_OPEN_PKG = re.compile(r"(^|-)open($|-)|^nvidia-open$|^kmod-nvidia-open")
# (Ubuntu-style names carry the branch; NVIDIA's debian12 repository names the module packages
# nvidia-kernel-dkms / nvidia-kernel-open-dkms, the branch only in the version)
_KERNEL_PKG = re.compile(r"^(nvidia-kernel-dkms$|nvidia-kernel-open-dkms$|"
                         r"nvidia-driver-\d+|nvidia-dkms-\d+|nvidia-kernel-source-\d+|nvidia-kernel-common-\d+|"
                         r"linux-modules-nvidia-\d+|kmod-nvidia|nvidia-open|nvidia-kmod|cuda-drivers-\d+)")
_BRANCH = re.compile(r"-(\d{3})(?:-|$)")


def finding(check, status, message, fix=None, evidence=None):
    return {"check": check, "status": status, "message": message, "fix": fix, "evidence": evidence or []}


def read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


class Doctor:
    # Fixed system locations (class attributes so tests can point them at a fixture tree).
    USR_SRC = "/usr/src"
    DKMS_DIR = "/var/lib/dkms"
    NVML_GLOBS = ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*", "/usr/lib64/libnvidia-ml.so.*.*",
                  "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.*.*", "/usr/local/nvidia/lib64/libnvidia-ml.so.*.*")

    @staticmethod
    def kernel_release():
        return os.uname()[2]

    def __init__(self, module):
        self.m = module
        self.p = module.params
        self.timeout_bin = module.get_bin_path("timeout")
        self.findings = []

    def run(self, argv):
        exe = self.m.get_bin_path(argv[0])
        if not exe:
            return None, "", ""
        cmd = [exe] + argv[1:]
        if self.timeout_bin:
            cmd = [self.timeout_bin, "-k", "5", str(self.p["timeout"])] + cmd
        return self.m.run_command(cmd, environ_update=smi.C_LOCALE)

    def add(self, *args, **kwargs):
        self.findings.append(finding(*args, **kwargs))

    # ---------------------------------------------------------------- checks
    def check_nvidia_smi(self):
        facts = smi.gather(self.m, {"min", "gpus"}, backend="nvidia-smi", timeout=self.p["timeout"],
                           binary=self.p["nvidia_smi_path"], proc_root=self.p["proc_root"],
                           sys_root=self.p["sys_root"], expected_gpu_count=self.p["expected_gpu_count"],
                           want_cuda=False)
        self.facts = facts
        health = facts["health"]
        evidence = []
        last = facts["collection"].get("last_failure")
        if last:
            evidence = [ln for ln in (last.get("stdout") or last.get("stderr") or "").splitlines() if ln.strip()][:5]
        if health["ok"]:
            self.add("nvidia_smi", "ok", "nvidia-smi reports %d GPU(s) (%s), driver %s"
                     % (facts["gpu_count"], ", ".join(facts["model_families"]) or "unknown model", facts["driver_version"]))
        else:
            self.add("nvidia_smi", "fail", health["reason"], health["fix"], evidence + health.get("issues", []))
        return facts

    def check_driver_support(self):
        """The loaded driver branch against the first branch that supports the GPU family."""
        facts = self.facts
        branch = facts.get("driver_branch")
        families = [f for f in (facts.get("model_families") or [facts.get("model_family")]) if f]
        if not isinstance(branch, int) or not families:
            self.add("driver_support", "skip", "driver branch or GPU model unknown (nvidia-smi did not say)")
            return
        for family in families:
            minimum = driver_support.unsupported(branch, family)
            if minimum is not None:
                self.add("driver_support", "fail",
                         "driver branch R%d does not support %s GPUs (the first branch that does is R%d)"
                         % (branch, family, minimum),
                         "Install driver branch %d or newer (nvidia_driver_branch: \"%d\" or the current production "
                         "branch), then reboot." % (minimum, minimum),
                         ["driver %s, GPU family %s" % (facts.get("driver_version"), family)])
                return
        self.add("driver_support", "ok", "driver branch R%d supports %s GPUs" % (branch, ", ".join(families)))

    def check_kernel_module(self, smi_ok):
        modules = P.parse_proc_modules(read(os.path.join(self.p["proc_root"], "modules")) or "")
        self.modules = modules
        release = self.kernel_release()
        self.release = release
        self.module_file = self._module_file(release)
        evidence = ["loaded: %s" % ", ".join(sorted(m for m in modules if m.startswith("nvidia"))) or "loaded: none"]
        evidence.append("module for %s: %s" % (release, self.module_file or "none found"))
        if "nvidia" in modules:
            self.add("kernel_module", "ok", "nvidia kernel module is loaded", evidence=evidence)
        elif smi_ok:
            self.add("kernel_module", "warn", "nvidia-smi answers but /proc/modules does not list nvidia "
                     "(a container sharing the host driver?)", evidence=evidence)
        elif not self.module_file:
            self.add("kernel_module", "fail", "the nvidia kernel module is not loaded and none is built for kernel %s" % release,
                     "Install the headers for %s (apt-get install linux-headers-%s / dnf install kernel-devel-%s), rebuild "
                     "with `dkms autoinstall` (or install the prebuilt linux-modules-nvidia-<branch>-%s package), then "
                     "`modprobe nvidia`; reboot if the module still does not load." % (release, release, release, release),
                     evidence)
        else:
            self.add("kernel_module", "fail", "the nvidia kernel module is built (%s) but not loaded" % self.module_file,
                     "Run `modprobe nvidia` and read `dmesg | grep NVRM` for why it failed (Secure Boot signing, "
                     "nouveau bound to the GPU, version mismatch); reboot if it was unloaded by an upgrade.", evidence)

    def _module_file(self, release):
        base = os.path.join(self.p["modules_root"], release)
        patterns = ["updates/dkms/nvidia.ko*", "kernel/drivers/video/nvidia.ko*", "extra/nvidia.ko*",
                    "kernel/nvidia*/nvidia.ko*", "updates/nvidia.ko*", "extra/*/nvidia.ko*", "kernel/drivers/video/nvidia/nvidia.ko*"]
        for pattern in patterns:
            hits = sorted(glob.glob(os.path.join(base, pattern)))
            if hits:
                return hits[0]
        return None

    def check_nouveau(self):
        if "nouveau" in self.modules:
            self.add("nouveau", "fail", "the nouveau driver is loaded and can claim the GPUs",
                     "Blacklist it (`blacklist nouveau` and `options nouveau modeset=0` in /etc/modprobe.d/), rebuild "
                     "the initramfs (update-initramfs -u / dracut -f) and reboot.", ["nouveau in /proc/modules"])
        else:
            self.add("nouveau", "ok", "nouveau is not loaded")

    def kernel_log_lines(self):
        if self.p["kernel_log"]:
            text = read(self.p["kernel_log"])
            return (text or "").splitlines(), "file %s" % self.p["kernel_log"]
        rc, out, _err = self.run(["dmesg"])
        if rc == 0 and out:
            return out.splitlines(), "dmesg"
        rc, out, _err = self.run(["journalctl", "-k", "-b", "--no-pager", "-q"])
        if rc == 0 and out:
            return out.splitlines(), "journalctl -k -b"
        return None, None

    def check_nvrm_log(self):
        lines, source = self.kernel_log_lines()
        if lines is None:
            self.add("nvrm_log", "skip", "the kernel log could not be read (dmesg needs root when kernel.dmesg_restrict=1)",
                     "Run the doctor with become: true.")
            self.nvrm = []
            return
        nvrm = [ln for ln in lines if "NVRM" in ln or "nvidia" in ln.lower()]
        self.nvrm = nvrm
        fails, warns = [], []
        for line in nvrm:
            xid = re.search(r"NVRM: Xid \(([^)]*)\): (\d+)", line)
            if xid:
                code = int(xid.group(2))
                (fails if code in XID_FATAL else warns).append(line.strip())
            elif re.search(r"API mismatch|RmInitAdapter failed|fallen off the bus|probe routine failed|"
                           r"No NVIDIA GPU found|failed to allocate|GPU at PCI:\S+ has fallen|Failed to enable MSI", line):
                fails.append(line.strip())
            elif re.search(r"NVRM: .*(error|failed|Error)", line):
                warns.append(line.strip())
        xids = sorted({int(m) for m in re.findall(r"NVRM: Xid \([^)]*\): (\d+)", "\n".join(fails + warns))})
        names = ["%d (%s)" % (x, XID_FATAL.get(x, "see the Xid catalogue")) for x in xids]
        if fails:
            self.add("nvrm_log", "fail", "the kernel log has NVRM errors%s" % (": Xid " + ", ".join(names) if names else ""),
                     "Act on the first error: Xid 79/fallen off the bus -> drain, reset or power-cycle and check the riser/"
                     "cabling; ECC Xids (48/63/64/94/95) -> drain and reset, RMA if repeated; 'API mismatch' -> reboot so "
                     "the kernel module and libraries match; 'RmInitAdapter failed' -> check power/firmware and reboot.",
                     fails[-10:])
        elif warns:
            self.add("nvrm_log", "warn", "the kernel log has NVRM warnings%s" % (": Xid " + ", ".join(names) if names else ""),
                     "Review the lines; application Xids (13, 31, 43, 45) usually point at a job, not the node.", warns[-10:])
        else:
            self.add("nvrm_log", "ok", "no NVRM errors in the kernel log (%s, %d NVIDIA lines)" % (source, len(nvrm)),
                     evidence=nvrm[-3:])

    def check_version_mismatch(self):
        kernel = P.parse_proc_driver_version(read(os.path.join(self.p["proc_root"], "driver/nvidia/version")))["version"]
        user = None
        for pattern in self.NVML_GLOBS:
            hits = glob.glob(pattern)
            if hits:
                user = P.clean_version(os.path.basename(sorted(hits)[-1]).replace("libnvidia-ml.so.", ""))
                break
        smi_text = ((self.facts["collection"].get("last_failure") or {}).get("stdout") or "")
        mismatch_text = "Driver/library version mismatch" in smi_text
        evidence = ["kernel module %s" % kernel, "libnvidia-ml %s" % user]
        if mismatch_text or (kernel and user and kernel != user):
            self.add("version_mismatch", "fail", "the loaded kernel module (%s) and the user-space driver library (%s) differ"
                     % (kernel, user), "Reboot (or unload and reload the nvidia modules) so the kernel module matches the "
                     "installed %s libraries; hold the driver packages to stop unattended upgrades." % user, evidence)
        elif kernel and user:
            self.add("version_mismatch", "ok", "kernel module and libnvidia-ml are both %s" % kernel, evidence=evidence)
        else:
            self.add("version_mismatch", "skip", "cannot compare versions (kernel module %s, library %s)" % (kernel, user),
                     evidence=evidence)

    def check_device_nodes(self, smi_ok):
        dev = self.p["dev_root"]
        params = P.parse_driver_params(read(os.path.join(self.p["proc_root"], "driver/nvidia/params")) or "")
        want_mode = int(params.get("DeviceFileMode", "438")) & 0o777
        want_uid = int(params.get("DeviceFileUID", "0"))
        want_gid = int(params.get("DeviceFileGID", "0"))
        gpu_dirs = glob.glob(os.path.join(self.p["proc_root"], "driver/nvidia/gpus/*"))
        minors = []
        for path in gpu_dirs:
            info = read(os.path.join(path, "information")) or ""
            match = re.search(r"Device Minor:\s*(\d+)", info)
            if match:
                minors.append(int(match.group(1)))
        if not minors:
            minors = list(range(max(self.facts["gpu_count"], 0)))
        expected = ["nvidiactl"] + ["nvidia%d" % i for i in sorted(minors)]
        if "nvidia_uvm" in self.modules:
            expected.append("nvidia-uvm")
        missing, bad, evidence = [], [], []
        for name in expected:
            path = os.path.join(dev, name)
            try:
                st = os.stat(path)
            except OSError:
                missing.append("/dev/" + name)
                continue
            mode = stat.S_IMODE(st.st_mode)
            evidence.append("/dev/%s %s %o %d:%d" % (name, "char" if stat.S_ISCHR(st.st_mode) else "NOT-A-CHAR-DEVICE",
                                                     mode, st.st_uid, st.st_gid))
            if not stat.S_ISCHR(st.st_mode):
                bad.append("/dev/%s is not a character device" % name)
            elif name != "nvidia-uvm" and (mode, st.st_uid, st.st_gid) != (want_mode, want_uid, want_gid):
                bad.append("/dev/%s is %o %d:%d, the driver wants %o %d:%d"
                           % (name, mode, st.st_uid, st.st_gid, want_mode, want_uid, want_gid))
            elif mode & 0o006 == 0 and want_mode & 0o006:
                bad.append("/dev/%s is not accessible to other users (%o)" % (name, mode))
        if missing:
            status = "warn" if smi_ok else "fail"
            self.add("device_nodes", status, "missing device nodes: %s" % ", ".join(missing),
                     "Load the driver (`modprobe nvidia nvidia_uvm`), then create the nodes with `nvidia-modprobe -c0 -u` "
                     "(or start nvidia-persistenced); check udev rules that delete /dev/nvidia*.", evidence + missing)
        elif bad:
            self.add("device_nodes", "warn", "; ".join(bad),
                     "Restore the modes the driver expects (NVreg_DeviceFileMode/UID/GID in /etc/modprobe.d; default 0666 "
                     "root:root) or fix the udev rule that changed them; GPU jobs of non-root users fail otherwise.", evidence)
        else:
            self.add("device_nodes", "ok", "%d device nodes present with mode %o" % (len(expected), want_mode), evidence=evidence)

    def check_kernel_headers(self):
        release = self.release
        candidates = [os.path.join(self.p["modules_root"], release, "build"),
                      os.path.join(self.USR_SRC, "linux-headers-%s" % release), os.path.join(self.USR_SRC, "kernels", release)]
        found = [c for c in candidates if os.path.exists(os.path.join(c, "Makefile"))]
        dkms = sorted(glob.glob(os.path.join(self.DKMS_DIR, "nvidia*")))
        if found:
            self.add("kernel_headers", "ok", "kernel headers for %s are installed (%s)" % (release, found[0]))
        elif dkms:
            self.add("kernel_headers", "fail", "the driver is built by DKMS (%s) but the headers for the running kernel %s "
                     "are not installed" % (", ".join(dkms), release),
                     "Install linux-headers-%s (Debian/Ubuntu) or kernel-devel-%s (EL), then `dkms autoinstall`." % (release, release),
                     candidates)
        else:
            self.add("kernel_headers", "warn", "no kernel headers for %s; fine with prebuilt modules, needed for DKMS builds"
                     % release, "Install linux-headers-%s / kernel-devel-%s before the next driver or kernel upgrade."
                     % (release, release), candidates)

    def installed_packages(self):
        rc, out, _err = self.run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n", "*nvidia*"])
        if rc == 0 or (rc == 1 and out):
            return [ln.split()[0] for ln in out.splitlines() if ln.split() and ln.split()[-1].startswith("ii")], "dpkg"
        rc, out, _err = self.run(["rpm", "-qa", "--qf", "%{NAME}\n", "*nvidia*"])
        if rc == 0:
            return [ln.strip() for ln in out.splitlines() if ln.strip()], "rpm"
        return None, None

    def check_driver_packages(self):
        pkgs, manager = self.installed_packages()
        if pkgs is None:
            self.add("driver_packages", "skip", "no dpkg or rpm to list packages")
            return
        kernel_pkgs = [p for p in pkgs if _KERNEL_PKG.match(p)]
        open_pkgs = [p for p in kernel_pkgs if _OPEN_PKG.search(p)]
        prop_pkgs = [p for p in kernel_pkgs if p not in open_pkgs and not p.startswith("cuda-drivers")
                     and not p.startswith("nvidia-kernel-common")]
        branches = sorted({int(m.group(1)) for p in kernel_pkgs for m in [_BRANCH.search(p)] if m})
        loaded = P.parse_proc_driver_version(read(os.path.join(self.p["proc_root"], "driver/nvidia/version")))["flavour"]
        evidence = ["%s: %s" % (manager, ", ".join(kernel_pkgs) or "no NVIDIA kernel-module packages")]
        if open_pkgs and prop_pkgs:
            self.add("driver_packages", "fail", "both open (%s) and proprietary (%s) kernel-module packages are installed"
                     % (", ".join(open_pkgs), ", ".join(prop_pkgs)),
                     "Keep one flavour: purge the other's packages (only those: e.g. `apt-get purge %s`), rebuild the "
                     "initramfs and reboot. Hopper/Blackwell and NVSwitch systems need the open flavour." % " ".join(
                         prop_pkgs if loaded == "open" else open_pkgs), evidence)
        elif len(branches) > 1:
            self.add("driver_packages", "warn", "packages of several driver branches are installed: %s" % branches,
                     "Purge the branch you do not run and hold the one you do.", evidence)
        elif loaded and ((loaded == "open" and prop_pkgs) or (loaded == "proprietary" and open_pkgs)):
            self.add("driver_packages", "warn", "the loaded module is %s but the installed packages are the other flavour"
                     % loaded, "Reboot to load the installed flavour, or reinstall the intended one.", evidence)
        else:
            self.add("driver_packages", "ok", "one driver flavour installed%s" % (" (%s)" % ", ".join(kernel_pkgs) if kernel_pkgs else ""),
                     evidence=evidence)

    def process_running(self, names):
        for comm in glob.glob(os.path.join(self.p["proc_root"], "[0-9]*", "comm")):
            name = (read(comm) or "").strip()
            if name in names:
                return name
        return None

    def check_persistence(self):
        daemon = self.process_running(("nvidia-persistenced", "nvidia-persiste"))
        modes = [g.get("persistence_mode") for g in self.facts["gpus"]]
        if daemon:
            self.add("persistence", "ok", "nvidia-persistenced is running")
        elif modes and all(m is True for m in modes):
            self.add("persistence", "warn", "GPUs are in legacy persistence mode (nvidia-smi -pm 1) but nvidia-persistenced "
                     "is not running; the driver deprecates -pm", "systemctl enable --now nvidia-persistenced")
        else:
            self.add("persistence", "warn", "nvidia-persistenced is not running: each nvidia-smi/CUDA start re-initialises "
                     "the GPUs (slow, and settings are lost when the last client exits)",
                     "systemctl enable --now nvidia-persistenced")

    def check_fabric_manager(self):
        facts = self.facts
        local = facts["nvswitch_source"] in ("pci", "proc")
        if not facts["nvswitch"]:
            self.add("fabric_manager", "skip", "no NVSwitch on this node")
            return
        running = self.process_running(("nv-fabricmanager", "nv-fabricmanage"))
        if not local:
            self.add("fabric_manager", "skip" if running is None else "ok",
                     "GPUs report an NVSwitch fabric but no switch is visible here (managed by the host/hypervisor)")
            return
        states = sorted({g.get("fabric_state") for g in facts["gpus"] if g.get("fabric_state")})
        if running:
            self.add("fabric_manager", "ok", "nvidia-fabricmanager is running for %d NVSwitch(es)" % facts["nvswitch_count"],
                     evidence=["GPU fabric state: %s" % ", ".join(states)])
        else:
            self.add("fabric_manager", "fail", "%d NVSwitch(es) present but nvidia-fabricmanager is not running; CUDA "
                     "fails with 'system not yet initialized'" % facts["nvswitch_count"],
                     "Install nvidia-fabricmanager of exactly the driver version (%s), then `systemctl enable --now "
                     "nvidia-fabricmanager`; check /var/log/fabricmanager.log." % facts["driver_version"],
                     ["GPU fabric state: %s" % (", ".join(states) or "unknown")])

    # --------------------------------------------------------------- verdict
    def verdict(self):
        order = ["driver_support", "version_mismatch", "nouveau", "kernel_module", "kernel_headers", "driver_packages", "nvrm_log",
                 "nvidia_smi", "fabric_manager", "device_nodes", "persistence"]
        by = {f["check"]: f for f in self.findings}
        fails = [by[c] for c in order if c in by and by[c]["status"] == "fail"]
        warns = [by[c] for c in order if c in by and by[c]["status"] == "warn"]
        if fails:
            # nvidia_smi's own failure is a symptom; prefer a root cause when one was found.
            causes = [f for f in fails if f["check"] != "nvidia_smi"] or fails
            first = causes[0]
            smi_fail = by.get("nvidia_smi", {})
            cause = first["message"]
            if smi_fail.get("status") == "fail" and first["check"] != "nvidia_smi":
                cause = "%s (so %s)" % (first["message"], smi_fail["message"])
            return {"status": "broken", "cause": cause, "fix": first["fix"], "check": first["check"],
                    "failed_checks": [f["check"] for f in fails]}
        if warns:
            return {"status": "degraded", "cause": warns[0]["message"], "fix": warns[0]["fix"], "check": warns[0]["check"],
                    "failed_checks": []}
        return {"status": "healthy", "cause": None, "fix": None, "check": None, "failed_checks": []}


def run_module(module):
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout: invalid value %r; allowed: a positive number of seconds" % module.params["timeout"])
    doc = Doctor(module)
    facts = doc.check_nvidia_smi()
    smi_ok = facts["health"]["ok"] or facts["gpu_count"] > 0
    doc.check_driver_support()
    doc.check_kernel_module(smi_ok)
    doc.check_nouveau()
    doc.check_nvrm_log()
    doc.check_version_mismatch()
    doc.check_device_nodes(smi_ok)
    doc.check_kernel_headers()
    doc.check_driver_packages()
    doc.check_persistence()
    doc.check_fabric_manager()
    module.exit_json(changed=False, verdict=doc.verdict(), findings=doc.findings, nvidia_smi=facts)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            timeout=dict(type="int", default=30),
            nvidia_smi_path=dict(smi.NVIDIA_SMI_PATH_SPEC),
            proc_root=dict(type="path", default="/proc"),
            sys_root=dict(type="path", default="/sys"),
            dev_root=dict(type="path", default="/dev"),
            modules_root=dict(type="path", default="/lib/modules"),
            kernel_log=dict(type="path"),
            expected_gpu_count=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    run_module(module)


if __name__ == "__main__":
    main()
