"""One verifier style in molecule (issue 23 item 4): every scenario under extensions/molecule/
verifies with testinfra, tests/test_<scenario>.py inside the scenario, and has no Ansible
verify.yml (nor a verify playbook of another name). Molecule 26 deep-merges each scenario's
molecule.yml over extensions/molecule/config.yml; the checks read the merged configuration."""

from pathlib import Path

import pytest
import yaml

MOLECULE = Path(__file__).resolve().parents[2] / "extensions" / "molecule"
SCENARIOS = sorted(p.parent.name for p in MOLECULE.glob("*/molecule.yml"))


def _merge(base, over):
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _config(scenario):
    base = yaml.safe_load((MOLECULE / "config.yml").read_text())
    return _merge(base, yaml.safe_load((MOLECULE / scenario / "molecule.yml").read_text()) or {})


def test_scenarios_are_found():
    # the collection's scenarios, the shared create/destroy playbooks excluded
    assert len(SCENARIOS) >= 11 and "shared" not in SCENARIOS, SCENARIOS
    assert {"mig", "tenant_isolation", "gpu_tuning", "nvidia_driver"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_verifies_with_testinfra(scenario):
    config = _config(scenario)
    assert config["verifier"]["name"] == "testinfra", "%s: verifier %r" % (scenario, config["verifier"])
    assert "verify" in config["scenario"]["test_sequence"], scenario
    # no Ansible verify playbook, under the default name or another one
    assert not (MOLECULE / scenario / "verify.yml").exists(), "%s: verify.yml (use tests/test_*.py)" % scenario
    assert "verify" not in config["provisioner"].get("playbooks", {}), scenario


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_has_its_testinfra_tests(scenario):
    tests = MOLECULE / scenario / _config(scenario)["verifier"].get("directory", "tests")
    own = tests / ("test_%s.py" % scenario)
    assert own.is_file(), "%s: no %s" % (scenario, own.relative_to(MOLECULE))
    for path in tests.glob("test_*.py"):
        text = path.read_text()
        assert "\ndef test_" in text and "(host" in text, "%s: no testinfra test (def test_...(host...)) in %s" % (
            scenario, path.name)
