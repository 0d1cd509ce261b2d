# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the spark_rapids role.

spark_properties_line(value, key): one line of spark-defaults.conf as
java.util.Properties.load() (Spark's reader) will parse it back to exactly
``key`` -> ``value``:

* ``key value`` separated by one space, no quotes, no inline comment;
* backslashes doubled (Properties treats ``\\`` as an escape and a trailing
  one as a line continuation);
* a value that starts with ``=`` or ``:`` gets that character escaped (after
  the whitespace separator Properties would swallow one ``=`` or ``:``);
* an empty value is written as the bare key (Spark reads "").
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def escape_value(value):
    text = "%s" % (value,)
    if "\n" in text or "\r" in text:
        raise AnsibleFilterError("spark_properties_line: value %r spans lines" % (text,))
    text = text.replace("\\", "\\\\")
    if text[:1] in ("=", ":"):
        text = "\\" + text
    return text


def spark_properties_line(value, key):
    key = "%s" % (key,)
    if not key or any(c in key for c in " \t=:#!\\\n"):
        raise AnsibleFilterError("spark_properties_line: key %r needs escaping; keys are validated first" % (key,))
    text = escape_value(value)
    return key if text == "" else "%s %s" % (key, text)


class FilterModule(object):
    def filters(self):
        return {"spark_properties_line": spark_properties_line}
