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


def _steps(role, entry="main"):
    return yaml.safe_load((ROLES / role / "tasks" / ("%s.yml" % entry)).read_text())


@pytest.mark.parametrize("entry", ["main", "apply"])
@pytest.mark.parametrize("role", ROLE_NAMES)
def test_router_steps_are_imports_or_conditional_includes(role, entry):
    for step in _steps(role, entry):
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


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_main_is_the_validation_then_apply(role):
    """main = the role's own checks (skipped where site.yml's validate play ran them) + apply.yml;
    site.yml's plays enter at tasks_from: apply after their validate play, so apply.yml must hold
    everything but those checks, and have no argument spec of its own (Ansible would prepend a
    validation task to it)."""
    steps = _steps(role)
    checks, last = steps[:-1], steps[-1]
    assert last.get(IMPORT) == "apply.yml", "%s: main.yml must end by importing apply.yml" % role
    assert checks, "%s: main.yml has no validation step" % role
    for step in checks:
        assert "__dgxops_validation.roles" in str(step.get("when")), (
            "%s: %r runs on the apply entry point's hosts too: move it to apply.yml" % (role, step["name"]))
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert "main" in specs and "apply" not in specs, role


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_apply_never_enters_a_router_again(role):
    """apply.yml imports the role's concern files, never apply.yml or main.yml (an import of
    itself loops until Ansible gives up; mig's did once)."""
    for step in _steps(role, "apply"):
        target = step.get(IMPORT) or (step.get(INCLUDE) or {}).get("file")
        assert target not in ("apply.yml", "main.yml"), "%s: %r enters %s again" % (role, step["name"], target)
        assert (ROLES / role / "tasks" / target).is_file(), "%s: %r names a missing %s" % (role, step["name"], target)


def _include_roles(node):
    if isinstance(node, dict):
        if "ansible.builtin.include_role" in node:
            yield node["ansible.builtin.include_role"]
        for value in node.values():
            yield from _include_roles(value)
    elif isinstance(node, list):
        for value in node:
            yield from _include_roles(value)


def test_site_plays_enter_at_apply_after_the_validate_play():
    """Every playbook that includes a role's main entry point chooses apply once the validate
    play has validated that role for the host."""
    seen = set()
    for play in sorted((ROLES.parent / "playbooks").glob("*.yml")):
        for include in _include_roles(yaml.safe_load(play.read_text())):
            role = include["name"].rsplit(".", 1)[-1]
            tasks_from = include.get("tasks_from", "main")
            if tasks_from in ("main", "apply") or "apply" in tasks_from:
                assert tasks_from == "{{ 'apply' if '%s' in (__dgxops_validation.roles | default([])) else 'main' }}" % role, (
                    "%s includes %s at %r" % (play.name, role, tasks_from))
                seen.add(role)
    assert seen == set(ROLE_NAMES)


def test_every_role_is_checked():
    assert len(ROLE_NAMES) >= 9
