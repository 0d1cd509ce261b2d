# -*- coding: utf-8 -*-
"""Real consumers read what the dgxops.fleet.nccl role renders.

* libnccl from the ``nvidia-nccl-cu12`` wheel (requirements-consumers.txt), loaded
  through ctypes in a clean child process with ``NCCL_CONF_FILE`` pointing at a
  file rendered by the role itself (ansible-playbook, role run against localhost).
  ``ncclGetUniqueId`` makes NCCL load its configuration files without a GPU; the
  child then reads its own environment through libc ``getenv``, which is where
  NCCL's parser puts every ``KEY=VALUE`` it accepted (``setenv(key, value, 0)``).
* Open MPI from Debian (``openmpi-bin``): ``ompi_info`` reports the rendered MCA
  parameter with ``source:file (<the file>:<line>)``.
* When torch with CUDA is present (the GPU machine), two NCCL ranks on the one
  GPU, made to look like two hosts, run an all-reduce over loopback sockets with
  ``NCCL_CONF_FILE`` pointing at the rendered file.

Measured on libnccl 2.32.3 (no GPU): the INFO lines ``NCCL_ALGO set by
environment to Tree`` and ``NCCL_NSOCKS_PERTHREAD set by environment to 8.`` are
printed only once a communicator is built (tuning / socket transport), which
needs a GPU; ``ncclGetUniqueId`` prints ``NCCL_SOCKET_IFNAME set by environment
to lo``.  The CPU tests therefore assert NCCL's own parse result (getenv) plus
that INFO line, and the GPU test asserts the ALGO/NSOCKS lines.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))

from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_nccl  # noqa: E402

GUIDE_SETTINGS = {  # guide 000 §3.3, plus what a CPU-only run needs
    "NCCL_ALGO": "Tree",
    "NCCL_PROTO": "LL",
    "NCCL_NSOCKS_PERTHREAD": 8,
    "NCCL_SOCKET_NTHREADS": 2,
    "NCCL_SOCKET_IFNAME": "lo",
    "NCCL_IB_DISABLE": 1,
}

CHILD = textwrap.dedent(r"""
    import ctypes, json, sys
    lib = ctypes.CDLL(sys.argv[1])
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    uid = ctypes.create_string_buffer(128)
    rc = lib.ncclGetUniqueId(uid)
    version = ctypes.c_int()
    lib.ncclGetVersion(ctypes.byref(version))
    env = {}
    for key in sys.argv[2:]:
        value = libc.getenv(key.encode())
        env[key] = None if value is None else value.decode()
    sys.stdout.write("RESULT " + json.dumps({"rc": rc, "version": version.value, "env": env}) + "\n")
""")


def _libnccl():
    try:
        import nvidia.nccl  # noqa: F401  pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    for base in __import__("nvidia.nccl").nccl.__path__:
        hits = glob.glob(os.path.join(base, "lib", "libnccl.so*"))
        if hits:
            return sorted(hits)[0]
    return None


LIBNCCL = _libnccl()
needs_nccl = pytest.mark.skipif(LIBNCCL is None, reason="nvidia-nccl-cu12 wheel not installed "
                                                        "(pip install -r requirements-consumers.txt)")
OMPI_INFO = shutil.which("ompi_info")
needs_ompi = pytest.mark.skipif(OMPI_INFO is None, reason="ompi_info not found (apt-get install openmpi-bin)")


def run_role(tmp_path, role_vars, check=False, name="run"):
    """Run the real role against localhost; return (rc, output)."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(textwrap.dedent("""\
        - name: Apply the nccl role to localhost
          hosts: localhost
          gather_facts: false
          roles:
            - role: dgxops.fleet.nccl
        """))
    varfile = tmp_path / ("%s-vars.json" % name)
    varfile.write_text(json.dumps(role_vars))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable,
           "-e", "@%s" % varfile, "--diff", str(playbook)]
    if check:
        cmd.append("--check")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)
    return proc.returncode, proc.stdout


def recap(output):
    match = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", output)
    assert match, output
    return {"ok": int(match.group(1)), "changed": int(match.group(2)), "failed": int(match.group(4))}


def nccl_reads(conf, keys, tmp_path, extra_env=None):
    """Load the file with libnccl in a clean process; return (result dict, log text)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NCCL_CONF_FILE": str(conf),
           "NCCL_DEBUG": "INFO", "LC_ALL": "C"}
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-c", CHILD, LIBNCCL] + list(keys), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          timeout=120, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout
    return json.loads(lines[0][len("RESULT "):]), proc.stdout


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("nccl-render")
    conf = tmp_path / "nccl.conf"
    rc, out = run_role(tmp_path, {"nccl_conf_path": str(conf), "nccl_settings": GUIDE_SETTINGS})
    assert rc == 0, out
    return conf, out


def test_role_renders_sorted_key_value_lines_with_header(rendered):
    conf, out = rendered
    text = conf.read_text()
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == ["NCCL_ALGO=Tree", "NCCL_IB_DISABLE=1", "NCCL_NSOCKS_PERTHREAD=8", "NCCL_PROTO=LL",
                    "NCCL_SOCKET_IFNAME=lo", "NCCL_SOCKET_NTHREADS=2"]
    assert text.startswith("# Managed by Ansible: dgxops.fleet.nccl\n")
    # NCCL < 2.26 turns a comment line holding '=' into a junk variable.
    assert all("=" not in line for line in text.splitlines() if line.startswith("#"))
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    assert "is listed under 'Debugging'" in out  # the debug-only warning reaches the user


@needs_nccl
def test_real_nccl_takes_every_rendered_value(rendered, tmp_path):
    conf, _ = rendered
    result, log = nccl_reads(conf, list(GUIDE_SETTINGS), tmp_path)
    assert result["rc"] == 0, log
    assert result["env"] == {k: str(v) for k, v in GUIDE_SETTINGS.items()}
    assert "NCCL INFO NCCL_SOCKET_IFNAME set by environment to lo" in log
    assert "Bootstrap: Using lo:" in log


@needs_nccl
def test_process_environment_beats_the_rendered_file(rendered, tmp_path):
    conf, _ = rendered
    result, _ = nccl_reads(conf, ["NCCL_ALGO", "NCCL_PROTO"], tmp_path, {"NCCL_ALGO": "Ring"})
    assert result["env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}


@needs_nccl
def test_real_nccl_mangles_what_the_validator_refuses(tmp_path):
    """The negative control: the forms the validator refuses really break in NCCL."""
    conf = tmp_path / "handwritten.conf"
    conf.write_text('NCCL_ALGO = Tree\nNCCL_PROTO="LL"\nNCCL_DEBUG_SUBSYS=INIT \n')
    result, _ = nccl_reads(conf, ["NCCL_ALGO", "NCCL_ALGO ", "NCCL_PROTO", "NCCL_DEBUG_SUBSYS"], tmp_path)
    assert result["env"] == {"NCCL_ALGO": None, "NCCL_ALGO ": " Tree", "NCCL_PROTO": '"LL"',
                             "NCCL_DEBUG_SUBSYS": "INIT "}
    for value in (" Tree", '"LL"'):
        assert not validate_nccl.validate({"nccl_settings": {"NCCL_ALGO": value}}).ok


@needs_nccl
def test_every_known_name_exists_in_libnccl():
    """Each variable the validator accepts is a string in the shipped libnccl's .rodata."""
    with open(LIBNCCL, "rb") as fh:
        header = fh.read(64)
        shoff, = struct.unpack_from("<Q", header, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", header, 0x3A)
        fh.seek(shoff)
        sections = [struct.unpack("<IIQQQQIIQQ", fh.read(shentsize)) for _ in range(shnum)]
        names_hdr = sections[shstrndx]
        fh.seek(names_hdr[4])
        shstr = fh.read(names_hdr[5])
        rodata = None
        for sec in sections:
            name = shstr[sec[0]:shstr.index(b"\0", sec[0])]
            if name == b".rodata":
                fh.seek(sec[4])
                rodata = fh.read(sec[5])
    assert rodata
    present = set(m.decode() for m in re.findall(rb"(?<![A-Z0-9_])(NCCL_[A-Z0-9_]+)\x00", rodata))
    missing = sorted(set(validate_nccl.KNOWN) - present)
    # NCCL_IPC_USE_ABSTRACT_SOCKET / NCCL_ALGO etc. may be composed at run time in other
    # releases; on 2.32.3 every known name is a literal.
    assert missing == [], missing


def test_second_run_changes_nothing_and_check_mode_writes_nothing(tmp_path):
    conf = tmp_path / "etc" / "nccl.conf"
    conf.parent.mkdir()
    role_vars = {"nccl_conf_path": str(conf), "nccl_profile": "sockets"}
    rc, out = run_role(tmp_path, role_vars, check=True, name="check")
    assert rc == 0, out
    assert recap(out)["changed"] == 1
    assert "+NCCL_NET=Socket" in out  # diff shown
    assert not conf.exists()
    rc, out = run_role(tmp_path, role_vars, name="first")
    assert rc == 0 and recap(out)["changed"] == 1, out
    rc, out = run_role(tmp_path, role_vars, name="second")
    assert rc == 0, out
    assert recap(out)["changed"] == 0, out


def test_unmanaged_file_is_backed_up_once(tmp_path):
    conf = tmp_path / "nccl.conf"
    conf.write_text("NCCL_DEBUG=INFO\n")
    role_vars = {"nccl_conf_path": str(conf), "nccl_settings": {"NCCL_DEBUG": "WARN"}}
    rc, out = run_role(tmp_path, role_vars, name="replace")
    assert rc == 0, out
    backups = [p for p in tmp_path.iterdir() if p.name.startswith("nccl.conf.") and p.name != "nccl.conf"]
    assert len(backups) == 1 and backups[0].read_text() == "NCCL_DEBUG=INFO\n"
    rc, out = run_role(tmp_path, dict(role_vars, nccl_settings={"NCCL_DEBUG": "VERSION"}), name="own")
    assert rc == 0 and recap(out)["changed"] == 1, out
    backups = [p for p in tmp_path.iterdir() if p.name.startswith("nccl.conf.") and p.name != "nccl.conf"]
    assert len(backups) == 1  # the role's own file is not backed up again


def test_sixteen_by_eight_fails_before_the_host_changes(tmp_path):
    conf = tmp_path / "nccl.conf"
    rc, out = run_role(tmp_path, {"nccl_conf_path": str(conf),
                                  "nccl_settings": {"NCCL_NSOCKS_PERTHREAD": 16, "NCCL_SOCKET_NTHREADS": 8}})
    assert rc != 0
    assert "nccl_settings.NCCL_NSOCKS_PERTHREAD=16 x nccl_settings.NCCL_SOCKET_NTHREADS=8 = 128" in out
    assert "limit of 64" in out
    assert recap(out)["changed"] == 0 and recap(out)["failed"] == 1
    assert not conf.exists()


def test_missing_referenced_topology_file_fails_before_the_host_changes(tmp_path):
    conf = tmp_path / "nccl.conf"
    missing = tmp_path / "nope.xml"
    rc, out = run_role(tmp_path, {"nccl_conf_path": str(conf), "nccl_settings": {"NCCL_TOPO_FILE": str(missing)}})
    assert rc != 0
    assert "nccl_settings.NCCL_TOPO_FILE: %s is not a regular file" % missing in out
    assert not conf.exists()


def test_topology_xml_is_deployed_and_referenced(tmp_path):
    src = tmp_path / "topo-src.xml"
    src.write_text('<system version="1"><cpu numaid="0" affinity="ffff"/></system>\n')
    conf = tmp_path / "nccl.conf"
    xml_dir = tmp_path / "nccl"
    rc, out = run_role(tmp_path, {"nccl_conf_path": str(conf), "nccl_xml_dir": str(xml_dir),
                                  "nccl_topo_file_src": str(src)})
    assert rc == 0, out
    assert (xml_dir / "topo.xml").read_text() == src.read_text()
    assert "NCCL_TOPO_FILE=%s/topo.xml" % xml_dir in conf.read_text().splitlines()


@needs_ompi
def test_open_mpi_reads_the_rendered_mca_parameter(tmp_path):
    system_file = subprocess.run([OMPI_INFO, "--path", "sysconfdir", "--parsable"], stdout=subprocess.PIPE,
                                 universal_newlines=True, check=True).stdout.strip().split(":", 2)[2]
    original = os.path.join(system_file, "openmpi-mca-params.conf")
    params = tmp_path / "openmpi-mca-params.conf"
    shutil.copyfile(original, params)
    before = params.read_text().splitlines()
    role_vars = {"nccl_conf_enabled": False, "nccl_mpi_enabled": True,
                 "nccl_mpi_mca_params_file": str(params),
                 "nccl_mpi_mca_params": {"btl": "^openib", "btl_tcp_if_exclude": "lo,docker0"},
                 "nccl_mpi_environment": {"HOROVOD_FUSION_THRESHOLD": 16777216}}
    role_vars["nccl_mpi_environment_path"] = str(tmp_path / "dgxops-mpi.sh")
    rc, out = run_role(tmp_path, role_vars, name="mpi1")
    assert rc == 0, out
    rc, out = run_role(tmp_path, role_vars, name="mpi2")
    assert rc == 0 and recap(out)["changed"] == 0, out
    after = params.read_text().splitlines()
    # only the managed keys differ; every other line of the distribution's file is kept
    untouched = [line for line in before if not re.match(r"^\s*(btl|btl_tcp_if_exclude)\s*=", line)]
    assert [line for line in after if line in untouched] == untouched
    assert after.count("btl = ^openib") == 1
    line_no = after.index("btl = ^openib") + 1
    env = dict(os.environ, OMPI_MCA_mca_base_param_files=str(params), LC_ALL="C")
    info = subprocess.run([OMPI_INFO, "--param", "btl", "all", "--level", "9", "--parsable"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                          check=True).stdout
    assert "mca:btl:base:param:btl:value:^openib" in info.splitlines()
    assert "mca:btl:base:param:btl:source:file (%s:%d)" % (params, line_no) in info.splitlines()
    assert "mca:btl:tcp:param:btl_tcp_if_exclude:value:lo,docker0" in info.splitlines()
    assert (tmp_path / "dgxops-mpi.sh").read_text().splitlines()[-1] == "export HOROVOD_FUSION_THRESHOLD=16777216"


# ---------------------------------------------------------------- real GPU (device machine only)
GPU_RANK = textwrap.dedent(r"""
    import os, sys, torch, torch.distributed as dist
    rank = int(sys.argv[1])
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%s" % sys.argv[2], rank=rank, world_size=2,
                            device_id=torch.device("cuda:0"))
    x = torch.full((1 << 20,), float(rank + 1), device="cuda:0")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    print("RANK%d SUM %s NCCL %s" % (rank, x[0].item(), ".".join(map(str, torch.cuda.nccl.version()))), flush=True)
    dist.destroy_process_group()
""")


def _torch_cuda():
    try:
        import torch  # pylint: disable=import-outside-toplevel
        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(not os.environ.get("DGXOPS_NCCL_GPU_CONF") or not _torch_cuda(),
                    reason="real-GPU run: needs torch with CUDA and DGXOPS_NCCL_GPU_CONF=<rendered nccl.conf>")
def test_two_ranks_over_loopback_use_the_rendered_file(tmp_path):
    conf = os.environ["DGXOPS_NCCL_GPU_CONF"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    base.update({"NCCL_CONF_FILE": conf, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING,NET",
                 "NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
                 "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"})
    port = "29533"
    procs = []
    for rank in (0, 1):
        env = dict(base, NCCL_HOSTID="dgxops-fake-host-%d" % rank)
        procs.append(subprocess.Popen([sys.executable, "-c", GPU_RANK, str(rank), port], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True))
    outs = [p.communicate(timeout=150)[0] for p in procs]
    log = "\n".join(outs)
    out_dir = os.environ.get("OUT")
    if out_dir:
        with open(os.path.join(out_dir, "nccl-two-ranks.log"), "w") as fh:
            fh.write(log)
    assert all(p.returncode == 0 for p in procs), log[-6000:]
    assert "RANK0 SUM 3.0" in log and "RANK1 SUM 3.0" in log, log[-6000:]
    assert "NCCL_ALGO set by environment to Tree" in log, log[-6000:]
    assert "NCCL_PROTO set by environment to LL" in log, log[-6000:]
    assert "NCCL_NSOCKS_PERTHREAD set by environment to 8." in log, log[-6000:]
