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
    description: Name of the validator, C(plugins/module_utils/validate_<area>.py).
    type: str
    required: true
  config:
    description: The variables to validate, as a dictionary of variable name to value.
    type: dict
    required: true
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
- name: Validate NCCL settings before touching any host
  dgxops.fleet.validate:
    area: nccl
    config:
      nccl_settings: "{{ nccl_settings }}"
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
