"""The collection builds, and ansible-builder creates an EE build context offline."""

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


@pytest.fixture(scope="module")
def collection_tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    proc = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(out), ROOT],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (tarball,) = list(out.glob("dgxops-fleet-*.tar.gz"))
    return tarball


def test_collection_artifact_holds_content_not_tooling(collection_tarball):
    with tarfile.open(collection_tarball) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile("MANIFEST.json"))
    assert manifest["collection_info"]["namespace"] == "dgxops"
    assert manifest["collection_info"]["name"] == "fleet"
    assert set(manifest["collection_info"]["dependencies"]) == {"ansible.posix", "community.general"}
    assert "plugins/action/validate.py" in names
    assert "roles/fleet_identity/tasks/main.yml" in names
    assert "meta/runtime.yml" in names
    leaked = [n for n in names if n.split("/")[0] in ("tests", "src", "scripts", "extensions", ".collections", ".ci", "benchmarks")]
    assert leaked == []


def test_ansible_builder_creates_context_offline(tmp_path, collection_tarball):
    shutil.copy(os.path.join(ROOT, "execution-environment.yml"), tmp_path)
    shutil.copytree(os.path.join(ROOT, "ee"), tmp_path / "ee", ignore=shutil.ignore_patterns("context", "*.tar.gz"))
    shutil.copy(collection_tarball, tmp_path / "ee" / "dgxops-fleet.tar.gz")
    proc = subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
                           "--context", "context", "--output-filename", "Containerfile"],
                          cwd=tmp_path, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert 'ARG EE_BASE_IMAGE="quay.io/ansible/awx-ee:24.6.1"' in containerfile
    assert "ansible-galaxy collection install --offline /build/collections/dgxops-fleet.tar.gz" in containerfile
    assert (tmp_path / "context" / "_build" / "collections" / "dgxops-fleet.tar.gz").exists()
    reqs = (tmp_path / "context" / "_build" / "requirements.yml").read_text()
    assert "community.general" in reqs and "ansible.posix" in reqs
