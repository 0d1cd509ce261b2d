# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared result type for controller-side and module-side validators.

Every area validator (``validate_<area>.py`` in this directory) exposes
``validate(config)`` returning a :class:`ValidationResult`.  The same
function is called by the ``dgxops.fleet.validate`` action (on the
controller, before any host is touched) and, where useful, by modules, so
a message reads the same wherever it fires.

Messages always name the variable, the bad value and what is allowed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ValidationResult:
    """Errors, warnings and the normalised configuration of one validation."""

    def __init__(self):
        self.errors = []
        self.warnings = []
        self.normalized = {}

    def error(self, variable, value, allowed):
        """Record an error naming the variable, the bad value and what is allowed."""
        self.errors.append("%s: invalid value %r; allowed: %s" % (variable, value, allowed))

    def error_text(self, text):
        self.errors.append(text)

    def warn(self, text):
        self.warnings.append(text)

    @property
    def ok(self):
        return not self.errors

    def as_dict(self):
        return {
            "errors": list(self.errors),
            "warnings": list(self.warnings),
            "normalized": self.normalized,
        }


def check_distribution(result, config, supported, arches=None):
    """The host's distribution (and architecture) against a role's supported lists, from the
    facts the action passes (``__distribution`` "Name-Major", ``__distribution_version``,
    ``__architecture``); nothing is checked where the facts were not gathered."""
    distribution = config.get("__distribution")
    if not distribution:
        return
    if distribution not in (supported or []) or (arches is not None and config.get("__architecture") not in arches):
        shown = "%s %s" % (distribution.split("-")[0], config.get("__distribution_version") or distribution.split("-")[-1])
        if arches is not None:
            shown += " on %s" % config.get("__architecture")
        allowed = " or ".join(supported or [])
        if arches is not None:
            allowed += " on %s" % " or ".join(sorted(arches))
        result.error("ansible_facts.distribution", shown, allowed)
