# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """The attribute descriptions every dgxops.fleet module shares (community.general's
    plugins/doc_fragments/attributes.py is the model). A module extends
    C(dgxops.fleet.attributes) (and C(.platform), C(.facts) where they apply) and states only
    its own support levels and details."""

    # Every module: check_mode and diff_mode; the module sets support (and details).
    DOCUMENTATION = r'''
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in diff mode), when in diff mode.
'''

    # Modules that act on the node's OS; the module may narrow the description.
    PLATFORM = r'''
options: {}
attributes:
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
'''

    # Modules that return ansible_facts.
    FACTS = r'''
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
'''
