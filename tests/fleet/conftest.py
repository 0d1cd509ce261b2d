"""A 3-node simulated fleet shared by the fleet tests (needs Docker and the node image)."""

import os
import shutil
import subprocess

import pytest

from dgxops.sim.fleet import SimFleet, parse_layout

LAYOUT = "dgx-a100-80gb=1,dgx-h100=1,dgx-spark=1"


def _docker_ok():
    docker = shutil.which("docker", path="/usr/bin") or shutil.which("docker")
    return bool(docker) and subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="session")
def sim_fleet(tmp_path_factory):
    if not _docker_ok():
        if os.environ.get("CI"):
            pytest.fail("Docker engine not available in CI: scripts/bootstrap.sh should have started it")
        pytest.skip("no Docker engine (run scripts/bootstrap.sh)")
    fleet = SimFleet("pytest-fleet")
    fleet.down()
    nodes = fleet.up(parse_layout(LAYOUT, fleet="pytest-fleet"))
    inv_dir = tmp_path_factory.mktemp("inventory")
    inventory = fleet.write_inventory(inv_dir / "hosts.yml")
    # the simulated fleet's group_vars apply to this fleet too
    os.symlink(os.path.join(os.path.dirname(__file__), "..", "..", "inventories", "simulated", "group_vars"),
               inv_dir / "group_vars")
    try:
        yield fleet, nodes, str(inventory)
    finally:
        fleet.down()
