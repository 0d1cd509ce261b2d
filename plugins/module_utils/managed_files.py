# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Directories, files and removals a module manages on the node, with check mode and diffs
(node code: the service_files and nvidia_persistenced modules).

Each operation records the paths it changed (or would change, in check mode) and a diff of
each content change; a file is written to a temporary file beside it and moved into place."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shlex
import shutil
import tempfile

from ansible.module_utils.common.text.converters import to_bytes, to_native


def read(path):
    """The file's bytes, or None where it cannot be read (missing)."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def attrs_differ(path, mode, uid, gid):
    st = os.lstat(path)
    return (st.st_mode & 0o7777) != mode or st.st_uid != uid or st.st_gid != gid


class ManagedFiles(object):
    def __init__(self, module):
        self.module = module
        self.check = module.check_mode
        self.changed_paths = []
        self.diffs = []
        self.backups = []

    def fail(self, msg):
        self.module.fail_json(msg=msg, changed=bool(self.changed_paths))

    def directory(self, path, mode, uid, gid):
        """Make ``path`` a directory with this mode and owner; returns whether it changed."""
        if os.path.isdir(path):
            if not attrs_differ(path, mode, uid, gid):
                return False
        elif os.path.lexists(path):
            self.fail("%s exists and is not a directory" % path)
        self.changed_paths.append(path)
        if not self.check:
            if not os.path.isdir(path):
                os.makedirs(path)
            os.chown(path, uid, gid)
            os.chmod(path, mode)
        return True

    def file(self, dest, content, mode, uid, gid, what="a file was declared there", backup=False, validate=None):
        """Give ``dest`` this text, mode and owner; returns whether the *content* changed (a mode
        or owner fix alone changes the path but restarts nothing). With ``backup`` a file whose
        content is replaced is first copied beside it (``module.backup_local``: dest.PID.DATE~),
        as the template module's backup option does; the copies are listed in ``backups``. With
        ``validate`` (a command with ``%s``, run without a shell) the new content is checked in a
        temporary file beside ``dest`` before it replaces anything, as the template module's
        validate option does; not in check mode."""
        data = to_bytes(content, errors="surrogate_or_strict")
        if os.path.isdir(dest):
            self.fail("%s is a directory; %s" % (dest, what))
        before = read(dest)
        differs = before != data
        if not differs and not attrs_differ(dest, mode, uid, gid):
            return False
        self.changed_paths.append(dest)
        if differs:
            self.diffs.append({"before_header": dest, "after_header": dest,
                               "before": to_native(before or b"", errors="surrogate_or_replace"), "after": content})
        if self.check:
            return differs
        if differs:
            if backup and before is not None:
                self.backups.append(self.module.backup_local(dest))
            parent = os.path.dirname(dest) or "."
            if not os.path.isdir(parent):
                self.fail("%s: the directory %s does not exist; declare it in directories" % (dest, parent))
            fd, tmp = tempfile.mkstemp(prefix=".dgxops-", dir=parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.chown(tmp, uid, gid)
                os.chmod(tmp, mode)
                if validate:
                    self._validate(validate, tmp, dest)
            except Exception:
                os.unlink(tmp)
                raise
            self.module.atomic_move(tmp, dest)
        os.chown(dest, uid, gid)
        os.chmod(dest, mode)
        return differs

    def _validate(self, command, tmp, dest):
        if "%s" not in command:
            self.fail("%s: validate must contain %%s (the file to check): %r" % (dest, command))
        argv = [tmp if arg == "%s" else arg.replace("%s", tmp) for arg in shlex.split(command)]
        rc, out, err = self.module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            os.unlink(tmp)
            self.module.fail_json(msg="%s: the new content failed validation (%s): %s" % (dest, command, (err or out).strip()),
                                  rc=rc, stdout=out, stderr=err, cmd=argv, changed=bool(self.changed_paths[:-1]))

    def remove(self, path):
        """Remove a file, link or directory tree; returns whether it existed."""
        if not os.path.lexists(path):
            return False
        tree = os.path.isdir(path) and not os.path.islink(path)
        self.changed_paths.append(path)
        before = "" if tree else to_native(read(path) or b"", errors="surrogate_or_replace")
        self.diffs.append({"before_header": path, "after_header": "%s (absent)" % path, "before": before, "after": ""})
        if not self.check:
            if tree:
                shutil.rmtree(path)
            else:
                os.unlink(path)
        return True
