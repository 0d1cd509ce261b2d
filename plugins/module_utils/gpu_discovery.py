# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPUs and MIG devices a node offers to Spark (the spark_rapids role's discovery script).

Standard library only, and nothing from Ansible: the ``spark_rapids`` role copies this file with
``nvidia_smi_parse.py`` next to its GPU discovery script, which runs with the node's python3.
The nvidia-smi output is read by ``nvidia_smi_parse`` (``gpus_from_query``, ``parse_list``),
the parsers every module uses.

* No GPU in MIG mode: the addresses are the GPU indexes ("0".."7"), like Spark's
  examples/src/main/scripts/getGpusResources.sh.
* A GPU in MIG mode contributes its MIG devices instead of itself; with ``mig_address`` index
  (what spark-rapids needs: it calls Cuda.setDevice(address.toInt)) the addresses are the CUDA
  ordinals 0..N-1 of the listed devices in ``nvidia-smi -L`` order, with ``uuid`` the MIG-...
  UUIDs.
* A GPU in MIG mode without MIG devices contributes nothing (a warning).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

try:
    from ansible_collections.dgxops.fleet.plugins.module_utils import nvidia_smi_parse as P
except ImportError:  # the discovery script's copy next to nvidia_smi_parse.py
    import nvidia_smi_parse as P

QUERY_FIELDS = ("index", "uuid", "mig.mode.current")
# The two nvidia-smi calls, as argv after the binary (the second only where needs_listing says so).
QUERY_ARGS = ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader"]
LIST_ARGS = ["-L"]
MIG_ADDRESSES = ("index", "uuid")


class DiscoveryError(Exception):
    pass


def needs_listing(query_text):
    """Whether :func:`devices` needs the ``-L`` output too: only a GPU in MIG mode lists its MIG
    devices there, so a node without one is read with a single nvidia-smi process. Output that
    cannot be read asks for the listing as well, so that :func:`devices` reports the error."""
    gpus, errors = P.gpus_from_query(query_text, list(QUERY_FIELDS), header=False)
    return bool(errors) or not gpus or any(g.get("mig_mode_current") == "Enabled" for g in gpus)


def devices(query_text, list_text, mig_address="index"):
    """``--query-gpu=index,uuid,mig.mode.current --format=csv,noheader`` and ``-L`` output ->
    ``(devices, warnings)``; each device ``{address, gpu, uuid, profile, mig}``.

    Raises :class:`DiscoveryError` when the output cannot be read or no device is usable.
    """
    if mig_address not in MIG_ADDRESSES:
        raise DiscoveryError("mig address %r; allowed: %s" % (mig_address, ", ".join(MIG_ADDRESSES)))
    gpus, errors = P.gpus_from_query(query_text, list(QUERY_FIELDS), header=False)
    bad = [g for g in gpus if g.get("index") is None or not g.get("uuid")]
    if errors or bad:
        raise DiscoveryError("unexpected nvidia-smi --query-gpu output: %s"
                             % "; ".join(errors or ["a GPU without index or UUID"]))
    migs = dict((g["uuid"], g["mig_devices"]) for g in P.parse_list(list_text))
    found, warnings = [], []
    for gpu in sorted(gpus, key=lambda g: g["index"]):
        if gpu.get("mig_mode_current") != "Enabled":
            found.append({"gpu": gpu["index"], "uuid": gpu["uuid"], "profile": "", "mig": False})
            continue
        mig_devices = migs.get(gpu["uuid"], [])
        if not mig_devices:
            warnings.append("GPU %d is in MIG mode but has no MIG devices; skipped" % gpu["index"])
        for dev in mig_devices:
            found.append({"gpu": gpu["index"], "uuid": dev["uuid"], "profile": dev["profile"], "mig": True})
    if not found:
        raise DiscoveryError("no usable GPU or MIG device found")
    any_mig = any(d["mig"] for d in found)
    if any_mig and not all(d["mig"] for d in found):
        warnings.append("this node mixes whole GPUs and MIG devices; addresses are ordinals in nvidia-smi -L order")
    for ordinal, dev in enumerate(found):
        if not any_mig:
            dev["address"] = str(dev["gpu"])
        elif mig_address == "uuid":
            dev["address"] = dev["uuid"]
        else:
            dev["address"] = str(ordinal)
    return found, warnings
