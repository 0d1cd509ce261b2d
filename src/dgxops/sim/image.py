"""Build the simulated DGX node image offline.

Two layers, each tagged with a hash of its inputs so an unchanged build is skipped:

* ``dgxops/node-base:<hash>``: ``debootstrap`` of Debian bookworm from the configured
  mirror, ``docker import``-ed (no registry is reachable, so no ``FROM debian``).
* ``dgxops/node:<hash>``: the project's layer on top: the fake ``nvidia-smi`` and the
  ``dgxops-sim`` admin tool (from ``src/dgxops/sim/fakesmi``), systemd trimmed for
  containers.  ``dgxops/node:latest`` always names the newest build.

Only the docker CLI is used (argv lists, no shell), so the builder works with any engine
version the CLI can talk to.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASE_REPO = "dgxops/node-base"
NODE_REPO = "dgxops/node"
SUITE = "bookworm"
# What a DGX node image needs so the roles can run against it: python3 (+ python3-apt for
# the apt module), systemd as PID 1, udev rules, kmod/modprobe.d, util-linux (findmnt,
# fstrim.timer), sudo (become + non-root tests), gnupg (apt keyrings).
BASE_PACKAGES = (
    "python3",
    "python3-apt",
    "systemd",
    "systemd-sysv",
    "dbus",
    "kmod",
    "udev",
    "util-linux",
    "sudo",
    "procps",
    "iproute2",
    "gnupg",
    "ca-certificates",
    "pciutils",
)
BUILDER_VERSION = "2"  # bump when the build steps below change meaning

SIM_SRC = Path(__file__).resolve().parent  # src/dgxops/sim
PKG_SRC = SIM_SRC.parent  # src/dgxops

DOCKERFILE = """\
FROM {base}
ENV container=docker LANG=C.UTF-8
COPY dgxops /opt/dgxops-sim/dgxops
COPY nvidia-smi /usr/bin/nvidia-smi
COPY dgxops-sim /usr/local/sbin/dgxops-sim
COPY dgxops-sim-boot.service /etc/systemd/system/dgxops-sim-boot.service
COPY dgxops-sim-pid1 /usr/local/sbin/dgxops-sim-pid1
COPY repos/cuda /srv/dgxops-cuda-repo
COPY repos/monitoring /srv/dgxops-monitoring-repo
COPY libcuda-standin.so /opt/dgxops-sim/libcuda-standin.so
RUN chmod 0755 /usr/bin/nvidia-smi /usr/local/sbin/dgxops-sim /usr/local/sbin/dgxops-sim-pid1 \\
 && mkdir -p /var/lib/dgxops-sim /etc/dgxops-sim \\
 && python3 -m compileall -q /opt/dgxops-sim \\
 && systemctl mask systemd-udev-trigger.service systemd-modules-load.service \\
      sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount \\
      getty.target console-getty.service \\
 && systemctl enable dgxops-sim-boot.service \\
 && printf 'd /tmp 1777 root root -\\n' > /etc/tmpfiles.d/tmp.conf \\
 && mv /etc/apt/sources.list /etc/apt/sources.list.offline \\
 && printf 'Types: deb\\nURIs: file:/srv/dgxops-monitoring-repo/debian/\\nSuites: /\\nTrusted: yes\\n' \\
      > /etc/apt/sources.list.d/distribution-standin.sources \\
 && apt-get update -qq \\
 && systemctl set-default multi-user.target \\
 && printf 'C.UTF-8 UTF-8\\n' > /etc/locale.gen
STOPSIGNAL SIGRTMIN+3
CMD ["/usr/local/sbin/dgxops-sim-pid1"]
LABEL org.dgxops.role=sim-node
"""

# systemd-logind stays: `shutdown -r` (ansible.builtin.reboot) asks it to reboot.
# /tmp is a tmpfs, new at each container start (docker run --tmpfs), and systemd-tmpfiles does not
# empty it again at boot: docker exec answers before the boot is over (sshd on a real node starts
# after that cleanup), and a module running then would lose its payload in /tmp.
BOOT_UNIT = """\
[Unit]
Description=dgxops simulated node boot: boot id, booted kernel, Secure Boot, driver load, GPU reboot semantics
Documentation=file:/opt/dgxops-sim/dgxops/sim/fakesmi/boot.py
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/dgxops-sim boot

[Install]
WantedBy=sysinit.target
"""

# PID 1 of a node: a fresh boot id bind-mounted before anything can look (the reboot module
# compares boot ids; a container would show the host kernel's), then systemd.
PID1 = """\
#!/bin/sh
mkdir -p /run/dgxops-sim
cat /proc/sys/kernel/random/uuid > /run/dgxops-sim/boot_id
mount --bind /run/dgxops-sim/boot_id /proc/sys/kernel/random/boot_id
exec /lib/systemd/systemd "$@"
"""

WRAPPER = """\
#!/usr/bin/python3
# {name}: simulated by dgxops (src/dgxops/sim/fakesmi). Not the real NVIDIA tool.
import sys
sys.path.insert(0, "/opt/dgxops-sim")
from dgxops.sim.fakesmi.{module} import main
sys.exit(main())
"""


def log(msg: str) -> None:
    print("[dgxops-image] %s" % msg, file=sys.stderr, flush=True)


def docker_bin() -> str:
    """Debian's client first: /usr/local/bin/docker on these machines is another client."""
    for cand in ("/usr/bin/docker", shutil.which("docker")):
        if cand and os.access(cand, os.X_OK):
            return cand
    raise SystemExit("docker CLI not found: run scripts/bootstrap.sh (installs docker.io)")


def docker(*args: str, check: bool = True, capture: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [docker_bin(), *args], check=check, text=True,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None, **kw,
    )


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


def debian_mirror() -> str:
    """The mirror apt is configured with (deb822 or one-line format)."""
    candidates = [Path("/etc/apt/sources.list")]
    sdir = Path("/etc/apt/sources.list.d")
    if sdir.is_dir():
        candidates += sorted(sdir.glob("*.sources")) + sorted(sdir.glob("*.list"))
    for path in candidates:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            m = re.match(r"^URIs:\s*(\S+)", line)
            if m and "security" not in m.group(1):
                return m.group(1)
            m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m and "security" not in m.group(1):
                return m.group(1)
    return "http://deb.debian.org/debian"


def _hash(parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def base_tag(mirror: str) -> str:
    return "%s:%s" % (BASE_REPO, _hash([BUILDER_VERSION, SUITE, mirror, ",".join(BASE_PACKAGES)]))


def _sim_files():
    for path in sorted(PKG_SRC.rglob("*.py")):
        rel = path.relative_to(PKG_SRC)
        if "__pycache__" in rel.parts:
            continue
        # the node only needs the package root and the simulator
        # (aptrepo.py: `dgxops-sim init` names the driver set of the node's repository layout from it)
        if rel.parts[0] == "__init__.py" or rel.parts[:2] in (("sim", "__init__.py"), ("sim", "aptrepo.py")) \
                or rel.parts[:2] == ("sim", "fakesmi"):
            yield path, rel


MONITORING_REPO = PKG_SRC.parent.parent / "extensions" / "molecule" / "monitoring" / "build_repo.py"


LIBCUDA_SRC = SIM_SRC / "libcuda_standin.c"


def c_compiler():
    """The C compiler that builds the libcuda stand-in, or None (the nodes then have no libcuda)."""
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def build_libcuda(dest: Path) -> bool:
    """Compile the libcuda.so.1 stand-in for the node image (same architecture as this machine).

    Without a compiler the image gets an empty file and the driver packages install a text
    placeholder: the facts then read the CUDA version with `nvidia-smi --version`, as on a node
    without libcuda. Returns whether the library was built.
    """
    cc = c_compiler()
    if cc is None:
        dest.write_bytes(b"")
        log("no C compiler: the nodes get no libcuda stand-in (facts read `nvidia-smi --version`)")
        return False
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(dest), str(LIBCUDA_SRC)], check=True)
    return True


def node_tag(base: str) -> str:
    parts = [BUILDER_VERSION, base, DOCKERFILE, WRAPPER, BOOT_UNIT, PID1, os.uname().release,
             (SIM_SRC / "aptrepo.py").read_bytes(), LIBCUDA_SRC.read_bytes(), str(c_compiler() is not None)]
    if MONITORING_REPO.exists():
        parts.append(MONITORING_REPO.read_bytes())
    for path, rel in _sim_files():
        parts += [str(rel), path.read_bytes()]
    return "%s:%s" % (NODE_REPO, _hash(parts))


def build_repos(ctx: Path) -> None:
    """The stand-in apt repositories every node carries (file: sources, no network)."""
    from dgxops.sim import aptrepo
    aptrepo.build(str(ctx / "repos" / "cuda"), os.uname().release)
    mon = ctx / "repos" / "monitoring"
    mon.mkdir(parents=True, exist_ok=True)
    if MONITORING_REPO.exists():
        subprocess.run([sys.executable, str(MONITORING_REPO), str(mon)], check=True, stdout=subprocess.DEVNULL)


def build_base(mirror: str, force: bool = False) -> str:
    tag = base_tag(mirror)
    if image_exists(tag) and not force:
        log("base image %s is up to date: skipped" % tag)
        return tag
    if shutil.which("debootstrap") is None:
        raise SystemExit("debootstrap not found: apt-get install debootstrap (scripts/bootstrap.sh does)")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dgxops-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        log("debootstrap %s from %s (about a minute)" % (SUITE, mirror))
        subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=" + ",".join(BASE_PACKAGES),
             SUITE, str(rootfs), mirror],
            check=True, stdout=subprocess.DEVNULL,
        )
        # apt caches and lists are not needed in the image
        for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
            target = rootfs / sub
            for child in target.glob("*.deb") if sub.endswith("archives") else target.glob("*_*"):
                child.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        docker("import", "--change", "CMD [\"/lib/systemd/systemd\"]", "-", tag, stdin=tar.stdout)
        tar.stdout.close()
        if tar.wait() != 0:
            raise SystemExit("tar of the rootfs failed")
    log("built %s in %.0f s" % (tag, time.monotonic() - start))
    return tag


def build_node(base: str, force: bool = False) -> str:
    tag = node_tag(base)
    if image_exists(tag) and not force:
        log("node image %s is up to date: skipped" % tag)
        docker("tag", tag, NODE_REPO + ":latest")
        return tag
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dgxops-node-") as tmp:
        ctx = Path(tmp)
        for path, rel in _sim_files():
            dest = ctx / "dgxops" / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        (ctx / "nvidia-smi").write_text(WRAPPER.format(name="nvidia-smi", module="cli"))
        (ctx / "dgxops-sim").write_text(WRAPPER.format(name="dgxops-sim", module="admin"))
        (ctx / "dgxops-sim-boot.service").write_text(BOOT_UNIT)
        (ctx / "dgxops-sim-pid1").write_text(PID1)
        build_repos(ctx)
        build_libcuda(ctx / "libcuda-standin.so")
        (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=base))
        proc = docker("build", "-q", "-t", tag, "-t", NODE_REPO + ":latest", str(ctx), check=False)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            raise SystemExit("docker build of %s failed" % tag)
    log("built %s in %.1f s" % (tag, time.monotonic() - start))
    return tag


def ensure_image(force: bool = False) -> str:
    """Build (or reuse) the node image and return its tag."""
    base = build_base(debian_mirror(), force=force)
    return build_node(base, force=force)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="dgxops image", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when inputs are unchanged")
    parser.add_argument("--print-tag", action="store_true", help="print the tag the inputs give, build nothing")
    args = parser.parse_args(argv)
    if args.print_tag:
        print(node_tag(base_tag(debian_mirror())))
        return 0
    print(ensure_image(force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
