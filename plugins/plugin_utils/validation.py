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
