"""The shipped inventories hold valid settings: the validate play passes on them."""

import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
FACTS = '{"spark_rapids_gpus_per_node": 8, "spark_rapids_gpu_memory_mib": 81920, "mig_gpu_model": "a100-80gb"}'


def run_validate(inventory, *extra, callback=None):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=BIN + os.pathsep + os.environ.get("PATH", ""))
    if callback:
        env["ANSIBLE_STDOUT_CALLBACK"] = callback
    return subprocess.run(
        [os.path.join(BIN, "ansible-playbook"), "-i", inventory, "playbooks/validate.yml",
         "-e", "ansible_connection=local", "-e", "ansible_become=false",
         "-e", "ansible_python_interpreter=%s" % sys.executable, *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=600)


def test_example_fleet_settings_are_valid():
    # GPU facts come from the hardware on a real run (site.yml gathers them first); give the
    # validator an A100 80GB's values instead
    proc = run_validate("inventories/example", "-e", FACTS, callback="ansible.posix.json")
    assert proc.returncode == 0, proc.stdout[-4000:]
    data = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert all(stats["failures"] == 0 and stats["unreachable"] == 0 for stats in data["stats"].values())
    # every host of the example fleet was checked, in one task per host, the MIG tenants' extra
    # areas included
    (task,) = [t for play in data["plays"] for t in play["tasks"]
               if t["task"]["name"] == "Check every enabled role's settings on the controller"]
    roles = dict((host, result["roles"]) for host, result in task["hosts"].items())
    inventory = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", "inventories/example", "--list"],
                               cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert sorted(roles) == sorted(json.loads(inventory)["_meta"]["hostvars"])
    for host in ("dgx-a100-01", "dgx-a100-02", "dgx-h100-01", "dgx-h200-01", "spark-01", "spark-02"):
        assert host in roles
    common = ["fleet_identity", "nvidia_driver", "gpu_tuning", "storage_tuning", "nccl", "spark_rapids", "monitoring"]
    assert roles["dgx-a100-01"] == common
    assert roles["dgx-a100-02"] == common[:5] + ["mig", "tenant_isolation"] + common[5:]


def test_a_bad_value_stops_every_host_before_any_change():
    proc = run_validate("inventories/example", "-e", FACTS,
                        "-e", '{"nccl_settings": {"NCCL_NSOCKS_PERTHREAD": 16, "NCCL_SOCKET_NTHREADS": 8}}')
    assert proc.returncode != 0
    assert "NCCL_NSOCKS_PERTHREAD" in proc.stdout and "NCCL_SOCKET_NTHREADS" in proc.stdout and "64" in proc.stdout
    assert "changed=0" in proc.stdout and "changed=1" not in proc.stdout


def test_simulated_inventory_groups_match_the_fleet_code():
    from dgxops.sim.fleet import MODELS

    groups = {group for group, _driver in MODELS.values()}
    for group in groups:
        path = os.path.join(ROOT, "inventories", "simulated", "group_vars", group + ".yml")
        assert os.path.exists(path), path
        assert isinstance(yaml.safe_load(open(path)), dict)
