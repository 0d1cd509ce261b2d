"""oserror: a write path's OSError named with the path, the errno and what to do."""

import errno

import pytest

from ansible_collections.dgxops.fleet.plugins.module_utils import oserror

# what Mitogen returned for a template onto a read-only bind-mounted /etc/nccl.conf (issue 22)
EBUSY_TRACE = """Traceback (most recent call last):
  File "master:/x/ansible/module_utils/basic.py", line 1744, in atomic_move
    os.rename(b_src, b_dest)
OSError: [Errno 16] Device or resource busy: b'/root/.ansible/tmp/ansible_mitogen_action_ee03/.source.conf' -> b'/etc/nccl.conf'
"""


def test_fail_args_names_path_errno_and_advice():
    exc = OSError(errno.ENOSPC, "No space left on device", "/etc/fstab")
    args = oserror.fail_args(exc, "/etc/fstab")
    assert args["msg"] == ("cannot write /etc/fstab: [Errno 28 ENOSPC] No space left on device; no space left on the "
                           "node's filesystem: free space (df -h; journalctl --vacuum-size, apt-get clean) and run again")
    assert args["path"] == "/etc/fstab" and args["errno"] == 28 and args["errno_name"] == "ENOSPC"


@pytest.mark.parametrize("code, words", [(errno.EBUSY, "bind mount"), (errno.EROFS, "read-only"),
                                         (errno.EACCES, "become"), (errno.EDQUOT, "quota"), (errno.EXDEV, "check the path")])
def test_every_errno_gets_advice(code, words):
    assert words in oserror.describe(code, None, "/p")


def test_from_traceback_names_the_destination():
    named = oserror.from_traceback(EBUSY_TRACE)
    assert named["path"] == "/etc/nccl.conf" and named["errno"] == 16
    assert named["msg"].startswith("cannot write /etc/nccl.conf: [Errno 16 EBUSY] Device or resource busy; the file is in use")
    assert oserror.from_traceback("Traceback...\nValueError: boom") is None
