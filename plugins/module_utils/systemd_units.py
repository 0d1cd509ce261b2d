# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""systemd units as the node's systemctl reports them (node code: the modules that manage units).

One ``systemctl show`` call reads every unit a task needs; the states that count as enabled are
those ``systemctl is-enabled`` answers 0 for (what ansible.builtin.systemd_service tests)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PROPERTIES = ("LoadState", "UnitFileState", "ActiveState")

# `systemctl is-enabled` exits 0 for these (systemctl(1), is-enabled)
ENABLED_STATES = frozenset(["enabled", "enabled-runtime", "static", "alias", "indirect", "generated", "transient"])
# a unit starting, running or reloading needs no start
RUNNING_STATES = frozenset(["active", "activating", "reloading"])

# where unit files and drop-ins live: a change there needs `systemctl daemon-reload`
UNIT_DIRS = ("/etc/systemd/", "/run/systemd/", "/usr/lib/systemd/", "/lib/systemd/", "/usr/local/lib/systemd/")


def show_argv(names):
    """The one ``systemctl show`` call that reads every unit of ``names``."""
    argv = ["systemctl", "show"]
    for prop in PROPERTIES:
        argv += ["-p", prop]
    return argv + ["--"] + list(names)


def parse_show(stdout, names):
    """``{name: {property: value}}`` from ``systemctl show``'s output for ``names``: one block of
    ``Key=value`` lines per unit, separated by blank lines, in the order the units were given."""
    blocks, current = [], {}
    for line in (stdout or "").splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current[key] = value
    if current:
        blocks.append(current)
    if len(blocks) != len(names):
        raise ValueError("systemctl show returned %d unit(s) for %d: %r" % (len(blocks), len(names), stdout))
    return dict(zip(names, blocks))


def is_loaded(props):
    return props.get("LoadState") not in (None, "", "not-found")


def is_enabled(props):
    return props.get("UnitFileState") in ENABLED_STATES


def is_running(props):
    return props.get("ActiveState") in RUNNING_STATES


def needs_daemon_reload(paths):
    """Whether a change to one of ``paths`` is one systemd reads only after a daemon-reload."""
    return any(str(p).startswith(UNIT_DIRS) for p in paths)
