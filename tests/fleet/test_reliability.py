"""Reliability on a simulated fleet of its own (issue 22): bad declared state is refused before any
host changes, node faults are named by the facts' own reason and fix, the doctor gives a verdict.

The fleet (an A100-40GB on driver 535, which lists MIG profiles only with MIG on, and an H100) is
this module's own, so it never touches the fleets other tests start."""

import json
import os
import re
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
    print("mitogen_linear: the paused node was reported and the run ended %.1f s after the pause" % waited)
    assert result.status != "timeout", result.summary()
    assert waited < 20 + 30, waited
    assert [(f.host, f.task, f.unreachable) for f in result.failures] == [(victim, "Long step", True)]
    assert second_ok == {other}


FROZEN_FLEET = "rel22h"
FROZEN_PLAY = """
- name: Three steps
  hosts: dgx
  gather_facts: false
  tasks:
    - name: First step
      ansible.builtin.command: "true"
      changed_when: false
    - name: Long step
      ansible.builtin.shell: "touch /run/dgxops-long-step && sleep 8"
      changed_when: false
    - name: Record the work done
      ansible.builtin.copy:
        content: "done\\n"
        dest: /var/tmp/dgxops-frozen-node-test
        mode: "0644"
"""
# seconds: the task timeout the test sets (ANSIBLE_TASK_TIMEOUT over ansible.cfg's 1200) and the
# slack for a loaded machine; a run that is still going after HANG_S has hung
TEST_TASK_TIMEOUT = 20
SLACK_S = 40
HANG_S = 300


@pytest.fixture(scope="module")
def frozen_fleet(fleet_factory):
    """Three nodes of their own, reached with the inventory `dgxops sim up` writes."""
    with fleet_factory(FROZEN_FLEET, "dgx-spark=3") as started:
        try:
            yield list(started.names), started.inventory
        finally:
            for name in started.names:
                subprocess.run([DOCKER, "unpause", name], capture_output=True, check=False)


@pytest.mark.parametrize("strategy", ["linear", "free"])
def test_a_paused_node_is_unreachable_under_plain_ansible_playbook_and_the_rest_finish(frozen_fleet, strategy,
                                                                                        tmp_path):
    """Plain ansible-playbook (no wrapper), Ansible's own strategy, the simulated inventory's
    connection and the checkout's ansible.cfg: a node paused in the middle of a task is reported
    unreachable with the task timeout named, and the other nodes do the rest of the play."""
    names, inventory = frozen_fleet
    victim, others = names[1], [names[0], names[2]]
    for node in names:
        node_exec(node, "rm", "-f", "/run/dgxops-long-step", "/var/tmp/dgxops-frozen-node-test")
    play = tmp_path / "frozen.yml"
    play.write_text(FROZEN_PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_STRATEGY=strategy,
               ANSIBLE_TASK_TIMEOUT=str(TEST_TASK_TIMEOUT), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    log = tmp_path / "run.log"
    try:
        with open(log, "wb") as out:
            proc = subprocess.Popen([playbook, "-i", inventory, str(play)], cwd=ROOT, env=env,
                                    stdout=out, stderr=subprocess.STDOUT)
            try:
                # freeze the node while its Long step runs (the step's marker file is there)
                deadline = time.monotonic() + 120
                while node_exec(victim, "test", "-e", "/run/dgxops-long-step").returncode != 0:
                    assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                    time.sleep(0.3)
                subprocess.run([DOCKER, "pause", victim], capture_output=True, check=True)
                paused = time.monotonic()
                proc.wait(timeout=HANG_S)
                waited = time.monotonic() - paused
            finally:
                if proc.poll() is None:  # it hung: the test fails, and the run goes
                    proc.kill()
                    proc.wait()
    finally:
        subprocess.run([DOCKER, "unpause", victim], capture_output=True, check=False)
    text = log.read_text()
    print("%s: the paused node was reported and the run ended %.1f s after the pause" % (strategy, waited))
    assert proc.returncode == 4, text  # 4: a host was unreachable
    assert waited < TEST_TASK_TIMEOUT + SLACK_S, (waited, text)
    assert "fatal: [%s]: UNREACHABLE!" % victim in text, text
    assert ("%s did not answer within %d s" % (victim, TEST_TASK_TIMEOUT)) in text, text
    assert "the container is paused (docker unpause %s)" % victim in text, text
    recap = {m.group(1): m.group(2) for m in re.finditer(r"^(\S+)\s+:\s+(ok=.*)$", text, re.M)}
    assert re.search(r"unreachable=1\b", recap[victim]) and re.search(r"ok=1\b", recap[victim]), recap
    for node in others:
        assert re.search(r"ok=3\b.*unreachable=0\s+failed=0", recap[node]), recap
        assert node_exec(node, "cat", "/var/tmp/dgxops-frozen-node-test").stdout == "done\n"
    assert node_exec(victim, "test", "-e", "/var/tmp/dgxops-frozen-node-test").returncode == 1


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
    # R470 predates NVIDIA's debian12 repository: the node gets it from the Ubuntu layout
    legacy = node_exec(node, "dgxops-sim", "init", "--model", "dgx-h100", "--driver", "470.256.02", "--layout", "ubuntu",
                       "--force")
    assert legacy.returncode == 0, legacy.stdout + legacy.stderr
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
