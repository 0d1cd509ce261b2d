# -*- coding: utf-8 -*-
"""dgxops.fleet.nvidia_driver_resolve (and module_utils/driver_resolve) against a fake apt that
answers apt-cache madison / pkgnames / show in apt's formats, from package tables shaped like
NVIDIA's ubuntu2404 and debian12 CUDA repositories (the simulated fleet's aptrepo.py stand-ins)."""

import pytest

from ansible.module_utils import basic
from ansible_collections.dgxops.fleet.plugins.module_utils import driver_resolve as R
from ansible_collections.dgxops.fleet.plugins.modules import nvidia_driver_resolve as mod

from module_runner import run_module

URL = "https://developer.download.nvidia.com/compute/cuda/repos/%s/x86_64  Packages"


def exact(name, version):
    return "%s (= %s)" % (name, version)


def ubuntu_repo(releases=("580.95.05", "580.82.07"), other_branches=(570,)):
    """{name: {version: Depends}}: the Ubuntu layout (branch in the names)."""
    repo = {}

    def add(name, ver, deps=""):
        repo.setdefault(name, {})[ver] = deps

    for upstream in releases:
        v = upstream + "-0ubuntu1"
        b = upstream.split(".", maxsplit=1)[0]
        for suffix in ("", "-open"):
            add("nvidia-driver-%s%s" % (b, suffix), v, ", ".join(
                [exact("nvidia-dkms-%s%s" % (b, suffix), v), exact("nvidia-kernel-common-" + b, v), exact("nvidia-utils-" + b, v),
                 exact("nvidia-compute-utils-" + b, v), exact("libnvidia-compute-" + b, v)]))
            add("nvidia-dkms-%s%s" % (b, suffix), v, "dkms, %s, %s" % (
                exact("nvidia-kernel-common-" + b, v), exact("nvidia-kernel-source-%s%s" % (b, suffix), v)))
            add("nvidia-kernel-source-%s%s" % (b, suffix), v)
        add("nvidia-kernel-common-" + b, v)
        add("nvidia-utils-" + b, v, exact("libnvidia-compute-" + b, v))
        add("nvidia-compute-utils-" + b, v, exact("libnvidia-compute-" + b, v))
        add("libnvidia-compute-" + b, v)
        add("nvidia-fabricmanager", upstream + "-1")
        add("libnvidia-nscq", upstream + "-1")
    for b in other_branches:
        add("nvidia-driver-%d" % b, "%d.172.08-0ubuntu1" % b)
        add("nvidia-driver-%d-open" % b, "%d.172.08-0ubuntu1" % b)
    return repo


def debian12_repo(releases=("580.95.05", "575.57.08")):
    """Debian 12 layout: one name for every branch, three levels of exact Depends."""
    repo = {}
    for upstream in releases:
        v = upstream + "-1"
        rows = {
            "nvidia-driver-cuda": ", ".join(exact(n, v) for n in ("nvidia-smi", "libcuda1", "nvidia-persistenced")),
            "nvidia-smi": exact("libnvidia-ml1", v),
            "libnvidia-ml1": "libc6 (>= 2.34)",
            "libcuda1": exact("nvidia-kernel-support", v) + " | nvidia-cuda-stub",
            "nvidia-persistenced": "",
            "nvidia-kernel-open-dkms": exact("nvidia-kernel-support", v) + ", " + exact("firmware-nvidia-gsp", v),
            "nvidia-kernel-dkms": exact("nvidia-kernel-support", v) + ", " + exact("firmware-nvidia-gsp", v),
            "nvidia-kernel-support": "",
            "firmware-nvidia-gsp": "",
        }
        for name, deps in rows.items():
            repo.setdefault(name, {})[v] = deps
    return repo


class Apt:
    def __init__(self, repo, dist="ubuntu2404"):
        self.repo = repo
        self.dist = dist
        self.calls = []
        self.fail = {}

    def newest_first(self, name):
        return sorted(self.repo.get(name, {}), key=lambda v: [int(x) for x in v.split("-")[0].split(":")[-1].split(".")],
                      reverse=True)

    def __call__(self, argv):
        self.calls.append(list(argv))
        sub = argv[1]
        if sub in self.fail:
            return self.fail[sub], "", "E: broken"
        if sub == "madison":
            return 0, "".join("%30s | %s | %s\n" % (n, v, URL % self.dist)
                              for n in argv[2:] for v in self.newest_first(n)), ""
        if sub == "pkgnames":
            return 0, "".join(n + "\n" for n in sorted(self.repo) if n.startswith(argv[2])), ""
        if sub == "show":
            out = []
            for arg in argv[3:]:
                name, ver = arg.split("=", 1)
                if ver not in self.repo.get(name, {}):
                    return 100, "", "E: Version '%s' for '%s' was not found" % (ver, name)
                deps = self.repo[name][ver]
                out.append("Package: %s\nVersion: %s\nArchitecture: amd64\nPriority: optional\n%s"
                           "Description: stand-in\n\n" % (name, ver, ("Depends: %s\n" % deps) if deps else ""))
            return 0, "".join(out), ""
        raise AssertionError(argv)


@pytest.fixture
def apt(monkeypatch):
    holder = {}

    def run_command(self, argv, **kw):
        assert kw.get("environ_update") == {"LC_ALL": "C"}
        return holder["apt"](argv)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)

    def use(repo, dist="ubuntu2404"):
        holder["apt"] = Apt(repo, dist)
        return holder["apt"]
    return use


UBUNTU_OPEN = {"driver": "nvidia-driver-580-open", "kernel": "nvidia-dkms-580-open", "utils": "nvidia-utils-580",
               "fabricmanager": "nvidia-fabricmanager", "nscq": "libnvidia-nscq"}
DEBIAN_OPEN = {"driver": "nvidia-driver-cuda", "kernel": "nvidia-kernel-open-dkms", "utils": "nvidia-smi",
               "fabricmanager": "", "nscq": ""}


def test_upstream_and_rows():
    assert R.upstream("580.95.05-0ubuntu1") == "580.95.05"
    assert R.upstream("1:580.95.05-1") == "580.95.05"
    assert R.upstream("580.95.05") == "580.95.05"
    assert R.madison_rows("N: Unable to locate package x\n  a | 1-1 | http://r  Packages\n") == [["a", "1-1", "http://r  Packages"]]


def test_exact_dependencies_keep_only_equal_relations():
    show = ("Package: a\nPre-Depends: p (= 1-1)\nDepends: b (= 1-1), dkms, c (>= 2), d (= 1-1) | e, f:amd64 (= 1-1)\n"
            "Recommends: g (= 1-1)\n\nPackage: b\nDepends: b2 (= 1-2)\n")
    assert R.exact_dependencies(show) == {"p": "1-1", "b": "1-1", "f:amd64": "1-1", "b2": "1-2"}


def test_choose_version_order_of_preference():
    avail = ["580.95.05-0ubuntu1", "580.82.07-0ubuntu1"]
    assert R.choose_version("580.82.07", avail, [], [], 580, False) == "580.82.07"
    assert R.choose_version("", avail, ["580.82.07-0ubuntu1"], ["580.95.05"], 580, False) == "580.82.07"
    assert R.choose_version("", avail, ["570.172.08-0ubuntu1"], ["580.82.07"], 580, False) == "580.82.07"
    assert R.choose_version("", avail, ["580.82.07-0ubuntu1"], ["580.82.07"], 580, True) == "580.95.05"
    assert R.choose_version("", avail, ["580.11.11-0ubuntu1"], [], 580, False) == "580.95.05"
    assert R.choose_version("", [], [], [], 580, False) == ""


def test_branches():
    assert R.branches_from_pkgnames("nvidia-driver-570\nnvidia-driver-570-open\nnvidia-driver-580-server\n"
                                    "nvidia-driver-580-open\nnvidia-driver-assistant\n", "nvidia-driver-") == [570, 580]
    assert R.branches_from_madison([["nvidia-driver-cuda", "580.95.05-1", "x"], ["nvidia-driver-cuda", "1:575.57.08-1", "x"],
                                    ["nvidia-driver-cuda", "580.82.07-1", "x"]]) == [575, 580]


def test_ubuntu_newest_set_and_its_companions(capsys, apt):
    fake = apt(ubuntu_repo())
    res = run_module(capsys, mod.main, {"names": UBUNTU_OPEN, "branch": 580})
    assert res["target"] == "580.95.05"
    assert res["available"]["nvidia-driver-580-open"] == ["580.95.05-0ubuntu1", "580.82.07-0ubuntu1"]
    assert res["pinned"] == {"nvidia-driver-580-open": "580.95.05-0ubuntu1", "nvidia-dkms-580-open": "580.95.05-0ubuntu1",
                             "nvidia-utils-580": "580.95.05-0ubuntu1", "nvidia-fabricmanager": "580.95.05-1",
                             "libnvidia-nscq": "580.95.05-1"}
    assert list(res["pinned"]) == list(UBUNTU_OPEN.values())
    assert res["companions"] == {"nvidia-kernel-common-580": "580.95.05-0ubuntu1",
                                 "nvidia-compute-utils-580": "580.95.05-0ubuntu1",
                                 "libnvidia-compute-580": "580.95.05-0ubuntu1",
                                 "nvidia-kernel-source-580-open": "580.95.05-0ubuntu1"}
    assert res["missing"] == [] and res["branches"] == [] and res["rounds"] == 2
    assert fake.calls[0] == ["apt-cache", "madison"] + list(UBUNTU_OPEN.values())
    assert [c[1] for c in fake.calls] == ["madison", "show", "show"]
    assert fake.calls[2][3:3 + 5] == [k + "=" + v for k, v in res["pinned"].items()]


def test_ubuntu_keeps_the_installed_release(capsys, apt):
    apt(ubuntu_repo())
    res = run_module(capsys, mod.main, {"names": UBUNTU_OPEN, "branch": 580,
                                        "installed_versions": ["580.82.07-0ubuntu1"]})
    assert res["target"] == "580.82.07"
    assert set(res["pinned"].values()) == {"580.82.07-0ubuntu1", "580.82.07-1"}
    assert set(res["companions"].values()) == {"580.82.07-0ubuntu1"}


def test_ubuntu_missing_branch_lists_the_branches(capsys, apt):
    fake = apt(ubuntu_repo())
    res = run_module(capsys, mod.main, {"names": dict(UBUNTU_OPEN, driver="nvidia-driver-550-open"), "branch": 550})
    assert res["available"]["nvidia-driver-550-open"] == []
    assert res["branches"] == [570, 580]
    assert res["target"] == "" and res["companions"] == {}
    assert fake.calls[-1] == ["apt-cache", "pkgnames", "nvidia-driver-"]


def test_requested_version_missing_for_a_package(capsys, apt):
    repo = ubuntu_repo()
    del repo["nvidia-fabricmanager"]["580.82.07-1"]
    fake = apt(repo)
    res = run_module(capsys, mod.main, {"names": UBUNTU_OPEN, "branch": 580, "version": "580.82.07"})
    assert res["missing"] == ["nvidia-fabricmanager"] and res["pinned"]["nvidia-fabricmanager"] == ""
    assert res["companions"] == {} and [c[1] for c in fake.calls] == ["madison"]


def test_debian12_three_levels_and_branches_from_versions(capsys, apt):
    fake = apt(debian12_repo(), "debian12")
    res = run_module(capsys, mod.main, {"names": DEBIAN_OPEN, "branch": 580, "branch_in_name": False,
                                        "branches_prefix": "", "fleet_versions": ["580.95.05"]})
    assert res["pinned"] == {"nvidia-driver-cuda": "580.95.05-1", "nvidia-kernel-open-dkms": "580.95.05-1",
                             "nvidia-smi": "580.95.05-1"}
    assert res["companions"] == {"libcuda1": "580.95.05-1", "nvidia-persistenced": "580.95.05-1",
                                 "nvidia-kernel-support": "580.95.05-1", "firmware-nvidia-gsp": "580.95.05-1",
                                 "libnvidia-ml1": "580.95.05-1"}
    assert res["rounds"] == 2
    assert all(c[1] != "pkgnames" for c in fake.calls)
    res = run_module(capsys, mod.main, {"names": DEBIAN_OPEN, "branch": 590, "branch_in_name": False, "branches_prefix": ""})
    assert res["branches"] == [575, 580] and res["target"] == ""


def test_apt_failures_fail_the_module(capsys, apt):
    fake = apt(ubuntu_repo())
    fake.fail["madison"] = 100
    res = run_module(capsys, mod.main, {"names": UBUNTU_OPEN, "branch": 580})
    assert res["failed"] is True and "apt-cache madison" in res["msg"] and "rc=100" in res["msg"]
    fake = apt(ubuntu_repo())
    fake.fail["show"] = 100
    res = run_module(capsys, mod.main, {"names": UBUNTU_OPEN, "branch": 580}, check=True)
    assert res["failed"] is True and "apt-cache show --no-all-versions" in res["msg"]


def test_walk_stops_after_five_rounds():
    chain = {"p%d" % i: "p%d (= 1)" % (i + 1) for i in range(10)}

    def show(argv):
        return "".join("Package: %s\nDepends: %s\n\n" % (a.split("=")[0], chain[a.split("=")[0]]) for a in argv[3:])
    companions, rounds = R.walk({"p0": "1"}, show)
    assert rounds == 5 and sorted(companions) == ["p1", "p2", "p3", "p4", "p5"]
