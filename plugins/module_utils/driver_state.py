# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node has installed and loaded of the NVIDIA driver, from the raw texts the
dgxops.fleet.nvidia_driver_state module reads (node code: pure functions, no I/O).

dpkg's status database, read with ``dpkg-query -W -f`` and :data:`DPKG_QUERY_FORMAT`
(tab-separated ``Status-Abbrev Package Version Architecture``). ``Status-Abbrev`` is three
characters: the wanted state (``u``nknown, ``i``nstall, ``h``old, ``r``emove, ``p``urge), the
package state (``n``ot-installed, ``c``onfig-files, ``H``alf-installed, ``U``npacked,
half-con``F``igured, triggers-a``W``aited, triggers-``t``pending, ``i``nstalled) and an error flag
(a space, or ``R`` for reinst-required)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P

DPKG_QUERY_FORMAT = "${db:Status-Abbrev}\\t${Package}\\t${Version}\\t${Architecture}\\n"

# Package states dpkg (and python-apt's is_installed, which package_facts reads) count as
# not installed: nothing unpacked, or only the configuration files left.
_NOT_INSTALLED = ("n", "c")


def parse_dpkg_status(text):
    """``dpkg-query -W -f=DPKG_QUERY_FORMAT`` output ->
    ``{"packages": {name: [{"name", "version", "arch", "source"}]}, "held": [..], "config_only": [..]}``.

    ``packages`` has the shape of ``ansible.builtin.package_facts``' (manager apt): the packages
    dpkg has (partly) installed, one entry per installed architecture. ``held``: the packages
    whose wanted state is hold; ``config_only``: removed packages whose configuration files are
    left (their ``rc`` state)."""
    packages = {}
    held = []
    config_only = []
    for line in (text or "").splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or len(fields[0]) < 2 or not fields[1]:
            continue
        status, name = fields[0], fields[1]
        version = fields[2] if len(fields) > 2 else ""
        arch = fields[3] if len(fields) > 3 else ""
        if status[0] == "h" and name not in held:
            held.append(name)
        if status[1] == "c":
            if name not in config_only:
                config_only.append(name)
        elif status[1] not in _NOT_INSTALLED:
            packages.setdefault(name, []).append(
                {"name": name, "version": version, "arch": arch, "source": "apt"})
    return {"packages": packages, "held": held, "config_only": config_only}


def loaded_driver(text):
    """``/proc/driver/nvidia/version`` text (empty when no driver is loaded) ->
    ``{"version": "580.95.05"|None, "flavour": "open"|"proprietary"|None}``."""
    # the shared parser's: the flavour from the NVRM line, as the facts module and the doctor read it
    return P.parse_proc_driver_version(text)


def secure_boot_from_efivar(data):
    """The bytes of the SecureBoot EFI variable (four attribute bytes, then the state byte) ->
    True (enabled), False, or None (no variable: legacy boot, or efivarfs not exposed)."""
    if not data:
        return None
    return bytearray(data)[-1] == 1


def kernels(running, module_dirs):
    """The running kernel first, then every ``/lib/modules/<release>`` (sorted), without repeats:
    the next boot may pick any of them."""
    out = [running] if running else []
    for release in sorted(module_dirs):
        if release not in out:
            out.append(release)
    return out


def is_nvswitch(known, lspci_rc, lspci_out):
    """Whether this is an NVSwitch system: ``known`` when given, else whether
    ``lspci -n -d 10de::0680`` listed a device, else None (lspci did not run)."""
    if known is not None:
        return bool(known)
    if lspci_rc != 0:
        return None
    return len((lspci_out or "").strip()) > 0
