"""An installed dgxops, as a new user gets it: `pip install .` into an empty venv, the collection
from its tarball, then `dgxops run dgxops.fleet.site --check` from another directory against a
simulated node; and the README's Python snippet, run as written, against the same node.
The node comes from the in-process fleet API under its own fleet name (the README's `sim up` line
would start the default fleet, which a developer may be using)."""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLEET = "pytest-install"

pytestmark = pytest.mark.docker


def _docker_ok():
    docker = shutil.which("docker", path="/usr/bin") or shutil.which("docker")
    return bool(docker) and subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv with only `pip install .` of this checkout, and the collection installed from its tarball."""
    base = tmp_path_factory.mktemp("install")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # a copy of the checkout's tracked files (a fresh clone, without .venv, .cache, build outputs)
    clone = base / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", ROOT, str(clone)], check=True)
    subprocess.run(["git", "-C", ROOT, "diff", "HEAD", "--binary", "--output", str(base / "wip.patch")], check=True)
    if (base / "wip.patch").stat().st_size:  # uncommitted work under test too
        subprocess.run(["git", "-C", str(clone), "apply", "--binary", str(base / "wip.patch")], check=True)
    start = time.monotonic()
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(clone)],
                         capture_output=True, text=True, check=False, timeout=600)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    print("\n$ %s -m pip install %s  (empty venv; rc %d, %.0f s)" % (venv / "bin" / "python", clone, pip.returncode, time.monotonic() - start))
    print(subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list"], capture_output=True, text=True, check=True).stdout)
    show = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "show", "dgxops"], capture_output=True, text=True, check=True)
    requires = re.search(r"^Requires: (.*)$", show.stdout, re.M).group(1)
    print("dgxops Requires: %s" % requires)
    for dep in ("ansible-core", "ansible-runner", "Jinja2", "prometheus-client"):
        assert dep.lower() in requires.lower(), requires
    # the collection from the tarball ansible-galaxy builds of the clone
    build = subprocess.run([str(venv / "bin" / "ansible-galaxy"), "collection", "build", "--output-path", str(base), str(clone)],
                           capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = base.glob("dgxops-fleet-*.tar.gz")
    print("$ ansible-galaxy collection build --output-path %s %s\n%s" % (base, clone, build.stdout.strip()))
    print("tarball %s: %d bytes (%.1f KiB)" % (tarball.name, tarball.stat().st_size, tarball.stat().st_size / 1024))
    assert tarball.stat().st_size < 1024 * 1024
    collections = base / "collections"
    # as a user would, outside this checkout (whose ansible.cfg resolves dgxops.fleet in place)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    inst = subprocess.run([str(venv / "bin" / "ansible-galaxy"), "collection", "install", "--offline", "-p", str(collections),
                           str(tarball)], capture_output=True, text=True, check=False, cwd=base, env=clean)
    print("$ ansible-galaxy collection install --offline -p %s %s  (rc %d)\n%s" % (collections, tarball.name, inst.returncode,
                                                                             (inst.stdout + inst.stderr).strip()))
    assert inst.returncode == 0, inst.stdout + inst.stderr
    assert (collections / "ansible_collections" / "dgxops" / "fleet" / "playbooks" / "site.yml").is_file(), inst.stdout
    return base, venv, collections


@pytest.fixture(scope="module")
def sim_inventory(installed):
    if not _docker_ok():
        if os.environ.get("CI"):
            pytest.fail("Docker engine not available in CI: scripts/bootstrap.sh should have started it")
        pytest.skip("no Docker engine (run scripts/bootstrap.sh)")
    from dgxops.sim.fleet import SimFleet, parse_layout

    base, _venv, _collections = installed
    work = base / "elsewhere"
    work.mkdir()
    fleet = SimFleet(FLEET)
    fleet.down()
    try:
        fleet.up(parse_layout("dgx-h100=1", fleet=FLEET))
        fleet.write_inventory(work / "sim.yml")  # what `dgxops sim up --inventory sim.yml` writes
        yield work
    finally:
        fleet.down()


def _user_env(installed, work):
    base, venv, collections = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "DGXOPS_", "VIRTUAL_ENV", "PYTHON"))}
    # the installed collection; community.docker (the simulated nodes' connection) from where bootstrap put it
    env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join([str(collections), sysconfig.get_paths()["purelib"]])
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/bin", env.get("PATH", "")])  # Debian's docker CLI first
    env["DGXOPS_STATE_DIR"] = str(base / "state")
    env["HOME"] = str(base / "home")
    return env


def test_installed_dgxops_runs_an_fqcn_playbook_from_another_directory(installed, sim_inventory):
    base, venv, _collections = installed
    work = sim_inventory
    assert not (work / "ansible.cfg").exists() and not str(work).startswith(ROOT)
    argv = [str(venv / "bin" / "dgxops"), "run", "dgxops.fleet.site", "--check", "-i", "sim.yml"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=work, env=_user_env(installed, work), capture_output=True, text=True, check=False, timeout=900)
    print("\n$ cd %s && %s  (rc %d, %.0f s)" % (work, " ".join(argv), proc.returncode, time.monotonic() - start))
    sys.stdout.write(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"^OK: status=successful rc=0, 1 host\(s\)", proc.stdout, re.M)
    # the package that ran is the installed one, not this checkout's
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import dgxops.runner as r; print(r.__file__)"],
                           cwd=work, env=_user_env(installed, work), capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv))


def test_readme_python_snippet_runs_as_written(installed, sim_inventory):
    """The README's Python block, unchanged, in the directory where `sim up --inventory sim.yml` wrote the
    inventory (after the site run above, so its spark run finds the cached GPU facts too)."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks and "sim.yml" in blocks[0]
    # this checkout's dgxops (with mitogen: the collection's faster strategy), the installed collection
    env = _user_env(installed, sim_inventory)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env["PATH"]])
    proc = subprocess.run([sys.executable, "-c", blocks[0]], cwd=sim_inventory, env=env,
                          capture_output=True, text=True, check=False, timeout=900)
    sys.stdout.write(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdicts = re.findall(r"^(OK|FAILED): status=", proc.stdout, re.M)
    assert verdicts == ["OK", "OK"], proc.stdout[-3000:]
