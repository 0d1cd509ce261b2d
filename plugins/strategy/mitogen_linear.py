# -*- coding: utf-8 -*-
# Copyright (c) dgxops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: mitogen_linear
version_added: 0.1.0
short_description: Mitogen's linear strategy, with a CPU placement fit for small controllers
description:
  - Runs Mitogen's C(mitogen_linear) strategy (the C(mitogen) package installed on the controller).
    Task order and results are those of Ansible's C(linear) strategy; Mitogen keeps one connection
    per host and runs modules in it, without copying each module to the host.
  - Without the C(mitogen) package it warns and runs Ansible's C(linear) strategy.
  - Mitogen lists every installed collection (an import and a C(meta/runtime.yml) parse each) for
    each collection module it runs, in the worker process that runs it, and Ansible forks a new
    worker for each host and task, so a run paid that listing once per host per collection task.
    This strategy lists them once, in the controller's process before the workers fork, and hands
    each worker that list (with the C(ansible) package's collections installed, about 0.7 s of the
    30 s of controller CPU of a 16-node C(site.yml) rerun on 2 CPUs; more where more collections
    are installed).
  - Mitogen pins the controller's processes to CPUs and keeps CPU 0 for its connection
    multiplexer. On a 2-CPU controller its policy then puts the top-level process and every worker
    on CPU 1, so the per-task work of the whole run shares one CPU (on 3 CPUs, they share CPUs 1
    and 2). On a 2-CPU controller a 16-node C(site.yml) rerun took 60.7-66.7 s pinned and
    41.4-41.9 s unpinned.
  - This strategy leaves Mitogen's pinning on where the controller keeps a CPU of its own (4 CPUs
    or more) and turns it off on controllers with fewer than 4 CPUs and on controllers already
    confined to a subset of their CPUs (C(taskset), a cpuset), which Mitogen's placement would
    ignore.
  - The environment variable C(DGXOPS_MITOGEN_CPU_PINNING) overrides that choice. C(auto) is
    the default, C(on) keeps Mitogen's pinning, and C(off) turns it off.
author:
  - dgxops maintainers (@dgxops)
notes:
  - The C(dgxops) wrapper selects this strategy when Mitogen is installed (C(--strategy auto)).
  - In your own C(ansible.cfg), set C(strategy = dgxops.fleet.mitogen_linear).
  - Hosts on the P(dgxops.fleet.docker#connection) connection run through Mitogen's docker
    connection, as hosts on C(docker) do (Mitogen only redirects the connections it knows by name).
"""

import multiprocessing
import os

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.loader import strategy_loader
from ansible.utils.display import Display
from ansible_collections.dgxops.fleet.plugins.module_utils import oserror

try:
    import ansible_mitogen.affinity
    import ansible_mitogen.loaders  # noqa: F401  (Mitogen's version checks run on this import)
    import ansible_mitogen.mixins
    import ansible_mitogen.planner
    import ansible_mitogen.strategy
except ImportError as exc:
    HAS_MITOGEN = False
    MITOGEN_IMPORT_ERROR = exc
else:
    HAS_MITOGEN = True
    MITOGEN_IMPORT_ERROR = None

display = Display()

PINNING_ENV = "DGXOPS_MITOGEN_CPU_PINNING"
PINNING_CHOICES = ("auto", "on", "off")
# Mitogen reserves CPU 0 for its multiplexer; below this many CPUs the top-level process and all
# workers then share what is left (CPU 1 alone on a 2-CPU controller, CPUs 1-2 on 3).
MIN_CPUS_FOR_PINNING = 4


def cpu_pinning_wanted(setting, cpu_count, allowed_cpus):
    """Whether to keep Mitogen's CPU pinning.

    setting: auto, on or off; cpu_count: the CPUs Mitogen counts (all of the machine's);
    allowed_cpus: how many this process may run on (its affinity mask)."""
    setting = (setting or "auto").strip().lower()
    if setting not in PINNING_CHOICES:
        raise AnsibleError(
            "%s must be one of %s, got %r" % (PINNING_ENV, ", ".join(PINNING_CHOICES), setting)
        )
    if setting != "auto":
        return setting == "on"
    return cpu_count >= MIN_CPUS_FOR_PINNING and allowed_cpus >= cpu_count


def _allowed_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return multiprocessing.cpu_count()


def _apply_cpu_pinning_choice():
    """Replace Mitogen's placement policy with its no-op base when pinning is not wanted.

    Mitogen reads ansible_mitogen.affinity.policy each time it places a process (the top-level
    process when the strategy starts, the multiplexer, each worker), so this runs before the
    first of those."""
    if not cpu_pinning_wanted(os.environ.get(PINNING_ENV), multiprocessing.cpu_count(), _allowed_cpus()):
        ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()


def name_module_oserror(result, data):
    """A module's uncaught OSError, as Mitogen returns it (a traceback, no JSON), named: the path,
    the errno and what to do (module_utils/oserror.py); the traceback stays in module_stderr."""
    # ansible-core 2.21 hands Mitogen a UnifiedTaskResult here, older versions a dict
    is_dict = isinstance(data, dict)
    failed = data.get("failed") if is_dict else getattr(data, "failed", False)
    if not failed or not isinstance(result, dict):
        return data
    text = "%s\n%s" % (result.get("stderr") or "", result.get("stdout") or "")
    named = oserror.from_traceback(text) if "Traceback" in text else None
    if not named:
        return data
    if is_dict:
        data["msg"] = named["msg"]
        data.update(path=named["path"], errno=named["errno"], errno_name=named["errno_name"])
    else:
        data.msg = named["msg"]
        data.exception = None  # the message is the error now; the traceback stays in module_stderr
    return data


def _name_module_oserrors():
    """Ansible's own module wrapper turns an uncaught exception into a failed result with its
    message; Mitogen's in-process runner prints the traceback instead, which ansible-core reports
    as "Module result deserialization failed". Name the OSError ones (EBUSY, ENOSPC, EROFS...)."""
    mixin = ansible_mitogen.mixins.ActionModuleMixin
    original = mixin._postprocess_response
    if getattr(original, "_dgxops_named", False):
        return

    def _postprocess_response(self, result):
        return name_module_oserror(result, original(self, result))

    _postprocess_response._dgxops_named = True
    mixin._postprocess_response = _postprocess_response


# the collection's connections that Mitogen runs with its own connection of that kind
MITOGEN_CONNECTIONS = {"dgxops.fleet.docker": "mitogen_docker"}


def mitogen_connection_name(name):
    """Mitogen's connection for one of the collection's connections, None for any other."""
    return MITOGEN_CONNECTIONS.get(name)


def _redirect_collection_connections():
    """Mitogen rewrites connection_loader.get_with_context() for the connections it knows by name
    (docker, ssh...) into its own. dgxops.fleet.docker is community.docker's docker connection
    with a bound on frozen containers (Mitogen bounds those itself), so it goes the same way."""
    original = ansible_mitogen.strategy.wrap_connection_loader__get_with_context
    if getattr(original, "_dgxops_redirect", False):
        return

    def wrap_connection_loader__get_with_context(name, *args, **kwargs):
        mitogen_name = mitogen_connection_name(name)
        if mitogen_name:
            return ansible_mitogen.loaders.connection_loader__get_with_context(mitogen_name, *args, **kwargs)
        return original(name, *args, **kwargs)

    wrap_connection_loader__get_with_context._dgxops_redirect = True
    # StrategyMixin installs this module global when the strategy runs
    ansible_mitogen.strategy.wrap_connection_loader__get_with_context = wrap_connection_loader__get_with_context


# the installed collections' directories, listed once in the controller's process (the strategy's
# __init__, before any worker forks); None until then
_collection_dirs = None


def list_collection_dirs_once():
    """The installed collections' directories (text), listed on the first call only."""
    global _collection_dirs  # pylint: disable=global-statement
    if _collection_dirs is None:
        from ansible.collections.list import list_collection_dirs
        _collection_dirs = [to_text(path) for path in list_collection_dirs()]
    return _collection_dirs


def _share_collection_dirs():
    """Mitogen's planner calls _load_collections(invocation) for each collection module it runs,
    in the forked worker, and that lists every installed collection again. Hand it the list the
    controller's process made once instead (same paths, same order)."""
    original = getattr(ansible_mitogen.planner, "_load_collections", None)
    if original is None or getattr(original, "_dgxops_shared", False):
        return

    def _load_collections(invocation):
        for path in list_collection_dirs_once():
            invocation._extra_sys_paths.add(path)  # pylint: disable=protected-access

    _load_collections._dgxops_shared = True
    ansible_mitogen.planner._load_collections = _load_collections


if HAS_MITOGEN:
    _apply_cpu_pinning_choice()
    _name_module_oserrors()
    _redirect_collection_connections()
    _share_collection_dirs()

    class StrategyModule(ansible_mitogen.strategy.StrategyMixin,
                         strategy_loader.get("linear", class_only=True)):
        """Mitogen's linear strategy; see DOCUMENTATION for the CPU placement and the shared
        collection list."""

        def __init__(self, *args, **kwargs):
            list_collection_dirs_once()  # in this process, before the workers fork
            super().__init__(*args, **kwargs)

else:
    class StrategyModule(strategy_loader.get("linear", class_only=True)):
        """Ansible's linear strategy, with a warning that Mitogen is missing."""

        def __init__(self, *args, **kwargs):
            display.warning(
                "dgxops.fleet.mitogen_linear: the mitogen package is not installed on the controller "
                "(%s); running Ansible's linear strategy. pip install mitogen to use it." % (MITOGEN_IMPORT_ERROR,)
            )
            super().__init__(*args, **kwargs)
