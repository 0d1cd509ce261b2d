"""Controller code lives in plugins/plugin_utils, node code in plugins/module_utils.

A module_utils file must be reachable from a module (what Ansible ships to a node) or copied to
nodes by a role (node scripts); a file imported only by controller code belongs in plugin_utils.
The validate action reaches its validators through an explicit map, not a string-built import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = ROOT / "plugins"
PREFIX = "ansible_collections.dgxops.fleet.plugins."


def _imports(path: Path) -> set[tuple[str, str]]:
    """(subpackage, name) of every dgxops.fleet plugins module a file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
            rest = node.module[len(PREFIX):].split(".")
            if len(rest) == 1:  # from ...plugins.module_utils import a, b
                found.update((rest[0], alias.name) for alias in node.names)
            else:  # from ...plugins.module_utils.a import x
                found.add((rest[0], rest[1]))
    return found


def _node_module_utils() -> set[str]:
    """module_utils names reachable from the modules or copied to nodes by a role."""
    todo = []
    for module in (PLUGINS / "modules").glob("*.py"):
        todo.extend(name for sub, name in _imports(module) if sub == "module_utils")
    for path in (ROOT / "roles").glob("*/tasks/*.yml"):
        text = path.read_text()
        if "module_utils" in text:
            todo.extend(re.findall(r"\b([a-z_]+)\.py\b", text))
    seen = set()
    while todo:
        name = todo.pop()
        src = PLUGINS / "module_utils" / (name + ".py")
        if name in seen or not src.is_file():
            continue
        seen.add(name)
        todo.extend(n for sub, n in _imports(src) if sub == "module_utils")
    return seen


def test_module_utils_holds_only_node_code():
    present = {p.stem for p in (PLUGINS / "module_utils").glob("*.py") if p.stem != "__init__"}
    controller_only = present - _node_module_utils()
    assert not controller_only, "imported only by controller code: move to plugins/plugin_utils: %s" % sorted(controller_only)


def test_controller_code_reaches_module_utils_only_through_plugin_utils():
    for sub in ("action", "filter", "strategy"):
        for path in (PLUGINS / sub).glob("*.py"):
            uses = {name for s, name in _imports(path) if s == "module_utils"}
            # oserror: the strategy plugin explains a worker's OSError like the modules do
            assert uses <= {"oserror"}, "%s imports module_utils %s directly" % (path.relative_to(ROOT), sorted(uses))


def test_validators_are_loaded_through_an_explicit_map():
    from ansible_collections.dgxops.fleet.plugins.action import validate as action

    source = (PLUGINS / "action" / "validate.py").read_text()
    assert "importlib" not in source and "__import__" not in source
    validators = {p.stem[len("validate_"):] for p in (PLUGINS / "plugin_utils").glob("validate_*.py")
                  if "\ndef validate(" in p.read_text()}
    assert set(action.VALIDATORS) == validators
    for area, module in action.VALIDATORS.items():
        assert module.__name__ == PREFIX + "plugin_utils.validate_" + area
