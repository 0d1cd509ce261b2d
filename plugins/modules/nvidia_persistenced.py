#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_persistenced
short_description: Keep GPU persistence mode through nvidia-persistenced, in one task
version_added: 0.1.0
description:
  - Writes the one systemd drop-in that replaces nvidia-persistenced's packaged C(ExecStart)
    (Ubuntu's unit runs the daemon with C(--no-persistence-mode)) with the declared persistence
    mode, user and binary; enables the daemon, starts it per O(persistenced_state), and restarts
    it (C(systemctl try-restart)) when its drop-in changed while it runs. It does only what differs;
    a node already in that state gets one C(systemctl show) and no change.
  - Removes the drop-ins listed in O(remove_dropins) (what earlier versions wrote), whether or not
    the daemon keeps persistence mode.
  - Runs C(systemctl daemon-reload) once, only when a drop-in was written or removed.
  - A unit that is not installed fails the task when the daemon must run (O(persistenced_state=started),
    or O(persistence_method) given); with O(persistenced_state=auto) it is a warning and nothing is
    written (the driver's utils package brings the unit; the next run configures it).
  - With O(persistence_method) (the C(gpu_tuning) role) the module also decides whether the daemon
    keeps persistence mode at all (RV(managed)); where it does not, it only reports.
  - Commands run with C(LC_ALL=C), without a shell.
options:
  persistence_mode:
    description:
      - V(true) runs the daemon with C(--persistence-mode), V(false) with C(--no-persistence-mode).
      - Null means persistence mode is not managed; nothing is written, started or enabled, only
        O(remove_dropins) are removed.
    type: bool
  persistenced_path:
    description: The daemon's binary, as the drop-in's C(ExecStart) runs it (absolute, no spaces).
    type: path
    default: /usr/bin/nvidia-persistenced
  persistenced_user:
    description: The user the daemon drops privileges to; empty or null keeps it root (no C(--user)).
    type: str
    default: nvidia-persistenced
  persistenced_state:
    description:
      - V(started) enables and always starts the daemon (for callers that read the GPUs next).
      - V(auto) enables it and starts it only when a driver is loaded (C(/proc/driver/nvidia/version)
        exists; right after a first install the daemon starts at the reboot).
    type: str
    choices: [auto, started]
    default: auto
  persistence_method:
    description:
      - Unset (the C(nvidia_driver) role) means the daemon keeps persistence mode wherever its unit is installed.
      - V(daemon) the daemon keeps it; O(persistenced_path) must exist.
      - V(auto) the daemon keeps it where O(persistenced_path) exists, else nothing is done (RV(managed) is false).
      - V(legacy) the daemon is left alone (the caller keeps persistence mode with C(nvidia-smi -pm)).
    type: str
    choices: [auto, daemon, legacy]
  unit:
    description: The daemon's systemd unit.
    type: str
    default: nvidia-persistenced.service
  dropin:
    description: The drop-in file written (its directory is created, C(0755)); C(0644), owned by root.
    type: path
    default: /etc/systemd/system/nvidia-persistenced.service.d/dgxops.conf
  remove_dropins:
    description: Other drop-ins of the unit that must not exist (files written by earlier versions).
    type: list
    elements: path
    default: []
  variable_prefix:
    description:
      - Prefix for option names in messages, so that a role's variable is named (the
        C(nvidia_driver) role passes C(nvidia_driver_), C(gpu_tuning) passes C(gpu_tuning_)).
    type: str
    default: ''
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
    details: Reads the unit and the files, reports every write, removal, reload, enable, start and restart it would make, and makes none.
  diff_mode:
    support: full
    details: The drop-in's content before and after, and the content of every drop-in it removes.
  platform:
    platforms: posix
    details: Needs systemd.
seealso:
  - module: dgxops.fleet.service_files
  - module: dgxops.fleet.nvidia_gpu
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Run nvidia-persistenced in persistence mode (start it once a driver is loaded)
  dgxops.fleet.nvidia_persistenced:
    persistence_mode: true
    persistenced_state: auto
  become: true

- name: Keep persistence through the daemon where it is installed, else report (the caller uses nvidia-smi -pm)
  dgxops.fleet.nvidia_persistenced:
    persistence_mode: true
    persistence_method: auto
    persistenced_state: started
    persistenced_user: ""
    remove_dropins: [/etc/systemd/system/nvidia-persistenced.service.d/old.conf]
    variable_prefix: gpu_tuning_
  become: true
  register: persistenced
"""

RETURN = r"""
managed:
  description: Whether the daemon keeps persistence mode (its unit installed, the drop-in written and the unit enabled, or would be in check mode).
  returned: always
  type: bool
unit_present:
  description: Whether the unit is installed; null where it was not read (the daemon is not used and nothing was removed).
  returned: always
  type: bool
binary_present:
  description: Whether O(persistenced_path) exists.
  returned: always
  type: bool
driver_loaded:
  description: Whether C(/proc/driver/nvidia/version) exists (a driver is loaded).
  returned: always
  type: bool
exec_start:
  description: The command line the drop-in gives the daemon; null where the daemon is not used.
  returned: always
  type: str
  sample: /usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose
changed_paths:
  description: The directory, drop-in and removed drop-ins that changed (or would), in order.
  returned: always
  type: list
  elements: str
daemon_reload:
  description: Whether C(systemctl daemon-reload) ran (or would).
  returned: always
  type: bool
actions:
  description: What was done to the unit (or would be), in order, of C(enable), C(start), C(restart).
  returned: always
  type: list
  elements: str
  sample: [enable, start]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dgxops.fleet.plugins.module_utils import managed_files as mf
from ansible_collections.dgxops.fleet.plugins.module_utils import persistenced as pd
from ansible_collections.dgxops.fleet.plugins.module_utils import systemd_units as su

DIR_MODE = 0o755
FILE_MODE = 0o644


class Persistenced(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.check = module.check_mode
        self.prefix = self.params["variable_prefix"] or ""
        self.unit = self.params["unit"]
        self.fs = mf.ManagedFiles(module)
        self.changed_paths = self.fs.changed_paths
        self.reload_needed = False
        self.diffs = self.fs.diffs
        self.actions = []
        self.props = None

    def fail(self, msg, **extra):
        self.module.fail_json(msg=msg, changed=bool(self.changed_paths or self.actions), **extra)

    def run(self, argv):
        rc, out, err = self.module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            self.fail("%s failed: %s" % (" ".join(argv), (err or out).strip()), rc=rc, stdout=out, stderr=err, cmd=argv)
        return out

    def mutate(self, argv):
        if not self.check:
            self.run(argv)

    def show(self):
        return su.parse_show(self.run(su.show_argv([self.unit])), [self.unit])[self.unit]

    def read_unit(self):
        """The unit's properties (one ``systemctl show``). A unit systemd does not know yet may
        be on disk (a package installed it without a reload): ``list-unit-files`` reads the disk,
        and a listed unit is loaded with a daemon-reload."""
        props = self.show()
        if not su.is_loaded(props):
            listed = self.run(["systemctl", "list-unit-files", "--no-legend", self.unit])
            if pd.unit_listed(listed, self.unit):
                if self.check:
                    state = [line.split() for line in listed.splitlines() if line.split()[:1] == [self.unit]][0]
                    props = {"LoadState": "loaded", "UnitFileState": state[1] if len(state) > 1 else "",
                             "ActiveState": "inactive"}
                else:
                    self.run(["systemctl", "daemon-reload"])
                    props = self.show()
        self.props = props
        return su.is_loaded(props)

    def write_dropin(self, content):
        """Returns whether the content changed (a mode or owner fix alone restarts nothing)."""
        dest = self.params["dropin"]
        self.fs.directory(os.path.dirname(dest) or ".", DIR_MODE, 0, 0)
        differs = self.fs.file(dest, content, FILE_MODE, 0, 0, what="the drop-in is a file")
        if differs:
            self.reload_needed = True
        return differs

    def to_remove(self):
        """The drop-ins of ``remove_dropins`` that exist (a directory there fails the task)."""
        found = []
        for path in self.params["remove_dropins"]:
            if path == self.params["dropin"] or not os.path.lexists(path):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                self.fail("%s is a directory; remove_dropins lists files" % path)
            found.append(path)
        return found

    def remove_dropins(self, paths):
        removed = False
        for path in paths:
            removed = self.fs.remove(path) or removed
        if removed:
            self.reload_needed = True
        return removed


def main():
    module = AnsibleModule(
        argument_spec=dict(
            persistence_mode=dict(type="bool"),
            persistenced_path=dict(type="path", default="/usr/bin/nvidia-persistenced"),
            persistenced_user=dict(type="str", default="nvidia-persistenced"),
            persistenced_state=dict(type="str", default="auto", choices=list(pd.STATES)),
            persistence_method=dict(type="str", choices=list(pd.METHODS)),
            unit=dict(type="str", default="nvidia-persistenced.service"),
            dropin=dict(type="path", default="/etc/systemd/system/nvidia-persistenced.service.d/dgxops.conf"),
            remove_dropins=dict(type="list", elements="path", default=[]),
            variable_prefix=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    work = Persistenced(module)
    prefix, unit, method = work.prefix, work.unit, p["persistence_method"]

    # Reads, and every refusal, before any change.
    binary_present = os.path.exists(p["persistenced_path"])
    driver_loaded = os.path.exists(pd.PROC_DRIVER_VERSION)
    if method == "daemon" and p["persistence_mode"] is not None and not binary_present:
        work.fail("%spersistence_method: invalid value 'daemon' on this host; %s does not exist (install the "
                  "driver's nvidia-compute-utils package); allowed: daemon only where nvidia-persistenced is "
                  "installed, else auto or legacy" % (prefix, p["persistenced_path"]))
    use_daemon = pd.via_daemon(p["persistence_mode"], method, binary_present)
    removing = work.to_remove()
    unit_present = work.read_unit() if (use_daemon or removing) else None
    must_run = p["persistenced_state"] == "started" or method is not None
    if use_daemon and not unit_present and must_run:
        if method is not None:
            work.fail("%spersistence_method: %s, and %s exists, but %s is not installed on this host (it comes "
                      "with the driver's utils package); allowed: the daemon method only where the unit exists, "
                      "else legacy" % (prefix, method, p["persistenced_path"], unit))
        work.fail("%spersistenced_state: started, but %s is not installed on this host (it comes with the "
                  "driver's utils package); allowed: started only where the unit exists, else auto" % (prefix, unit))
    managed = bool(use_daemon and unit_present)
    if use_daemon and not unit_present:
        module.warn("%s is not installed on this host yet (it comes with the driver's utils package); persistence "
                    "mode is configured on the next run after it is." % unit)

    exec_start = None
    content_changed = False
    if managed:
        exec_start = pd.exec_start(p["persistenced_path"], p["persistenced_user"], p["persistence_mode"])
        content_changed = work.write_dropin(pd.render_dropin(p["persistenced_path"], p["persistenced_user"],
                                                             p["persistence_mode"]))
    removed = work.remove_dropins(removing)
    if work.reload_needed:
        work.mutate(["systemctl", "daemon-reload"])

    props = work.props or {}
    running = su.is_running(props)
    started = False
    if managed:
        if not su.is_enabled(props):
            work.actions.append("enable")
            work.mutate(["systemctl", "enable", unit])
        if not running and pd.should_start(p["persistenced_state"], driver_loaded):
            work.actions.append("start")
            work.mutate(["systemctl", "start", unit])
            started = True
    if (content_changed or removed) and running and not started:
        # the running daemon takes the new ExecStart only at a restart; a stopped one stays stopped
        work.actions.append("restart")
        work.mutate(["systemctl", "try-restart", unit])

    result = dict(
        changed=bool(work.changed_paths or work.actions),
        managed=managed,
        unit_present=unit_present,
        binary_present=binary_present,
        driver_loaded=driver_loaded,
        exec_start=exec_start,
        changed_paths=work.changed_paths,
        daemon_reload=work.reload_needed,
        actions=work.actions,
    )
    if module._diff:
        result["diff"] = work.diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
