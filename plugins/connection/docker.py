# -*- coding: utf-8 -*-
# Copyright (c) dgxops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: docker
version_added: 0.1.0
short_description: community.docker's docker connection that never waits on a frozen container
description:
  - The P(community.docker.docker#connection) connection (the Docker CLI, C(docker exec)) with one
    change. A container that is frozen (C(docker pause), or a cgroup freeze) is reported
    B(unreachable) within Ansible's task timeout, and the other hosts go on.
  - Ansible's task timeout (C(task_timeout) in C(ansible.cfg), E(ANSIBLE_TASK_TIMEOUT), the task's
    C(timeout) keyword) raises in the worker while C(docker exec) waits on the frozen container.
    community.docker 5.x runs C(docker exec) in a C(with subprocess.Popen(...)) block, so that
    exception then waits in C(Popen.__exit__) for a client that never exits, and the run hangs.
    Here the C(docker exec) client is killed instead, and the host is reported unreachable with
    the timeout and the container's state. Later commands on that connection (the task's temporary
    directory clean-up) are refused at once.
  - C(docker exec) into a container that is already paused fails at once ("is paused, unpause
    the container before exec"); that is reported unreachable too, not as a module failure.
  - Without a task timeout nothing bounds a command, as with community.docker's plugin. The
    collection's C(ansible.cfg) sets C(task_timeout = 1200), the C(dgxops run) default.
  - Under the C(dgxops.fleet.mitogen_linear) strategy this connection is run by Mitogen's own
    docker connection, as C(docker) is.
  - Options are community.docker's (5.4.0), read the same way.
author:
  - dgxops maintainers (@dgxops)
requirements:
  - the community.docker collection on the controller, and the Docker CLI
notes:
  - A command that asks for a C(become) password runs through community.docker's own code, which
    bounds the prompt exchange by O(container_timeout) but not a freeze after it.
options:
  remote_addr:
    description:
      - The name of the container you want to access.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_docker_host
  remote_user:
    description:
      - The user to execute as inside the container.
    vars:
      - name: ansible_user
      - name: ansible_docker_user
    ini:
      - section: defaults
        key: remote_user
    env:
      - name: ANSIBLE_REMOTE_USER
    cli:
      - name: user
    keyword:
      - name: remote_user
  docker_extra_args:
    description:
      - Extra arguments to pass to the docker command line.
    default: ''
    vars:
      - name: ansible_docker_extra_args
    ini:
      - section: docker_connection
        key: extra_cli_args
  container_timeout:
    default: 10
    description:
      - How long to wait for a C(become) password prompt (community.docker's meaning). The time a
        command may take is bounded by the task timeout, not by this.
    env:
      - name: ANSIBLE_TIMEOUT
      - name: ANSIBLE_DOCKER_TIMEOUT
    ini:
      - key: timeout
        section: defaults
      - key: timeout
        section: docker_connection
    vars:
      - name: ansible_docker_timeout
    cli:
      - name: timeout
    type: integer
  extra_env:
    description:
      - Extra environment variables to set when running commands in the container (Ansible
        variables only).
    vars:
      - name: ansible_docker_extra_env
    type: dict
  working_dir:
    description:
      - The directory inside the container to run commands in.
    env:
      - name: ANSIBLE_DOCKER_WORKING_DIR
    ini:
      - key: working_dir
        section: docker_connection
    vars:
      - name: ansible_docker_working_dir
    type: string
  privileged:
    description:
      - Whether commands should be run with extended privileges.
    env:
      - name: ANSIBLE_DOCKER_PRIVILEGED
    ini:
      - key: privileged
        section: docker_connection
    vars:
      - name: ansible_docker_privileged
    type: boolean
    default: false
"""

import os
import re
import subprocess
from shlex import quote

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import BUFSIZE
from ansible.utils.display import Display

try:
    from ansible_collections.community.docker.plugins.connection.docker import Connection as _DockerConnection
except ImportError as exc:  # community.docker is not installed
    HAS_COMMUNITY_DOCKER = False
    COMMUNITY_DOCKER_IMPORT_ERROR = exc
    from ansible.plugins.connection import ConnectionBase

    class _DockerConnection(ConnectionBase):
        """Stands in for community.docker's connection so that this plugin loads and says what is
        missing (Connection.__init__ raises)."""

        def _connect(self):
            return self

        def close(self):
            pass
else:
    HAS_COMMUNITY_DOCKER = True
    COMMUNITY_DOCKER_IMPORT_ERROR = None

display = Display()

# what `docker exec` answers for a container that is paused already (Docker 20.10 - 27)
PAUSED_RE = re.compile(r"is paused, unpause the container before exec", re.IGNORECASE)
# seconds to wait for a killed `docker exec` client to go, and for `docker inspect`
REAP_TIMEOUT = 10


def is_timeout(exc):
    """Whether exc is Ansible's task timeout (TaskTimeoutError, a BaseException carrying the
    period in seconds), as opposed to an error or an interrupt."""
    return (not isinstance(exc, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit))
            and isinstance(getattr(exc, "timeout", None), int))


def frozen_message(container, seconds, state):
    """The unreachable message for a container that did not answer within the task timeout."""
    if state == "paused":
        why = "the container is paused (docker unpause %s)" % container
    elif state:
        why = "the container is %s but its command did not finish (frozen?)" % state
    else:
        why = "docker inspect did not answer either"
    return ("%s did not answer within %s s (the task timeout: task_timeout in ansible.cfg, "
            "ANSIBLE_TASK_TIMEOUT, the task's timeout keyword, dgxops run --task-timeout): "
            "docker exec into container %s had not returned; %s"
            % (container, seconds, container, why))


def abandon(proc):
    """Kill a `docker exec` client that waits on a frozen container and reap it, never waiting
    without a bound (killing the client leaves the container's process as it is)."""
    try:
        proc.kill()
    except OSError:
        pass
    try:
        proc.wait(timeout=REAP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


class Connection(_DockerConnection):
    """community.docker's docker connection; a frozen container is reported unreachable."""

    transport = "dgxops.fleet.docker"

    def __init__(self, *args, **kwargs):
        if not HAS_COMMUNITY_DOCKER:
            raise AnsibleError(
                "dgxops.fleet.docker needs the community.docker collection on the controller (%s)"
                % (COMMUNITY_DOCKER_IMPORT_ERROR,)
            )
        super().__init__(*args, **kwargs)
        self._frozen = None  # the message, once a command timed out on this connection

    def _container(self):
        return self.get_option("remote_addr")

    def _state(self):
        """The container's state from `docker inspect` (running, paused...), None if unknown."""
        try:
            proc = subprocess.run([self.docker_cmd, "inspect", "--format", "{{.State.Status}}", self._container()],
                                  capture_output=True, timeout=REAP_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            return None
        return to_text(proc.stdout).strip() or None

    def _run(self, args, in_data=None, stdin=subprocess.PIPE):
        """Run a docker CLI command; Ansible's task timeout kills it and the host is unreachable."""
        if self._frozen:
            raise AnsibleConnectionFailure(self._frozen)
        args = [to_bytes(a, errors="surrogate_or_strict") for a in args]
        proc = subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(in_data)
        except BaseException as exc:
            abandon(proc)
            if not is_timeout(exc):
                raise
            self._frozen = frozen_message(self._container(), exc.timeout, self._state())
            raise AnsibleConnectionFailure(self._frozen) from None
        if proc.returncode != 0 and PAUSED_RE.search(to_text(stderr)):
            raise AnsibleConnectionFailure(
                "%s is paused: docker exec refused to run in it (docker unpause %s): %s"
                % (self._container(), self._container(), to_text(stderr).strip())
            )
        return proc.returncode, stdout, stderr

    def exec_command(self, cmd, in_data=None, sudoable=False):
        """Run a command in the container, bounded by the task timeout."""
        self._set_conn_data()
        if self.become and self.become.expect_prompt() and sudoable:
            # a password prompt exchange: community.docker's own code
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        # ConnectionBase's bookkeeping (connects first), not community.docker's Popen
        super(_DockerConnection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        local_cmd = self._build_exec_cmd([self._play_context.executable, "-c", cmd])
        display.vvv("EXEC %s" % to_text(local_cmd), host=self._container())
        return self._run(local_cmd, in_data=in_data)

    def put_file(self, in_path, out_path):
        """Copy a file into the container (dd through docker exec), bounded by the task timeout."""
        self._set_conn_data()
        super(_DockerConnection, self).put_file(in_path, out_path)
        display.vvv("PUT %s TO %s" % (in_path, out_path), host=self._container())
        out_path = self._prefix_login_path(out_path)
        if not os.path.exists(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleFileNotFound("file or module does not exist: %s" % to_text(in_path))
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as in_file:
            count = "" if os.fstat(in_file.fileno()).st_size else " count=0"
            args = self._build_exec_cmd(
                [self._play_context.executable, "-c", "dd of=%s bs=%s%s" % (quote(out_path), BUFSIZE, count)]
            )
            rc, stdout, stderr = self._run(args, stdin=in_file)
        if rc != 0:
            raise AnsibleError("failed to transfer file %s to %s:\n%s\n%s"
                               % (to_text(in_path), to_text(out_path), to_text(stdout), to_text(stderr)))

    def fetch_file(self, in_path, out_path):
        """community.docker's fetch (docker cp, which a paused container answers), refused on a
        connection whose container already timed out."""
        if self._frozen:
            raise AnsibleConnectionFailure(self._frozen)
        super().fetch_file(in_path, out_path)
