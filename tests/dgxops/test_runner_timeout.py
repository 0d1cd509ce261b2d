"""dgxops run --task-timeout: ANSIBLE_TASK_TIMEOUT for the run, a timed-out task reported as an unreachable host."""

import pytest

from dgxops.cli import DEFAULT_TASK_TIMEOUT, build_parser
from dgxops.runner import PlaybookRun, _Collector, build_runner_kwargs, task_timeout_env


def test_task_timeout_goes_to_the_environment(tmp_path):
    kwargs = build_runner_kwargs(PlaybookRun("site.yml", task_timeout=45), str(tmp_path))
    assert kwargs["envvars"]["ANSIBLE_TASK_TIMEOUT"] == "45"
    assert "ANSIBLE_TASK_TIMEOUT" not in build_runner_kwargs(PlaybookRun("site.yml"), str(tmp_path))["envvars"]


@pytest.mark.parametrize("bad", [-1, "10", 1.5, True])
def test_bad_task_timeout_is_refused(bad):
    with pytest.raises(ValueError, match="task_timeout must be a whole number"):
        task_timeout_env(bad)


def test_cli_default_and_option():
    parser = build_parser()
    assert parser.parse_args(["run", "site.yml"]).task_timeout == DEFAULT_TASK_TIMEOUT == 1200
    assert parser.parse_args(["check", "--task-timeout", "30"]).task_timeout == 30


def test_a_timed_out_task_is_reported_as_unreachable():
    collector = _Collector(None)
    collector({"event": "runner_on_failed", "event_data": {
        "host": "n1", "task": "Long step", "res": {"msg": "Timed out after 20 second(s)."}}})
    collector({"event": "runner_on_failed", "event_data": {
        "host": "n2", "task": "Other", "res": {"msg": "boom"}}})
    first, second = collector.failures
    assert first.unreachable and first.msg.startswith("Timed out after 20 second(s).: the host did not answer")
    assert not second.unreachable
