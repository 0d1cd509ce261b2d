"""Every role's public API: defaults/main.yml and meta/argument_specs.yml agree, and the
`validate` entry point (what site.yml's validate play runs) checks the same options as `main`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").is_file())


def _load(role: str):
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    return specs, defaults


def test_every_role_is_covered():
    assert {"gpu_tuning", "nccl", "storage_tuning", "spark_rapids", "mig", "tenant_isolation"} <= set(ROLE_NAMES)


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_defaults_and_main_spec_agree(role):
    specs, defaults = _load(role)
    options = specs["main"]["options"]
    assert set(defaults) == set(options), "defaults and argument specs list different variables"
    for name, value in defaults.items():
        assert name.startswith(role + "_"), "%s is not prefixed with the role name" % name
        assert "description" in options[name], "%s has no description" % name
        if "default" in options[name]:
            assert options[name]["default"] == value, "%s: default differs from defaults/main.yml" % name


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_validate_entry_point_checks_the_main_options(role):
    specs, _defaults = _load(role)
    assert "validate" in specs, "the roles' validate entry point (tasks_from: validate) checks what site.yml's validate play checks"
    assert specs["validate"]["options"] == specs["main"]["options"]
    assert (ROLES / role / "tasks" / "validate.yml").is_file()


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_main_skips_only_what_the_validate_play_ran(role):
    main = yaml.safe_load((ROLES / role / "tasks" / "main.yml").read_text())
    first = main[0]
    include = first.get("ansible.builtin.include_tasks")
    assert include is not None, "validation must come first, as an include that can be skipped"
    assert (include if isinstance(include, str) else include["file"]) == "validate.yml"
    assert first["when"] == "'%s' not in (__dgxops_validation.roles | default([]))" % role
