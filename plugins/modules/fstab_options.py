#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: fstab_options
short_description: Add or remove mount options on existing fstab entries, keeping every other byte
version_added: 0.1.0
description:
  - Edits the options field (the fourth field) of existing entries in an fstab(5) file.
    An entry is selected by its mount point, its source field, a filesystem UUID or a label.
  - Every other line, comment, blank line, field and the whitespace between fields are left
    byte for byte as they were; only the options field of the selected lines is rewritten.
    Tabs, CRLF line endings, a missing final newline and bytes that are not UTF-8 survive.
  - Unlike M(ansible.posix.mount), the module never creates an entry, never rewrites a whole
    line with single spaces, never mounts and never remounts. Remount separately when wanted.
  - An entry that does not exist, or a selector that matches several entries, is an error and
    nothing is written. All entries are checked before the file is changed.
  - Option values may be double-quoted and contain commas (C(context="a,b")), as libmount allows.
  - O(entries[].remove) by name removes every option of that name (C(commit) removes C(commit=60)).
    O(entries[].add) with C(name=value) replaces an existing option of that name in place.
    The module does not know which options conflict (C(noatime) and C(relatime)); the
    M(dgxops.fleet.validate) validator of the C(storage_tuning) role adds those removals.
options:
  path:
    description: The fstab file to edit.
    type: path
    default: /etc/fstab
  target:
    description:
      - Mount point of the entry to edit (second field), for example C(/raid).
        A trailing slash is ignored; C(none) or C(swap) select swap entries literally.
      - Shorthand for a single O(entries) item; mutually exclusive with O(entries),
        O(source), O(uuid) and O(label).
    type: str
  source:
    description:
      - First field of the entry to edit, compared literally (C(/dev/md0), C(tmpfs)).
        C(UUID=...) and C(LABEL=...) are matched like O(uuid) and O(label).
    type: str
  uuid:
    description:
      - Filesystem UUID of the entry; matches C(UUID=x), C(UUID="x") and C(/dev/disk/by-uuid/x),
        case-insensitively.
    type: str
  label:
    description: Filesystem label; matches C(LABEL=x), C(LABEL="x") and C(/dev/disk/by-label/x).
    type: str
  add:
    description:
      - Options to add to the single entry selected by O(target), O(source), O(uuid) or O(label).
      - Not allowed with O(entries); use O(entries[].add).
    type: list
    elements: str
  remove:
    description:
      - Options to remove from the single entry selected at the top level.
      - Not allowed with O(entries); use O(entries[].remove).
    type: list
    elements: str
  entries:
    description:
      - Several edits done in one pass, with one backup and one atomic write.
      - Each item names exactly one of O(entries[].target), O(entries[].source),
        O(entries[].uuid), O(entries[].label).
    type: list
    elements: dict
    suboptions:
      target:
        description: Mount point, as O(target).
        type: str
      source:
        description: Source field, as O(source).
        type: str
      uuid:
        description: Filesystem UUID, as O(uuid).
        type: str
      label:
        description: Filesystem label, as O(label).
        type: str
      add:
        description: Options to add.
        type: list
        elements: str
        default: []
      remove:
        description: Options to remove.
        type: list
        elements: str
        default: []
  backup:
    description:
      - Copy the file to C(<path>.<pid>.<timestamp>~) before changing it. No backup is made
        when nothing changes.
    type: bool
    default: true
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.attributes.platform
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - The file is replaced atomically; its owner, group, mode and SELinux context are kept.
  - Verify the result with C(findmnt --verify --tab-file <path>) (util-linux), which parses it
    the way C(mount) does.
seealso:
  - module: ansible.posix.mount
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Add noatime to /raid and drop continuous discard
  dgxops.fleet.fstab_options:
    target: /raid
    add: [noatime]
    remove: [discard, relatime]

- name: Edit two entries in one pass, selected by UUID and label
  dgxops.fleet.fstab_options:
    entries:
      - uuid: 5f1c2a7e-6b1d-4f57-9a43-0c3f8f6f9a10
        add: [noatime, commit=60]
      - label: scratch
        add: [nofail]
"""

RETURN = r"""
entries:
  description: One item per edit, in order.
  returned: always
  type: list
  elements: dict
  contains:
    selector:
      description: 'The selector used, for example C({"target": "/raid"}).'
      type: dict
    line:
      description: 1-based line number of the entry.
      type: int
    target:
      description: Mount point of the entry, decoded.
      type: str
    source:
      description: Source field of the entry, decoded.
      type: str
    options_before:
      description: The options before the edit (C(defaults) when the field was absent).
      type: str
      sample: defaults,discard
    options_after:
      description: The options after the edit.
      type: str
      sample: defaults,noatime
    changed:
      description: Whether this entry's options changed.
      type: bool
path:
  description: The fstab file that was read (and written when changed).
  returned: success
  type: str
  sample: /etc/fstab
backup_file:
  description: Path of the backup, when one was made.
  returned: changed and O(backup) is true and not in check mode
  type: str
  sample: /etc/fstab.12345.2026-12-02@15:40:01~
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.dgxops.fleet.plugins.module_utils import oserror
from ansible_collections.dgxops.fleet.plugins.module_utils.fstab import (
    SELECTOR_KINDS,
    FstabError,
    apply_edits,
)


def _read(module, path):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (IOError, OSError) as exc:
        module.fail_json(**oserror.fail_args(exc, path, "read"))
    return data.decode("utf-8", "surrogateescape")


def _write(module, path, text):
    data = text.encode("utf-8", "surrogateescape")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fstab_options.", dir=directory)
    except (IOError, OSError) as exc:
        module.fail_json(**oserror.fail_args(exc, path, "write a temporary file next to"))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except (IOError, OSError) as exc:
        os.unlink(tmp)
        module.fail_json(**oserror.fail_args(exc, path, "write a temporary file next to"))
    try:
        module.atomic_move(tmp, to_bytes(path, errors="surrogate_or_strict"))
    except Exception as exc:  # pylint: disable=broad-except  # 2.19+ raises Exception chained to the OSError
        cause = exc if isinstance(exc, (IOError, OSError)) else exc.__cause__
        if os.path.exists(tmp):
            os.unlink(tmp)
        if not isinstance(cause, (IOError, OSError)):
            raise
        module.fail_json(**oserror.fail_args(cause, path))


def main():
    entry_spec = dict(
        target=dict(type="str"),
        source=dict(type="str"),
        uuid=dict(type="str"),
        label=dict(type="str"),
        add=dict(type="list", elements="str", default=[]),
        remove=dict(type="list", elements="str", default=[]),
    )
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/fstab"),
            target=dict(type="str"),
            source=dict(type="str"),
            uuid=dict(type="str"),
            label=dict(type="str"),
            add=dict(type="list", elements="str"),
            remove=dict(type="list", elements="str"),
            entries=dict(type="list", elements="dict", options=entry_spec),
            backup=dict(type="bool", default=True),
        ),
        mutually_exclusive=[
            ("entries", "target"), ("entries", "source"), ("entries", "uuid"), ("entries", "label"),
            ("entries", "add"), ("entries", "remove"),
            ("target", "source", "uuid", "label"),
        ],
        required_one_of=[("entries", "target", "source", "uuid", "label")],
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]

    if params["entries"] is not None:
        edits = params["entries"]
        if not edits:
            module.fail_json(msg="entries: at least one entry is required")
    else:
        edit = dict((k, params[k]) for k in SELECTOR_KINDS)
        edit["add"] = params["add"] or []
        edit["remove"] = params["remove"] or []
        edits = [edit]

    if not os.path.isfile(path):
        module.fail_json(msg="%s does not exist or is not a regular file; "
                             "fstab_options only edits existing entries" % path, path=path)

    before = _read(module, path)
    try:
        after, results = apply_edits(before, edits, path=path)
    except FstabError as exc:
        module.fail_json(msg=str(exc), path=path)

    changed = after != before
    result = dict(changed=changed, entries=results, path=path)
    if changed and module._diff:
        result["diff"] = dict(before=before, after=after, before_header=path, after_header=path)
    if changed and not module.check_mode:
        if params["backup"]:
            result["backup_file"] = module.backup_local(path)
        _write(module, path, after)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
