"""The mig role against upstream: every built-in layout name the role advertises exists and fits
the GPU's own profile table; the +me layouts of mig-parted's config-default.yaml; and the GPU
clients stopped around a MIG mode change include the units the monitoring role (and NVIDIA's
packages / mig-parted's hooks) really run."""
import os
import re

import jinja2
import pytest
import yaml

from ansible_collections.dgxops.fleet.plugins.module_utils import mig_layout as ml

from test_mig_layout import table_for

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
MIG = os.path.join(ROOT, "roles", "mig")
with open(os.path.join(MIG, "vars", "main.yml")) as fh:
    MIG_VARS = yaml.safe_load(fh)
with open(os.path.join(MIG, "defaults", "main.yml")) as fh:
    MIG_DEFAULTS_TEXT = fh.read()
    MIG_DEFAULTS = yaml.safe_load(MIG_DEFAULTS_TEXT)
with open(os.path.join(ROOT, "roles", "monitoring", "defaults", "main.yml")) as fh:
    MON_DEFAULTS = yaml.safe_load(fh)
LAYOUTS = MIG_VARS["__mig_builtin_layouts"]


# ------------------------------------------------------------------ item 9: layout names
def _advertised_names():
    """Layout names the comment above mig_layout_name in defaults/main.yml promises."""
    block = MIG_DEFAULTS_TEXT.split("mig_layout_name:")[0].rsplit("\n\n", 1)[-1]
    return set(re.findall(r"\b((?:all|half)-[A-Za-z0-9.+-]*[A-Za-z0-9])", block))


def test_every_advertised_layout_name_exists():
    names = _advertised_names()
    assert "all-1g.10gb.me" in names and "all-balanced" in names
    defined = set().union(*(set(v) for v in LAYOUTS.values()))
    assert sorted(names - defined) == []


@pytest.mark.parametrize("model, name, profile", [
    ("a100-40gb", "all-1g.5gb.me", "1g.5gb+me"),
    ("a100-80gb", "all-1g.10gb.me", "1g.10gb+me"),
    ("h100", "all-1g.10gb.me", "1g.10gb+me"),
    ("h200", "all-1g.18gb.me", "1g.18gb+me"),
])
def test_media_extension_layouts_as_mig_parted_defines_them(model, name, profile):
    # mig-parted config-default.yaml: all-<1g>.me = one "<1g>+me" instance on every GPU
    assert LAYOUTS[model][name] == [{"gpus": "all", "instances": [{"profile": profile, "count": 1}]}]


@pytest.mark.parametrize("model, name", [(m, n) for m in sorted(LAYOUTS) for n in sorted(LAYOUTS[m])])
def test_every_builtin_layout_fits_the_gpus_profile_table(model, name):
    table = table_for(model)
    for pos, entry in enumerate(ml.normalize_layout(LAYOUTS[model][name])):
        instances = entry.get("instances") or []
        if not entry.get("mig", True) or not instances:
            continue
        desired = ml.desired_instances(table, instances, "%s[%d]" % (name, pos))
        assert ml.place(table, desired) is not None, (model, name)


# ------------------------------------------------------------------ item 2: GPU clients
def test_the_monitoring_roles_units_are_gpu_clients_the_mig_role_stops():
    clients = MIG_VARS["__mig_gpu_clients"]
    assert MON_DEFAULTS["monitoring_dcgm_exporter_service"] + ".service" in clients
    assert MON_DEFAULTS["monitoring_dcgm_service"] + ".service" in clients
    # mig-parted deployments/systemd/hooks.sh: driver_services nvsm, nvidia-dcgm; k8s_services dcgm-exporter
    for unit in ("nvsm.service", "nvidia-dcgm.service", "dcgm-exporter.service"):
        assert unit in clients
    # the exporter stops before the host engine it talks to, persistenced last
    assert clients.index("nvidia-dcgm-exporter.service") < clients.index("nvidia-dcgm.service")
    assert clients[-1] == "nvidia-persistenced.service"
    assert MIG_DEFAULTS["mig_stop_services"] == []   # the user's own, on top of the detected ones


def _render_boot_unit(template, **extra):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    ctx = dict(MIG_DEFAULTS, **MIG_VARS)
    ctx.update({"ansible_managed": "managed", "__mig_validated": {"normalized": {"device_access": {"access": []}}}})
    ctx.update(extra)
    ctx["__mig_boot_before"] = yaml.safe_load(env.from_string(MIG_VARS["__mig_boot_before"]).render(ctx))
    with open(os.path.join(MIG, "templates", template)) as fh:
        return env.from_string(fh.read()).render(ctx)


@pytest.mark.parametrize("template", ["dgxops-mig.service.j2", "dgxops-mig-devices.service.j2"])
def test_boot_units_start_before_every_gpu_client(template):
    text = _render_boot_unit(template, mig_stop_services=["my-gpu-agent.service"])
    before = re.search(r"^Before=(.*)$", text, re.M).group(1).split()
    for unit in ("nvidia-dcgm-exporter.service", "dcgm-exporter.service", "nvsm.service",
                 "nvidia-dcgm.service", "my-gpu-agent.service", "kubelet.service"):
        assert unit in before
    assert "nvidia-persistenced.service" not in before   # the layout is applied after it
