"""The collection builds, and ansible-builder creates an EE build context offline."""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def collection_tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    argv = [os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(out), ROOT]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = list(out.glob("dgxops-fleet-*.tar.gz"))
    # the evidence, in the test log (-s): the command, what it said, the tarball's size
    print("\n$ %s  (%.1f s)\n%s" % (" ".join(argv), time.monotonic() - start, proc.stdout.strip()))
    with tarfile.open(tarball) as tar:
        members = len(tar.getnames())
    print("tarball %s: %d bytes (%.1f KiB), %d members" % (tarball.name, tarball.stat().st_size, tarball.stat().st_size / 1024, members))
    return tarball


def test_collection_artifact_holds_content_not_tooling(collection_tarball):
    # built from this checkout after scripts/bootstrap.sh: .venv, .cache/wheels, .collections,
    # ansible.cfg and the generated simulated inventory are all here, and must stay out
    with tarfile.open(collection_tarball) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))
    assert manifest["collection_info"]["namespace"] == "dgxops"
    assert manifest["collection_info"]["name"] == "fleet"
    assert "plugins/action/validate.py" in names
    assert "roles/fleet_identity/tasks/main.yml" in names
    assert "meta/runtime.yml" in names and "playbooks/site.yml" in names
    dot = [n for n in names if any(part.startswith(".") for part in n.split("/"))]
    assert dot == []
    leaked = [n for n in names if n.split("/")[0] in ("tests", "src", "scripts", "extensions", "benchmarks", "ee", "ansible.cfg")
              or n.startswith("inventories/simulated") or "__pycache__" in n or n.endswith(".tar.gz")]
    assert leaked == []
    assert os.path.getsize(collection_tarball) < 1024 * 1024


def test_collection_depends_only_on_what_its_content_uses(collection_tarball):
    import re

    used = set()
    optional = set()  # imported only in try/except ImportError, the plugin naming what is missing
    with tarfile.open(collection_tarball) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        for m in tar.getmembers():
            if not m.isfile():
                continue
            text = tar.extractfile(m).read().decode("utf-8", "replace")
            if m.name.endswith(".py"):  # plugins importing another collection's code
                used |= {"%s.%s" % g for g in re.findall(r"ansible_collections\.([a-z_]+)\.([a-z_]+)\.", text)}
                for block in re.findall(r"(?ms)^try:\n(.*?)^except ImportError", text):
                    optional |= {"%s.%s" % g for g in re.findall(r"ansible_collections\.([a-z_]+)\.([a-z_]+)\.", block)}
            elif m.name.endswith((".yml", ".yaml", ".j2")) and m.name.split("/")[0] in ("roles", "playbooks", "site.yml"):
                # tasks (module keys), filters/lookups/tests by FQCN in expressions
                used |= set(re.findall(r"(?m)^\s*(?:-\s+)?([a-z_]+\.[a-z_]+)\.[a-z_0-9]+:", text))
                used |= set(re.findall(r"[|(\s'\"]([a-z_]+\.[a-z_]+)\.[a-z_0-9]+\b(?!\.)", text))
    used = {u for u in used if u not in ("dgxops.fleet", "ansible.builtin", "ansible.legacy") and
            u.split(".")[0] in ("community", "ansible", "containers", "kubernetes", "cisco", "amazon")}
    declared = set(manifest["collection_info"]["dependencies"])
    assert declared == used - optional, "declared %s, used %s" % (sorted(declared), sorted(used - optional))
    # optional ones (dgxops.fleet.docker: community.docker) are named in the README's dependencies
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert all("`%s`" % o in readme for o in optional), optional


def test_collection_installs_offline(tmp_path, collection_tarball):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    argv = [os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "-p", str(tmp_path), str(collection_tarball)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, cwd=tmp_path)
    print("\n$ %s  (rc %d)\n%s" % (" ".join(argv), proc.returncode, (proc.stdout + proc.stderr).strip()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "ansible_collections" / "dgxops" / "fleet" / "roles" / "nccl" / "tasks" / "main.yml").is_file()


def test_ee_names_the_tarball_the_build_makes():
    """ee/requirements.yml installs the tarball `ansible-galaxy collection build` names after galaxy.yml's version."""
    import yaml

    version = yaml.safe_load(open(os.path.join(ROOT, "galaxy.yml")))["version"]
    reqs = yaml.safe_load(open(os.path.join(ROOT, "ee", "requirements.yml")))["collections"]
    assert reqs == [{"name": "collections/dgxops-fleet-%s.tar.gz" % version, "type": "file"}]


def test_ansible_builder_context_installs_the_built_tarball(tmp_path, collection_tarball):
    """The documented steps, as they are: the tarball built into ee/collections reaches the stage
    that installs it (the galaxy stage copies _build/ to /build, where requirements.yml points)."""
    shutil.copy(os.path.join(ROOT, "execution-environment.yml"), tmp_path)
    shutil.copytree(os.path.join(ROOT, "ee"), tmp_path / "ee", ignore=shutil.ignore_patterns("context", "collections"))
    (tmp_path / "ee" / "collections").mkdir()
    shutil.copy(collection_tarball, tmp_path / "ee" / "collections")  # the versioned name, not renamed
    proc = subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
                           "--context", "context", "--output-filename", "Containerfile"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert 'ANSIBLE_GALAXY_CLI_COLLECTION_OPTS="--offline"' in containerfile
    galaxy_stage = containerfile.split("FROM base AS galaxy")[1].split("FROM ")[0]
    assert "COPY _build /build" in galaxy_stage and "-r requirements.yml" in galaxy_stage
    assert "COPY --from=galaxy /usr/share/ansible /usr/share/ansible" in containerfile.split("AS final")[1]
    built = tmp_path / "context" / "_build"
    req = (built / "requirements.yml").read_text()
    name = [line.split("name:")[1].strip() for line in req.splitlines() if "name:" in line][0]
    assert (built / name).is_file(), "requirements.yml names %s, the context has %s" % (name, os.listdir(built / "collections"))
    assert "ansible-core==2.19." in containerfile and "ansible-runner==2.4." in containerfile  # pinned
