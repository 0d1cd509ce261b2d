#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# This file documents the dgxops.fleet.validate action plugin; the code runs on the controller.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: validate
short_description: Validate a role's variables on the controller before any host changes
version_added: 0.1.0
description:
  - Runs the collection's validator for one area (for example C(nccl), C(spark_rapids),
    C(storage_tuning)) on the controller. Nothing is sent to the managed host.
  - Fails with every problem found at once; each message names the variable,
    the bad value and what is allowed.
  - Warnings from the validator are shown as Ansible warnings.
options:
  area:
    description: Name of the validator, C(plugins/plugin_utils/validate_<area>.py).
    type: str
    required: true
  config:
    description:
      - The variables to validate, as a dictionary of variable name to value.
      - Left out, the action collects them itself from the task vars, each variable named once
        where it is defined. For a role's area (C(fleet_identity), C(gpu_tuning), C(mig),
        C(monitoring), C(nccl), C(nvidia_driver), C(spark_rapids), C(storage_tuning),
        C(tenant_isolation)) the names are the options of the role's C(meta/argument_specs.yml),
        plus the role's private tables and the inputs derived from the host's facts and inventory
        (C(plugins/plugin_utils/role_inputs.py)); for C(files) the variables of the path table
        (C(plugins/plugin_utils/validate_files.py)); for C(dgxops) every C(dgxops_enable_*) switch,
        C(dgxops_serial) and C(dgxops_max_fail_percentage).
      - The other areas (C(declared), C(tenant_gpu_affinity), C(mig_devices)) need it.
    type: dict
extends_documentation_fragment:
  - dgxops.fleet.attributes
attributes:
  check_mode:
    support: full
    details: Runs on the controller and only reads.
  diff_mode:
    support: none
author:
  - dgxops maintainers (@dgxops)
"""

EXAMPLES = r"""
- name: Validate every nccl_* variable of the role (names from its argument specs)
  dgxops.fleet.validate:
    area: nccl
  register: __nccl_validation

- name: Validate given values only
  dgxops.fleet.validate:
    area: fleet_identity
    config:
      fleet_identity_fleet_name: lab
      fleet_identity_node_role: compute
      fleet_identity_labels: {}
"""

RETURN = r"""
normalized:
  description: The validated configuration, normalised by the validator.
  returned: success
  type: dict
warnings_found:
  description: Warnings raised by the validator.
  returned: always
  type: list
  elements: str
"""
