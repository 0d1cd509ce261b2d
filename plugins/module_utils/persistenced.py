# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia-persistenced's systemd drop-in and the decisions around it (node code: the
``nvidia_persistenced`` module).

One drop-in replaces the packaged ``ExecStart`` (Ubuntu's unit runs the daemon with
``--no-persistence-mode``); both roles that need the daemon (nvidia_driver, gpu_tuning) write
it through the module, so its text lives here once. The text is the one the nvidia_driver role's
template rendered before the module existed, byte for byte: a node converged by an earlier
version sees no change (and no restart of the daemon)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# the driver's own record of a loaded kernel module: the daemon needs one to start
PROC_DRIVER_VERSION = "/proc/driver/nvidia/version"

MANAGED_MARKER = "Managed by Ansible: dgxops.fleet.nvidia_driver"

HEADER = (
    "# %s. Local changes are overwritten.\n"
    "# The only dgxops drop-in for this unit (gpu_tuning uses it through tasks_from: persistenced):\n"
    "# a second drop-in overriding ExecStart would conflict with it.\n"
) % MANAGED_MARKER

METHODS = ("auto", "daemon", "legacy")
STATES = ("auto", "started")


def exec_start(path, user, persistence_mode):
    """The daemon's command line: ``path [--user USER] --[no-]persistence-mode --verbose``
    (an empty or null user: no ``--user``, the daemon stays root)."""
    argv = [path]
    if user:
        argv += ["--user", user]
    argv.append("--persistence-mode" if persistence_mode else "--no-persistence-mode")
    argv.append("--verbose")
    return " ".join(argv)


def render_dropin(path, user, persistence_mode):
    """The whole drop-in: an empty ``ExecStart=`` clears the packaged one, the next sets ours."""
    return HEADER + "[Service]\nExecStart=\nExecStart=%s\n" % exec_start(path, user, persistence_mode)


def via_daemon(persistence_mode, method, binary_present):
    """Whether the daemon keeps persistence mode: ``None`` for no method (the nvidia_driver role:
    always, where the unit exists), else per gpu_tuning's method (``auto``: where the binary is
    installed). A persistence mode of ``None`` (not managed) never uses the daemon."""
    if persistence_mode is None or method == "legacy":
        return False
    if method == "auto":
        return bool(binary_present)
    return True


def should_start(state, driver_loaded):
    """``started``: always; ``auto``: only when a driver is loaded (right after a first install
    the daemon starts at the reboot that loads the driver)."""
    return state == "started" or bool(driver_loaded)


def unit_listed(stdout, unit):
    """Whether ``systemctl list-unit-files --no-legend UNIT`` lists ``unit`` (first column)."""
    for line in (stdout or "").splitlines():
        fields = line.split()
        if fields and fields[0] == unit:
            return True
    return False
