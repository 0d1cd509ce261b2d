#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_fingerprint
short_description: Read what must be the same on every node of a group (kernel, NCCL, topology, managed files)
version_added: 0.2.0
description:
  - Reads, without changing anything, the parts of a node's state that the fleet consistency check
    compares and that C(dgxops.fleet.nvidia_smi_facts) does not already report - the running kernel,
    the NCCL library version found on the node, a signature of the GPU topology matrix
    (C(nvidia-smi topo -m)) and the SHA-256 of the files the roles manage.
  - Guide 001 section 4.2 asks for the same driver, NCCL and topology on every node before a benchmark;
    the C(fleet_consistency) filter and C(playbooks/consistency.yml) compare these per inventory group.
options:
  files:
    description: Files to checksum (absolute paths). A missing file is reported as null.
    type: list
    elements: path
    default: []
  nccl_search_paths:
    description: Directories searched for C(libnccl.so.<version>), in order; the first hit wins.
    type: list
    elements: path
    default: [/usr/lib/x86_64-linux-gnu, /usr/lib/aarch64-linux-gnu, /usr/lib64, /usr/lib, /usr/local/lib,
              /usr/local/cuda/lib64, /opt/nccl/lib]
  timeout:
    description: Seconds C(nvidia-smi topo -m) may take.
    type: int
    default: 30
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.nvidia_smi
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    details: Nothing to diff.
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Read the node's fingerprint
  dgxops.fleet.node_fingerprint:
    files: [/etc/nccl.conf, /etc/modprobe.d/nvidia.conf]
  register: fp
"""

RETURN = r"""
fingerprint:
  description: What was read.
  returned: always
  type: dict
  contains:
    kernel:
      description: The running kernel (C(uname -r)).
      type: str
    nccl_version:
      description: Version of the first C(libnccl.so.X.Y.Z) found, null when none.
      type: str
    nccl_path:
      description: Where it was found.
      type: str
    topology_signature:
      description: First 16 hex digits of the SHA-256 of the C(nvidia-smi topo -m) matrix (legend dropped); null when it could not be read.
      type: str
    topology_error:
      description: Why the topology could not be read.
      type: str
    files:
      description: Path -> SHA-256 (null when the file is missing).
      type: dict
"""

import hashlib
import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils.nvidia_smi import NVIDIA_SMI_PATH_SPEC, find_nvidia_smi

NCCL_RE = re.compile(r"^libnccl\.so\.(\d+\.\d+\.\d+)$")


def sha256_file(path):
    try:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(65536), b""):
                h.update(chunk)
        return h.hexdigest()
    except (IOError, OSError):
        return None


def find_nccl(dirs):
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except (IOError, OSError):
            continue
        for name in names:
            m = NCCL_RE.match(name)
            if m:
                return m.group(1), os.path.join(d, name)
    return None, None


def topology_signature(text):
    """Hash of the matrix part of ``nvidia-smi topo -m`` (up to the ``Legend:`` block)."""
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("Legend"):
            break
        if line.strip():
            lines.append(" ".join(line.split()))
    if not lines:
        return None
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="path", default=[]),
            nccl_search_paths=dict(type="list", elements="path",
                                   default=["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                                            "/usr/lib", "/usr/local/lib", "/usr/local/cuda/lib64", "/opt/nccl/lib"]),
            nvidia_smi_path=dict(NVIDIA_SMI_PATH_SPEC),
            timeout=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    fp = {"kernel": os.uname()[2], "files": {}, "topology_signature": None, "topology_error": None}
    fp["nccl_version"], fp["nccl_path"] = find_nccl(p["nccl_search_paths"])
    for path in p["files"]:
        fp["files"][path] = sha256_file(path)
    binary = find_nvidia_smi(module, p["nvidia_smi_path"])
    if not binary:
        fp["topology_error"] = "%s not found" % (p["nvidia_smi_path"] or "nvidia-smi")
    else:
        rc, out, err = module.run_command(["timeout", str(p["timeout"]), binary, "topo", "-m"],
                                          environ_update={"LC_ALL": "C"})
        if rc == 0:
            fp["topology_signature"] = topology_signature(out)
        else:
            fp["topology_error"] = "nvidia-smi topo -m: rc=%d %s" % (rc, (err or out).strip()[:200])
    module.exit_json(changed=False, fingerprint=fp)


if __name__ == "__main__":
    main()
