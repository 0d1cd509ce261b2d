#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: service_files
short_description: A service's directories, files and systemd units, in one task
version_added: 0.1.0
description:
  - Brings the directories, files, removed paths and systemd units of one service to their
    declared state in one task, in this order, doing only what differs
    (what a role would otherwise spell as M(ansible.builtin.file), M(ansible.builtin.copy),
    M(ansible.builtin.template), M(ansible.builtin.systemd_service) tasks and handlers).
  - Files are given by content (render templates on the controller with
    C(lookup('ansible.builtin.template', ...)), plain files with C(lookup('ansible.builtin.file', ...))),
    compared byte for byte and replaced atomically.
  - After a change to a path under C(/etc/systemd/), C(/run/systemd/), C(/lib/systemd/) or
    C(/usr/lib/systemd/) it runs C(systemctl daemon-reload) once.
  - Reads every unit with one C(systemctl show); enables, disables, starts or stops only the units
    whose state differs, then restarts each unit named in O(files[].restart) of a changed file
    once (a unit this task just started is not restarted; for a C(oneshot) service a restart runs it).
  - Commands run with C(LC_ALL=C), without a shell.
options:
  directories:
    description: Directories to create, with their mode and owner.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      mode:
        description: Its mode, in octal.
        type: str
        default: "0755"
      owner:
        description: Its owner.
        type: str
        default: root
      group:
        description: Its group.
        type: str
        default: root
  files:
    description: Files and their content; the parent directory must exist or be in O(directories).
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        description: The file.
        type: path
        required: true
      content:
        description: Its whole content.
        type: str
        required: true
      mode:
        description: Its mode, in octal.
        type: str
        default: "0644"
      owner:
        description: Its owner.
        type: str
        default: root
      group:
        description: Its group.
        type: str
        default: root
      restart:
        description: Units to restart once when this file's content changes.
        type: list
        elements: str
        default: []
      validate:
        description:
          - A command that checks the new content before it replaces O(files[].dest), with C(%s)
            where the file goes (run without a shell), as M(ansible.builtin.template) does, e.g.
            C(udevadm verify %s). A non-zero exit fails the task and leaves the file as it was.
          - Not run in check mode, nor when the content is unchanged.
        type: str
      backup:
        description:
          - Copy the file beside it (C(dest.PID.DATE~), as M(ansible.builtin.template) does) before
            its content is replaced; the copies are returned in C(backup_files).
        type: bool
        default: false
  absent:
    description: Files or directories (with their content) that must not exist.
    type: list
    elements: path
    default: []
  units:
    description: systemd units and the state they must be in.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The unit (C(.service) when it has no suffix, as systemctl reads it).
        type: str
        required: true
      enabled:
        description: Enabled at boot (V(true)), disabled (V(false)), or left as it is (unset).
        type: bool
      state:
        description:
          - V(started) or V(stopped), or left as it is (unset).
          - A unit that does not exist fails the task when O(units[].enabled) is V(true) or
            O(units[].state) is V(started); in check mode (where the files or packages that bring
            it may not be there yet) the enable and start it needs are reported as changes instead.
        type: str
        choices: [started, stopped]
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
    details: Reports every file, removal and unit action it would make, and makes none.
  diff_mode:
    support: full
    details: The before and after content of every file it writes and every path it removes.
  platform:
    platforms: posix
    details: Units need systemd.
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Install the collector, its units and its timer
  dgxops.fleet.service_files:
    directories:
      - path: /usr/local/libexec/dgxops
    files:
      - dest: /usr/local/libexec/dgxops/collector
        content: "{{ lookup('ansible.builtin.file', 'collector.py') }}"
        mode: "0755"
        restart: [dgxops-collector.service]
      - dest: /etc/systemd/system/dgxops-collector.timer
        content: "{{ lookup('ansible.builtin.template', 'dgxops-collector.timer.j2') }}"
    units:
      - name: dgxops-collector.timer
        enabled: true
        state: started
  become: true

- name: Remove it
  dgxops.fleet.service_files:
    units:
      - name: dgxops-collector.timer
        enabled: false
        state: stopped
    absent:
      - /etc/systemd/system/dgxops-collector.timer
      - /usr/local/libexec/dgxops/collector
  become: true
"""

RETURN = r"""
changed_paths:
  description: The directories, files and removed paths that changed (or would), in order.
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/dgxops-collector.timer]
backup_files:
  description: The backup copies made of replaced files (O(files[].backup)); none in check mode.
  returned: always
  type: list
  elements: str
  sample: [/etc/spark/conf/spark-defaults.conf.4242.2026-12-05@12:00:00~]
daemon_reload:
  description: Whether C(systemctl daemon-reload) ran (or would).
  returned: always
  type: bool
units:
  description: Each unit of O(units) and O(files[].restart), as read before any change, and the actions taken.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The unit.
      type: str
    found:
      description: Whether systemd knew the unit when it was read (after the daemon-reload).
      type: bool
    enabled:
      description: Whether it was enabled (C(systemctl is-enabled) would answer 0).
      type: bool
    running:
      description: Whether it was active, activating or reloading.
      type: bool
    actions:
      description: What was done (or would be), in order, of C(enable), C(disable), C(start), C(stop), C(restart).
      type: list
      elements: str
  sample: [{name: dgxops-collector.timer, found: true, enabled: true, running: true, actions: []}]
"""

import grp
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxops.fleet.plugins.module_utils import managed_files as mf
from ansible_collections.dgxops.fleet.plugins.module_utils import systemd_units as su


def _octal(module, value, what):
    try:
        return int(str(value), 8)
    except ValueError:
        module.fail_json(msg="%s: invalid mode %r; allowed: an octal string such as '0644'" % (what, value))


def _ids(module, owner, group, what):
    try:
        return pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        module.fail_json(msg="%s: owner %r or group %r does not exist on this host" % (what, owner, group))


class ServiceFiles(object):
    def __init__(self, module):
        self.module = module
        self.check = module.check_mode
        self.fs = mf.ManagedFiles(module)
        self.changed_paths = self.fs.changed_paths
        self.diffs = self.fs.diffs
        self.restarts = []
        self.report = {}
        self.reloaded = False

    def _run(self, argv, what):
        rc, out, err = self.module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            self.module.fail_json(msg="%s failed: %s" % (" ".join(argv), (err or out).strip()), rc=rc,
                                  stdout=out, stderr=err, cmd=argv, changed=bool(self.changed_paths))
        return out

    def prepare(self):
        """Every mode and owner resolved before anything changes: a bad one fails the task first."""
        for key, path_key in (("directories", "path"), ("files", "dest")):
            for item in self.module.params[key]:
                item["_mode"] = _octal(self.module, item["mode"], item[path_key])
                item["_uid"], item["_gid"] = _ids(self.module, item["owner"], item["group"], item[path_key])

    def directories(self):
        for item in self.module.params["directories"]:
            self.fs.directory(item["path"], item["_mode"], item["_uid"], item["_gid"])

    def files(self):
        for item in self.module.params["files"]:
            if self.fs.file(item["dest"], item["content"], item["_mode"], item["_uid"], item["_gid"], backup=item["backup"],
                            validate=item["validate"]):
                self.restarts.extend(u for u in item["restart"] if u not in self.restarts)

    def absent(self):
        for path in self.module.params["absent"]:
            self.fs.remove(path)

    def _show(self, names):
        return su.parse_show(self._run(su.show_argv(names), "show"), names) if names else {}

    def _act(self, unit, actions):
        if not self.check:
            for action in actions:
                self._run(["systemctl", action, unit], action)

    def stop_units(self):
        """Units to disable or stop, before their files are removed (systemd must still know them)."""
        wanted = [u for u in self.module.params["units"] if u.get("enabled") is False or u.get("state") == "stopped"]
        states = self._show([u["name"] for u in wanted])
        for unit in wanted:
            props = states[unit["name"]]
            found, enabled, running = su.is_loaded(props), su.is_enabled(props), su.is_running(props)
            actions = []
            if unit.get("enabled") is False and enabled and props.get("UnitFileState") != "static":
                actions.append("disable")
            if unit.get("state") == "stopped" and running:
                actions.append("stop")
            self._act(unit["name"], actions)
            self.report[unit["name"]] = {"name": unit["name"], "found": found, "enabled": enabled,
                                         "running": running, "actions": actions}

    def daemon_reload(self):
        self.reloaded = su.needs_daemon_reload(self.changed_paths)
        if self.reloaded and not self.check:
            self._run(["systemctl", "daemon-reload"], "daemon-reload")

    def start_units(self):
        """Units to enable or start, after their files are written and systemd reloaded, then the
        restarts of the units whose files changed."""
        wanted = [u for u in self.module.params["units"] if u.get("enabled") is True or u.get("state") == "started"]
        names = [u["name"] for u in wanted]
        states = self._show(names + [n for n in self.restarts if n not in names])
        started = set()
        for unit in wanted:
            props = states[unit["name"]]
            found, enabled, running = su.is_loaded(props), su.is_enabled(props), su.is_running(props)
            if not found and not self.check:
                # in check mode the files or packages that bring the unit may not be there yet:
                # the enable and start it needs are reported instead
                self.module.fail_json(msg="%s: the unit does not exist on this host (systemctl show: LoadState=%s)"
                                      % (unit["name"], props.get("LoadState")), changed=bool(self.changed_paths))
            actions = []
            if unit.get("enabled") is True and not enabled:
                actions.append("enable")
            if unit.get("state") == "started" and not running:
                actions.append("start")
                started.add(unit["name"])
            self._act(unit["name"], actions)
            entry = self.report.setdefault(unit["name"], {"name": unit["name"], "found": found, "enabled": enabled,
                                                          "running": running, "actions": []})
            entry["actions"].extend(actions)
        stopped = set(u["name"] for u in self.module.params["units"] if u.get("state") == "stopped")
        for name in self.restarts:
            props = states[name]
            if name in started or name in stopped or not (su.is_loaded(props) or self.check):
                continue
            entry = self.report.setdefault(name, {"name": name, "found": su.is_loaded(props), "enabled": su.is_enabled(props),
                                                  "running": su.is_running(props), "actions": []})
            entry["actions"].append("restart")
            self._act(name, ["restart"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                mode=dict(type="str", default="0755"),
                owner=dict(type="str", default="root"),
                group=dict(type="str", default="root"),
            )),
            files=dict(type="list", elements="dict", default=[], options=dict(
                dest=dict(type="path", required=True),
                content=dict(type="str", required=True),
                mode=dict(type="str", default="0644"),
                owner=dict(type="str", default="root"),
                group=dict(type="str", default="root"),
                restart=dict(type="list", elements="str", default=[]),
                backup=dict(type="bool", default=False),
                validate=dict(type="str"),
            )),
            absent=dict(type="list", elements="path", default=[]),
            units=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                enabled=dict(type="bool"),
                state=dict(type="str", choices=["started", "stopped"]),
            )),
        ),
        supports_check_mode=True,
    )
    work = ServiceFiles(module)
    work.prepare()
    work.directories()
    work.files()
    work.stop_units()
    work.absent()
    work.daemon_reload()
    work.start_units()
    units = list(work.report.values())
    changed = bool(work.changed_paths) or any(u["actions"] for u in units)
    result = dict(changed=changed, changed_paths=work.changed_paths, backup_files=work.fs.backups,
                  daemon_reload=work.reloaded, units=units)
    if module._diff:
        result["diff"] = work.diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
