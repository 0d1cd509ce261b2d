"""`dgxops sim up --inventory PATH`: the inventory carries the simulated fleet's settings wherever it is written."""

import json
import os
import shutil
import subprocess
import sys

import yaml

from dgxops.sim import fleet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)
SIMULATED = os.path.join(ROOT, "inventories", "simulated")


def _fleet(tmp_path, monkeypatch):
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path / "state"))
    sim = fleet.SimFleet("unit")
    nodes = [fleet.Node("dgxsim-a100-80gb-2", "dgx-a100-80gb", "550.163.01", "c1"),
             fleet.Node("unit-spark-1", "dgx-spark", "580.95.05", "c2")]
    monkeypatch.setattr(sim, "load", lambda: nodes)
    return sim


def _hostvars(inventory, cwd):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", str(inventory), "--list"], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)["_meta"]["hostvars"]


def _expected(host, groups):
    """What Ansible gives the host from inventories/simulated itself (group_vars + host_vars)."""
    want = {}
    for name in ["all"] + groups:
        path = os.path.join(SIMULATED, "group_vars", name + ".yml")
        if os.path.exists(path):
            want.update(yaml.safe_load(open(path)) or {})
    path = os.path.join(SIMULATED, "host_vars", host + ".yml")
    if os.path.exists(path):
        want.update(yaml.safe_load(open(path)) or {})
    return want


def test_inventory_written_elsewhere_carries_the_fleets_settings(tmp_path, monkeypatch):
    sim = _fleet(tmp_path, monkeypatch)
    out = tmp_path / "some" / "where.yml"
    sim.write_inventory(out)
    assert not (out.parent / "group_vars").exists()  # nothing written beside it
    hostvars = _hostvars(out, tmp_path)
    for host, groups in (("dgxsim-a100-80gb-2", ["dgx_a100"]), ("unit-spark-1", ["dgx_spark"])):
        want = _expected(host, groups)
        assert want, "inventories/simulated has settings for %s" % host
        got = {k: hostvars[host].get(k) for k in want}
        assert got == want
        assert hostvars[host]["ansible_connection"] == "dgxops.fleet.docker"
    assert hostvars["unit-spark-1"]["spark_rapids_cluster_group"] == "dgx_spark"
    assert hostvars["unit-spark-1"]["nvidia_driver_repo_url"] == "file:/srv/dgxops-cuda-repo/debian12/"
    assert hostvars["unit-spark-1"]["nvidia_driver_branch"] == "580"


def test_inventory_beside_the_settings_does_not_copy_them(tmp_path, monkeypatch):
    sim = _fleet(tmp_path, monkeypatch)
    settings = tmp_path / "simulated"
    shutil.copytree(os.path.join(SIMULATED, "group_vars"), settings / "group_vars")
    shutil.copytree(os.path.join(SIMULATED, "host_vars"), settings / "host_vars")
    monkeypatch.setattr(fleet.SimFleet, "SETTINGS_DIR", settings)
    out = sim.write_inventory(settings / "hosts.yml")
    data = yaml.safe_load(out.read_text())
    assert "spark_rapids_cluster_group" not in json.dumps(data)  # group_vars beside it apply
    hostvars = _hostvars(out, tmp_path)
    assert hostvars["unit-spark-1"]["spark_rapids_cluster_group"] == "dgx_spark"


def test_settings_are_reachable_from_the_package():
    # src/dgxops/sim/inventory links to inventories/simulated; the wheel ships its group_vars/host_vars
    assert os.path.samefile(fleet.SimFleet.SETTINGS_DIR, SIMULATED)


def test_simulated_hosts_yml_is_generated_not_tracked():
    """inventories/simulated/hosts.yml is written by `dgxops sim up --inventory` (scripts/demo.sh);
    the tracked source is the fleet layout and the group_vars/host_vars beside it."""
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")):
        return  # not a git checkout (an unpacked sdist): nothing is tracked
    tracked = subprocess.run(["git", "ls-files", "inventories/simulated"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert "inventories/simulated/hosts.yml" not in tracked
    assert "inventories/simulated/group_vars/all.yml" in tracked
    ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", "inventories/simulated/hosts.yml"], cwd=ROOT,
                             check=False)
    assert ignored.returncode == 0, "inventories/simulated/hosts.yml is not in .gitignore"


def test_default_layout_generates_the_demo_inventory(tmp_path, monkeypatch):
    """What scripts/demo.sh writes: the default layout's nodes beside the tracked settings, every
    host_vars file naming one of them."""
    specs = fleet.parse_layout(fleet.DEFAULT_LAYOUT)
    names = {spec.name for spec in specs}
    for vars_file in os.listdir(os.path.join(SIMULATED, "host_vars")):
        assert vars_file[:-len(".yml")] in names, "host_vars/%s names no node of the default layout" % vars_file
    settings = tmp_path / "simulated"
    shutil.copytree(os.path.join(SIMULATED, "group_vars"), settings / "group_vars")
    shutil.copytree(os.path.join(SIMULATED, "host_vars"), settings / "host_vars")
    monkeypatch.setattr(fleet.SimFleet, "SETTINGS_DIR", settings)
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path / "state"))
    sim = fleet.SimFleet()
    nodes = [fleet.Node(spec.name, spec.model, spec.driver, "c%d" % i) for i, spec in enumerate(specs)]
    monkeypatch.setattr(sim, "load", lambda: nodes)
    out = sim.write_inventory(settings / "hosts.yml")
    assert out.read_text().startswith("---\n# Written by `dgxops sim up` for fleet dgxsim")
    hostvars = _hostvars(out, tmp_path)
    assert set(hostvars) == names
    assert hostvars["dgxsim-a100-80gb-2"]["mig_layout_name"] == "all-1g.10gb"
    assert {hv["ansible_connection"] for hv in hostvars.values()} == {"dgxops.fleet.docker"}
