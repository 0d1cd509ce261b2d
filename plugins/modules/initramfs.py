#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: initramfs
short_description: Regenerate the initramfs when the module configuration it carries has changed
version_added: 0.1.0
description:
  - Compares the SHA-256 checksums of the files an initramfs carries (for the
    C(dgxops.fleet.nvidia_driver) role, the nouveau blacklist and the nvidia module options) with
    the checksums recorded when it was last regenerated, and runs C(update-initramfs -u -k all) when
    they differ, or when O(force) says an input was just changed, then records the new checksums.
  - "State-based, not change-based: a run that failed after editing the files still regenerates
    the initramfs next time."
  - Does nothing where C(update-initramfs) is not installed (no initramfs-tools image can carry the
    files there); RV(available) tells.
  - Commands run with C(LC_ALL=C), without a shell.
options:
  inputs:
    description: The files the initramfs carries, in a fixed order (a missing one counts as C(absent)).
    type: list
    elements: path
    required: true
  stamp:
    description: Where the checksums of the last regeneration are recorded (the directory is created, C(0755)).
    type: path
    required: true
  force:
    description: Regenerate even when the recorded checksums match (an input was changed by this run).
    type: bool
    default: false
  update_initramfs:
    description: The C(update-initramfs) program.
    type: path
    default: /usr/sbin/update-initramfs
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
    details: Reports whether it would regenerate; runs nothing and records nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
    details: Needs initramfs-tools (Debian, Ubuntu) to do anything.
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Regenerate the initramfs when the blacklist or the module options changed
  dgxops.fleet.initramfs:
    inputs: [/etc/modprobe.d/blacklist-nouveau.conf, /etc/modprobe.d/nvidia.conf]
    stamp: /var/lib/dgxops/nvidia_driver/initramfs.stamp
    force: "{{ blacklist is changed or modprobe is changed }}"
  become: true
  register: initramfs
"""

RETURN = r"""
available:
  description: Whether C(update-initramfs) is installed.
  returned: always
  type: bool
stale:
  description: Whether the initramfs was (or, in check mode, would be) regenerated.
  returned: always
  type: bool
checksums:
  description: The inputs' checksums, as recorded (space-separated, C(absent) for a missing file).
  returned: always
  type: str
  sample: "3f1c... absent"
recorded:
  description: The checksums recorded before this run (empty when none were).
  returned: always
  type: str
"""

import hashlib
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native


def checksum(path):
    if not os.path.isfile(path):
        return "absent"
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(65536), b""):
            digest.update(block)
    return digest.hexdigest()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            inputs=dict(type="list", elements="path", required=True),
            stamp=dict(type="path", required=True),
            force=dict(type="bool", default=False),
            update_initramfs=dict(type="path", default="/usr/sbin/update-initramfs"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    wanted = " ".join(checksum(path) for path in p["inputs"])
    recorded = ""
    if os.path.isfile(p["stamp"]):
        with open(p["stamp"], "rb") as handle:
            recorded = to_native(handle.read(), errors="surrogate_or_replace").strip()
    result = dict(changed=False, available=os.path.exists(p["update_initramfs"]), stale=False,
                  checksums=wanted, recorded=recorded)
    if not result["available"]:
        module.exit_json(**result)
    result["stale"] = bool(p["force"]) or recorded != wanted
    result["changed"] = result["stale"]
    if module.check_mode or not result["stale"]:
        module.exit_json(**result)
    argv = [p["update_initramfs"], "-u", "-k", "all"]
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg="%s failed: %s" % (" ".join(argv), (err or out).strip()), rc=rc, stdout=out, stderr=err,
                         cmd=argv, **result)
    directory = os.path.dirname(p["stamp"])
    if not os.path.isdir(directory):
        os.makedirs(directory)
        os.chmod(directory, 0o755)
    fd, tmp = tempfile.mkstemp(prefix=".dgxops-", dir=directory)
    with os.fdopen(fd, "wb") as handle:
        handle.write(to_bytes(wanted + "\n"))
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, p["stamp"])
    result.update(stdout=out, stderr=err)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
