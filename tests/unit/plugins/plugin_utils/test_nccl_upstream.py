"""The nccl role against what NCCL and Open MPI really accept (items 5 and 6 of issue #20), and the
Open MPI parameter names of the role checked against `ompi_info --all --parsable` (Open MPI 4.1)."""
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_nccl import validate

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
with open(os.path.join(ROOT, "roles", "nccl", "vars", "main.yml")) as fh:
    PROFILES = yaml.safe_load(fh)["__nccl_profiles"]


def run(settings=None, profile="", mca=None):
    return validate({"nccl_settings": settings or {}, "nccl_profile": profile, "__nccl_profiles": PROFILES,
                     "nccl_mpi_mca_params": mca or {}})


# ------------------------------------------------------------------ item 6: NCCL values
@pytest.mark.parametrize("name", ["NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"])
@pytest.mark.parametrize("value", [0, 1, 2, 3, 4, 5, "3", "NVB", "C2C", "P2C", "PXN", "LOC", "NVL", "PIX",
                                   "PXB", "PHB", "SYS"])
def test_path_levels_ncclgetlevel_reads(name, value):
    result = run({name: value})
    assert result.errors == []
    assert result.normalized["settings"][name] == str(value)


@pytest.mark.parametrize("value", [6, -1, "NET", "DIS", "nvb", "FOO"])
def test_path_levels_it_does_not(value):
    assert run({"NCCL_P2P_LEVEL": value}).errors


@pytest.mark.parametrize("name", ["NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS"])
def test_channels_up_to_maxchannels(name):
    assert run({name: 64}).errors == []
    assert run({name: 65}).errors


def test_socket_nthreads_zero_is_accepted():
    assert run({"NCCL_SOCKET_NTHREADS": 0}).errors == []


def test_nsocks_alone_gets_threads_that_make_it_work():
    result = run({"NCCL_NSOCKS_PERTHREAD": 8})
    settings = result.normalized["settings"]
    assert settings["NCCL_SOCKET_NTHREADS"] == "4"
    assert int(settings["NCCL_SOCKET_NTHREADS"]) * int(settings["NCCL_NSOCKS_PERTHREAD"]) <= 64
    assert any("does nothing on ordinary NICs" in w for w in result.warnings)


@pytest.mark.parametrize("nsocks, threads", [(1, 4), (16, 4), (32, 2), (64, 1)])
def test_added_threads_keep_the_product_within_64(nsocks, threads):
    settings = run({"NCCL_NSOCKS_PERTHREAD": nsocks}).normalized["settings"]
    assert settings["NCCL_SOCKET_NTHREADS"] == str(threads)
    assert threads * nsocks <= 64


def test_nsocks_with_automatic_threads_warns():
    result = run({"NCCL_NSOCKS_PERTHREAD": 8, "NCCL_SOCKET_NTHREADS": 0})
    assert result.errors == [] and result.normalized["settings"]["NCCL_SOCKET_NTHREADS"] == "0"
    assert any("NCCL_SOCKET_NTHREADS=0" in w for w in result.warnings)


def test_explicit_threads_are_kept():
    result = run({"NCCL_NSOCKS_PERTHREAD": 8, "NCCL_SOCKET_NTHREADS": 2})
    assert result.normalized["settings"]["NCCL_SOCKET_NTHREADS"] == "2"
    assert not any("ordinary NICs" in w for w in result.warnings)


# ------------------------------------------------------------------ item 5: Open MPI
def test_tcp_include_and_exclude_together_are_refused():
    result = run(mca={"btl_tcp_if_include": "ib0", "btl_tcp_if_exclude": "lo"})
    assert len(result.errors) == 1 and "disables the TCP BTL" in result.errors[0]


def test_tcp_include_from_the_user_and_exclude_from_the_profile_are_refused():
    # the sockets profile sets btl_tcp_if_exclude
    result = run(profile="sockets", mca={"btl_tcp_if_include": "ens1f0"})
    [error] = result.errors
    assert "__nccl_profiles.sockets.mca_params.btl_tcp_if_exclude" in error
    assert "nccl_mpi_mca_params.btl_tcp_if_include" in error


def test_a_profiles_parameter_can_be_dropped_with_null():
    result = run(profile="sockets", mca={"btl_tcp_if_include": "ens1f0", "btl_tcp_if_exclude": None})
    assert result.errors == []
    assert result.normalized["mca_params"] == {"btl_tcp_if_include": "ens1f0"}


@pytest.mark.parametrize("btl, warns", [("^self", True), ("tcp,vader", True), ("self,vader,tcp", False),
                                        ("^openib", False)])
def test_btl_without_self_warns(btl, warns):
    result = run(mca={"btl": btl})
    assert result.errors == []
    assert any("self BTL" in w for w in result.warnings) is warns


# ------------------------------------------------------------------ item 11: ompi_info
@pytest.mark.skipif(shutil.which("ompi_info") is None, reason="openmpi-bin is not installed")
def test_every_mca_parameter_the_role_names_exists_in_ompi_info():
    out = subprocess.run(["ompi_info", "--all", "--parsable"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, LC_ALL="C"), check=True).stdout
    params = set(line.split(":")[4] for line in out.splitlines()
                 if line.startswith("mca:") and line.split(":")[3:4] == ["param"])
    assert "btl_tcp_if_include" in params and "not_a_param" not in params
    named = {"btl_tcp_if_include", "btl_tcp_if_exclude", "btl"}
    for profile in PROFILES.values():
        named.update((profile or {}).get("mca_params") or {})
    assert sorted(named - params) == []
