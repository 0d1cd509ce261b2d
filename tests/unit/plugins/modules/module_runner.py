"""Run a module's main() in-process and return its JSON result (shared by the module tests)."""
import json

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(capsys, main, args, check=False, diff=False):
    """The module's result for ``args``; check/diff set Ansible's check and diff modes.

    Once controller-side Ansible code has been imported in this process (another test file
    importing a filter plugin does), module warnings go to the display (stderr) instead of the
    result: ``_stderr`` keeps them so assertions see them either way."""
    margs = dict(args)
    if check:
        margs["_ansible_check_mode"] = True
    if diff:
        margs["_ansible_diff"] = True
    with patch_module_args(margs):
        with pytest.raises(SystemExit):
            main()
    captured = capsys.readouterr()
    res = json.loads(captured.out)
    res["_stderr"] = captured.err
    return res
