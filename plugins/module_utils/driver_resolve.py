# -*- coding: utf-8 -*-
# Copyright: dgxops maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_driver role's package set, resolved from apt's answers (node code: pure functions;
dgxops.fleet.nvidia_driver_resolve runs the apt-cache commands).

Inputs are apt's own formats: ``apt-cache madison`` (``name | version | source`` lines, newest
first), ``apt-cache pkgnames PREFIX`` (one name a line) and ``apt-cache show --no-all-versions
name=version ...`` (RFC 822 stanzas). Versions are Debian versions (``[epoch:]upstream-revision``);
the role pins one upstream release across the set."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_UPSTREAM_RE = re.compile(r"^([0-9]+:)?(.*)-[^-]+$")
_DEP_RE = re.compile(r"^([^ |]+) \(= ([^)]+)\)$")
_DEPENDS_RE = re.compile(r"^(Pre-)?Depends: ")

# apt's dependency walk: rounds of `apt-cache show` until no new exact-version dependency appears
# (two or three levels in NVIDIA's repositories).
MAX_ROUNDS = 5


def upstream(version):
    """``[epoch:]upstream-revision`` -> ``upstream`` (a version without a revision is returned as is)."""
    return _UPSTREAM_RE.sub(r"\2", version)


def madison_rows(text):
    """``apt-cache madison`` output -> ``[[name, version, source], ...]`` in apt's order."""
    return [[cell.strip() for cell in line.split("|")] for line in (text or "").splitlines() if "|" in line]


def _to_int(text):
    try:
        return int(text)
    except ValueError:
        return 0


def branches_from_pkgnames(text, prefix):
    """``apt-cache pkgnames PREFIX`` output -> the sorted branches named ``PREFIX<NNN>[-open]``."""
    pattern = re.compile("^" + prefix + r"([0-9]{3})(-open)?$")
    found = set()
    for line in (text or "").splitlines():
        match = pattern.search(line)
        if match:
            found.add(int(match.group(1)))
    return sorted(found)


def branches_from_madison(rows):
    """madison rows of one package whose versions carry the branch (``580.95.05-1``) -> sorted branches."""
    found = set()
    for row in rows:
        if len(row) > 1:
            found.add(_to_int(re.sub(r"^([0-9]+:)?([0-9]{3})\..*$", r"\2", row[1])))
    return sorted(found)


def index(rows, names, branch):
    """{name: [version, ...]}: each package's versions of the branch, newest first as apt lists them."""
    branch_re = re.compile(r"^([0-9]+:)?" + str(branch) + r"\.")
    return dict((name, [row[1] for row in rows if len(row) > 1 and row[0] == name and branch_re.match(row[1])])
                for name in names)


def choose_version(requested, available_driver, installed_versions, fleet_versions, branch, upgrade_within_branch):
    """The driver's upstream version: the requested one; else, unless upgrading within the branch,
    the installed one of this branch and then the one the fleet runs (when the repository still has
    them); else the newest. '' when the repository has none of the branch."""
    if requested:
        return requested
    available = [upstream(v) for v in available_driver]
    branch_re = re.compile("^" + str(branch) + r"\.")
    installed = [v for v in (upstream(v) for v in installed_versions) if branch_re.match(v)]
    kept = ([v for v in installed if v in available] + [""])[0]
    fleet = ([v for v in available if v in fleet_versions] + [""])[0]
    if kept and not upgrade_within_branch:
        return kept
    if fleet and not upgrade_within_branch:
        return fleet
    return available[0] if available else ""


def pin(available, names, target):
    """{name: the package's version of the target's upstream release, '' when it has none}."""
    pattern = re.compile(r"^([0-9]+:)?" + re.escape(target) + r"-[^-]+$")
    return dict((name, ([v for v in available.get(name, []) if pattern.match(v)] + [""])[0]) for name in names)


def exact_dependencies(show_text):
    """``apt-cache show`` output -> {name: version} of every ``name (= version)`` in Depends and Pre-Depends."""
    deps = {}
    for line in (show_text or "").splitlines():
        if not _DEPENDS_RE.match(line):
            continue
        for item in _DEPENDS_RE.sub("", line).split(","):
            match = _DEP_RE.match(item.strip())
            if match:
                deps[match.group(1)] = match.group(2)
    return deps


def show_argv(named):
    """The ``apt-cache show`` argv for every name=version of ``named``."""
    return ["apt-cache", "show", "--no-all-versions"] + ["%s=%s" % (k, v) for k, v in named.items()]


def walk(pinned, show, rounds=MAX_ROUNDS):
    """The exact-version dependencies of the pinned set, followed until none is new (at most
    ``rounds`` rounds): ``show(argv)`` returns apt-cache show's output. Returns (companions, rounds run)."""
    companions = {}
    for done in range(1, rounds + 1):
        named = dict(pinned)
        named.update(companions)
        nxt = dict(companions)
        nxt.update(exact_dependencies(show(show_argv(named))))
        nxt = dict((k, v) for k, v in nxt.items() if k not in pinned)
        if nxt == companions:
            return companions, done
        companions = nxt
    return companions, rounds
