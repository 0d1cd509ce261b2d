# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fleet_consistency: compare the nodes of each group (see plugins/plugin_utils/consistency.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: fleet_consistency
short_description: Compare driver, CUDA, NCCL, kernel, GPUs, VBIOS, topology, MIG layout and managed files per group
version_added: 0.2.0
description:
  - "Input is a dict host -> C({'facts': ansible_facts, 'fingerprint': node_fingerprint result, 'group': name})."
  - Within each group the value most nodes share is the reference; every node that differs is reported with what differs.
  - Returns C(consistent), C(outlier_count), C(groups) (per group C(hosts), C(reference), C(outliers)) and C(text) (report lines).
options:
  _input:
    description: host -> record.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Compare the fleet
  ansible.builtin.set_fact:
    report: "{{ records | dgxops.fleet.fleet_consistency }}"
"""

RETURN = r"""
_value:
  description: The comparison.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.dgxops.fleet.plugins.plugin_utils import consistency


def fleet_consistency(nodes):
    if not isinstance(nodes, dict):
        raise AnsibleFilterError("fleet_consistency: expected a dict host -> record, got %s" % type(nodes).__name__)
    records, groups = {}, {}
    for host, rec in nodes.items():
        rec = rec or {}
        records[host] = consistency.node_record(rec.get("facts") or {}, rec.get("fingerprint") or {})
        groups[host] = rec.get("group")
    result = consistency.compare(records, groups)
    result["text"] = consistency.render_text(result)
    return result


def consistency_record(hostvars_of_host, groups):
    """One host's record from its hostvars: facts, the registered fingerprint, and its group
    (``dgxops_consistency_group``, else the smallest inventory group it is in)."""
    hv = hostvars_of_host
    group = hv.get("dgxops_consistency_group")
    if not group:
        names = [g for g in (hv.get("group_names") or []) if g not in ("all", "ungrouped")]
        sizes = dict((g, len(groups.get(g) or [])) for g in names)
        group = sorted(names, key=lambda g: (sizes[g], g))[0] if names else "ungrouped"
    fp = hv.get("__dgxops_fingerprint") or {}
    return {"facts": dict(hv.get("ansible_facts") or {}), "fingerprint": dict(fp.get("fingerprint") or {}),
            "group": group}


class FilterModule(object):
    def filters(self):
        return {"fleet_consistency": fleet_consistency, "consistency_record": consistency_record}
