"""The attributes block the modules share lives once, in plugins/doc_fragments/attributes.py:
each module extends it and states only its support levels, and ansible-doc renders the merge."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
SHARED = ("check_mode", "diff_mode")


def _doc(name):
    tree = ast.parse((ROOT / "plugins" / "modules" / ("%s.py" % name)).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % name)


@pytest.mark.parametrize("name", MODULES)
def test_module_extends_the_attributes_fragment(name):
    doc = _doc(name)
    assert "dgxops.fleet.attributes" in doc.get("extends_documentation_fragment", []), name
    for attr in SHARED:
        own = doc["attributes"][attr]
        assert own["support"] in ("full", "partial", "none"), (name, attr)
        assert "description" not in own, "%s repeats the shared description of %s" % (name, attr)
    if "platform" in doc["attributes"]:
        assert "dgxops.fleet.attributes.platform" in doc["extends_documentation_fragment"], name
        assert "description" not in doc["attributes"]["platform"], name


def test_ansible_doc_renders_the_merged_attributes():
    fragment = yaml.safe_load(__import__(
        "ansible_collections.dgxops.fleet.plugins.doc_fragments.attributes", fromlist=["x"]).ModuleDocFragment.DOCUMENTATION)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "--json", "-t", "module"]
                          + ["dgxops.fleet.%s" % m for m in MODULES], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    rendered = json.loads(proc.stdout)
    assert sorted(rendered) == ["dgxops.fleet.%s" % m for m in MODULES]
    for name in MODULES:
        attrs = rendered["dgxops.fleet.%s" % name]["doc"]["attributes"]
        for attr in SHARED:
            assert attrs[attr]["description"] == fragment["attributes"][attr]["description"], (name, attr)
            assert attrs[attr]["support"] == _doc(name)["attributes"][attr]["support"], (name, attr)
        if "platform" in attrs:
            assert attrs["platform"]["platforms"] == "posix" and attrs["platform"]["support"] == "full", name
    facts = rendered["dgxops.fleet.nvidia_smi_facts"]["doc"]["attributes"]["facts"]
    assert facts["support"] == "full" and "ansible_facts" in facts["description"]
    assert rendered["dgxops.fleet.nvidia_gpu"]["doc"]["attributes"]["diff_mode"]["support"] == "full"
    assert rendered["dgxops.fleet.nvidia_smi_facts"]["doc"]["attributes"]["diff_mode"]["support"] == "none"
