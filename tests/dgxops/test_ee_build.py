"""The execution environment builds here (ansible-builder, on a locally built base) and runs
site.yml --check from inside the image against a simulated node, through ansible-runner's
container mode. Skips only when no Docker engine answers (in CI that is a failure)."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLEET = "pytest-ee"


def _docker_ok():
    docker = shutil.which("docker", path="/usr/bin") or shutil.which("docker")
    return bool(docker) and subprocess.run([docker, "info"], capture_output=True, check=False).returncode == 0


pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def ee_image():
    if not _docker_ok():
        if os.environ.get("CI"):
            pytest.fail("Docker engine not available in CI: scripts/bootstrap.sh should have started it")
        pytest.skip("no Docker engine: the execution environment cannot be built (run scripts/bootstrap.sh)")
    from dgxops.ee import build_ee

    start = time.monotonic()
    # cached by a hash of its inputs: a rebuild only when they change (DGXOPS_EE_REBUILD=1: always, for a build log)
    tag = build_ee(force=os.environ.get("DGXOPS_EE_REBUILD") == "1")
    image = subprocess.run(["/usr/bin/docker", "image", "inspect", "--format", "{{.Id}} {{.Size}} {{.Created}}", tag],
                           capture_output=True, text=True, check=True).stdout.split()
    print("\nexecution environment: %s (built or reused in %.0f s)\nimage id %s, %.0f MB, created %s"
          % (tag, time.monotonic() - start, image[0], int(image[1]) / 1e6, image[2]))
    return tag


@pytest.fixture(scope="module")
def sim_node(tmp_path_factory):
    from dgxops.sim.fleet import SimFleet, parse_layout

    fleet = SimFleet(FLEET)
    fleet.down()
    try:
        nodes = fleet.up(parse_layout("dgx-h100=1", fleet=FLEET))
        yield fleet, nodes
    finally:
        fleet.down()


def test_ee_has_the_pinned_toolchain_and_the_collection(ee_image):
    proc = subprocess.run(["/usr/bin/docker", "run", "--rm", ee_image, "sh", "-c",
                           "ansible --version; ansible-runner --version; ansible-galaxy collection list dgxops.fleet"],
                          capture_output=True, text=True, check=False, timeout=120)
    print("\n$ docker run --rm %s sh -c 'ansible --version; ansible-runner --version; ansible-galaxy collection list dgxops.fleet'\n%s"
          % (ee_image, proc.stdout.strip()))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ansible [core 2.19.14]" in proc.stdout and "2.4.3" in proc.stdout
    assert "dgxops.fleet" in proc.stdout and "/usr/share/ansible/collections" in proc.stdout


def test_site_check_runs_inside_the_ee_against_a_simulated_node(ee_image, sim_node, tmp_path, monkeypatch):
    import ansible_runner

    # ansible-runner's container mode runs "docker" from PATH: Debian's engine CLI first
    monkeypatch.setenv("PATH", "/usr/bin:" + os.environ.get("PATH", ""))
    fleet, nodes = sim_node
    private = tmp_path / "private"
    (private / "inventory").mkdir(parents=True)
    fleet.write_inventory(private / "inventory" / "hosts.yml")
    # the simulated node's connection (docker exec) is a test-only collection: mounted, not baked in
    docker_collection = os.path.join(sysconfig.get_paths()["purelib"], "ansible_collections", "community", "docker")
    assert os.path.isdir(docker_collection), "scripts/bootstrap.sh extracts community.docker into the venv"
    events = []
    start = time.monotonic()
    result = ansible_runner.run(
        private_data_dir=str(private), playbook="dgxops.fleet.site", cmdline="--check --diff",
        process_isolation=True, process_isolation_executable="docker", container_image=ee_image,
        container_volume_mounts=[
            "/var/run/docker.sock:/var/run/docker.sock",
            "/usr/bin/docker:/usr/bin/docker:ro",  # same Debian release as the EE: the host's CLI runs there
            "%s:/usr/share/ansible/collections/ansible_collections/community/docker:ro" % docker_collection,
        ],
        container_options=["--user=0", "--network=none"],
        envvars={"ANSIBLE_NOCOLOR": "1"}, quiet=True, event_handler=lambda e: events.append(e) or True,
        timeout=540,
    )
    stdout = result.stdout.read()
    command = open(os.path.join(result.config.artifact_dir, "command")).read()
    print("\nansible-runner container mode, %.0f s: status %s, rc %s\ncommand: %s"
          % (time.monotonic() - start, result.status, result.rc, " ".join(json.loads(command)["command"])))
    sys.stdout.write(stdout[-6000:])  # the run's log, in the test log
    assert result.status == "successful" and result.rc == 0, stdout[-4000:]
    stats = result.stats
    host = nodes[0].name
    assert stats["ok"].get(host, 0) > 10 and not stats["failures"] and not stats["dark"]
    assert "docker" in command and ee_image in command  # it ran in the image, not on this machine
    # the collection that ran is the one installed in the image
    assert any("/usr/share/ansible/collections/ansible_collections/dgxops/fleet" in str(e.get("event_data", {}).get("task_path", ""))
               for e in events)
