"""Reliability on a simulated fleet of its own (issue 22): bad declared state is refused before any
host changes, node faults are named by the facts' own reason and fix, the doctor gives a verdict.

The fleet (an A100-40GB on driver 535, which lists MIG profiles only with MIG on, and an H100) is
this module's own, so it never touches the fleets other tests start."""

import json
import os
import subprocess
import sys
import time

import pytest

from dgxops.runner import PlaybookRun, run_playbook


FLEET = "rel22"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = "/usr/bin/docker"


@pytest.fixture(scope="module")
def fleet(fleet_factory):
    with fleet_factory(FLEET, "dgx-a100-40gb=1,dgx-h100=1") as started:
        yield {n.model: n.name for n in started.nodes}, started.inventory


def node_exec(node, *argv):
    return subprocess.run([DOCKER, "exec", node, *argv], capture_output=True, text=True, check=False)


def mig_modes(node):
    out = node_exec(node, "nvidia-smi", "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    return out.stdout.split("\n")[0].strip()


A100_MIG = {"mig_layout": [{"gpus": 0, "instances": [{"profile": "1g.20gb", "count": 1}]}]}


@pytest.mark.parametrize("extravars, expected", [
    # the A100-40GB's driver (535) lists no profiles with MIG off: the model table refuses it
    (A100_MIG, "profile '1g.20gb' is not offered by this GPU"),
    ({"mig_layout": [{"gpus": "all", "instances": [{"profile": "1g.5gb", "count": 8}]}]}, "at most 7 instance"),
    ({"mig_layout": [{"gpus": 12, "instances": [{"profile": "1g.5gb", "count": 1}]}]}, "GPU index 12 does not exist"),
    ({"mig_layout": [{"gpus": 0, "instances": [{"profile": 99, "count": 1}]}]}, "profile id 99 is not offered"),
    ({"mig_layout": [{"gpus": 0, "instances": [{"profile": "1g.5gb+me", "count": 2}]}]}, "1g.5gb+me requested"),
    ({"mig_layout": [{"gpus": "all", "instances": [{"profile": "3g.20gb", "count": 2}]}],
      "spark_rapids_cluster_manager": "standalone"}, "spark_rapids_cluster_manager: invalid value 'standalone'"),
    ({"gpu_tuning_gpus": ["12"]}, "invalid value '12'"),
    ({"gpu_tuning_application_clocks": {"memory_mhz": 1215, "graphics_mhz": 1000}},
     "graphics clock 1000 MHz is not supported with memory 1215 MHz"),
    ({"storage_tuning_mounts": [{"target": "/no/such/mount", "add": ["noatime"]}]}, "/no/such/mount"),
    ({"nvidia_driver_modprobe_path": "/etc/passwd"}, "nvidia_driver_modprobe_path: invalid value '/etc/passwd'"),
    ({"nccl_conf_mode": "0666"}, "nccl_conf_mode: invalid value '0666'"),
    ({"spark_rapids_conf_dir": "conf"}, "spark_rapids_conf_dir: invalid value 'conf'"),
    ({"dgxops_serial": "lots"}, "dgxops_serial: invalid value 'lots'"),
    ({"dgxops_max_fail_percentage": "half"}, "dgxops_max_fail_percentage: invalid value 'half'"),
    ({"dgxops_enable_storage": "maybe"}, "dgxops_enable_storage: invalid value 'maybe'"),
    ({"tenant_isolation_tenants": [{"name": "big", "allowed_cpus": "0-999"}]}, "allowed_cpus: invalid value '0-999'"),
    ({"spark_rapids_settings": {"spark.rapids.sql.concurrentGpuTasks": 1000}}, "concurrentGpuTasks']: invalid value 1000"),
])
def test_bad_declared_state_is_refused_before_any_change(fleet, extravars, expected):
    models, inventory = fleet
    node = models["dgx-a100-40gb"]
    before = mig_modes(node)
    result = run_playbook(PlaybookRun("site.yml", inventory=inventory, limit=node, extravars=extravars))
    assert not result.ok
    assert result.rc != 250
    assert result.changed == 0 and result.changed_tasks == []
    messages = "\n".join(f.msg for f in result.failures)
    assert expected in messages, result.summary()
    assert mig_modes(node) == before == "Disabled, Disabled"


@pytest.mark.parametrize("fault, expected", [
    (["dgxops-sim", "fault", "set", "driver-not-loaded"], "(driver_not_loaded): the NVIDIA driver is not loaded"),
    (["dgxops-sim", "fault", "set", "gpu-lost", "--gpu", "3"], "(gpu_lost): a GPU has fallen off the bus"),
    (["dgxops-sim", "fault", "set", "hang", "--gpu", "2"], "(timeout): nvidia-smi did not answer"),
    (["mv", "/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi.away"], "(not_installed)"),
])
def test_a_node_fault_stops_that_host_with_its_reason_and_fix(fleet, fault, expected):
    models, inventory = fleet
    sick, well = models["dgx-h100"], models["dgx-a100-40gb"]
    assert node_exec(sick, *fault).returncode == 0
    try:
        result = run_playbook(PlaybookRun("site.yml", inventory=inventory,
                                          extravars={"gpu_tuning_persistence_mode": None}))
    finally:
        node_exec(sick, "dgxops-sim", "fault", "clear")
        node_exec(sick, "sh", "-c", "[ -e /usr/bin/nvidia-smi.away ] && mv /usr/bin/nvidia-smi.away /usr/bin/nvidia-smi; true")
    assert [f.host for f in result.failures] == [sick], result.summary()
    failure = result.failures[0]
    assert failure.task == "Stop hosts whose GPU facts report a fault"
    assert expected in failure.msg and "Fix: " in failure.msg
    assert "invalid value None" not in failure.msg
    assert result.hosts[sick]["changed"] == 0
    # the healthy host went through every area
    assert result.hosts[well]["failures"] == 0 and result.hosts[well]["ok"] > 20


def test_doctor_prints_verdict_cause_and_fix(fleet):
    models, inventory = fleet
    sick = models["dgx-h100"]
    node_exec(sick, "dgxops-sim", "fault", "set", "driver-not-loaded")
    try:
        proc = subprocess.run([sys.executable, "-m", "dgxops.cli", "doctor", "-i", inventory, "--json"],
                              capture_output=True, text=True, cwd=ROOT, check=False)
        text = subprocess.run([sys.executable, "-m", "dgxops.cli", "doctor", "-i", inventory],
                              capture_output=True, text=True, cwd=ROOT, check=False)
    finally:
        node_exec(sick, "dgxops-sim", "fault", "clear")
    data = json.loads(proc.stdout)
    verdict = data["verdicts"][sick]
    assert verdict["status"] == "broken"
    assert "driver" in verdict["cause"].lower() and verdict["fix"]
    assert data["verdicts"][models["dgx-a100-40gb"]]["status"] in ("healthy", "degraded")
    assert "%s: BROKEN" % sick in text.stdout
    assert "cause: " in text.stdout and "fix: " in text.stdout


@pytest.mark.parametrize("model, profile", [("dgx-h100", "3g.40gb"), ("dgx-a100-40gb", "3g.20gb")])
def test_check_mode_completes_on_a_new_mig_layout(fleet, model, profile):
    models, inventory = fleet
    node = models[model]
    extravars = {"mig_layout": [{"gpus": "all", "instances": [{"profile": profile, "count": 2}]}],
                 "spark_rapids_cluster_manager": "yarn"}
    result = run_playbook(PlaybookRun("site.yml", inventory=inventory, limit=node, extravars=extravars,
                                      check=True, diff=True))
    assert result.ok, result.summary()
    tasks = [t for _h, t in result.changed_tasks]
    assert "Install the boot-time layout unit" in tasks and "Apply the MIG layout" in tasks
    assert mig_modes(node) == "Disabled, Disabled"


def test_a_paused_node_is_reported_within_the_task_timeout_and_the_rest_finish(fleet, tmp_path):
    models, inventory = fleet
    victim, other = models["dgx-h100"], models["dgx-a100-40gb"]
    play = tmp_path / "slow.yml"
    play.write_text("""
- name: Three steps
  hosts: dgx
  gather_facts: false
  tasks:
    - name: First step
      ansible.builtin.command: "true"
      changed_when: false
    - name: Long step
      ansible.builtin.command: sleep 6
      changed_when: false
    - name: Second step
      ansible.builtin.command: "true"
      changed_when: false
""")
    paused = []
    second_ok = set()

    def progress(event):
        if event.kind == "ok" and event.text == "Second step":
            second_ok.add(event.host)
        if event.kind == "task" and event.text == "Long step" and not paused:
            time.sleep(1.5)  # the step is running on the node: freeze it in the middle
            subprocess.run([DOCKER, "pause", victim], capture_output=True, check=False)
            paused.append(time.monotonic())

    try:
        result = run_playbook(PlaybookRun(str(play), inventory=inventory, task_timeout=20, timeout=300),
                              progress=progress)
        waited = time.monotonic() - paused[0]
    finally:
        subprocess.run([DOCKER, "unpause", victim], capture_output=True, check=False)
    assert result.status != "timeout", result.summary()
    assert waited < 20 + 30, waited
    assert [(f.host, f.task, f.unreachable) for f in result.failures] == [(victim, "Long step", True)]
    assert second_ok == {other}


def test_a_spark_secret_is_hidden_from_diff_and_the_file_is_0600(fleet):
    models, inventory = fleet
    node = models["dgx-h100"]
    secret = "s3cr3t-Pa55"
    extravars = {"spark_rapids_settings": {"spark.ssl.keyStorePassword": secret},
                 "spark_rapids_allowed_extra_keys": ["spark.ssl.keyStorePassword"]}
    check = run_playbook(PlaybookRun("site.yml", inventory=inventory, limit=node, tags="spark",
                                     extravars=extravars, check=True, diff=True))
    assert check.ok, check.summary()
    assert secret not in json.dumps(check.as_dict(), default=str)
    applied = run_playbook(PlaybookRun("site.yml", inventory=inventory, limit=node, tags="spark", extravars=extravars))
    assert applied.ok, applied.summary()
    assert secret not in json.dumps(applied.as_dict(), default=str)
    stat = node_exec(node, "stat", "-c", "%a", "/opt/spark/conf/spark-defaults.conf")
    assert stat.stdout.strip() == "600"
    # without a secret the file goes back to 0644
    assert run_playbook(PlaybookRun("site.yml", inventory=inventory, limit=node, tags="spark")).ok
    assert node_exec(node, "stat", "-c", "%a", "/opt/spark/conf/spark-defaults.conf").stdout.strip() == "644"


def test_a_driver_branch_that_does_not_support_the_gpu_is_flagged(fleet):
    models, inventory = fleet
    node = models["dgx-h100"]
    assert node_exec(node, "dgxops-sim", "init", "--model", "dgx-h100", "--driver", "470.256.02", "--force").returncode == 0
    try:
        proc = subprocess.run([sys.executable, "-m", "dgxops.cli", "doctor", "-i", inventory, "-l", node, "--json"],
                              capture_output=True, text=True, cwd=ROOT, check=False)
        # with the driver area off (a fleet whose driver is managed elsewhere), site.yml must
        # refuse the node before any change; with it on, the driver role installs the declared branch
        site = run_playbook(PlaybookRun("site.yml", inventory=inventory, limit=node,
                                        extra_vars=['{"dgxops_enable_driver": false}']))
    finally:
        node_exec(node, "dgxops-sim", "init", "--model", "dgx-h100", "--driver", "580.95.05", "--force")
    verdict = json.loads(proc.stdout)["verdicts"][node]
    assert verdict["status"] == "broken" and verdict["check"] == "driver_support"
    assert verdict["cause"] == "driver branch R470 does not support h100 GPUs (the first branch that does is R525)"
    # site.yml without the driver area refuses it before any change
    assert not site.ok and site.changed == 0
    assert "does not support h100 GPUs; allowed: branch 525 or newer" in site.failures[0].msg
