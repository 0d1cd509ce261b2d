"""The ansible-runner wrapper: argument building, and a real run on localhost."""

import os
import sys

from dgxops import runner
from dgxops.runner import PlaybookRun


def test_build_kwargs_is_explicit(tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path / "state"))
    spec = PlaybookRun("site.yml", inventory="inventories/simulated/hosts.yml", check=True, diff=True,
                       limit="dgx_h100", tags="nccl", extravars={"a": 1}, forks=4, cwd=str(runner.ROOT))
    kw = runner.build_runner_kwargs(spec, str(tmp_path))
    assert kw["private_data_dir"] == str(tmp_path)
    assert kw["project_dir"] == str(runner.ROOT)
    assert kw["playbook"] == str(runner.ROOT / "site.yml")
    assert kw["inventory"] == [str(runner.ROOT / "inventories/simulated/hosts.yml")]
    assert kw["cmdline"] == "--check --diff"
    assert kw["limit"] == "dgx_h100" and kw["tags"] == "nccl" and kw["forks"] == 4
    assert kw["extravars"] == {"a": 1}
    # Ansible finds ./ansible.cfg itself (the checkout's here), and its fact cache is used
    assert "ANSIBLE_CONFIG" not in kw["envvars"] and "ANSIBLE_CACHE_PLUGIN" not in kw["envvars"]
    assert kw["fact_cache_type"] != "jsonfile"  # not ansible-runner's per-run cache
    assert kw["envvars"]["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    assert kw["artifact_dir"] == str(tmp_path / "state" / "runs") and kw["rotate_artifacts"] == 0  # see prune_runs
    assert "verbosity" not in kw and "timeout" not in kw


def test_paths_resolve_from_the_callers_directory_and_fqcn_playbooks_pass(tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yml").write_text("[]\n")
    kw = runner.build_runner_kwargs(PlaybookRun("mine.yml", inventory="inv"), str(tmp_path / "p"))
    assert kw["playbook"] == str(tmp_path / "mine.yml") and kw["inventory"] == [str(tmp_path / "inv")]
    assert kw["project_dir"] == str(tmp_path)
    kw = runner.build_runner_kwargs(PlaybookRun("dgxops.fleet.site"), str(tmp_path / "p"))
    assert kw["playbook"] == "dgxops.fleet.site"
    # no ansible.cfg anywhere: the wrapper's shared fact cache, and the checkout's config only on request
    assert kw["envvars"]["ANSIBLE_CACHE_PLUGIN"] == "jsonfile"
    kw = runner.build_runner_kwargs(PlaybookRun("mine.yml", project_config=True), str(tmp_path / "p"))
    assert kw["envvars"]["ANSIBLE_CONFIG"] == str(runner.ROOT / "ansible.cfg")
    assert "ANSIBLE_CACHE_PLUGIN" not in kw["envvars"]  # the checkout's ansible.cfg names a cache


def _playbook(tmp_path, body):
    path = tmp_path / "play.yml"
    path.write_text(body)
    return str(path)


def test_real_run_reports_changes_and_failures(tmp_path):
    marker = tmp_path / "marker"
    play = _playbook(tmp_path, f"""
- name: Wrapper test
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Create a file
      ansible.builtin.copy:
        content: "x"
        dest: "{marker}"
        mode: "0644"
    - name: Fail on purpose
      ansible.builtin.fail:
        msg: "boom {{{{ reason }}}}"
""")
    seen = []
    result = runner.run_playbook(PlaybookRun(play, inventory="localhost,", extravars={"reason": "on purpose"}),
                                 progress=seen.append)
    assert marker.read_text() == "x"
    assert result.status == "failed" and not result.ok
    assert result.hosts["localhost"]["changed"] == 1
    assert result.hosts["localhost"]["failures"] == 1
    assert [(f.host, f.task, f.msg) for f in result.failures] == [("localhost", "Fail on purpose", "boom on purpose")]
    assert ("localhost", "Create a file") in result.changed_tasks
    kinds = [(e.kind, e.text) for e in seen]
    assert ("task", "Create a file") in kinds and ("changed", "Create a file") in kinds
    assert ("failed", "Fail on purpose") in kinds
    text = result.summary()
    assert "FAILED" in text and "boom on purpose" in text


def test_second_run_is_reported_unchanged(tmp_path):
    marker = tmp_path / "m"
    play = _playbook(tmp_path, f"""
- name: Idempotent
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Create a file
      ansible.builtin.copy:
        content: "y"
        dest: "{marker}"
        mode: "0644"
""")
    first = runner.run_playbook(PlaybookRun(play, inventory="localhost,"))
    second = runner.run_playbook(PlaybookRun(play, inventory="localhost,", check=True, strategy="linear"))
    assert first.ok and first.changed == 1
    assert second.ok and second.changed == 0
    assert second.summary().startswith("HOST")
    # the result says which strategy ran: auto picks the collection's mitogen_linear where mitogen is installed
    expected = "dgxops.fleet.mitogen_linear" if runner.mitogen_installed() else "linear"
    assert first.strategy == expected and first.as_dict()["strategy"] == expected
    assert first.summary().splitlines()[-2].endswith("strategy " + expected)
    assert second.strategy == "linear" and second.summary().splitlines()[-2].endswith("strategy linear")
    assert first.summary().splitlines()[-1] == "artifacts: %s" % first.artifact_dir


def test_progress_printer_one_line_per_task():
    import io

    from dgxops.runner import Progress, ProgressPrinter

    out = io.StringIO()
    printer = ProgressPrinter(out)
    for event in [Progress("play", "Site"), Progress("task", "Render"), Progress("ok", "Render", "a"),
                  Progress("changed", "Render", "b"), Progress("task", "Check"), Progress("failed", "Check", "b"),
                  Progress("end", "")]:
        printer(event)
    lines = out.getvalue().splitlines()
    assert lines[1] == "PLAY Site"
    assert lines[2].split()[:3] == ["[", "1]", "Render"] and lines[2].rstrip().endswith("ok=1 changed=1")
    assert lines[3].strip() == "changed: b"
    assert "[  2] Check" in lines[4] and lines[4].rstrip().endswith("failed=1")
    assert lines[5].strip() == "failed: b"


def test_strategy_selection(monkeypatch):
    monkeypatch.setattr(runner, "mitogen_installed", lambda: True)
    assert runner.strategy_env("auto") == {"ANSIBLE_STRATEGY": "dgxops.fleet.mitogen_linear"}
    assert runner.strategy_env("mitogen") == {"ANSIBLE_STRATEGY": "dgxops.fleet.mitogen_linear"}
    # explicit, so a caller's ANSIBLE_STRATEGY (ansible-runner starts from os.environ) cannot win
    assert runner.strategy_env("linear") == {"ANSIBLE_STRATEGY": "linear"}
    monkeypatch.setattr(runner, "mitogen_installed", lambda: False)
    assert runner.strategy_env("auto") == {"ANSIBLE_STRATEGY": "linear"}
    import pytest

    with pytest.raises(ValueError, match="mitogen is not installed"):
        runner.strategy_env("mitogen")
    with pytest.raises(ValueError, match="strategy must be"):
        runner.strategy_env("fast")


def test_inventory_sources_host_lists_stay_and_empty_entries_are_refused():
    import pytest

    kw = runner.build_runner_kwargs(PlaybookRun("x.yml", inventory=["localhost,", "a,b", "inventories/example", "/abs/hosts"],
                                                cwd=str(runner.ROOT)), "/tmp/x")
    assert kw["inventory"] == ["localhost,", "a,b", str(runner.ROOT / "inventories/example"), "/abs/hosts"]
    # an empty entry would resolve to the checkout, whose executables Ansible would run with --list
    for bad in ("", "  "):
        with pytest.raises(ValueError, match="inventory: an empty entry"):
            runner.build_runner_kwargs(PlaybookRun("x.yml", inventory=[bad]), "/tmp/x")
