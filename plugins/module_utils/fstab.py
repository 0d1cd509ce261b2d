# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Byte-preserving editing of mount options in an fstab(5) file.

Only the fourth field (the mount options) of the selected lines is rewritten;
every other byte of the file -- other lines, comments, blank lines, the
whitespace between fields, the other fields of the edited line, the line
endings and a missing final newline -- is kept exactly.

Parsing follows libmount (util-linux), the consumer of the file:

* a line is a comment when its first non-blank character is ``#``; a blank
  line is ignored; there are no trailing comments;
* fields are separated by blanks (spaces and tabs);
* fields may contain octal escapes (``\\040`` for a space, ``\\011`` tab,
  ``\\134`` backslash); selectors are compared with the decoded text;
* option values may be double-quoted and may then contain commas
  (``context="system_u:object_r:tmp_t:s0,c1"``): a quoted comma does not
  split the option list.

The text is handled as ``str`` decoded with ``surrogateescape`` so that bytes
that are not UTF-8 survive a round trip unchanged.

Pure standard library; Python 3.9+ on the managed node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath
import re

SELECTOR_KINDS = ("target", "source", "uuid", "label")

_FIELD_RE = re.compile(r"[^ \t]+")
_OCTAL_RE = re.compile(r"\\([0-7]{3})")
_OPTION_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@+\-]*$")


class FstabError(Exception):
    """An fstab edit that cannot be done; the message is meant for the user."""


# ---------------------------------------------------------------- lines


def split_lines(text):
    """Split ``text`` into ``(content, eol)`` pairs; ``''.join`` restores it.

    Only ``\\n`` ends a line (as for libmount). A ``\\r`` before it is kept in
    ``eol`` so that CRLF files keep their line endings. A final line without
    a newline has ``eol == ''``.
    """
    out = []
    pos = 0
    length = len(text)
    while pos < length:
        nl = text.find("\n", pos)
        if nl < 0:
            out.append((text[pos:], ""))
            break
        end = nl
        if end > pos and text[end - 1] == "\r":
            end -= 1
        out.append((text[pos:end], text[end:nl + 1]))
        pos = nl + 1
    return out


def is_entry(content):
    """True when a line holds an fstab entry (not blank, not a comment)."""
    stripped = content.lstrip(" \t")
    return bool(stripped) and not stripped.startswith("#")


def field_spans(content):
    """Return ``[(start, end), ...]`` of the blank-separated fields of a line."""
    return [m.span() for m in _FIELD_RE.finditer(content)]


def unescape(field):
    """Decode the octal escapes libmount accepts (``\\040`` -> space)."""
    return _OCTAL_RE.sub(lambda m: chr(int(m.group(1), 8)), field)


def _strip_quotes(value):
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        return value[1:-1]
    return value


def normalize_target(path):
    """Normalise a mount point for comparison (``/raid/`` == ``/raid``)."""
    if not path.startswith("/"):
        return path  # "none", "swap": compared literally
    return posixpath.normpath(path).replace("//", "/")


# ---------------------------------------------------------------- options


def split_options(text):
    """Split an option list at commas that are not inside double quotes."""
    if text == "":
        return []
    out = []
    cur = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
            cur.append(ch)
        elif ch == "," and not quoted:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def option_key(option):
    """The name of an option: the text before the first ``=``."""
    return option.split("=", 1)[0]


def check_option(option):
    """Return None when ``option`` is a well-formed mount option, else why not."""
    if not isinstance(option, str) or option == "":
        return "an option must be a non-empty string"
    if re.search(r"\s", option):
        return "an option must not contain whitespace (fstab separates fields with blanks)"
    if option.count('"') % 2:
        return "unbalanced double quote"
    if len(split_options(option)) != 1:
        return "one option per list item (a comma outside double quotes splits options)"
    if not _OPTION_KEY_RE.match(option_key(option)):
        return ("the option name must start with a letter, digit or '_' and contain only "
                "letters, digits and _ . : @ + -")
    return None


def edit_options(options, add=(), remove=()):
    """Return the option list after removing then adding options.

    * ``remove``: ``name`` removes every option with that name (``commit``
      removes ``commit=60``, ``discard`` removes ``discard`` and
      ``discard=async``); ``name=value`` removes only that exact option.
    * ``add``: a flag is appended when not already present; ``name=value``
      replaces the first option with that name in place (later duplicates of
      the name are dropped) or is appended.
    * An empty result becomes ``['defaults']`` (the options field cannot be
      empty).
    """
    result = list(options)
    for rem in remove:
        if "=" in rem:
            result = [opt for opt in result if opt != rem]
        else:
            result = [opt for opt in result if option_key(opt) != rem]
    for new in add:
        if "=" in new:
            key = option_key(new)
            positions = [i for i, opt in enumerate(result) if option_key(opt) == key and "=" in opt]
            if positions:
                first = positions[0]
                result[first] = new
                result = [opt for i, opt in enumerate(result) if i == first or i not in positions]
            else:
                result.append(new)
        elif new not in result:
            result.append(new)
    if not result:
        result = ["defaults"]
    return result


# ---------------------------------------------------------------- entries


class Entry:
    """One fstab entry line, with the spans of its fields."""

    def __init__(self, index, content, eol):
        self.index = index          # 0-based line index
        self.content = content
        self.eol = eol
        self.spans = field_spans(content)

    @property
    def line_number(self):
        return self.index + 1

    def field(self, n):
        if n < len(self.spans):
            start, end = self.spans[n]
            return self.content[start:end]
        return None

    @property
    def source(self):
        return unescape(self.field(0) or "")

    @property
    def target(self):
        return unescape(self.field(1) or "")

    @property
    def options_text(self):
        return self.field(3)

    @property
    def options(self):
        text = self.options_text
        return split_options(text) if text is not None else ["defaults"]

    def with_options(self, options):
        """Return the line content with only the options field replaced."""
        text = ",".join(options)
        if len(self.spans) >= 4:
            start, end = self.spans[3]
            return self.content[:start] + text + self.content[end:]
        # Options field absent ("src target fstype"): append it, reusing the
        # separator that precedes the last field so tabs stay tabs.
        last_start, last_end = self.spans[-1]
        prev_end = self.spans[-2][1]
        sep = self.content[prev_end:last_start] or " "
        return self.content[:last_end] + sep + text + self.content[last_end:]


def parse_entries(text):
    """Return ``(lines, entries)``: all ``(content, eol)`` pairs and the entries."""
    lines = split_lines(text)
    entries = []
    for index, (content, eol) in enumerate(lines):
        if is_entry(content):
            entry = Entry(index, content, eol)
            if len(entry.spans) >= 3:
                entries.append(entry)
    return lines, entries


def _source_matches_uuid(source, uuid):
    want = uuid.lower()
    if source.upper().startswith("UUID="):
        return _strip_quotes(source[5:]).lower() == want
    if source.startswith("/dev/disk/by-uuid/"):
        return source[len("/dev/disk/by-uuid/"):].lower() == want
    return False


def _source_matches_label(source, label):
    if source.upper().startswith("LABEL="):
        return _strip_quotes(source[6:]) == label
    if source.startswith("/dev/disk/by-label/"):
        return source[len("/dev/disk/by-label/"):] == label
    return False


def entry_matches(entry, kind, value):
    """True when ``entry`` is selected by ``kind`` (target/source/uuid/label) = ``value``."""
    if kind == "target":
        return normalize_target(entry.target) == normalize_target(value)
    if kind == "source":
        upper = value.upper()
        if upper.startswith("UUID="):
            return _source_matches_uuid(entry.source, _strip_quotes(value[5:]))
        if upper.startswith("LABEL="):
            return _source_matches_label(entry.source, _strip_quotes(value[6:]))
        return entry.source == value
    if kind == "uuid":
        return _source_matches_uuid(entry.source, value)
    if kind == "label":
        return _source_matches_label(entry.source, value)
    raise FstabError("unknown selector %r; allowed: %s" % (kind, ", ".join(SELECTOR_KINDS)))


def describe_selector(kind, value):
    return "%s=%s" % (kind, value)


def find_entry(entries, kind, value, path="fstab"):
    """Return the single entry selected by ``kind``/``value`` or raise FstabError."""
    found = [e for e in entries if entry_matches(e, kind, value)]
    if not found:
        known = ", ".join(sorted(set(e.target for e in entries))) or "none"
        raise FstabError(
            "no entry in %s matches %s (the role only edits existing entries; "
            "mount points present: %s)" % (path, describe_selector(kind, value), known))
    if len(found) > 1:
        raise FstabError(
            "%s matches %d entries in %s (lines %s); select the entry by a field that is unique "
            "(target, source, uuid or label)" % (
                describe_selector(kind, value), len(found), path,
                ", ".join(str(e.line_number) for e in found)))
    return found[0]


def selector_of(edit):
    """Return ``(kind, value)`` of an edit dict that names exactly one selector."""
    named = [(k, edit.get(k)) for k in SELECTOR_KINDS if edit.get(k) not in (None, "")]
    if len(named) != 1:
        raise FstabError(
            "each entry needs exactly one of %s, got %s" % (
                ", ".join(SELECTOR_KINDS), ", ".join(k for k, _value in named) or "none"))
    return named[0]


def apply_edits(text, edits, path="fstab"):
    """Apply option edits to fstab ``text``.

    ``edits`` is a list of dicts with one selector key (``target``, ``source``,
    ``uuid`` or ``label``) and the lists ``add`` and ``remove``. Edits are
    applied in order; two edits may select the same line.

    Returns ``(new_text, results)`` where each result describes one edit:
    ``selector``, ``line``, ``target``, ``options_before``, ``options_after``
    and ``changed``. Raises FstabError (nothing is changed) when an option is
    malformed, an option is both added and removed, or a selector matches no
    entry or several.
    """
    lines, entries = parse_entries(text)
    contents = [content for content, _eol in lines]
    results = []
    for edit in edits:
        kind, value = selector_of(edit)
        add = list(edit.get("add") or [])
        remove = list(edit.get("remove") or [])
        for option in add + remove:
            why = check_option(option)
            if why:
                raise FstabError("invalid mount option %r for %s: %s" % (
                    option, describe_selector(kind, value), why))
        both = [o for o in add if o in remove or option_key(o) in remove]
        if both:
            raise FstabError("%s: option(s) %s both added and removed" % (
                describe_selector(kind, value), ", ".join(both)))
        entry = find_entry(entries, kind, value, path)
        # Re-read the current content: an earlier edit may have changed it.
        current = Entry(entry.index, contents[entry.index], entry.eol)
        before = current.options
        after = edit_options(before, add, remove)
        changed = after != before
        if changed:
            contents[entry.index] = current.with_options(after)
        results.append({
            "selector": {kind: value},
            "line": entry.line_number,
            "target": entry.target,
            "source": entry.source,
            "options_before": ",".join(before),
            "options_after": ",".join(after),
            "changed": changed,
        })
    new_text = "".join(c + eol for c, (_old, eol) in zip(contents, lines))
    return new_text, results
