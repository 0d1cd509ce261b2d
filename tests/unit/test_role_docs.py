"""Role READMEs' variable tables are generated from meta/argument_specs.yml
(scripts/gen_role_docs.py) and CI fails when one is out of date."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gen_role_docs", ROOT / "scripts" / "gen_role_docs.py")
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)
ROLES = [p.name for p in gen.roles()]


def test_every_role_readme_is_up_to_date(capsys):
    assert gen.main(["--check"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("role", ROLES)
def test_readme_lists_every_variable_of_the_argument_specs(role):
    readme = (ROOT / "roles" / role / "README.md").read_text()
    assert readme.count(gen.BEGIN) == 1 and readme.count(gen.END) == 1
    section = readme[readme.index(gen.BEGIN):readme.index(gen.END)]
    options = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    rows = [line.split(" | ")[0].strip("| `") for line in section.splitlines() if line.startswith("| `")]
    assert [r for r in rows if "." not in r] == list(options)


def _copy(tmp_path, role="nccl"):
    (tmp_path / "roles").mkdir()
    shutil.copytree(ROOT / "roles" / role, tmp_path / "roles" / role)
    return tmp_path / "roles" / role


def test_check_fails_when_a_description_changes_and_write_fixes_it(tmp_path, capsys):
    role = _copy(tmp_path)
    specs = role / "meta" / "argument_specs.yml"
    specs.write_text(specs.read_text().replace("Manage the NCCL configuration file.", "Manage /etc/nccl.conf | the file."))
    before = (role / "README.md").read_text()
    assert gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert "roles/nccl/README.md: out of date" in capsys.readouterr().out
    assert (role / "README.md").read_text() == before  # --check writes nothing
    assert gen.main(["--root", str(tmp_path)]) == 0
    after = (role / "README.md").read_text()
    assert "| `nccl_conf_enabled` | bool | `true` | Manage /etc/nccl.conf \\| the file. |" in after
    # everything outside the markers is kept byte for byte
    assert after[:after.index(gen.BEGIN)] == before[:before.index(gen.BEGIN)]
    assert after[after.index(gen.END):] == before[before.index(gen.END):]
    assert gen.main(["--check", "--root", str(tmp_path)]) == 0


def test_readme_without_markers_gets_a_variables_section(tmp_path):
    role = _copy(tmp_path, "fleet_identity")
    (role / "README.md").write_text("# dgxops.fleet.fleet_identity\n\nHand-written text.\n")
    assert gen.main(["--root", str(tmp_path)]) == 0
    text = (role / "README.md").read_text()
    assert text.startswith("# dgxops.fleet.fleet_identity\n\nHand-written text.\n\n## Variables\n\n" + gen.BEGIN)
    assert "| `fleet_identity_node_role` | str | `compute` | What the node does in the fleet. Choices: `compute`," in text


def test_unbalanced_markers_are_refused(tmp_path):
    role = _copy(tmp_path)
    text = (role / "README.md").read_text()
    (role / "README.md").write_text(text.replace(gen.END, ""))
    assert gen.main(["--check", "--root", str(tmp_path)]) == 2


@pytest.mark.parametrize("doc, md", [
    ("C(x) and O(nccl_settings) and V(true)", "`x` and `nccl_settings` and `true`"),
    ("I(warn) B(never) L(guide,https://example.org)", "*warn* **never** [guide](https://example.org)"),
    ("vars/<platform>.yml but C(<dir>/topo.xml)", "vars/&lt;platform&gt;.yml but `<dir>/topo.xml`"),
])
def test_ansible_markup_becomes_markdown(doc, md):
    assert gen.markdown(doc) == md
