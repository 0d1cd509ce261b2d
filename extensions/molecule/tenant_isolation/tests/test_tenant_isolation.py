"""Verify the tenant_isolation scenario on a simulated DGX H100 (testinfra, docker backend).

The converged tenants (alpha with the probe service in its slice, beta) are checked first through
`systemctl show` and the cgroup files the kernel enforces; the later tests run the role again
(run_role.yml, tests ordered top to bottom) with other tenants: cgroup-v2-only settings (refused
on a cgroup v1 node, applied on a v2 one), bad values, tenants placed by GPU (refused without GPU
facts, with an unknown GPU, with numa_nodes as well; written from the GPUs' CPU and NUMA affinity
in the GPU facts or in tenant_isolation_gpu_affinity). The base_tenants fixture puts the
converged tenants back at the end, so verify can run again after a fresh converge.

Every run of the role starts without GPU facts (an in-memory fact cache per run); a run that
needs them gathers them first (gather_gpu_topology), as a play would.
"""

import os
import sys

import pytest

SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(SCENARIO, "..", "shared"))

from role_runs import run_playbook  # noqa: E402

UNIT_DIR = "/etc/systemd/system"
BASE_TENANTS = [
    {"name": "alpha", "description": "Tenant alpha (Spark team)", "cpu_quota": "400%", "cpu_weight": 200,
     "memory_max": "64G", "tasks_max": 4096, "units": ["tenant-probe.service"]},
    {"name": "beta", "cpu_quota": "200%", "memory_max": "8G"},
]
GPU_TENANTS = [{"name": "delta", "gpus": [0, 1]}, {"name": "epsilon", "gpus": [3, 4]}]


def name_of(host):
    return host.backend.get_hostname()


def cgroup_v2(host):
    return host.file("/sys/fs/cgroup/cgroup.controllers").exists


def show(host, unit, *props):
    return host.check_output("systemctl show %s %s" % (unit, " ".join("-p " + p for p in props))).splitlines()


def run_role(extra, gather_gpu_topology=False):
    # an in-memory fact cache: every run starts without GPU facts
    return run_playbook(os.path.join(SCENARIO, "run_role.yml"), dict(extra, gather_gpu_topology=gather_gpu_topology),
                        env={"ANSIBLE_CACHE_PLUGIN": "ansible.builtin.memory"})


@pytest.fixture(scope="module")
def base_tenants(host):
    """Put the converged tenants back after the tests that run the role with others."""
    yield
    back = run_role({"tenant_isolation_tenants": BASE_TENANTS})
    assert back.rc == 0, back.stdout[-4000:]
    assert host.run("ls %s/tenant-*.slice" % UNIT_DIR).stdout.split() == \
        ["%s/tenant-alpha.slice" % UNIT_DIR, "%s/tenant-beta.slice" % UNIT_DIR]
    alpha = show(host, "tenant-alpha.slice", "CPUQuotaPerSecUSec", "MemoryMax")
    assert "CPUQuotaPerSecUSec=4s" in alpha and "MemoryMax=68719476736" in alpha, alpha


# ---------------------------------------------------------------- the converged tenants

def test_systemctl_show_reports_the_alpha_limits(host):
    alpha = show(host, "tenant-alpha.slice", "CPUQuotaPerSecUSec", "MemoryMax", "CPUWeight", "TasksMax", "Description")
    for line in ("CPUQuotaPerSecUSec=4s", "MemoryMax=68719476736", "CPUWeight=200", "TasksMax=4096",
                 "Description=Tenant alpha (Spark team)"):
        assert line in alpha, alpha


def test_systemctl_show_reports_the_beta_limits(host):
    beta = show(host, "tenant-beta.slice", "CPUQuotaPerSecUSec", "MemoryMax")
    assert "CPUQuotaPerSecUSec=2s" in beta, beta
    assert "MemoryMax=8589934592" in beta, beta


def test_probe_service_runs_in_the_alpha_slice(host):
    probe = show(host, "tenant-probe.service", "Slice", "ActiveState", "ControlGroup")
    assert "Slice=tenant-alpha.slice" in probe, probe
    assert "ActiveState=active" in probe, probe
    assert any("/tenant.slice/tenant-alpha.slice/tenant-probe.service" in line for line in probe), probe


def find_alpha_cgroup(host, roots):
    path = host.run("find %s -maxdepth 6 -type d -path '*tenant.slice/tenant-alpha.slice' 2>/dev/null | head -n1"
                    % " ".join(roots)).stdout.strip()
    assert path, "no tenant-alpha.slice cgroup under %s" % " ".join(roots)
    return path


def test_cgroup_files_carry_the_alpha_limits(host):
    def read(directory, name):
        return host.file("%s/%s" % (directory, name)).content_string.strip()

    if cgroup_v2(host):
        d = find_alpha_cgroup(host, ["/sys/fs/cgroup"])
        assert "cpu.max=%s memory.max=%s" % (read(d, "cpu.max"), read(d, "memory.max")) \
            == "cpu.max=400000 100000 memory.max=68719476736"
    else:
        cpu = find_alpha_cgroup(host, ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"])
        mem = find_alpha_cgroup(host, ["/sys/fs/cgroup/memory"])
        assert "quota=%s period=%s limit=%s" % (read(cpu, "cpu.cfs_quota_us"), read(cpu, "cpu.cfs_period_us"),
                                               read(mem, "memory.limit_in_bytes")) \
            == "quota=400000 period=100000 limit=68719476736"


# ---------------------------------------------------------------- cpuset / MemoryHigh need cgroup v2

def test_numa_pinned_tenant_with_memory_high(host, base_tenants):
    gamma = {"name": "gamma", "cpu_quota": "800%", "memory_high": "56G", "memory_max": "64G", "numa_nodes": [0]}
    run = run_role({"tenant_isolation_restart_units": True, "tenant_isolation_tenants": BASE_TENANTS + [gamma]})
    if cgroup_v2(host):
        # applied: the NUMA node 0 CPUs
        assert run.rc == 0, run.stdout[-4000:]
        shown = show(host, "tenant-gamma.slice", "AllowedCPUs", "AllowedMemoryNodes", "MemoryHigh")
        assert "AllowedMemoryNodes=0" in shown, shown
        assert "MemoryHigh=60129542144" in shown, shown
    else:
        # refused clearly, nothing written
        msg = run.failure
        assert "runs cgroup v1" in msg
        assert "gamma: memory_high, numa_nodes" in msg
        assert "Nothing was changed" in msg
        assert not host.file("%s/tenant-gamma.slice" % UNIT_DIR).exists


def test_bad_cpu_quota_refused_with_the_variable_value_and_what_is_allowed(host, base_tenants):
    run = run_role({"tenant_isolation_tenants": [{"name": "alpha", "cpu_quota": "4 cpus"}]})
    assert "tenant_isolation_tenants[alpha].cpu_quota: invalid value '4 cpus'; allowed: a percentage of one CPU" \
        in run.failure


def test_refused_runs_left_alpha_as_it_was(host):
    alpha = show(host, "tenant-alpha.slice", "CPUQuotaPerSecUSec", "MemoryMax")
    assert "CPUQuotaPerSecUSec=4s" in alpha, alpha
    assert "MemoryMax=68719476736" in alpha, alpha


# ---------------------------------------------------------------- NUMA placement by GPU affinity

def test_gpu_placed_tenant_refused_without_gpu_facts(host, base_tenants):
    run = run_role({"tenant_isolation_require_cgroup_v2": False,
                    "tenant_isolation_tenants": BASE_TENANTS + [{"name": "delta", "gpus": [0, 1]}]})
    msg = run.failure
    # the message names the variable, the value and how to get the affinity
    assert "tenant_isolation_tenants[delta].gpus: invalid value [0, 1]; allowed: GPU indexes whose CPU/NUMA affinity" \
        in msg
    assert "is known, but %s has none" % name_of(host) in msg
    assert "gather_subset [default, topology]" in msg
    assert "tenant_isolation_gpu_affinity" in msg


def test_gpu_facts_report_the_cpu_and_numa_affinity(host):
    result = host.ansible("dgxops.fleet.nvidia_smi_facts", "gather_subset=default,topology", check=False)
    assert not result.get("failed"), result
    gpus = result["ansible_facts"]["nvidia_smi"]["gpus"]
    assert gpus[0]["cpu_affinity"] == "0-55,112-167", [g["cpu_affinity"] for g in gpus]
    assert gpus[0]["numa_node"] == 0
    assert gpus[7]["cpu_affinity"] == "56-111,168-223", [g["cpu_affinity"] for g in gpus]
    assert gpus[7]["numa_node"] == 1


def test_gpu_placed_tenants_refused_where_cgroup_v2_is_required(host, base_tenants):
    if cgroup_v2(host):
        pytest.skip("a cgroup v1 node only")
    run = run_role({"tenant_isolation_tenants": BASE_TENANTS + [{"name": "delta", "gpus": [0, 1]}]},
                   gather_gpu_topology=True)
    msg = run.failure
    # names the GPU placement; nothing written
    assert "runs cgroup v1" in msg
    assert "delta: gpus" in msg
    assert not host.file("%s/tenant-delta.slice" % UNIT_DIR).exists


def test_unknown_gpu_index_refused_with_the_gpus_the_node_has(host, base_tenants):
    run = run_role({"tenant_isolation_require_cgroup_v2": False,
                    "tenant_isolation_tenants": BASE_TENANTS + [{"name": "delta", "gpus": [1, 9]}]},
                   gather_gpu_topology=True)
    msg = run.failure
    assert "tenant_isolation_tenants[delta].gpus: invalid value [9]; allowed: GPU indexes of %s" % name_of(host) in msg
    assert "(from ansible_facts.nvidia_smi.gpus): 0, 1, 2, 3, 4, 5, 6, 7" in msg


def test_gpus_and_numa_nodes_exclude_each_other(host, base_tenants):
    run = run_role({"tenant_isolation_tenants": [{"name": "delta", "gpus": [0], "numa_nodes": [0]}]},
                   gather_gpu_topology=True)
    assert "tenant_isolation_tenants[delta].gpus: invalid value [0]; allowed: either gpus or numa_nodes, not both" \
        in run.failure


def gpu_placed_run():
    # cgroup v1 allowed: the settings are written (and ignored by systemd there)
    return run_role({"tenant_isolation_require_cgroup_v2": False,
                     "tenant_isolation_tenants": BASE_TENANTS + GPU_TENANTS}, gather_gpu_topology=True)


def test_gpu_placed_slices_carry_the_gpus_affinity(host, base_tenants):
    run = gpu_placed_run()
    assert run.rc == 0, run.stdout[-4000:]
    assert sorted(n for n in run.result["slices_changed"] if n in ("delta", "epsilon")) == ["delta", "epsilon"]
    lines = host.check_output("grep -h -E '^(AllowedCPUs|AllowedMemoryNodes)=' %s/tenant-delta.slice "
                              "%s/tenant-epsilon.slice" % (UNIT_DIR, UNIT_DIR)).splitlines()
    # the GPUs' CPU and NUMA affinity (DGX H100 topo -m): GPUs 0-1 on node 0, GPUs 3-4 across both
    assert lines == ["AllowedCPUs=0-55,112-167", "AllowedMemoryNodes=0", "AllowedCPUs=0-223", "AllowedMemoryNodes=0-1"]
    # the second run changes no slice
    again = gpu_placed_run()
    assert again.rc == 0, again.stdout[-4000:]
    assert again.result["slices_changed"] == []


def test_gpu_affinity_override_is_used_instead_of_the_facts(host, base_tenants):
    # epsilon from the previous test, no longer listed: removed
    assert host.file("%s/tenant-epsilon.slice" % UNIT_DIR).exists
    run = run_role({"tenant_isolation_require_cgroup_v2": False,
                    "tenant_isolation_gpu_affinity": [{"index": 0, "cpu_affinity": "0-1", "numa_node": 0},
                                                      {"index": 1, "cpu_affinity": "2,3", "numa_node": None}],
                    "tenant_isolation_tenants": BASE_TENANTS + [{"name": "delta", "gpus": [0, 1]}]})
    assert run.rc == 0, run.stdout[-4000:]
    lines = host.check_output("grep -h -E '^Allowed' %s/tenant-delta.slice" % UNIT_DIR).splitlines()
    # GPU 1 without a NUMA node leaves it out of AllowedMemoryNodes
    assert lines == ["AllowedCPUs=0-3", "AllowedMemoryNodes=0"]
    assert not host.file("%s/tenant-epsilon.slice" % UNIT_DIR).exists
