# -*- coding: utf-8 -*-
"""Unit tests of the nccl validator (plugins/plugin_utils/validate_nccl.py)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.dgxops.fleet.plugins.plugin_utils import validate_nccl
from ansible_collections.dgxops.fleet.plugins.plugin_utils.validate_nccl import validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))
with open(os.path.join(ROOT, "roles", "nccl", "vars", "main.yml")) as _fh:
    PROFILES = yaml.safe_load(_fh)["__nccl_profiles"]


def run(settings=None, **extra):
    config = {"nccl_settings": settings or {}, "__nccl_profiles": PROFILES}
    config.update(extra)
    return validate(config)


# (id, config kwargs, substrings every one of which must appear in one single error message)
BAD = [
    ("typo-in-name", {"settings": {"NCCL_NSOCK_PERTHREAD": 8}},
     ["nccl_settings.NCCL_NSOCK_PERTHREAD", "did you mean NCCL_NSOCKS_PERTHREAD?"]),
    ("lowercase-name", {"settings": {"nccl_algo": "Tree"}},
     ["nccl_settings.nccl_algo", "NCCL_[A-Z0-9_]+", "did you mean NCCL_ALGO?"]),
    ("name-with-space", {"settings": {"NCCL_DEBUG ": "WARN"}},
     ["nccl_settings.NCCL_DEBUG ", "no spaces", "did you mean NCCL_DEBUG?"]),
    ("tree-trailing-space", {"settings": {"NCCL_ALGO": "Tree "}},
     ["nccl_settings.NCCL_ALGO", "'Tree '", "no leading or trailing whitespace"]),
    ("double-quotes", {"settings": {"NCCL_DEBUG": '"INFO"'}},
     ["nccl_settings.NCCL_DEBUG", "no quotes", "write INFO"]),
    ("single-quotes", {"settings": {"NCCL_SOCKET_IFNAME": "'eth0'"}},
     ["nccl_settings.NCCL_SOCKET_IFNAME", "no quotes", "write eth0"]),
    ("nine-by-eight-sockets", {"settings": {"NCCL_NSOCKS_PERTHREAD": 9, "NCCL_SOCKET_NTHREADS": 8}},
     ["nccl_settings.NCCL_NSOCKS_PERTHREAD=9", "nccl_settings.NCCL_SOCKET_NTHREADS=8", "= 72",
      "limit of 64", "NCCL_NSOCKS_PERTHREAD <= 8"]),
    ("sixteen-by-eight-sockets", {"settings": {"NCCL_NSOCKS_PERTHREAD": 16, "NCCL_SOCKET_NTHREADS": 8}},
     ["nccl_settings.NCCL_NSOCKS_PERTHREAD=16", "nccl_settings.NCCL_SOCKET_NTHREADS=8", "= 128",
      "limit of 64"]),
    ("negative-nsocks", {"settings": {"NCCL_NSOCKS_PERTHREAD": -1}},
     ["nccl_settings.NCCL_NSOCKS_PERTHREAD", "-1", "from 1 to 64"]),
    ("nthreads-above-16", {"settings": {"NCCL_SOCKET_NTHREADS": 17}},
     ["nccl_settings.NCCL_SOCKET_NTHREADS", "17", "from 0 to 16"]),
    ("non-numeric-8k", {"settings": {"NCCL_NSOCKS_PERTHREAD": "8k"}},
     ["nccl_settings.NCCL_NSOCKS_PERTHREAD", "'8k'", "decimal integer", "'8k' would become 8"]),
    ("float-buffsize", {"settings": {"NCCL_BUFFSIZE": 4.5}},
     ["nccl_settings.NCCL_BUFFSIZE", "4.5", "a decimal integer >= 1"]),
    ("unknown-algorithm", {"settings": {"NCCL_ALGO": "Butterfly"}},
     ["nccl_settings.NCCL_ALGO", "'Butterfly' is not one of them", "Ring, Tree, CollNetDirect"]),
    ("old-collnet-name", {"settings": {"NCCL_ALGO": "CollNet"}},
     ["nccl_settings.NCCL_ALGO", "CollNetDirect and CollNetChain"]),
    ("space-in-algo-list", {"settings": {"NCCL_ALGO": "Tree, Ring"}},
     ["nccl_settings.NCCL_ALGO", "remove the spaces around 'Ring'"]),
    ("bad-function-name", {"settings": {"NCCL_ALGO": "allreduc:tree"}},
     ["nccl_settings.NCCL_ALGO", "'allreduc' is not a function name", "AllReduce"]),
    ("second-entry-without-function", {"settings": {"NCCL_PROTO": "LL;Simple"}},
     ["nccl_settings.NCCL_PROTO", "only the first ';' entry may leave out the function name"]),
    ("unknown-protocol", {"settings": {"NCCL_PROTO": "LL256"}},
     ["nccl_settings.NCCL_PROTO", "'LL256' is not one of them", "LL, LL128, Simple"]),
    ("bad-debug-level", {"settings": {"NCCL_DEBUG": "VERBOSE"}},
     ["nccl_settings.NCCL_DEBUG", "'VERBOSE'", "VERSION, WARN, INFO, TRACE"]),
    ("ifname-with-space", {"settings": {"NCCL_SOCKET_IFNAME": "eth0, eth1"}},
     ["nccl_settings.NCCL_SOCKET_IFNAME", "comma-separated list of interface name prefixes", "no spaces"]),
    ("hca-with-bad-port", {"settings": {"NCCL_IB_HCA": "=mlx5_0:x"}},
     ["nccl_settings.NCCL_IB_HCA", "<hca>[:<port>[:<rail>[:<plane>]]]"]),
    ("too-many-hcas", {"settings": {"NCCL_IB_HCA": "=" + ",".join("mlx5_%d" % i for i in range(33))}},
     ["nccl_settings.NCCL_IB_HCA", "at most 32 HCAs", "got 33"]),
    ("ib-timeout-range", {"settings": {"NCCL_IB_TIMEOUT": 32}},
     ["nccl_settings.NCCL_IB_TIMEOUT", "32", "from 0 to 31"]),
    ("bool01-choice", {"settings": {"NCCL_IB_DISABLE": 2}},
     ["nccl_settings.NCCL_IB_DISABLE", "one of 0, 1"]),
    ("relative-topo-path", {"settings": {"NCCL_TOPO_FILE": "topo.xml"}},
     ["nccl_settings.NCCL_TOPO_FILE", "an absolute path"]),
    ("tilde-graph-path", {"settings": {"NCCL_GRAPH_FILE": "~/graph.xml"}},
     ["nccl_settings.NCCL_GRAPH_FILE", "does not expand '~'"]),
    ("conf-file-inside-conf", {"settings": {"NCCL_CONF_FILE": "/etc/other.conf"}},
     ["nccl_settings.NCCL_CONF_FILE", "has no effect"]),
    ("removed-variable", {"settings": {"NCCL_LL_THRESHOLD": 16384}},
     ["nccl_settings.NCCL_LL_THRESHOLD", "removed in NCCL 2.5"]),
    ("hostid-fleet-wide", {"settings": {"NCCL_HOSTID": "node1"}},
     ["nccl_settings.NCCL_HOSTID", "must differ between hosts"]),
    ("min-ctas-above-max", {"settings": {"NCCL_MIN_CTAS": 16, "NCCL_MAX_CTAS": 8}},
     ["nccl_settings.NCCL_MIN_CTAS=16", "nccl_settings.NCCL_MAX_CTAS=8", "NCCL_MIN_CTAS <= NCCL_MAX_CTAS"]),
    ("unknown-profile", {"nccl_profile": "omnipath"},
     ["nccl_profile", "'omnipath'", "dgx_spark_pair, infiniband, roce, sockets"]),
    ("empty-value", {"settings": {"NCCL_DEBUG": ""}},
     ["nccl_settings.NCCL_DEBUG", "a non-empty value"]),
    ("mca-btl-with-spaces", {"nccl_mpi_mca_params": {"btl": "^openib, ofi"}},
     ["nccl_mpi_mca_params.btl", "comma-separated list of component names", "^openib"]),
    ("mca-env-style-name", {"nccl_mpi_mca_params": {"OMPI_MCA_btl": "^openib"}},
     ["nccl_mpi_mca_params.OMPI_MCA_btl", "not the 'OMPI_MCA_' environment form"]),
    ("mca-quoted", {"nccl_mpi_mca_params": {"btl_tcp_if_include": '"eth0"'}},
     ["nccl_mpi_mca_params.btl_tcp_if_include", "no quotes"]),
    ("env-with-nccl-var", {"nccl_mpi_environment": {"NCCL_DEBUG": "INFO"}},
     ["nccl_mpi_environment.NCCL_DEBUG", "put NCCL settings in nccl_settings"]),
    ("profile-override-breaks-limit", {"nccl_profile": "sockets", "settings": {"NCCL_NSOCKS_PERTHREAD": 32}},
     ["nccl_settings.NCCL_NSOCKS_PERTHREAD=32",
      "__nccl_profiles.sockets.settings.NCCL_SOCKET_NTHREADS=4", "= 128", "NCCL_NSOCKS_PERTHREAD <= 16"]),
    ("unquoted-mode", {"nccl_conf_mode": "420"},
     ["nccl_conf_mode", "'420'", "a quoted octal string"]),
    ("missing-topo-src", {"nccl_topo_file_src": "/nonexistent/topo.xml"},
     ["nccl_topo_file_src", "/nonexistent/topo.xml", "an existing file on the controller"]),
]


@pytest.mark.parametrize("kwargs,needles", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_with_variable_and_allowed_values(kwargs, needles):
    kwargs = dict(kwargs)
    settings = kwargs.pop("settings", None)
    result = run(settings, **kwargs)
    assert not result.ok
    matching = [e for e in result.errors if all(n in e for n in needles)]
    assert matching, "no single error contains all of %r; errors: %r" % (needles, result.errors)


def test_at_least_fifteen_bad_inputs():
    assert len(BAD) >= 15


def test_guide_settings_are_valid_sorted_and_warned_as_debug_only():
    result = run({"NCCL_PROTO": "LL", "NCCL_NSOCKS_PERTHREAD": 8, "NCCL_ALGO": "Tree"})
    assert result.errors == []
    # the guide's NSOCKS_PERTHREAD=8 alone is a no-op (NCCL's automatic thread count is 0 on
    # ordinary NICs): rendered with 4 helper threads (4 x 8 = 32 <= 64)
    assert list(result.normalized["settings"].items()) == [
        ("NCCL_ALGO", "Tree"), ("NCCL_NSOCKS_PERTHREAD", "8"), ("NCCL_PROTO", "LL"), ("NCCL_SOCKET_NTHREADS", "4")]
    joined = "\n".join(result.warnings)
    assert "NCCL_ALGO=Tree is listed under 'Debugging'" in joined
    assert "NCCL_PROTO=LL is listed under 'Debugging'" in joined


def test_sixteen_by_eight_is_refused_naming_both_variables_and_the_limit():
    result = run({"NCCL_NSOCKS_PERTHREAD": 16, "NCCL_SOCKET_NTHREADS": 8})
    assert len(result.errors) == 1
    assert result.errors[0].startswith(
        "nccl_settings.NCCL_NSOCKS_PERTHREAD=16 x nccl_settings.NCCL_SOCKET_NTHREADS=8 = 128 "
        "sockets per connection exceeds NCCL's limit of 64")
    assert "; allowed: NCCL_NSOCKS_PERTHREAD <= 8 with NCCL_SOCKET_NTHREADS=8" in result.errors[0]


def test_product_of_exactly_64_is_accepted():
    result = run({"NCCL_NSOCKS_PERTHREAD": 4, "NCCL_SOCKET_NTHREADS": 16})
    assert result.errors == []
    assert result.normalized["settings"]["NCCL_NSOCKS_PERTHREAD"] == "4"


def test_yaml_booleans_become_one_and_zero():
    result = run({"NCCL_IB_DISABLE": True, "NCCL_P2P_DISABLE": False})
    assert result.errors == []
    assert result.normalized["settings"] == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_DISABLE": "0"}


def test_per_function_and_exclusion_syntax_is_accepted():
    result = run({"NCCL_ALGO": "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
                  "NCCL_PROTO": "^LL128"})
    assert result.errors == []
    assert result.normalized["settings"]["NCCL_ALGO"] == \
        "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring"


def test_explicit_ll128_warns_about_corruption():
    result = run({"NCCL_PROTO": "LL,LL128"})
    assert result.errors == []
    assert any("can corrupt data" in w for w in result.warnings)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_shipped_profile_is_valid(name):
    result = run(nccl_profile=name)
    assert result.errors == []
    assert result.normalized["settings"], name
    for key, value in PROFILES[name]["settings"].items():
        assert result.normalized["settings"][key] == str(value)


def test_user_settings_override_profile_and_null_drops_a_key():
    result = run({"NCCL_SOCKET_NTHREADS": 2, "NCCL_IB_DISABLE": None}, nccl_profile="sockets")
    assert result.errors == []
    s = result.normalized["settings"]
    assert s["NCCL_SOCKET_NTHREADS"] == "2"
    assert "NCCL_IB_DISABLE" not in s
    assert s["NCCL_NET"] == "Socket"
    assert result.normalized["mca_params"] == {"btl_tcp_if_exclude": "lo,docker0"}


def test_unknown_name_is_accepted_only_when_allowed():
    refused = run({"NCCL_FUTURE_KNOB": 3})
    assert any("nccl_settings.NCCL_FUTURE_KNOB" in e and "nccl_allow_unknown" in e for e in refused.errors)
    allowed = run({"NCCL_FUTURE_KNOB": 3}, nccl_allow_unknown=["NCCL_FUTURE_KNOB"])
    assert allowed.errors == []
    assert allowed.normalized["settings"] == {"NCCL_FUTURE_KNOB": "3"}
    # allowed names still get the quoting check
    quoted = run({"NCCL_FUTURE_KNOB": '"x"'}, nccl_allow_unknown=["NCCL_FUTURE_KNOB"])
    assert any("no quotes" in e for e in quoted.errors)


def test_topology_file_is_deployed_and_referenced(tmp_path):
    topo = tmp_path / "topo.xml"
    topo.write_text('<system version="1"><cpu numaid="0"/></system>')
    result = run({}, nccl_topo_file_src=str(topo), nccl_xml_dir="/etc/nccl")
    assert result.errors == []
    assert result.normalized["settings"] == {"NCCL_TOPO_FILE": "/etc/nccl/topo.xml"}
    assert result.normalized["xml_files"] == [
        {"src": str(topo), "dest": "/etc/nccl/topo.xml", "variable": "NCCL_TOPO_FILE"}]
    assert result.normalized["must_exist"] == []


def test_malformed_topology_xml_is_refused(tmp_path):
    topo = tmp_path / "topo.xml"
    topo.write_text("<system><cpu></system>")
    result = run({}, nccl_topo_file_src=str(topo))
    assert any(e.startswith("nccl_topo_file_src:") and "well-formed XML" in e for e in result.errors)


def test_referenced_graph_file_must_exist_on_node():
    result = run({"NCCL_GRAPH_FILE": "/opt/site/graph.xml"})
    assert result.errors == []
    assert result.normalized["must_exist"] == [
        {"variable": "nccl_settings.NCCL_GRAPH_FILE", "path": "/opt/site/graph.xml"}]
    assert any("NCCL_GRAPH_FILE" in w and "Debugging" in w for w in result.warnings)


def test_guide_mca_setting_and_horovod_variable():
    result = run({}, nccl_mpi_mca_params={"btl": "^openib"},
                 nccl_mpi_environment={"HOROVOD_MPI_ARGS": "-mca btl ^openib"})
    assert result.errors == []
    assert result.normalized["mca_params"] == {"btl": "^openib"}
    assert any("Horovod does not read HOROVOD_MPI_ARGS" in w for w in result.warnings)


def test_every_error_names_a_variable_and_what_is_allowed():
    result = run({"NCCL_ALGO": "Tree ", "NCCL_NSOCKS_PERTHREAD": "abc", "bogus": 1})
    assert len(result.errors) == 3
    for error in result.errors:
        assert error.startswith("nccl_settings.")
        assert "allowed:" in error


def test_known_table_has_no_forbidden_or_removed_names():
    assert not set(validate_nccl.KNOWN) & set(validate_nccl.FORBIDDEN)
    assert not set(validate_nccl.KNOWN) & set(validate_nccl.REMOVED)
    assert set(validate_nccl.DEBUG_ONLY) <= set(validate_nccl.KNOWN)
