#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_resolve
short_description: Resolve the NVIDIA driver package set of one branch from apt, in one task
version_added: 0.1.0
description:
  - "Asks apt (C(apt-cache madison), C(apt-cache show) and, when the branch is missing,
    C(apt-cache pkgnames)) for the versions of a driver package set and returns what the
    C(dgxops.fleet.nvidia_driver) role installs: each package's versions of the branch, the chosen
    upstream version, each package's version of that release and the packages the set depends on at
    exactly their own version (followed until none is new, at most five rounds)."
  - The driver version is I(version) when given; else, unless I(upgrade_within_branch), the
    installed one of the branch (I(installed_versions)) and then the one the fleet runs
    (I(fleet_versions)) when the repository still has them; else the newest of the branch.
  - Never fails on a missing branch or version; RV(available), RV(branches) and RV(missing) say
    what is missing, and the caller refuses with its own message.
  - Read-only; commands run with C(LC_ALL=C).
options:
  names:
    description:
      - The packages of the set by role (C(driver), C(kernel), C(utils), C(fabricmanager), C(nscq));
        empty names are left out. C(driver) is required.
    type: dict
    required: true
  branch:
    description: The driver branch (C(580)).
    type: int
    required: true
  version:
    description: The upstream version to install (C(580.95.05)); empty chooses one as described above.
    type: str
    default: ""
  upgrade_within_branch:
    description: Choose the branch's newest version even when an installed or fleet version is available.
    type: bool
    default: false
  installed_versions:
    description: The Debian versions of the installed driver packages (either flavour).
    type: list
    elements: str
    default: []
  fleet_versions:
    description: The driver versions the other hosts of the play run.
    type: list
    elements: str
    default: []
  branch_in_name:
    description:
      - Whether package names carry the branch (Ubuntu's C(nvidia-driver-580-open)); then the branches the
        repository carries are the names C(apt-cache pkgnames) lists under I(branches_prefix), else the
        versions of C(names.driver).
    type: bool
    default: true
  branches_prefix:
    description: The prefix of the driver packages' names that carry the branch.
    type: str
    default: nvidia-driver-
extends_documentation_fragment:
  - dgxops.fleet.attributes
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
- name: Resolve the 580 open set
  dgxops.fleet.nvidia_driver_resolve:
    names:
      driver: nvidia-driver-580-open
      kernel: nvidia-dkms-580-open
      utils: nvidia-utils-580
    branch: 580
  register: plan
"""

RETURN = r"""
available:
  description: Each package's versions of the branch, newest first as apt lists them.
  returned: always
  type: dict
  sample: {"nvidia-driver-580-open": ["580.95.05-0ubuntu1", "580.82.07-0ubuntu1"]}
branches:
  description: The branches the repository carries; listed only when it lacks the requested one (else empty).
  returned: always
  type: list
  elements: int
target:
  description: The chosen upstream driver version; empty when the repository lacks the branch.
  returned: always
  type: str
  sample: 580.95.05
pinned:
  description: Each package's version of the target release, empty for a package that lacks it.
  returned: always
  type: dict
missing:
  description: The packages of the set that lack the target release.
  returned: always
  type: list
  elements: str
companions:
  description: The set's exact-version dependencies (not in the set) with their versions; empty when something is missing.
  returned: always
  type: dict
  sample: {"nvidia-kernel-common-580": "580.95.05-0ubuntu1"}
rounds:
  description: The C(apt-cache show) rounds the dependency walk ran.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dgxops.fleet.plugins.module_utils import driver_resolve as R

C_LOCALE = {"LC_ALL": "C"}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="dict", required=True),
            branch=dict(type="int", required=True),
            version=dict(type="str", default=""),
            upgrade_within_branch=dict(type="bool", default=False),
            installed_versions=dict(type="list", elements="str", default=[]),
            fleet_versions=dict(type="list", elements="str", default=[]),
            branch_in_name=dict(type="bool", default=True),
            branches_prefix=dict(type="str", default="nvidia-driver-"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    names = [n for n in (p["names"].get(k) for k in p["names"]) if n]
    driver = p["names"].get("driver")
    if not driver:
        module.fail_json(msg="names.driver is required")

    def apt_cache(argv, check=True):
        rc, out, err = module.run_command(argv, environ_update=C_LOCALE)
        if check and rc != 0:
            module.fail_json(msg="%s failed (rc=%d): %s" % (" ".join(argv), rc, (err or out).strip()[:500]),
                             rc=rc, cmd=argv, stdout=out, stderr=err)
        return rc, out

    _rc, out = apt_cache(["apt-cache", "madison"] + names)
    rows = R.madison_rows(out)
    available = R.index(rows, names, p["branch"])
    result = dict(changed=False, available=available, branches=[], target="", pinned={}, missing=[],
                  companions={}, rounds=0)
    if not available[driver]:
        if p["branch_in_name"]:
            _rc, out = apt_cache(["apt-cache", "pkgnames", p["branches_prefix"]], check=False)
            result["branches"] = R.branches_from_pkgnames(out, p["branches_prefix"])
        else:
            result["branches"] = R.branches_from_madison([r for r in rows if r[0] == driver])
        module.exit_json(**result)

    target = R.choose_version(p["version"], available[driver], p["installed_versions"], p["fleet_versions"],
                              p["branch"], p["upgrade_within_branch"])
    pinned = R.pin(available, names, target)
    result.update(target=target, pinned=pinned, missing=[k for k, v in pinned.items() if not v])
    if result["missing"]:
        module.exit_json(**result)
    result["companions"], result["rounds"] = R.walk(pinned, lambda argv: apt_cache(argv)[1])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
