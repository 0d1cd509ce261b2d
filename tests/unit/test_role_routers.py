"""One router style in every role's tasks/main.yml (issue 23 item 4/5).

A step that always runs is an import_tasks (static: it costs no task on a host); a conditional
group is one include_tasks with its `when` (a host that does not need the group pays one skipped
task) and `apply: tags` equal to its own tags, so `--tags <role>_<part>` selects the included
tasks too. Every step carries the role's tag first."""

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "tasks" / "main.yml").is_file())
INCLUDE = "ansible.builtin.include_tasks"
IMPORT = "ansible.builtin.import_tasks"


def _steps(role):
    return yaml.safe_load((ROLES / role / "tasks" / "main.yml").read_text())


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_router_steps_are_imports_or_conditional_includes(role):
    for step in _steps(role):
        actions = {INCLUDE, IMPORT} & set(step)
        assert len(actions) == 1, "%s: %r is neither an import_tasks nor an include_tasks" % (role, step["name"])
        assert set(step) <= {"name", "when", "tags", INCLUDE, IMPORT}, "%s: %r has %s" % (
            role, step["name"], sorted(set(step) - {"name", "when", "tags", INCLUDE, IMPORT}))
        tags = step.get("tags")
        assert isinstance(tags, list) and tags[0] == role, "%s: %r must be tagged [%s, ...]" % (role, step["name"], role)
        if INCLUDE in step:
            include = step[INCLUDE]
            assert "when" in step, "%s: %r includes unconditionally (use import_tasks)" % (role, step["name"])
            assert isinstance(include, dict) and include.get("apply", {}).get("tags") == tags, (
                "%s: %r must apply its own tags to the included tasks" % (role, step["name"]))
        else:
            assert isinstance(step[IMPORT], str) and "when" not in step, (
                "%s: %r imports with a condition (use one include_tasks with the when)" % (role, step["name"]))


def test_every_role_is_checked():
    assert len(ROLE_NAMES) >= 9
