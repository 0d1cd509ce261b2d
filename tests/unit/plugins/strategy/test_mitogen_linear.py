"""dgxops.fleet.mitogen_linear: the CPU pinning choice, and real runs through ansible-playbook
that read the CPU set of the worker processes (a lookup runs in the worker)."""

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
HAS_MITOGEN = importlib.util.find_spec("ansible_mitogen") is not None


def plugin():
    from ansible_collections.dgxops.fleet.plugins.strategy import mitogen_linear

    return mitogen_linear


@pytest.mark.parametrize(
    "setting, cpus, allowed, wanted",
    [
        ("auto", 2, 2, False),   # Mitogen would put the controller and every worker on CPU 1
        ("auto", 3, 3, False),
        ("auto", 4, 4, True),
        ("auto", 64, 64, True),
        ("auto", 64, 8, False),  # confined by taskset or a cpuset: Mitogen's placement ignores it
        (None, 2, 2, False),     # unset is auto
        (" ON ", 2, 2, True),
        ("on", 2, 1, True),
        ("off", 64, 64, False),
    ],
)
def test_cpu_pinning_choice(setting, cpus, allowed, wanted):
    assert plugin().cpu_pinning_wanted(setting, cpus, allowed) is wanted


def test_cpu_pinning_bad_setting_names_the_variable_and_choices():
    from ansible.errors import AnsibleError

    with pytest.raises(AnsibleError, match=r"DGXOPS_MITOGEN_CPU_PINNING must be one of auto, on, off, got 'yes'"):
        plugin().cpu_pinning_wanted("yes", 2, 2)


def worker_cpus(tmp_path, pinning, strategy="dgxops.fleet.mitogen_linear"):
    """Run a play with the strategy; the Cpus_allowed_list each of its workers had."""
    play = tmp_path / "cpus.yml"
    play.write_text("""
- name: Read the workers' CPU sets
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the worker's CPU set
      ansible.builtin.debug:
        msg: "CPUS={{ lookup('ansible.builtin.pipe', 'grep Cpus_allowed_list /proc/self/status') | split | last }}"
""")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("".join("node%d ansible_connection=local ansible_python_interpreter=%s\n" % (i, sys.executable)
                                 for i in range(4)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STRATEGY=strategy, ANSIBLE_FORCE_COLOR="0",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ANSIBLE_STRATEGY_PLUGINS", None)
    if pinning is None:
        env.pop("DGXOPS_MITOGEN_CPU_PINNING", None)
    else:
        env["DGXOPS_MITOGEN_CPU_PINNING"] = pinning
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(play)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cpus = [line.split("CPUS=", 1)[1].strip().strip('"') for line in proc.stdout.splitlines() if "CPUS=" in line]
    assert len(cpus) == 4, proc.stdout
    return cpus, proc


def cpu_list(cpus):
    """'0-1' -> {0, 1}; '0,2-3' -> {0, 2, 3}."""
    out = set()
    for part in cpus.split(","):
        first, _sep, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


@pytest.mark.skipif(not HAS_MITOGEN, reason="mitogen is not installed in this environment")
def test_off_leaves_workers_on_every_cpu_of_the_controller(tmp_path):
    cpus, _proc = worker_cpus(tmp_path, "off")
    assert {frozenset(cpu_list(c)) for c in cpus} == {frozenset(os.sched_getaffinity(0))}


@pytest.mark.skipif(not HAS_MITOGEN, reason="mitogen is not installed in this environment")
@pytest.mark.skipif(os.cpu_count() != 2 or len(os.sched_getaffinity(0)) != 2,
                    reason="Mitogen's one-CPU placement (everything on CPU 1) happens on 2-CPU controllers")
def test_auto_undoes_mitogens_one_cpu_placement_and_on_keeps_it(tmp_path):
    cpus, _proc = worker_cpus(tmp_path, None)
    assert {frozenset(cpu_list(c)) for c in cpus} == {frozenset(os.sched_getaffinity(0))}
    # what Mitogen's own policy does here, and what auto turns off: every worker on CPU 1
    pinned, _proc = worker_cpus(tmp_path, "on")
    assert {frozenset(cpu_list(c)) for c in pinned} == {frozenset({1})}


def test_without_mitogen_it_warns_and_runs_linear(tmp_path, monkeypatch):
    # hide mitogen from the controller: a sitecustomize that makes importing it fail
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('ansible_mitogen', 'mitogen'):\n"
        "            raise ImportError('hidden by the test: ' + name)\n"
        "sys.meta_path.insert(0, _Hide())\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(hide) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cpus, proc = worker_cpus(tmp_path, None)
    assert "the mitogen package is not installed on the controller" in proc.stdout + proc.stderr
    assert "running Ansible's linear strategy" in proc.stdout + proc.stderr
    assert len(cpus) == 4


TRACE = ("Traceback (most recent call last):\n  File \"basic.py\", line 1744, in atomic_move\n"
         "OSError: [Errno 16] Device or resource busy: b'/root/.ansible/tmp/x/.source.conf' -> b'/etc/nccl.conf'\n")


@pytest.mark.skipif(not HAS_MITOGEN, reason="mitogen not installed")
def test_a_module_oserror_traceback_is_named_in_the_result():
    # Mitogen's in-process runner returns an uncaught OSError as a traceback with no JSON;
    # ansible-core reports that as "Module result deserialization failed"
    name = plugin().name_module_oserror
    data = name({"rc": 1, "stdout": "", "stderr": TRACE},
                {"failed": True, "msg": "Module result deserialization failed: No start of json char found"})
    assert data["msg"].startswith("cannot write /etc/nccl.conf: [Errno 16 EBUSY] Device or resource busy; ")
    assert data["errno_name"] == "EBUSY" and data["path"] == "/etc/nccl.conf"

    class Utr:  # ansible-core 2.21's UnifiedTaskResult, as far as the strategy uses it
        failed = True
        msg = "Module result deserialization failed."
        exception = object()

    utr = name({"rc": 1, "stdout": "", "stderr": TRACE}, Utr())
    assert utr.msg.startswith("cannot write /etc/nccl.conf") and utr.exception is None
    # anything else is left alone
    other = {"failed": True, "msg": "boom"}
    assert name({"rc": 1, "stdout": "", "stderr": "Traceback\nValueError: x"}, dict(other)) == other
    assert name({"rc": 0, "stdout": "{}", "stderr": TRACE}, {"failed": False}) == {"failed": False}


def connection_class(tmp_path, strategy):
    """The connection class a worker gets for a host on dgxops.fleet.docker under the strategy
    (an action plugin beside the play reports it; nothing connects to the container)."""
    (tmp_path / "action_plugins").mkdir()
    (tmp_path / "action_plugins" / "which_connection.py").write_text(
        "from ansible.plugins.action import ActionBase\n"
        "class ActionModule(ActionBase):\n"
        "    def run(self, tmp=None, task_vars=None):\n"
        "        cls = type(self._connection)\n"
        "        return {'msg': 'CONNECTION=%s.%s' % (cls.__module__, cls.__name__)}\n"
    )
    play = tmp_path / "which.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - which_connection:\n      register: which\n"
                    "    - ansible.builtin.debug:\n        msg: \"{{ which.msg }}\"\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("ghost ansible_connection=dgxops.fleet.docker ansible_python_interpreter=/usr/bin/python3\n")
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STRATEGY=strategy, ANSIBLE_FORCE_COLOR="0", DGXOPS_MITOGEN_CPU_PINNING="off")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(play)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split("CONNECTION=", 1)[1].strip().strip('"') for line in proc.stdout.splitlines()
            if "CONNECTION=" in line]


@pytest.mark.skipif(not HAS_MITOGEN, reason="mitogen not installed")
def test_hosts_on_the_collections_docker_connection_run_through_mitogens(tmp_path):
    # Mitogen redirects only the connections it knows by name (docker, ssh...); without the
    # redirect a dgxops.fleet.docker host would silently lose Mitogen
    assert connection_class(tmp_path, "dgxops.fleet.mitogen_linear") == ["ansible.plugins.connection.mitogen_docker.Connection"]


def test_under_ansibles_linear_the_collections_docker_connection_runs(tmp_path):
    assert connection_class(tmp_path, "linear") == ["ansible_collections.dgxops.fleet.plugins.connection.docker.Connection"]


@pytest.mark.skipif(not HAS_MITOGEN, reason="mitogen is not installed in this environment")
def test_collections_are_listed_once_by_the_controller_not_per_worker(tmp_path, monkeypatch):
    """Mitogen's planner lists the installed collections for each collection module, in the
    worker; the strategy lists them once in the controller's top process and the workers reuse it."""
    calls = tmp_path / "calls"
    spy = tmp_path / "spy"
    spy.mkdir()
    (spy / "sitecustomize.py").write_text(
        # ansible-playbook only (its workers are forks of it), not the Python Mitogen starts
        "import os, sys\n"
        "if sys.argv[0].endswith('ansible-playbook'):\n"
        "    import ansible.collections.list as _l\n"
        "    _orig = _l.list_collection_dirs\n"
        "    def list_collection_dirs(*a, **kw):\n"
        "        with open(%r, 'a') as fh:\n"
        "            fh.write('%%d\\n' %% os.getpid())\n"
        "        return _orig(*a, **kw)\n"
        "    _l.list_collection_dirs = list_collection_dirs\n" % str(calls)
    )
    monkeypatch.setenv("PYTHONPATH", str(spy) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    play = tmp_path / "files.yml"
    play.write_text("""
- name: Run a collection module on every host
  hosts: all
  gather_facts: false
  tasks:
    - name: Write one file per host
      dgxops.fleet.service_files:
        files:
          - dest: "%s/{{ inventory_hostname }}.txt"
            content: "{{ inventory_hostname }}\\n"
    - name: And once more
      dgxops.fleet.service_files:
        files:
          - dest: "%s/{{ inventory_hostname }}.txt"
            content: "{{ inventory_hostname }}\\n"
""" % (tmp_path, tmp_path))
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("".join("node%d ansible_connection=local ansible_python_interpreter=%s\n" % (i, sys.executable)
                                 for i in range(4)))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STRATEGY="dgxops.fleet.mitogen_linear",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(play)],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.glob("node*.txt")) == ["node%d.txt" % i for i in range(4)]
    assert proc.stdout.count("ok=2    changed=1 ") == 4  # the second task found the files as the first wrote them
    pids = calls.read_text().split()
    # 8 worker runs of a collection module, one listing, in one process (Mitogen alone: one per worker)
    assert len(pids) == 1, pids
