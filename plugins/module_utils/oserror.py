# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Name an OSError from a write path: the path, the errno and what to do.

Used by the modules around every write (``fail_json(**oserror.fail_args(exc, path, what))``) and
by the ``dgxops.fleet.mitogen_linear`` strategy for modules whose uncaught OSError reaches
Mitogen's in-process runner as a bare traceback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

ADVICE = {
    errno.EBUSY: "the file is in use or is a mount point (a read-only bind mount?): unmount it, or point the "
                 "variable at a path the role may replace",
    errno.EROFS: "the filesystem is mounted read-only: remount it read-write (mount -o remount,rw) or choose "
                 "another path",
    errno.ENOSPC: "no space left on the node's filesystem: free space (df -h; journalctl --vacuum-size, apt-get "
                  "clean) and run again",
    errno.EDQUOT: "the disk quota is exceeded: free space or raise the quota, then run again",
    errno.EACCES: "permission denied: run with become (root), and check the file's attributes (lsattr: 'i' "
                  "immutable)",
    errno.EPERM: "operation not permitted: run with become (root), and check the file's attributes (lsattr: "
                 "'i' immutable) or the container's capabilities",
    errno.ENOENT: "the directory does not exist: create it first or fix the path",
    errno.ENOTDIR: "a component of the path is not a directory: fix the path",
    errno.EIO: "input/output error from the device: check dmesg and the disk's health",
}
_TRACE_LAST = re.compile(r"^(?:\w+\.)*(\w*Error|OSError): \[Errno (\d+)\] ([^:]+)(?:: (.*))?$")


def advice(code):
    return ADVICE.get(code, "check the path, its filesystem and its permissions on the node")


def describe(code, strerror, path, what="write"):
    name = errno.errorcode.get(code, "errno %s" % code)
    return "cannot %s %s: [Errno %s %s] %s; %s" % (what, path, code, name, strerror or os.strerror(code),
                                                   advice(code))


def fail_args(exc, path, what="write"):
    """Keyword arguments for ``fail_json`` naming the path, the errno and what to do."""
    code = getattr(exc, "errno", None)
    target = getattr(exc, "filename", None) or path
    if isinstance(target, bytes):
        target = target.decode("utf-8", "replace")
    return {"msg": describe(code, getattr(exc, "strerror", None) or str(exc), target, what),
            "path": target, "errno": code, "errno_name": errno.errorcode.get(code)}


def from_traceback(text):
    """``fail_args``-like dict for the last ``OSError: [Errno N] ...`` line of a traceback, or None."""
    for line in reversed((text or "").strip().splitlines()):
        match = _TRACE_LAST.match(line.strip())
        if match:
            code = int(match.group(2))
            rest = match.group(4) or ""
            # "b'/tmp/x' -> b'/etc/nccl.conf'": the destination is what the user named
            paths = re.findall(r"b?'([^']*)'", rest)
            path = paths[-1] if paths else rest or "the file"
            return {"msg": describe(code, match.group(3), path), "path": path, "errno": code,
                    "errno_name": errno.errorcode.get(code)}
    return None
