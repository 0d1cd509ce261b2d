# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function
__metaclass__ = type


class ModuleDocFragment(object):
    """The one nvidia-smi option of every module that runs nvidia-smi (its argument spec is
    module_utils.nvidia_smi.NVIDIA_SMI_PATH_SPEC, resolved by find_nvidia_smi)."""

    DOCUMENTATION = r'''
options:
  nvidia_smi_path:
    description:
      - Path or name of nvidia-smi. A name (default C(nvidia-smi)) is looked up on C(PATH) first, then in
        C(/usr/bin), C(/usr/local/bin), C(/usr/local/nvidia/bin), C(/usr/sbin) and C(/bin).
    type: path
    aliases: [nvidia_smi]
'''
