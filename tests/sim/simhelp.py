"""Helpers for simulator tests: run the fake nvidia-smi in-process against a temp state dir."""
import contextlib
import io
import json
import os

from dgxops.sim.fakesmi import admin, cli
from dgxops.sim.fakesmi import state as simstate


class Node(object):
    def __init__(self, tmpdir, model="dgx-h200", driver="580.159.04", gpus=None):
        self.dir = str(tmpdir)
        os.environ["DGXOPS_SIM_STATE_DIR"] = self.dir
        st = simstate.new_state(model, driver, seed="test")
        if gpus is not None:
            st["gpus"] = st["gpus"][:gpus]
        simstate.write_atomic(st)

    def smi(self, *args, euid=0):
        """Run nvidia-smi ARGS; return (rc, stdout, stderr)."""
        os.environ["DGXOPS_SIM_STATE_DIR"] = self.dir
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(args), euid=euid)
        return rc, out.getvalue(), err.getvalue()

    def admin(self, *args):
        os.environ["DGXOPS_SIM_STATE_DIR"] = self.dir
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = admin.main(list(args))
        return rc, out.getvalue()

    def state(self):
        with open(os.path.join(self.dir, "state.json")) as fh:
            return json.load(fh)

    def edit(self, fn):
        st = self.state()
        fn(st)
        os.environ["DGXOPS_SIM_STATE_DIR"] = self.dir
        simstate.write_atomic(st)
