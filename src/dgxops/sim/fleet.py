"""Start and stop a fleet of simulated DGX nodes (Docker containers running systemd).

A fleet has a name; each ``up`` records the exact container ids it started in a state file,
and ``down`` removes exactly those (it re-checks each container's fleet label first), so
containers of other fleets, molecule scenarios or users are never touched.

Nodes run with ``--network none`` and are reached through ``docker exec`` (Ansible's
``community.docker.docker`` connection): no traffic goes to any container address.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dgxops.sim.image import docker, ensure_image

LABEL_FLEET = "org.dgxops.fleet"
LABEL_RUN = "org.dgxops.fleet-run"
LABEL_MODEL = "org.dgxops.model"

MODELS = {
    # model: (inventory group, default driver)
    "dgx-a100-40gb": ("dgx_a100", "535.247.01"),
    "dgx-a100-80gb": ("dgx_a100", "550.163.01"),
    "dgx-h100": ("dgx_h100", "580.95.05"),
    "dgx-h200": ("dgx_h200", "580.95.05"),
    "dgx-spark": ("dgx_spark", "580.95.05"),
}

# systemd as PID 1 without --privileged (CAP_SYS_RESOURCE is missing on these hosts).
# Reboots: `shutdown -r` makes systemd call reboot(2), which (with SYS_BOOT, in the container's
# PID namespace) ends the container by SIGHUP; the on-failure policy starts it again, through its
# own systemd boot (a fresh /run, dgxops-sim-boot.service first). `dgxops-sim fault set no-boot`
# makes the next boot leave with exit code 0, which that policy keeps stopped.
SYSTEMD_RUN_FLAGS = [
    "--restart", "on-failure",
    "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cap-add", "SYS_BOOT",
    "--security-opt", "seccomp=unconfined", "--cgroupns=host",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp:mode=1777",
    "-e", "container=docker", "--network", "none",
]

DEFAULT_FLEET = "dgxsim"
DEFAULT_LAYOUT = "dgx-a100-80gb=2,dgx-h100=1,dgx-spark=1"


@dataclass
class NodeSpec:
    name: str
    model: str
    driver: str

    @property
    def group(self) -> str:
        return MODELS[self.model][0]


@dataclass
class Node:
    name: str
    model: str
    driver: str
    container_id: str
    state: str = "running"
    extra: dict = field(default_factory=dict)


def state_dir() -> Path:
    base = os.environ.get("DGXOPS_STATE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "dgxops")
    path = Path(base) / "fleets"
    path.mkdir(parents=True, exist_ok=True)
    return path


def parse_layout(layout: str, fleet: str = DEFAULT_FLEET, driver: str | None = None) -> list[NodeSpec]:
    """``"dgx-h100=2,dgx-spark=1"`` -> node specs named ``<fleet>-h100-1`` ... ."""
    specs: list[NodeSpec] = []
    for item in filter(None, (p.strip() for p in layout.split(","))):
        model, _sep, count = item.partition("=")
        model = model.strip()
        if model not in MODELS:
            raise ValueError("unknown model %r in layout %r; allowed: %s" % (model, layout, ", ".join(MODELS)))
        try:
            n = int(count or "1")
        except ValueError:
            raise ValueError("count for %s must be an integer, got %r" % (model, count)) from None
        if n < 1 or n > 64:
            raise ValueError("count for %s must be 1..64, got %d" % (model, n))
        short = model.replace("dgx-", "")
        for i in range(1, n + 1):
            specs.append(NodeSpec("%s-%s-%d" % (fleet, short, i), model, driver or MODELS[model][1]))
    if not specs:
        raise ValueError("layout %r names no nodes" % layout)
    return specs


class SimFleet:
    """A named set of simulated nodes; ``up``/``down`` are safe to repeat."""

    def __init__(self, name: str = DEFAULT_FLEET):
        if not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError("fleet name %r: use letters, digits, '-' and '_'" % name)
        self.name = name
        self.state_file = state_dir() / ("%s.json" % name)

    # -- state -----------------------------------------------------------------
    def load(self) -> list[Node]:
        if not self.state_file.exists():
            return []
        data = json.loads(self.state_file.read_text())
        return [Node(**n) for n in data.get("nodes", [])]

    def _save(self, nodes: list[Node]) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"fleet": self.name, "nodes": [asdict(n) for n in nodes]}, indent=2))
        tmp.replace(self.state_file)

    # -- lifecycle -------------------------------------------------------------
    def up(self, specs: list[NodeSpec], image: str | None = None, wait: float = 60.0) -> list[Node]:
        """Start the nodes that are not running yet; return all nodes of the fleet."""
        image = image or ensure_image()
        known = {n.name: n for n in self.load() if self._alive(n)}
        run_id = uuid.uuid4().hex[:8]
        started: list[Node] = []
        for spec in specs:
            if spec.name in known:
                continue
            self._remove_stopped_leftover(spec.name)
            proc = docker(
                "run", "-d", "--name", spec.name, "--hostname", spec.name,
                "--label", "%s=%s" % (LABEL_FLEET, self.name),
                "--label", "%s=%s" % (LABEL_RUN, run_id),
                "--label", "%s=%s" % (LABEL_MODEL, spec.model),
                *SYSTEMD_RUN_FLAGS, image, "/usr/local/sbin/dgxops-sim-pid1", check=False,
            )
            if proc.returncode != 0:
                self._save(list(known.values()) + started)
                raise RuntimeError("could not start %s: %s" % (spec.name, proc.stderr.strip()))
            node = Node(spec.name, spec.model, spec.driver, proc.stdout.strip())
            started.append(node)
            # record after each start so a failure later never leaks a container
            self._save(list(known.values()) + started)
        if started:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=min(8, len(started))) as pool:
                for fut in [pool.submit(self._configure, node, wait) for node in started]:
                    fut.result()
        return list(known.values()) + started

    @staticmethod
    def _boot_failure_hint(node: Node) -> str:
        """Why a node's systemd did not come up, when the container says so."""
        proc = docker("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", node.name, check=False)
        state = proc.stdout.strip() or "unknown"
        if state.startswith("running"):
            return ""
        logs = docker("logs", "--tail", "5", node.name, check=False)
        tail = " | ".join(line.strip() for line in (logs.stdout + logs.stderr).splitlines()[-5:])
        return ("; the container is %s (%s). Every simulated node runs systemd, which needs inotify "
                "instances: many nodes can exhaust fs.inotify.max_user_instances (128 by default; "
                "scripts/bootstrap.sh raises it to 1024)" % (state, tail or "no log output"))

    def _configure(self, node: Node, wait: float) -> None:
        deadline = time.monotonic() + wait
        while True:
            proc = docker("exec", node.name, "systemctl", "is-system-running", check=False)
            status = proc.stdout.strip()
            if status in ("running", "degraded"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("%s: systemd not up after %.0f s (state %r)%s" % (
                    node.name, wait, status, self._boot_failure_hint(node)))
            time.sleep(0.3)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump({"model": node.model, "driver": node.driver}, fh)
        try:
            docker("cp", fh.name, "%s:/etc/dgxops-sim/node.json" % node.name)
        finally:
            os.unlink(fh.name)
        proc = docker("exec", node.name, "dgxops-sim", "init", "--model", node.model,
                      "--driver", node.driver, "--force", check=False)
        # the driver set from the node's own repository, as a DGX OS image ships it
        if proc.returncode != 0:
            raise RuntimeError("%s: dgxops-sim init failed: %s" % (node.name, (proc.stderr or proc.stdout).strip()))

    def _remove_stopped_leftover(self, name: str) -> None:
        """Remove a stopped node of this fleet that no state file records (an earlier checkout's
        fleet, or one stopped by a host reboot), so `up` can start it again. A running container,
        or one without this fleet's label, is left alone (docker run then reports the conflict)."""
        proc = docker("inspect", "-f", '{{.State.Running}} {{index .Config.Labels "%s"}}' % LABEL_FLEET, name,
                      check=False)
        if proc.returncode == 0 and proc.stdout.split() == ["false", self.name]:
            docker("rm", "-f", "-v", name, check=False)

    def _alive(self, node: Node) -> bool:
        proc = docker("inspect", "-f", '{{.State.Running}} {{index .Config.Labels "%s"}}' % LABEL_FLEET,
                      node.container_id, check=False)
        return proc.returncode == 0 and proc.stdout.split() == ["true", self.name]

    def down(self) -> list[str]:
        """Remove exactly the containers this fleet started; return their names."""
        removed = []
        for node in self.load():
            proc = docker("inspect", "-f", '{{index .Config.Labels "%s"}}' % LABEL_FLEET,
                          node.container_id, check=False)
            if proc.returncode == 0 and proc.stdout.strip() == self.name:
                docker("rm", "-f", "-v", node.container_id, check=False)
                removed.append(node.name)
        if self.state_file.exists():
            self.state_file.unlink()
        return removed

    # -- views -----------------------------------------------------------------
    def inventory(self, nodes: list[Node] | None = None) -> dict:
        """An Ansible YAML inventory: one group per DGX generation, docker connection."""
        nodes = self.load() if nodes is None else nodes
        groups: dict[str, dict] = {}
        for node in nodes:
            group = MODELS[node.model][0]
            groups.setdefault(group, {"hosts": {}})["hosts"][node.name] = {
                "dgxops_sim_model": node.model,
                "dgxops_sim_driver": node.driver,
            }
        return {
            "all": {
                "vars": {
                    # community.docker's docker connection that reports a frozen (paused)
                    # node unreachable within the task timeout instead of hanging the run
                    # (plugins/connection/docker.py); under the mitogen strategy it becomes
                    # mitogen's own (much faster) docker connection, as "docker" does
                    "ansible_connection": "dgxops.fleet.docker",
                    "ansible_python_interpreter": "/usr/bin/python3",
                },
                "children": {"dgx": {"children": groups}, "simulated": {"children": {g: {} for g in groups}}},
            }
        }

    # The simulated fleet's settings: inventories/simulated/{group_vars,host_vars} in a checkout
    # (src/dgxops/sim/inventory links there), package data in an installed dgxops.
    SETTINGS_DIR = Path(__file__).resolve().parent / "inventory"

    def write_inventory(self, path: Path) -> Path:
        """Write the fleet's inventory to ``path``. Written anywhere but beside the simulated
        fleet's own group_vars/host_vars, it carries those settings inside it (group and host
        vars at the same levels, so precedence is unchanged), so site.yml runs against it as
        against inventories/simulated."""
        import yaml  # controller-side dependency, imported late to keep the module light

        data = self.inventory()
        settings = self.SETTINGS_DIR.resolve()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        note = ""
        if path.resolve().parent != settings and (settings / "group_vars").is_dir():
            root = data["all"]
            groups = dict(root["children"]["dgx"]["children"], simulated=root["children"]["simulated"],
                          dgx=root["children"]["dgx"])
            hosts = {h: hv for g in root["children"]["dgx"]["children"].values() for h, hv in g.get("hosts", {}).items()}
            for vars_file in sorted((settings / "group_vars").glob("*.yml")):
                values = yaml.safe_load(vars_file.read_text()) or {}
                if vars_file.stem == "all":
                    root["vars"] = dict(values, **root.get("vars", {}))  # the connection settings stay the fleet's
                elif vars_file.stem in groups:
                    groups[vars_file.stem].setdefault("vars", {}).update(values)
            for vars_file in sorted((settings / "host_vars").glob("*.yml")):
                if vars_file.stem in hosts:
                    hosts[vars_file.stem].update(yaml.safe_load(vars_file.read_text()) or {})
            note = "# The simulated fleet's settings (inventories/simulated/group_vars, host_vars) are included.\n"
        path.write_text("---\n# Written by `dgxops sim up` for fleet %s; regenerated on every up.\n" % self.name
                        + note + yaml.safe_dump(data, sort_keys=True))
        return path

    def exec(self, node: str, *argv: str) -> subprocess.CompletedProcess:
        return docker("exec", node, *argv, check=False)

    def start(self, node: str, wait: float = 60.0) -> None:
        """Power a stopped node on again (after `dgxops-sim fault set no-boot`): it boots normally."""
        known = {n.name: n for n in self.load()}
        if node not in known:
            raise ValueError("%s is not a node of fleet %s" % (node, self.name))
        docker("start", known[node].container_id)
        self._wait_running(known[node], wait)

    def _wait_running(self, node: Node, wait: float) -> None:
        deadline = time.monotonic() + wait
        while True:
            proc = docker("exec", node.name, "systemctl", "is-system-running", check=False)
            if proc.stdout.strip() in ("running", "degraded"):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("%s: systemd not up after %.0f s (state %r)%s" % (
                    node.name, wait, proc.stdout.strip(), self._boot_failure_hint(node)))
            time.sleep(0.3)
