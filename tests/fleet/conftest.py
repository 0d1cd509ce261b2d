"""Simulated fleets for the fleet tests (need Docker and the node image): one factory that every
module's fleet comes from, and the 3-node fleet shared by test_fleet_runs."""

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from dgxops.sim.fleet import Node, SimFleet, parse_layout

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYOUT = "dgx-a100-80gb=1,dgx-h100=1,dgx-spark=1"


def docker_ok():
    docker = shutil.which("docker", path="/usr/bin") or shutil.which("docker")
    return bool(docker) and subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0


def require_docker():
    if not docker_ok():
        if os.environ.get("CI"):
            pytest.fail("Docker engine not available in CI: scripts/bootstrap.sh should have started it")
        pytest.skip("no Docker engine (run scripts/bootstrap.sh)")


@dataclass
class StartedFleet:
    fleet: SimFleet
    nodes: list[Node]
    inventory: str  # its hosts.yml, with the simulated fleet's group_vars beside it
    inv_dir: Path

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]


@pytest.fixture(scope="session")
def fleet_factory(tmp_path_factory):
    """``with fleet_factory(name, layout) as started:`` starts the fleet (after removing any
    leftover of that name), writes its inventory beside inventories/simulated/group_vars, and
    removes exactly its containers on exit."""

    @contextlib.contextmanager
    def start(name, layout):
        require_docker()
        fleet = SimFleet(name)
        fleet.down()
        try:
            nodes = fleet.up(parse_layout(layout, fleet=name))
            inv_dir = tmp_path_factory.mktemp(name)
            inventory = fleet.write_inventory(inv_dir / "hosts.yml")
            # the simulated fleet's group_vars apply to this fleet too
            os.symlink(os.path.join(ROOT, "inventories", "simulated", "group_vars"), inv_dir / "group_vars")
            yield StartedFleet(fleet, nodes, str(inventory), inv_dir)
        finally:
            fleet.down()

    return start


@pytest.fixture(scope="session")
def sim_fleet(fleet_factory):
    with fleet_factory("pytest-fleet", LAYOUT) as started:
        yield started.fleet, started.nodes, started.inventory
