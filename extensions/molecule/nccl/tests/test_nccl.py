"""Verify the nccl scenario on the simulated node (testinfra, docker backend)."""

import json
import os
import re
import subprocess

import pytest

CONVERGE = os.path.join(os.path.dirname(__file__), "..", "converge.yml")


def test_nccl_conf_content_and_mode(host):
    conf = host.file("/etc/nccl.conf")
    assert conf.exists and conf.is_file
    assert conf.user == "root" and conf.group == "root"
    assert conf.mode == 0o644
    lines = conf.content_string.splitlines()
    assert lines[0] == "# Managed by Ansible: dgxops.fleet.nccl"
    assert [line for line in lines if not line.startswith("#")] == [
        "NCCL_ALGO=Tree",
        "NCCL_DEBUG=WARN",
        "NCCL_NSOCKS_PERTHREAD=8",
        "NCCL_PROTO=LL",
        "NCCL_SOCKET_IFNAME=^docker,lo",
        "NCCL_SOCKET_NTHREADS=2",
    ]
    assert all("=" not in line for line in lines if line.startswith("#"))


def test_unmanaged_file_was_backed_up_once(host):
    backups = host.run("ls /etc/nccl.conf.*").stdout.split()
    assert len(backups) == 1, backups
    assert host.file(backups[0]).content_string == "NCCL_DEBUG=INFO\n"


def test_mca_param_set_and_other_lines_kept(host):
    params = host.file("/etc/openmpi/openmpi-mca-params.conf").content_string.splitlines()
    assert "btl = ^openib" in params
    assert sum(1 for line in params if line.replace(" ", "").startswith("btl=")) == 1
    assert "mtl = ^ofi" in params
    assert "pml = ^ucx" in params


def test_mpi_environment_script(host):
    script = host.file("/etc/profile.d/dgxops-mpi.sh")
    assert script.mode == 0o644
    assert "export HOROVOD_FUSION_THRESHOLD=16777216" in script.content_string.splitlines()
    out = host.run("bash -lc 'echo $HOROVOD_FUSION_THRESHOLD'")
    assert out.stdout.strip() == "16777216"


def test_open_mpi_reads_the_parameter_when_installed(host):
    if host.run("command -v ompi_info").rc != 0:
        pytest.skip("Open MPI not installed in the node image (stand-in parameter file used)")
    out = host.check_output("ompi_info --param btl all --level 9 --parsable")
    assert "mca:btl:base:param:btl:value:^openib" in out.splitlines()


@pytest.mark.parametrize("extra, needles", [
    ({"nccl_settings": {"NCCL_NSOCKS_PERTHREAD": 16, "NCCL_SOCKET_NTHREADS": 8}},
     ["nccl_settings.NCCL_NSOCKS_PERTHREAD=16", "nccl_settings.NCCL_SOCKET_NTHREADS=8", "limit of 64"]),
    ({"nccl_settings": {"NCCL_ALGO": "Tree "}}, ["nccl_settings.NCCL_ALGO", "no leading or trailing whitespace"]),
    ({"nccl_mpi_mca_params": {"btl": "^openib, ofi"}}, ["nccl_mpi_mca_params.btl", "comma-separated"]),
    # Open MPI 4.1 disables the TCP BTL when both are set, here one from the profile, one from the user
    ({"nccl_profile": "sockets", "nccl_mpi_mca_params": {"btl": "^openib", "btl_tcp_if_include": "eth0"}},
     ["__nccl_profiles.sockets.mca_params.btl_tcp_if_exclude", "nccl_mpi_mca_params.btl_tcp_if_include",
      "disables the TCP BTL"]),
])
def test_bad_value_fails_before_changes(host, extra, needles):
    before = {path: host.file(path).content_string
              for path in ("/etc/nccl.conf", "/etc/openmpi/openmpi-mca-params.conf")}
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], CONVERGE, "-e", json.dumps(extra)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, check=False,
    )
    # ansible-core 2.19+ prints task errors on stderr and the yaml callback wraps long lines
    text = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout).split())
    assert proc.returncode != 0
    for needle in needles:
        assert needle in text, text[-3000:]
    assert "allowed:" in text
    for path, content in before.items():
        assert host.file(path).content_string == content
