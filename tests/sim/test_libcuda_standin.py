"""The libcuda.so.1 stand-in of the simulated nodes (src/dgxops/sim/libcuda_standin.c).

Compiled here as the node image build compiles it, loaded by the facts module's own reader
(plugins/module_utils/nvidia_smi.py cuda_version_from_libcuda) in a child Python, and installed
and removed by the driver packages' maintainer scripts run against a scratch root.
"""
import os
import shutil
import subprocess
import sys

import pytest

from dgxops.sim import aptrepo, image
from dgxops.sim.fakesmi.models import CUDA_BY_BRANCH, cuda_version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".collections")  # the checkout as ansible_collections.dgxops.fleet

pytestmark = pytest.mark.skipif(image.c_compiler() is None, reason="needs a C compiler (the image build skips the stand-in too)")

READ = """
import sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.dgxops.fleet.plugins.module_utils.nvidia_smi import cuda_version_from_libcuda
print(cuda_version_from_libcuda())
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    d = tmp_path_factory.mktemp("libcuda")
    so = d / "libcuda-standin.so"
    assert image.build_libcuda(so) is True
    assert so.stat().st_size > 0
    return so


def read_cuda(libdir, state_dir):
    """What the facts module reads on a node whose loader finds libdir/libcuda.so.1."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir), DGXOPS_SIM_STATE_DIR=str(state_dir))
    proc = subprocess.run([sys.executable, "-c", READ, COLLECTIONS], env=env, capture_output=True, text=True,
                          check=True, timeout=60)
    return proc.stdout.strip()


def test_cuda_driver_version_read_through_ctypes(standin, tmp_path):
    libdir, state = tmp_path / "lib", tmp_path / "state"
    libdir.mkdir()
    state.mkdir()
    shutil.copy(standin, libdir / "libcuda.so.1")
    for upstream, expected in (("580.95.05", "13.0"), ("570.195.03", "12.8"), ("550.163.01", "12.4"),
                               ("535.247.01", "12.2")):
        (state / "libcuda-api-version").write_text(aptrepo.cuda_api_version(upstream) + "\n")
        assert read_cuda(libdir, state) == expected


def test_no_version_file_or_garbage_reads_as_unknown(standin, tmp_path):
    libdir, state = tmp_path / "lib", tmp_path / "state"
    libdir.mkdir()
    state.mkdir()
    shutil.copy(standin, libdir / "libcuda.so.1")
    assert read_cuda(libdir, state) == "None"  # the facts then ask `nvidia-smi --version`
    (state / "libcuda-api-version").write_text("not a number\n")
    assert read_cuda(libdir, state) == "None"


def test_api_version_matches_the_fake_nvidia_smi_for_every_packaged_driver():
    for versions in aptrepo.BRANCHES.values():
        for upstream in versions:
            value = int(aptrepo.cuda_api_version(upstream))
            assert "%d.%d" % (value // 1000, (value % 1000) // 10) == cuda_version(int(upstream.split(".")[0]))
    assert set(CUDA_BY_BRANCH.values()) >= {"13.0", "12.8"}


def _script(text, root):
    """A maintainer script with its absolute paths moved under root (the scratch node)."""
    return (text.replace('"/usr/lib/$(uname -m)-linux-gnu"', '"%s/usr/lib/multiarch"' % root)
                .replace("/var/lib/dgxops-sim", "%s/var/lib/dgxops-sim" % root)
                .replace(aptrepo.LIBCUDA_STANDIN, "%s%s" % (root, aptrepo.LIBCUDA_STANDIN))
                .replace("ldconfig", "true"))


def run_script(text, root, version):
    proc = subprocess.run(["sh", "-c", _script(aptrepo.libcuda_script(text, version), root)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_packages_install_link_and_remove_the_library_as_an_upgrade_runs_them(standin, tmp_path):
    root = tmp_path / "node"
    (root / "opt" / "dgxops-sim").mkdir(parents=True)
    shutil.copy(standin, "%s%s" % (root, aptrepo.LIBCUDA_STANDIN))
    lib = root / "usr" / "lib" / "multiarch"
    state = root / "var" / "lib" / "dgxops-sim"
    # Ubuntu layout: libnvidia-compute-570 installed
    run_script(aptrepo.LIB_POSTINST, root, "570.195.03")
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.570.195.03"
    assert (lib / "libcuda.so.570.195.03").read_bytes() == standin.read_bytes()
    assert (lib / "libnvidia-ml.so.570.195.03").exists()
    assert read_cuda(lib, state) == "12.8"
    # -> libnvidia-compute-580: the new package's postinst runs last (apt's order on a conflict)
    run_script(aptrepo.LIB_POSTRM, root, "570.195.03")
    assert not (lib / "libcuda.so.1").exists() and not (state / "libcuda-api-version").exists()
    run_script(aptrepo.LIB_POSTINST, root, "580.95.05")
    assert read_cuda(lib, state) == "13.0"
    # Debian layout (libcuda1): a postrm of a version the link does not point at leaves the
    # link and the version alone
    run_script(aptrepo.CUDA_POSTINST, root, "580.65.06")
    run_script(aptrepo.CUDA_POSTRM, root, "580.95.05")
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.580.65.06"
    assert not (lib / "libcuda.so.580.95.05").exists()
    assert read_cuda(lib, state) == "13.0"
    # the driver removed: no libcuda, the facts fall back to nvidia-smi
    run_script(aptrepo.CUDA_POSTRM, root, "580.65.06")
    assert not os.path.lexists(lib / "libcuda.so.1") and sorted(os.listdir(lib)) == ["libnvidia-ml.so.580.95.05"]


def test_without_a_compiler_the_packages_install_a_placeholder(tmp_path):
    root = tmp_path / "node"
    (root / "opt" / "dgxops-sim").mkdir(parents=True)
    # the image's empty file (its Dockerfile COPYs one either way)
    open("%s%s" % (root, aptrepo.LIBCUDA_STANDIN), "wb").close()
    run_script(aptrepo.CUDA_POSTINST, root, "580.95.05")
    lib = root / "usr" / "lib" / "multiarch"
    assert not os.path.lexists(lib / "libcuda.so.1")
    assert (lib / "libcuda.so.580.95.05").read_text() == "stand-in libcuda 580.95.05\n"
