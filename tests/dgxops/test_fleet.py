"""The simulated-fleet helpers that need no Docker: layouts, inventories, image tags."""

import pytest

from dgxops.sim import fleet, image


def test_parse_layout_names_and_drivers():
    specs = fleet.parse_layout("dgx-h100=2,dgx-spark=1", fleet="lab")
    assert [(s.name, s.model, s.group) for s in specs] == [
        ("lab-h100-1", "dgx-h100", "dgx_h100"),
        ("lab-h100-2", "dgx-h100", "dgx_h100"),
        ("lab-spark-1", "dgx-spark", "dgx_spark"),
    ]
    assert specs[0].driver == fleet.MODELS["dgx-h100"][1]
    assert {s.driver for s in fleet.parse_layout("dgx-a100-40gb=2", driver="550.1.2")} == {"550.1.2"}


@pytest.mark.parametrize("layout, message", [
    ("dgx-h300=1", "unknown model 'dgx-h300'"),
    ("dgx-h100=two", "must be an integer"),
    ("dgx-h100=0", "must be 1..64"),
    ("", "names no nodes"),
])
def test_parse_layout_rejects(layout, message):
    with pytest.raises(ValueError, match=message):
        fleet.parse_layout(layout)


def test_inventory_groups_and_connection(tmp_path, monkeypatch):
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path))
    sim = fleet.SimFleet("unit")
    nodes = [fleet.Node("unit-h100-1", "dgx-h100", "580.95.05", "c1"),
             fleet.Node("unit-spark-1", "dgx-spark", "580.95.05", "c2")]
    inv = sim.inventory(nodes)["all"]
    assert inv["vars"]["ansible_connection"] == "dgxops.fleet.docker"
    groups = inv["children"]["dgx"]["children"]
    assert groups["dgx_h100"]["hosts"]["unit-h100-1"]["dgxops_sim_model"] == "dgx-h100"
    assert list(groups["dgx_spark"]["hosts"]) == ["unit-spark-1"]
    assert set(inv["children"]["simulated"]["children"]) == {"dgx_h100", "dgx_spark"}


def test_fleet_name_is_checked():
    with pytest.raises(ValueError, match="fleet name"):
        fleet.SimFleet("bad name;rm")


def test_down_without_state_removes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(fleet, "docker", lambda *a, **k: calls.append(a))
    assert fleet.SimFleet("empty").down() == []
    assert calls == []


def test_down_skips_containers_relabelled_or_gone(tmp_path, monkeypatch):
    """down() removes only containers that still carry this fleet's label."""
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path))
    sim = fleet.SimFleet("mine")
    sim._save([fleet.Node("a", "dgx-h100", "x", "id-a"), fleet.Node("b", "dgx-h100", "x", "id-b"),
               fleet.Node("c", "dgx-h100", "x", "id-c")])
    labels = {"id-a": "mine", "id-b": "someone-else"}  # id-c is gone
    removed = []

    class P:
        def __init__(self, rc, out=""):
            self.returncode, self.stdout, self.stderr = rc, out, ""

    def fake_docker(*args, **_kw):
        if args[0] == "inspect":
            cid = args[-1]
            return P(0, labels[cid] + "\n") if cid in labels else P(1)
        if args[0] == "rm":
            removed.append(args[-1])
            return P(0)
        raise AssertionError(args)

    monkeypatch.setattr(fleet, "docker", fake_docker)
    assert sim.down() == ["a"]
    assert removed == ["id-a"]
    assert not sim.state_file.exists()


def test_node_tag_depends_on_simulator_sources_only(tmp_path, monkeypatch):
    base = "dgxops/node-base:abc"
    first = image.node_tag(base)
    assert first == image.node_tag(base)  # unchanged inputs -> same tag -> build skipped
    assert image.node_tag("dgxops/node-base:def") != first
    fake_pkg = tmp_path / "dgxops"
    (fake_pkg / "sim" / "fakesmi").mkdir(parents=True)
    (fake_pkg / "__init__.py").write_text("")
    (fake_pkg / "sim" / "__init__.py").write_text("")
    (fake_pkg / "sim" / "fakesmi" / "cli.py").write_text("A = 1\n")
    (fake_pkg / "runner.py").write_text("not part of the node\n")
    monkeypatch.setattr(image, "PKG_SRC", fake_pkg)
    tag1 = image.node_tag(base)
    (fake_pkg / "runner.py").write_text("changed, still not part of the node\n")
    assert image.node_tag(base) == tag1
    (fake_pkg / "sim" / "fakesmi" / "cli.py").write_text("A = 2\n")
    assert image.node_tag(base) != tag1


def test_base_tag_follows_mirror_and_packages(monkeypatch):
    t = image.base_tag("http://deb.debian.org/debian")
    assert t.startswith("dgxops/node-base:")
    assert image.base_tag("http://mirror.example/debian") != t
    monkeypatch.setattr(image, "BASE_PACKAGES", image.BASE_PACKAGES + ("vim",))
    assert image.base_tag("http://deb.debian.org/debian") != t


def test_debian_mirror_reads_deb822(tmp_path, monkeypatch):
    src = tmp_path / "debian.sources"
    src.write_text("Types: deb\nURIs: http://mirror.local/debian\nSuites: bookworm\n")
    real_path = image.Path

    def fake_path(p):
        if p == "/etc/apt/sources.list":
            return real_path(tmp_path / "missing.list")
        if p == "/etc/apt/sources.list.d":
            return real_path(tmp_path)
        return real_path(p)

    monkeypatch.setattr(image, "Path", fake_path)
    assert image.debian_mirror() == "http://mirror.local/debian"


@pytest.mark.parametrize("inspect_out, removed", [
    ("false mine\n", True),          # stopped node of this fleet: replaced
    ("true mine\n", False),          # running: someone's live fleet, docker run reports the conflict
    ("false someone-else\n", False), # another fleet's container
    (None, False),                    # no such container
])
def test_up_replaces_only_a_stopped_leftover_of_this_fleet(tmp_path, monkeypatch, inspect_out, removed):
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path))
    calls = []

    class P:
        def __init__(self, rc, out=""):
            self.returncode, self.stdout, self.stderr = rc, out, "conflict"

    def fake_docker(*args, **_kw):
        calls.append(args)
        if args[0] == "inspect":
            return P(0, inspect_out) if inspect_out is not None else P(1)
        if args[0] == "rm":
            return P(0)
        if args[0] == "run":
            return P(1)  # stop before configuring a node
        raise AssertionError(args)

    monkeypatch.setattr(fleet, "docker", fake_docker)
    with pytest.raises(RuntimeError, match="could not start mine-h100-1"):
        fleet.SimFleet("mine").up(fleet.parse_layout("dgx-h100=1", fleet="mine"), image="img")
    assert (("rm", "-f", "-v", "mine-h100-1") in calls) is removed


@pytest.mark.parametrize("state, hinted", [("exited 255", True), ("running 0", False)])
def test_boot_timeout_says_why_a_node_died(tmp_path, monkeypatch, state, hinted):
    """A node whose systemd never answers: the error names the container state and the inotify limit."""
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path))

    class P:
        def __init__(self, rc, out="", err=""):
            self.returncode, self.stdout, self.stderr = rc, out, err

    def fake_docker(*args, **_kw):
        if args[0] == "exec":
            return P(1, "", "container is not running")
        if args[0] == "inspect":
            return P(0, state + "\n")
        if args[0] == "logs":
            return P(0, "", "Failed to allocate manager object: Too many open files\n")
        raise AssertionError(args)

    monkeypatch.setattr(fleet, "docker", fake_docker)
    with pytest.raises(RuntimeError) as err:
        fleet.SimFleet("mine")._configure(fleet.Node("n1", "dgx-h100", "x", "id-1"), wait=0)
    text = str(err.value)
    assert "n1: systemd not up" in text
    assert ("fs.inotify.max_user_instances" in text) is hinted
    assert ("Too many open files" in text) is hinted
