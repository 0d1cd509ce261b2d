"""One nvidia_smi_path option, resolved the same way in every module (PATH first, then the usual places)."""

import ast
import os
import re

import pytest
from ansible.module_utils.common.process import get_bin_path

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi as N

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULES = os.path.join(ROOT, "plugins", "modules")


def _exe(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


class Module(object):
    """AnsibleModule.get_bin_path without the rest of AnsibleModule (required=False: None when not found)."""

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        try:
            return get_bin_path(arg, opt_dirs=opt_dirs)
        except ValueError:
            return None


def test_path_comes_first_then_the_usual_directories(tmp_path, monkeypatch):
    on_path = _exe(tmp_path / "path" / "nvidia-smi")
    usual = _exe(tmp_path / "usr-local-bin" / "nvidia-smi")
    monkeypatch.setattr(N, "NVIDIA_SMI_DIRS", (str(tmp_path / "usr-local-bin"),))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert N.find_nvidia_smi(Module()) == on_path  # PATH before the usual directories
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert N.find_nvidia_smi(Module()) == usual
    assert N.find_nvidia_smi(Module(), "/opt/x/nvidia-smi") == "/opt/x/nvidia-smi"
    (tmp_path / "usr-local-bin" / "nvidia-smi").chmod(0o644)  # not executable: not a hit
    assert N.find_nvidia_smi(Module()) is None


def test_usual_directories_include_the_driver_and_container_locations():
    assert N.NVIDIA_SMI_DIRS[:3] == ("/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin")


def _argument_spec_keys(path):
    """Option names (and whether they use the shared spec) of a module's AnsibleModule(argument_spec=dict(...))."""
    tree = ast.parse(open(path).read())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec" and isinstance(node.value, ast.Call):
            for kw in node.value.keywords:
                found[kw.arg] = ast.unparse(kw.value)
    return found


def _runs_nvidia_smi(source):
    return "NvidiaSmi(" in source or "find_nvidia_smi(" in source or "smi.gather(" in source


@pytest.mark.parametrize("module", sorted(m for m in os.listdir(MODULES) if m.endswith(".py")))
def test_every_module_that_runs_nvidia_smi_has_the_one_option(module):
    path = os.path.join(MODULES, module)
    source = open(path).read()
    spec = _argument_spec_keys(path)
    runs_smi = _runs_nvidia_smi(source)
    # or through the module_utils it imports (nvidia_mig: mig_state's Runner)
    for used in re.findall(r"plugins\.module_utils\.(\w+) import", source):
        with open(os.path.join(ROOT, "plugins", "module_utils", used + ".py")) as fh:
            runs_smi = runs_smi or (used != "nvidia_smi" and _runs_nvidia_smi(fh.read()))
    if not runs_smi:
        assert "nvidia_smi_path" not in spec and "nvidia_smi" not in spec
        return
    assert "nvidia_smi" not in spec, "the old option name is an alias now"
    assert spec.get("nvidia_smi_path", "").endswith("NVIDIA_SMI_PATH_SPEC)"), spec.get("nvidia_smi_path")
