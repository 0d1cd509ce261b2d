"""The stand-in CUDA repository (src/dgxops/sim/aptrepo.py): its debian12 layout as apt resolves it.

apt runs in a sandbox (its own status file, lists and cache under tmp_path, simulation only), so
the dependency shape is checked by the resolver that installs it on a node, not by reading fields.
"""
import os
import shutil
import subprocess

import pytest

from dgxops.sim import aptrepo
from dgxops.sim.fakesmi import admin

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("dpkg-deb", "dpkg-scanpackages", "apt-get")),
                                reason="needs dpkg-dev and apt")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    out = tmp_path_factory.mktemp("cuda-repo")
    aptrepo.build(str(out), "6.1.0-test")
    return out


def stanzas(path):
    with open(path) as fh:
        return [dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
                for block in fh.read().strip().split("\n\n")]


class Apt:
    """apt-get -s against one layout, with an installed set given as dpkg status stanzas."""

    def __init__(self, root, repo):
        self.root = root
        for sub in ("lists/partial", "cache/archives/partial", "prefs"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "sources.list").write_text("deb [trusted=yes] file:%s/ ./\n" % repo)
        self.index = {(p["Package"], p["Version"]): p for p in stanzas(repo / "Packages")}
        self.installed = []
        self.run("update")

    def opts(self):
        r = self.root
        return ["-o", "Dir::State::status=%s" % (r / "status"), "-o", "Dir::State::Lists=%s" % (r / "lists"),
                "-o", "Dir::Cache=%s" % (r / "cache"), "-o", "Dir::Etc::SourceList=%s" % (r / "sources.list"),
                "-o", "Dir::Etc::SourceParts=%s" % (r / "none"), "-o", "Dir::Etc::Preferences=%s" % (r / "none"),
                "-o", "Dir::Etc::PreferencesParts=%s" % (r / "prefs"), "-o", "Debug::NoLocking=1",
                "-o", "APT::Architecture=amd64", "-o", "APT::Get::List-Cleanup=0"]

    def install_state(self, specs):
        """Pretend name=version packages are installed (dpkg status)."""
        keep = ("Package", "Version", "Architecture", "Depends", "Conflicts", "Provides", "Replaces")
        out = []
        for spec in specs:
            name, version = spec.split("=")
            p = self.index[(name, version)]
            out.append("\n".join(["Package: %s" % name, "Status: install ok installed"]
                                 + ["%s: %s" % (k, p[k]) for k in keep[1:] if k in p]))
        (self.root / "status").write_text("\n\n".join(out) + "\n")

    def run(self, *args):
        (self.root / "status").touch()
        return subprocess.run(["apt-get", *self.opts(), *args], capture_output=True, text=True,
                              env=dict(os.environ, LC_ALL="C"), check=False)

    def simulate(self, specs):
        proc = self.run("-s", "install", "--no-install-recommends", *specs)
        # "Inst name [old] (new ...)": the new version is the one in parentheses
        inst = {}
        for line in proc.stdout.splitlines():
            if line.startswith("Inst "):
                words = line.split()
                new = [w for w in words[2:] if w.startswith("(")][0].strip("(")
                inst[words[1]] = new
        removed = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("Remv ")]
        return proc, inst, removed


@pytest.fixture()
def deb12(tree, tmp_path):
    return Apt(tmp_path, tree / "debian12")


def test_the_tree_carries_both_layouts_as_flat_repositories(tree):
    ubuntu = {p["Package"] for p in stanzas(tree / "ubuntu" / "Packages")}
    debian = stanzas(tree / "debian12" / "Packages")
    names = {p["Package"] for p in debian}
    assert {"nvidia-driver-580-open", "nvidia-dkms-550", "nvidia-utils-570"} <= ubuntu
    assert not names & {"nvidia-driver-580-open", "nvidia-dkms-550", "nvidia-utils-570"}
    # Debian style: one name for every branch, the branch only in the version "<upstream>-1"
    for name in ("nvidia-driver-cuda", "nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms",
                 "nvidia-kernel-support", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-persistenced",
                 "firmware-nvidia-gsp", "nvidia-open", "cuda-drivers"):
        versions = sorted(p["Version"] for p in debian if p["Package"] == name)
        for branch in ("550", "570", "580"):
            assert ["%s-1" % v for v in aptrepo.BRANCHES[branch]] == [v for v in versions if v.startswith(branch + ".")]
        assert all(p.get("Source") for p in debian if p["Package"] == name)
    # fabric manager lost the branch in its name at 580, in this layout too
    assert {"nvidia-fabricmanager-550", "libnvidia-nscq-570", "nvidia-fabricmanager", "libnvidia-nscq"} <= names
    # the system stand-ins are in both
    for layout in ("ubuntu", "debian12"):
        assert {"dkms", "initramfs-tools", "linux-headers-6.1.0-test", "dgxops-canary"} <= {
            p["Package"] for p in stanzas(tree / layout / "Packages")}


def test_an_older_point_release_needs_its_whole_release_named(deb12):
    # the compute-only set of NVIDIA's guide, at the older 550 release: the exact-version
    # dependencies resolve to the newest release, so apt refuses
    proc, _inst, _rm = deb12.simulate(["nvidia-driver-cuda=550.127.05-1", "nvidia-kernel-dkms=550.127.05-1"])
    assert proc.returncode != 0
    assert "nvidia-smi (= 550.127.05-1) but 580.95.05-1 is to be installed" in proc.stdout
    # named with every package of its release (three levels deep: libcuda1 -> ptxjitcompiler)
    specs = admin.driver_package_specs("550.127.05", "proprietary", "debian12")
    assert {s.split("=")[0] for s in specs} == {
        "nvidia-driver-cuda", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "libnvidia-ml1",
        "libnvidia-ptxjitcompiler1", "nvidia-persistenced", "nvidia-kernel-support", "firmware-nvidia-gsp"}
    proc, inst, _rm = deb12.simulate(specs)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {v for n, v in inst.items() if n != "dkms"} == {"550.127.05-1"}
    assert "dkms" in inst


def test_open_and_proprietary_kernel_modules_replace_each_other(deb12):
    prop = admin.driver_package_specs("580.95.05", "proprietary", "debian12")
    deb12.install_state(prop + ["dkms=3.0.10-8+deb12u1"])
    proc, inst, removed = deb12.simulate(["nvidia-kernel-open-dkms=580.95.05-1"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert inst == {"nvidia-kernel-open-dkms": "580.95.05-1"} and removed == ["nvidia-kernel-dkms"]
    # the metapackages of NVIDIA's guide exclude each other too
    proc, _inst, _removed = deb12.simulate(["nvidia-open=580.95.05-1", "cuda-drivers=580.95.05-1"])
    assert proc.returncode != 0 and "Conflicts" in proc.stdout


def test_a_release_is_version_exact_so_a_branch_upgrade_moves_it_whole(deb12):
    deb12.install_state(admin.driver_package_specs("550.163.01", "open", "debian12") + ["dkms=3.0.10-8+deb12u1"])
    # only the top package named: its exact-version dependencies come along at 580, none stays at 550
    proc, inst, removed = deb12.simulate(["nvidia-driver-cuda=580.95.05-1", "nvidia-kernel-open-dkms=580.95.05-1"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert removed == [] and set(inst.values()) == {"580.95.05-1"}
    assert set(inst) == {s.split("=")[0] for s in admin.driver_package_specs("580.95.05", "open", "debian12")}
    # a part of the release never moves alone: nvidia-driver-cuda needs nvidia-smi (= its version)
    proc, inst, removed = deb12.simulate(["nvidia-smi=580.95.05-1"])
    assert proc.returncode == 0 and removed == []
    assert inst["nvidia-driver-cuda"] == "580.95.05-1" and inst["libnvidia-ml1"] == "580.95.05-1"


def test_kernel_module_packages_build_the_module_with_their_flavour(tree, tmp_path):
    for pkg, flavour in (("nvidia-kernel-dkms", "proprietary"), ("nvidia-kernel-open-dkms", "open")):
        deb = tree / "debian12" / ("%s_570.195.03-1_all.deb" % pkg)
        postinst = subprocess.run(["dpkg-deb", "-I", str(deb), "postinst"], capture_output=True, text=True,
                                  check=True).stdout
        assert "/var/lib/dkms/nvidia/570.195.03/" in postinst and "'%s'" % flavour in postinst
    lib = subprocess.run(["dpkg-deb", "-I", str(tree / "debian12" / "libnvidia-ml1_570.195.03-1_all.deb"), "postinst"],
                         capture_output=True, text=True, check=True).stdout
    assert "libnvidia-ml.so.570.195.03" in lib


def test_sim_init_installs_the_layout_of_the_node_distribution(tmp_path):
    osr = tmp_path / "os-release"
    osr.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
    assert admin.node_layout(str(osr)) == "debian12"
    osr.write_text('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n')
    assert admin.node_layout(str(osr)) == "ubuntu"
    assert admin.driver_package_specs("550.163.01", "open", "ubuntu") == ["nvidia-driver-550-open=550.163.01-0ubuntu1"]
    assert "nvidia-kernel-open-dkms=550.163.01-1" in admin.driver_package_specs("550.163.01", "open", "debian12")
