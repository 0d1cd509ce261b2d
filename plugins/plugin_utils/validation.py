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

The type helpers below are the one place where a validator reads a boolean or an integer:

- ``to_bool`` / ``to_int``: what an argument spec's ``type: bool`` / ``type: int`` reads
  (``check_type_bool`` / ``check_type_int``), ``None`` for anything else; a boolean is never an
  integer (``check_type_int`` would pass ``True`` through as 1).
- ``is_bool`` / ``is_int``: a real YAML boolean / integer, for the variables a role's tasks
  read as they are (``when: mig_reboot``, ``TimeoutStartSec={{ mig_boot_timeout }}``), where a
  string the argument spec accepts ("no", "300") would be truthy or rendered as written.
- ``as_bool`` / ``as_int``: either of those, recording the error (variable, bad value, what is
  allowed) in a :class:`ValidationResult` or a list; ``int_allowed`` words an integer range.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.module_utils.common.validation import check_type_int
from ansible.module_utils.parsing.convert_bool import boolean

BOOL_ALLOWED = "true or false"


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


def record(errors, variable, value, allowed):
    """The error "variable: invalid value 'value'; allowed: ..." in a ValidationResult or a list."""
    if isinstance(errors, ValidationResult):
        errors.error(variable, value, allowed)
    else:
        errors.append("%s: invalid value %r; allowed: %s" % (variable, value, allowed))


def is_bool(value):
    """A real boolean (YAML true/false), not a string or a number that reads as one."""
    return isinstance(value, bool)


def is_int(value):
    """A real integer; a boolean is not one (``isinstance(True, int)`` is true in Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def to_bool(value):
    """``True``/``False`` as an argument spec's ``type: bool`` (``check_type_bool``, the ``bool``
    filter's strict reading) reads the value: a boolean; "true"/"yes"/"on"/"y"/"t"/"1" and
    "false"/"no"/"off"/"n"/"f"/"0" in any case with surrounding blanks; the numbers 1 and 0.
    ``None`` for anything else ("maybe", 2, None, a list)."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, (str, int, float)):
        return None
    try:
        return boolean(value, strict=True)
    except TypeError:
        return None


def to_int(value):
    """The integer an argument spec's ``type: int`` (``check_type_int``) reads from the value: an
    integer; a string or a float with a whole-number value (" 4 ", "+3", "-1", "1_000", "2.0",
    "1e3", 2.0). ``None`` for anything else, a boolean included ("0x10", "1.5", 1.5, "", None)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, int):
        return value
    try:
        return check_type_int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: "inf", float("inf")
        return None


def int_allowed(minimum=None, maximum=None, what="an integer"):
    """How an error states an integer range: "an integer from 1 to 10", "an integer >= 1"."""
    if minimum is not None and maximum is not None:
        return "%s from %d to %d" % (what, minimum, maximum)
    if minimum is not None:
        return "%s >= %d" % (what, minimum)
    if maximum is not None:
        return "%s <= %d" % (what, maximum)
    return what


def as_bool(variable, value, errors, allowed=BOOL_ALLOWED, strict=False):
    """The value as a boolean (``to_bool``; with ``strict`` only a real boolean), or ``None``
    after recording an error naming the variable, the value and ``allowed`` in ``errors``."""
    flag = (value if is_bool(value) else None) if strict else to_bool(value)
    if flag is None:
        record(errors, variable, value, allowed)
    return flag


def as_int(variable, value, errors, minimum=None, maximum=None, allowed=None, strict=False):
    """The value as an integer (``to_int``; with ``strict`` only a real integer) within
    ``minimum``..``maximum`` (either may be ``None``), or ``None`` after recording an error naming
    the variable, the value and ``allowed`` (default: ``int_allowed(minimum, maximum)``)."""
    number = (value if is_int(value) else None) if strict else to_int(value)
    if number is None or (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        record(errors, variable, value, int_allowed(minimum, maximum) if allowed is None else allowed)
        return None
    return number


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
