"""Persistent node state: one JSON file, written atomically under an fcntl lock."""
import contextlib
import fcntl
import json
import os

# socket, tempfile and uuid are imported where they are used: every nvidia-smi call loads this
# module, and most only read the state (the fake should cost about what the real tool does).

from . import caps
from .models import DEFAULT_DRIVER, MODELS, bus_id

STATE_VERSION = 1
NODE_CONFIG = "/etc/dgxops-sim/node.json"


class StateError(Exception):
    pass


def state_dir():
    return os.environ.get("DGXOPS_SIM_STATE_DIR", "/var/lib/dgxops-sim")


def state_path():
    return os.path.join(state_dir(), "state.json")


def parse_branch(driver):
    try:
        return int(str(driver).split(".")[0])
    except ValueError:
        raise StateError("driver version %r is not of the form BRANCH.MINOR[.PATCH] (e.g. 580.95.05)" % (driver,)) from None


def validate_model_driver(model, driver):
    if model not in MODELS:
        raise StateError("unknown model %r; allowed: %s" % (model, ", ".join(sorted(MODELS))))
    parts = str(driver).split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise StateError("driver version %r is not of the form BRANCH.MINOR[.PATCH] (e.g. 580.95.05)" % (driver,)) from None
    if not 450 <= int(parts[0]) <= 999:
        raise StateError("driver branch %s is outside the simulated range 450-999" % parts[0])


def _gpu_defaults(model, index, seed):
    m = MODELS[model]
    import uuid

    ns = uuid.uuid5(uuid.NAMESPACE_DNS, "dgxops-sim.%s.%s" % (seed, model))
    u = uuid.uuid5(ns, "gpu%d" % index)
    serial = str(1650000000000 + (u.int % 9999999) * 10 + index)
    return {
        "index": index,
        "uuid": "GPU-%s" % u,
        "serial": serial if m["product"] != "DGX Spark" else "[N/A]",
        "bus_id": bus_id(model, index),
        "module_id": index + 1,
        "persistence_mode": False,
        "power_limit": m["power_default"],
        "app_clocks": None,          # [mem, graphics] or None for the defaults
        "locked_clocks": None,       # [min, max] or None
        "auto_boost_default": None,  # not supported on these GPUs (reported N/A)
        "compute_mode": "Default",
        "ecc_current": bool(m["ecc"]),
        "ecc_pending": bool(m["ecc"]),
        "mig_current": False,
        "mig_pending": False,
        "gpu_instances": [],
    }


def new_state(model, driver, seed=None):
    validate_model_driver(model, driver)
    import socket

    seed = seed or socket.gethostname()
    m = MODELS[model]
    return {
        "version": STATE_VERSION,
        "model": model,
        "driver": driver,
        "seed": seed,
        "gpus": [_gpu_defaults(model, i, seed) for i in range(m["gpus"])],
        "processes": [],
        "faults": {},
        "next_pid": 4100,
    }


def initial_model_driver():
    """Model and driver for a node that has no state yet (node.json, then env, then defaults)."""
    cfg = os.environ.get("DGXOPS_SIM_NODE_CONFIG", NODE_CONFIG)
    if os.path.exists(cfg):
        with open(cfg) as fh:
            data = json.load(fh)
        return data.get("model", "dgx-h100"), data.get("driver", DEFAULT_DRIVER)
    return (os.environ.get("DGXOPS_SIM_MODEL", "dgx-h100"),
            os.environ.get("DGXOPS_SIM_DRIVER", DEFAULT_DRIVER))


def reboot(state):
    """What a machine reboot (driver reload) does to the GPUs.

    Persist (InfoROM / hardware): ECC mode (pending becomes current), Ampere MIG mode (pending
    becomes current), UUIDs/serials. Lost: persistence mode, power limit, application and locked
    clocks, compute mode, GPU/compute instances, Hopper+ MIG mode, running processes.
    Injected faults stay until `dgxops-sim fault clear` (a reboot does not repair a simulated
    hardware or driver fault).
    """
    m = MODELS[state["model"]]
    for g in state["gpus"]:
        apply_gpu_reset(state, g, full_reboot=True)
        g["persistence_mode"] = False
        g["power_limit"] = m["power_default"]
        g["compute_mode"] = "Default"
        g["auto_boost_default"] = None
        if not m["ampere_mig"]:
            g["mig_current"] = g["mig_pending"] = False
    state["processes"] = []
    faults = state.get("faults", {})
    faults.pop("busy", None)
    return state


def apply_gpu_reset(state, g, full_reboot=False):
    """Effects of `nvidia-smi -r` on one GPU (also part of a reboot)."""
    g["ecc_current"] = g["ecc_pending"]
    g["mig_current"] = g["mig_pending"]
    g["gpu_instances"] = []
    g["app_clocks"] = None
    g["locked_clocks"] = None


class Store(object):
    """Context manager: load the state under an exclusive lock, save it atomically on exit."""

    def __init__(self, write=True, create=True):
        self.write = write
        self.create = create
        self.state = None
        self._lock = None
        self.dirty = False
        self.readonly = False

    def __enter__(self):
        d = state_dir()
        lock = os.path.join(d, ".lock")
        try:
            os.makedirs(d, exist_ok=True)
            self._lock = open(lock, "a")
        except OSError:
            # a non-root caller of a root-owned state directory: share-lock read-only if we
            # can. A setter then fails its own permission check (exit 4, "Insufficient
            # Permissions") like the real tool, instead of a traceback here.
            self._lock = open(lock, "r") if os.path.exists(lock) else None
            self.readonly = True
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_EX if (self.write and not self.readonly) else fcntl.LOCK_SH)
        path = state_path()
        if os.path.exists(path):
            with open(path) as fh:
                self.state = json.load(fh)
        elif self.create:
            model, driver = initial_model_driver()
            self.state = new_state(model, driver)
            self.dirty = True
        return self

    def save(self):
        self.dirty = True

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None and self.state is not None and self.dirty:
                if self.write:
                    write_atomic(self.state)
                else:
                    # first read of a fresh node: persist it if we may (root); a non-root
                    # reader just answers from the in-memory default state
                    try:
                        if self._lock is not None:
                            fcntl.flock(self._lock, fcntl.LOCK_EX)
                            if not os.path.exists(state_path()):
                                write_atomic(self.state)
                    except OSError:
                        pass
        finally:
            if self._lock is not None:
                fcntl.flock(self._lock, fcntl.LOCK_UN)
                self._lock.close()
        return False


def write_atomic(state):
    d = state_dir()
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=".state.", dir=d)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(state, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, state_path())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # the driver's /proc files that follow the instances (mig-minors, capabilities/...)
    caps.sync(state, d)
