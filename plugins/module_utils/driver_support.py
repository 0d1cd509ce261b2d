# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The first NVIDIA data-center driver branch that supports each GPU family.

A driver branch older than this does not know the GPU: it installs, but the kernel module
refuses the device (``NVRM: The NVIDIA GPU ... is not supported by the ... driver``) and
nvidia-smi shows no GPU.  The nvidia_driver validator refuses such a branch and the driver
doctor flags it.

Source: NVIDIA Data Center GPU Driver release notes (docs.nvidia.com/datacenter/tesla/), the
first branch whose "supported hardware" lists the GPU: A100 R450 (450.51.05, 2020-07),
H100 R525 (525.60.13), L40S R525 (525.85.12), H200 R550 (550.54.15), GH200 R535 (535.129.03),
GB10 / DGX Spark R580 (580.95.05), B200 R570 (570.133.20, also the GPU Operator's platform
notes). Read 2026-12-03.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MIN_BRANCH_BY_FAMILY = {
    "a100": 450,
    "a30": 450,
    "h100": 525,
    "l40s": 525,
    "gh200": 535,
    "h200": 550,
    "b200": 570,
    "gb10": 580,
}


def unsupported(branch, family):
    """``None`` when ``branch`` supports ``family`` (or either is unknown), else the minimum branch."""
    if not isinstance(branch, int) or isinstance(branch, bool) or not family:
        return None
    minimum = MIN_BRANCH_BY_FAMILY.get(str(family).lower())
    if minimum is not None and branch < minimum:
        return minimum
    return None
