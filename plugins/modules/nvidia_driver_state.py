#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_state
short_description: Read what a node has installed and loaded of the NVIDIA driver, in one task
version_added: 0.1.0
description:
  - "Reads, in one call, everything the C(dgxops.fleet.nvidia_driver) role decides from before it
    changes anything: dpkg's package states (installed, held, removed with configuration left),
    the loaded driver (C(/proc/driver/nvidia/version)), the installed kernel module's license
    (C(modinfo -F license nvidia)), the kernels the next boot may pick (C(/lib/modules/<release>)),
    whether nouveau is loaded (C(/sys/module/nouveau)), the Secure Boot EFI variable and, unless
    the answer is given, NVSwitch PCI devices (C(lspci -n -d 10de::0680))."
  - Returns the installed packages as C(ansible_facts.packages), in the shape
    M(ansible.builtin.package_facts) returns for the apt manager, so it replaces that task too.
  - Read-only; commands run with C(LC_ALL=C).
options:
  kernel:
    description:
      - The running kernel's release, listed first in RV(kernels).
      - Defaults to the release C(uname -r) reports on the node; the role passes C(ansible_facts.kernel).
    type: str
  nvswitch:
    description:
      - Whether the node has NVSwitches, when already known (the role variable, or the GPU facts).
      - When not given, C(lspci -n -d 10de::0680) decides; RV(nvswitch) is null when lspci cannot run.
    type: bool
  secure_boot_efivar:
    description: The Secure Boot EFI variable.
    type: path
    default: /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c
  proc_root:
    description: Where C(/proc) is mounted.
    type: path
    default: /proc
  sys_root:
    description: Where C(/sys) is mounted.
    type: path
    default: /sys
  modules_root:
    description: Where C(/lib/modules) is.
    type: path
    default: /lib/modules
  reboot_marker:
    description:
      - A file where earlier runs left the reasons for a reboot they did not make, one per line
        (the role keeps it under C(/run), so a reboot clears it); returned in RV(earlier_reboot_reasons).
    type: path
extends_documentation_fragment:
  - dgxops.fleet.attributes
  - dgxops.fleet.attributes.facts
attributes:
  check_mode:
    support: full
    details: Only reads; the result is the same in check mode.
  diff_mode:
    support: none
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Read what is installed and loaded of the NVIDIA driver
  dgxops.fleet.nvidia_driver_state:
    kernel: "{{ ansible_facts.kernel }}"
    nvswitch: "{{ nvidia_driver_nvswitch }}"
  become: true
  register: driver_state

- name: Show the loaded driver
  ansible.builtin.debug:
    msg: "{{ driver_state.loaded_version or 'none' }} ({{ driver_state.loaded_flavour or 'n/a' }})"
"""

RETURN = r"""
ansible_facts:
  description: Facts about the node's packages.
  returned: always
  type: dict
  contains:
    packages:
      description:
        - The installed packages, by name, each a list of C(name), C(version), C(arch), C(source)
          (one entry per installed architecture), as M(ansible.builtin.package_facts) returns them.
      type: dict
      sample: {"nvidia-driver-580-open": [{"name": "nvidia-driver-580-open", "version": "580.95.05-0ubuntu1", "arch": "amd64", "source": "apt"}]}
installed:
  description: The names of the installed packages, in dpkg's order.
  returned: always
  type: list
  elements: str
held:
  description: Packages on hold (dpkg's wanted state C(hold)).
  returned: always
  type: list
  elements: str
  sample: [nvidia-driver-580-open, nvidia-dkms-580-open]
config_only:
  description: Packages removed with their configuration files left (dpkg state C(rc)).
  returned: always
  type: list
  elements: str
loaded_version:
  description: The loaded driver's version, null when no driver is loaded.
  returned: always
  type: str
  sample: 580.95.05
loaded_flavour:
  description: The loaded driver's kernel-module flavour (C(open) or C(proprietary)), null when none is loaded.
  returned: always
  type: str
module_flavour:
  description:
    - The installed nvidia module's flavour by its license (C(Dual MIT/GPL) is C(open), C(NVIDIA) is
      C(proprietary)); null when no module is installed or modinfo cannot run.
  returned: always
  type: str
kernels:
  description: The running kernel, then every release with a C(/lib/modules) directory (sorted).
  returned: always
  type: list
  elements: str
nouveau_loaded:
  description: Whether the nouveau module is loaded.
  returned: always
  type: bool
secure_boot:
  description: Whether Secure Boot is enabled; null without the EFI variable (legacy boot, or efivarfs not exposed).
  returned: always
  type: bool
nvswitch:
  description: Whether the node has NVSwitches (option I(nvswitch), else lspci); null when unknown.
  returned: always
  type: bool
lspci_rc:
  description: The exit status of C(lspci), null when it did not run (I(nvswitch) given).
  returned: always
  type: int
earlier_reboot_reasons:
  description: The non-empty lines of O(reboot_marker); empty when it is not given or does not exist.
  returned: always
  type: list
  elements: str
  sample: [driver packages changed]
"""

import errno
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import driver_state as S
from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P

C_LOCALE = {"LC_ALL": "C"}


def run(module, argv):
    """(rc, stdout) of argv with LC_ALL=C; a missing program is rc 2 (ENOENT), as the command module reports it."""
    path = module.get_bin_path(argv[0])
    if not path:
        return errno.ENOENT, ""
    rc, out, _err = module.run_command([path] + list(argv[1:]), environ_update=C_LOCALE)
    return rc, out


def read(path, mode="r"):
    """A file's content, None when it cannot be read."""
    try:
        with open(path, mode) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def module_dirs(root):
    """The names of the directories (not links, not hidden) in root, as ansible.builtin.find lists them."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return [n for n in names if not n.startswith(".") and os.path.isdir(os.path.join(root, n))
            and not os.path.islink(os.path.join(root, n))]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            kernel=dict(type="str"),
            nvswitch=dict(type="bool"),
            secure_boot_efivar=dict(type="path",
                                    default="/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"),
            proc_root=dict(type="path", default="/proc"),
            sys_root=dict(type="path", default="/sys"),
            modules_root=dict(type="path", default="/lib/modules"),
            reboot_marker=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params

    rc, out = run(module, ["dpkg-query", "-W", "-f=" + S.DPKG_QUERY_FORMAT])
    if rc != 0:
        module.fail_json(msg="dpkg-query -W failed (rc=%d): cannot read the installed packages" % rc, rc=rc)
    dpkg = S.parse_dpkg_status(out)

    loaded = S.loaded_driver(read(os.path.join(p["proc_root"], "driver", "nvidia", "version")) or "")
    _rc, license_text = run(module, ["modinfo", "-F", "license", "nvidia"])

    lspci_rc = None
    lspci_out = ""
    if p["nvswitch"] is None:
        lspci_rc, lspci_out = run(module, ["lspci", "-n", "-d", "10de::0680"])

    module.exit_json(
        changed=False,
        ansible_facts={"packages": dpkg["packages"]},
        installed=list(dpkg["packages"]),
        held=dpkg["held"],
        config_only=dpkg["config_only"],
        loaded_version=loaded["version"],
        loaded_flavour=loaded["flavour"],
        module_flavour=P.flavour_from_license(license_text),
        kernels=S.kernels(p["kernel"] or os.uname()[2], module_dirs(p["modules_root"])),
        nouveau_loaded=os.path.lexists(os.path.join(p["sys_root"], "module", "nouveau")),
        secure_boot=S.secure_boot_from_efivar(read(p["secure_boot_efivar"], "rb")),
        nvswitch=S.is_nvswitch(p["nvswitch"], lspci_rc, lspci_out),
        lspci_rc=lspci_rc,
        earlier_reboot_reasons=[line for line in (read(p["reboot_marker"]) or "").splitlines() if line.strip()]
        if p["reboot_marker"] else [],
    )


if __name__ == "__main__":
    main()
