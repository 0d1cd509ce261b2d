"""Build the dgxops.fleet execution environment offline, cached by a hash of its inputs.

Two images, each tagged with a hash of its inputs so an unchanged build is skipped (as
``dgxops.sim.image`` does for the node image):

* ``dgxops/ee-base:<hash>``: the node base image (Debian bookworm, Python 3.11, built offline
  by ``dgxops.sim.image``) plus what ansible-builder expects of a base (``ee/base/``);
* ``dgxops/fleet-ee:<hash>``: ``ansible-builder build`` of ``execution-environment.yml`` on that
  base, with the collection installed from the tarball ``ansible-galaxy collection build``
  makes of this checkout. ``dgxops/fleet-ee:latest`` names the newest build.

The build runs in a staging copy of ``execution-environment.yml`` and ``ee/``, so the checkout
is not written to. pip inside the build reaches PyPI; nothing else is fetched.

    python -m dgxops.ee            # build (or reuse) and print the EE's tag
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from dgxops.sim.image import _hash, base_tag, debian_mirror, docker, docker_bin, image_exists, log

ROOT = Path(__file__).resolve().parents[2]
EE_BASE_REPO = "dgxops/ee-base"
EE_REPO = "dgxops/fleet-ee"
EE_FILE = "execution-environment.yml"


def galaxy_version(root: Path = ROOT) -> str:
    import yaml

    return str(yaml.safe_load((root / "galaxy.yml").read_text())["version"])


HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


def _host_cas() -> list[Path]:
    """The build machine's extra CA certificates: pip in the build must trust what the machine does."""
    return sorted(HOST_CA_DIR.glob("*.crt")) if HOST_CA_DIR.is_dir() else []


def ee_base_tag(node_base: str, root: Path = ROOT) -> str:
    parts = [node_base] + [p.read_bytes() for p in sorted((root / "ee" / "base").iterdir()) if p.is_file()]
    parts += [p.read_bytes() for p in _host_cas()]
    return "%s:%s" % (EE_BASE_REPO, _hash(parts))


def build_ee_base(node_base: str, root: Path = ROOT, force: bool = False) -> str:
    tag = ee_base_tag(node_base, root)
    if image_exists(tag) and not force:
        log("EE base %s is up to date: skipped" % tag)
        return tag
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dgxops-ee-base-") as tmp:
        ctx = Path(tmp) / "ctx"
        shutil.copytree(root / "ee" / "base", ctx)
        (ctx / "ca").mkdir()
        for ca in _host_cas():
            shutil.copy2(ca, ctx / "ca" / ca.name)
        proc = docker("build", "-q", "-t", tag, "-f", str(ctx / "Containerfile"),
                      "--build-arg", "NODE_BASE=%s" % node_base, str(ctx), check=False)
    if proc.returncode != 0:
        raise RuntimeError("docker build of %s failed:\n%s" % (tag, (proc.stdout + proc.stderr)[-3000:]))
    log("built %s in %.0f s" % (tag, time.monotonic() - start))
    return tag


def build_collection(out: Path, root: Path = ROOT) -> Path:
    bindir = Path(sys.executable).parent
    galaxy = shutil.which("ansible-galaxy", path=str(bindir)) or shutil.which("ansible-galaxy")
    if not galaxy:
        raise RuntimeError("ansible-galaxy not found: install ansible-core")
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([galaxy, "collection", "build", "--force", "--output-path", str(out), str(root)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("ansible-galaxy collection build failed: %s" % (proc.stdout + proc.stderr))
    return out / ("dgxops-fleet-%s.tar.gz" % galaxy_version(root))


def _tarball_digest(tarball: Path) -> str:
    """The collection's content (names and bytes), not the tarball's timestamps."""
    h = hashlib.sha256()
    with tarfile.open(tarball) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            h.update(member.name.encode() + b"\0")
            if member.isfile() and member.name != "MANIFEST.json":
                h.update(tar.extractfile(member).read())
    return h.hexdigest()


def ee_tag(base: str, tarball: Path, root: Path = ROOT) -> str:
    parts = [base, (root / EE_FILE).read_bytes(), _tarball_digest(tarball)]
    parts += [p.read_bytes() for p in sorted((root / "ee").glob("*")) if p.is_file()]
    return "%s:%s" % (EE_REPO, _hash(parts))


def build_ee(root: Path = ROOT, force: bool = False) -> str:
    """Build (or reuse) the execution environment; return its tag."""
    node_base = base_tag(debian_mirror())
    if not image_exists(node_base):
        from dgxops.sim.image import ensure_image

        ensure_image()
    base = build_ee_base(node_base, root, force=force)
    with tempfile.TemporaryDirectory(prefix="dgxops-ee-") as tmp:
        stage = Path(tmp)
        shutil.copy2(root / EE_FILE, stage / EE_FILE)
        shutil.copytree(root / "ee", stage / "ee", ignore=shutil.ignore_patterns("base", "context", "collections", "*.tar.gz"))
        tarball = build_collection(stage / "ee" / "collections", root)
        tag = ee_tag(base, tarball, root)
        if image_exists(tag) and not force:
            log("EE %s is up to date: skipped" % tag)
            docker("tag", tag, EE_REPO + ":latest")
            return tag
        builder = shutil.which("ansible-builder", path=str(Path(sys.executable).parent)) or shutil.which("ansible-builder")
        if not builder:
            raise RuntimeError("ansible-builder not found: pip install ansible-builder")
        start = time.monotonic()
        log("ansible-builder build %s on %s (a few minutes: pip installs from PyPI)" % (tag, base))
        proc = subprocess.run([builder, "build", "-f", EE_FILE, "--context", str(stage / "context"), "-t", tag,
                               "-t", EE_REPO + ":latest", "--container-runtime", "docker",
                               "--build-arg", "EE_BASE_IMAGE=%s" % base, "-v", "2"],
                              cwd=stage, capture_output=True, text=True, check=False,
                              env=_env_with_docker())
        if proc.returncode != 0:
            raise RuntimeError("ansible-builder build failed:\n%s" % (proc.stdout + proc.stderr)[-6000:])
    log("built %s in %.0f s" % (tag, time.monotonic() - start))
    return tag


def _env_with_docker() -> dict:
    import os

    # ansible-builder runs `docker` from PATH: the engine's own CLI first (see dgxops.sim.image)
    return dict(os.environ, PATH=os.pathsep.join([str(Path(docker_bin()).parent), os.environ.get("PATH", "")]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dgxops.ee", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when inputs are unchanged")
    args = parser.parse_args(argv)
    print(build_ee(force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
