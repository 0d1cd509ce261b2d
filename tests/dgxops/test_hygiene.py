"""Repository hygiene CI checks: yamllint on the whole tree, changelog lint, version_added on
every role and plugin, fragments that leave new-module/role announcements to antsibull-changelog,
and a .gitignore that ignores no tracked file."""

import ast
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))
ROLES = sorted(os.listdir(os.path.join(ROOT, "roles")))


def test_yamllint_whole_tree():
    proc = subprocess.run([os.path.join(BIN, "yamllint"), "--strict", "."], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_antsibull_changelog_lint():
    proc = subprocess.run([os.path.join(BIN, "antsibull-changelog"), "lint"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def _doc(path):
    tree = ast.parse(open(path).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    return None


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "plugins", "*", "*.py"))), ids=os.path.basename)
def test_plugins_say_version_added(path):
    doc = _doc(path)
    if doc is None:  # action plugins, doc fragments and module_utils document through their module / not at all
        assert "/doc_fragments/" in path or "/module_utils/" in path or "/plugin_utils/" in path or "/action/" in path or "/filter/" in path, "%s has no DOCUMENTATION" % path
        return
    assert doc.get("version_added"), "%s: DOCUMENTATION has no version_added" % path


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml"))), ids=os.path.basename)
def test_filter_docs_say_version_added(path):
    assert yaml.safe_load(open(path))["DOCUMENTATION"].get("version_added")


@pytest.mark.parametrize("role", ROLES)
def test_roles_say_version_added(role):
    specs = yaml.safe_load(open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")))["argument_specs"]
    # antsibull-changelog announces a new role from its main entry point's version_added
    assert specs["main"].get("version_added"), role


def test_fragments_leave_new_plugin_announcements_to_antsibull():
    """antsibull-changelog lists new modules, plugins and roles itself (from version_added):
    a fragment saying "X - new module/role" repeats it in the release notes."""
    announced = re.compile(r"^([\w.]+) - new (module|role|plugin|strategy|filter|controller-side action)\b")
    repeats = []
    for path in glob.glob(os.path.join(ROOT, "changelogs", "fragments", "*.y*ml")):
        for _section, entries in (yaml.safe_load(open(path)) or {}).items():
            for entry in entries if isinstance(entries, list) else []:
                m = announced.match(entry.strip())
                if m and m.group(1).split(".")[-1] in MODULES + ROLES + ["mitogen_linear", "spark_properties_line"]:
                    repeats.append("%s: %s" % (os.path.basename(path), entry[:60]))
    assert repeats == []


def test_gitignore_ignores_no_tracked_file():
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")) or not shutil.which("git"):
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=ROOT, input=tracked,
                             capture_output=True, text=True, check=False).stdout.split()
    assert ignored == []
    # what antsibull-changelog writes is meant to be committed
    for path in ("changelogs/changelog.yaml", "changelogs/.plugin-cache.yaml", "CHANGELOG.rst", "changelogs/fragments/x.yml"):
        proc = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, check=False)
        assert proc.returncode == 1, "%s is ignored" % path
