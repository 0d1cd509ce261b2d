"""dgxops.fleet.docker: a `docker exec` that never returns (a paused container) is killed when
Ansible's task timeout fires and the host is reported unreachable, never waited on; a container
paused before the command is unreachable too. A stand-in `docker` CLI plays the frozen container."""

import os
import signal
import stat
import time

import pytest

from ansible.errors import AnsibleConnectionFailure
from ansible.playbook.play_context import PlayContext
import yaml
from ansible import constants as C

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

FAKE_DOCKER = """#!/bin/sh
# a stand-in docker CLI: exec hangs like one into a paused container (or answers as Docker does
# for a container paused before the exec); inspect says paused
case "$1" in
  exec)
    echo $$ > "{state}/exec.pid"
    case "$(cat "{state}/mode")" in
      hang) exec sleep 600 ;;
      paused) echo "Error response from daemon: Container $3 is paused, unpause the container before exec" >&2; exit 1 ;;
      *) cat; echo ran; exit 0 ;;
    esac ;;
  inspect) echo paused ;;
  version) echo 20.10.24 ;;
esac
"""


def _alarm_timeout(seconds):
    """Ansible's task timeout, as the task executor arms it around the action."""
    try:  # ansible-core 2.19+
        from ansible._internal._errors._task_timeout import TaskTimeoutError
    except ImportError:  # pragma: no cover
        pytest.skip("ansible-core without TaskTimeoutError")
    return TaskTimeoutError.alarm_timeout(seconds)


@pytest.fixture
def connection(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    docker = tmp_path / "docker"
    docker.write_text(FAKE_DOCKER.replace("{state}", str(state)))
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    from ansible_collections.dgxops.fleet.plugins.connection import docker as plugin

    # what Ansible's plugin loader does for the plugin: its documented options, under its name
    C.config.initialize_plugin_configuration_definitions(
        "connection", "dgxops.fleet.docker", yaml.safe_load(plugin.DOCUMENTATION)["options"])
    pc = PlayContext()
    pc.executable = "/bin/sh"
    conn = plugin.Connection(pc, None, docker_command=str(docker))
    conn._load_name = "dgxops.fleet.docker"
    conn.set_options(direct={"remote_addr": "node-7"})
    conn.set_become_plugin(None)
    return conn, state


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes
    with open("/proc/%d/stat" % pid) as f:
        return f.read().split(") ")[1][0] != "Z"


def test_a_command_that_answers_runs_as_before(connection):
    conn, state = connection
    (state / "mode").write_text("ok")
    rc, out, err = conn.exec_command("true", in_data=b"payload ")
    assert (rc, out, err) == (0, b"payload ran\n", b"")


def test_a_frozen_exec_is_killed_and_the_host_reported_unreachable_within_the_task_timeout(connection):
    conn, state = connection
    (state / "mode").write_text("hang")
    start = time.monotonic()
    with pytest.raises(AnsibleConnectionFailure) as exc, _alarm_timeout(2):
        conn.exec_command("sleep 1000")
    took = time.monotonic() - start
    assert 1.5 < took < 10, took
    assert str(exc.value) == (
        "node-7 did not answer within 2 s (the task timeout: task_timeout in ansible.cfg, ANSIBLE_TASK_TIMEOUT, "
        "the task's timeout keyword, dgxops run --task-timeout): docker exec into container node-7 had not "
        "returned; the container is paused (docker unpause node-7)")
    pid = int((state / "exec.pid").read_text())
    assert not _alive(pid), "the docker exec client was left waiting"
    # the action's clean-up (its temporary directory) is refused at once, not waited on
    (state / "mode").write_text("hang")
    start = time.monotonic()
    with pytest.raises(AnsibleConnectionFailure, match="node-7 did not answer within 2 s"):
        conn.exec_command("rm -rf /tmp/ansible-tmp")
    assert time.monotonic() - start < 1


def test_a_frozen_put_file_is_killed_too(connection, tmp_path):
    conn, state = connection
    (state / "mode").write_text("hang")
    src = tmp_path / "module.py"
    src.write_text("print(1)\n")
    with pytest.raises(AnsibleConnectionFailure, match="node-7 did not answer within 2 s"), _alarm_timeout(2):
        conn.put_file(str(src), "/tmp/module.py")
    assert not _alive(int((state / "exec.pid").read_text()))


def test_a_container_paused_before_the_command_is_unreachable(connection):
    conn, state = connection
    (state / "mode").write_text("paused")
    expected = r"^node-7 is paused: docker exec refused to run in it \(docker unpause node-7\): Error response from daemon"
    with pytest.raises(AnsibleConnectionFailure, match=expected):
        conn.exec_command("true")


def test_an_interrupt_is_not_turned_into_unreachable_but_the_client_is_killed(connection):
    conn, state = connection
    (state / "mode").write_text("hang")

    def interrupt(_sig, _frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.alarm(1)
        with pytest.raises(KeyboardInterrupt):
            conn.exec_command("sleep 1000")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert not _alive(int((state / "exec.pid").read_text()))


def test_without_community_docker_it_says_what_is_missing(monkeypatch):
    import importlib.util
    import sys

    from ansible.errors import AnsibleError

    monkeypatch.setitem(sys.modules, "ansible_collections.community.docker.plugins.connection.docker", None)
    path = os.path.join(ROOT, "plugins", "connection", "docker.py")
    spec = importlib.util.spec_from_file_location("dgxops_docker_without_community_docker", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.HAS_COMMUNITY_DOCKER is False
    with pytest.raises(AnsibleError, match="dgxops.fleet.docker needs the community.docker collection"):
        module.Connection(PlayContext(), None)
