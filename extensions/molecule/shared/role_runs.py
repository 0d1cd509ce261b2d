"""Run a scenario's run_role.yml from its testinfra tests and read what the run did.

run_role.yml prints the role's results in a final debug task as {"dgxops_result": ...}; with
Ansible's JSON result format each callback result is one line, so the run's failures and results
are read from its output (mig and tenant_isolation use it)."""

import json
import os
import re
import subprocess


class Run:
    """One ansible-playbook run: rc, output, the failures' messages and the results run_role.yml shows."""

    LINE = re.compile(r"^(ok|changed|fatal): \[([^\]]+)\](?:: FAILED!)? => (\{.*\})$")

    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.failures = []
        self.results = []
        for line in proc.stdout.splitlines():
            match = self.LINE.match(line)
            if not match:
                continue
            data = json.loads(match.group(3))
            if match.group(1) == "fatal":
                self.failures.append(str(data.get("msg", "")))
            elif isinstance(data.get("msg"), dict) and "dgxops_result" in data["msg"]:
                self.results.append(data["msg"]["dgxops_result"])

    @property
    def result(self):
        assert len(self.results) == 1, self.stdout[-4000:]
        return self.results[0]

    @property
    def failure(self):
        """The message of the failure that stopped the run (what a rescue sees as ansible_failed_result)."""
        assert self.rc != 0, self.stdout[-4000:]
        assert self.failures, self.stdout[-4000:]
        return self.failures[-1]


def run_playbook(playbook, extra=None, limit=None, env=None):
    """ansible-playbook on molecule's inventory, results one JSON line each, no colour."""
    argv = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], playbook]
    if limit:
        argv += ["--limit", limit]
    if extra:
        argv += ["-e", json.dumps(extra)]
    run_env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                   ANSIBLE_CALLBACK_FORMAT_PRETTY="false", **(env or {}))
    return Run(subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env, check=False))
