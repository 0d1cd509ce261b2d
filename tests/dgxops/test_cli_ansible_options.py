"""`dgxops run` is a faithful front to ansible-playbook: options keep their spelling and meaning,
extra vars reach Ansible as written, `--` hands the rest over, facts and artifacts are kept."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.dirname(sys.executable)


def env_for(tmp_path, **extra):
    """A user's environment: no ANSIBLE_CONFIG from the test runner, dgxops state under tmp."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(DGXOPS_STATE_DIR=str(tmp_path / "state"), HOME=str(tmp_path / "home"), **extra)
    return env


def cli(tmp_path, *args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "dgxops.cli", *args], capture_output=True, text=True,
                          cwd=cwd or tmp_path, env=env or env_for(tmp_path), check=False, timeout=300)


def write_play(tmp_path, tasks, name="p.yml", hosts="all"):
    path = tmp_path / name
    path.write_text("- name: Options test\n  hosts: %s\n  gather_facts: false\n  tasks:\n%s" % (hosts, tasks))
    return path.name


DUMP = """    - name: Dump the variables
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'mode': mode, 'mode_type': mode | type_debug, 'a': a | default(None), 'b': b | default(None),
                      'nested': nested | default(None), 'secret': secret | default(None)} | to_json }}"
        mode: "0600"
      delegate_to: localhost
"""


def dumped(tmp_path):
    return json.loads((tmp_path / "out.json").read_text())


def test_extra_vars_reach_ansible_as_written(tmp_path):
    play = write_play(tmp_path, DUMP)
    proc = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", "-e", "out=%s" % (tmp_path / "out.json"),
               "-e", "mode=0644", "-e", "a=1 b=two words", "-e", '{"nested": {"list": [1, 2], "s": "x y"}}', "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = dumped(tmp_path)
    # Ansible's key=value parsing: strings, split on spaces; JSON keeps its types
    assert got["mode"] == "0644" and got["mode_type"] in ("str", "AnsibleUnicode", "_AnsibleTaggedStr")
    assert got["a"] == "1" and got["b"] == "two"
    assert got["nested"] == {"list": [1, 2], "s": "x y"}


def test_vault_file_with_password_file_and_prompt(tmp_path):
    secret = tmp_path / "vault.yml"
    secret.write_text("mode: '0750'\nsecret: s3cr3t value\n")
    pw = tmp_path / "pw"
    pw.write_text("correct horse\n")
    enc = subprocess.run([os.path.join(BIN, "ansible-vault"), "encrypt", "--vault-password-file", str(pw), str(secret)],
                         capture_output=True, text=True, env=env_for(tmp_path), check=False)
    assert enc.returncode == 0, enc.stderr
    assert secret.read_text().startswith("$ANSIBLE_VAULT")
    play = write_play(tmp_path, DUMP)
    out = "out=%s" % (tmp_path / "out.json")
    proc = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", "-e", out, "-e", "@vault.yml",
               "--vault-password-file", "pw", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert dumped(tmp_path)["secret"] == "s3cr3t value" and dumped(tmp_path)["mode"] == "0750"
    (tmp_path / "out.json").unlink()

    # -J: Ansible asks, the user types it (through the wrapper's prompt)
    import pexpect

    child = pexpect.spawn(sys.executable, ["-m", "dgxops.cli", "run", play, "-i", "localhost,", "-c", "local",
                                           "-e", out, "-e", "@vault.yml", "-J", "--json"],
                          cwd=str(tmp_path), env=env_for(tmp_path), encoding="utf-8", timeout=120)
    child.expect("Vault password: ")
    child.sendline("correct horse")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before[-2000:]
    assert dumped(tmp_path)["secret"] == "s3cr3t value"


def test_connection_user_key_and_double_dash_pass_through(tmp_path):
    play = write_play(tmp_path, DUMP.replace("'secret': secret", "'secret': ansible_user | default(None)"))
    key = tmp_path / "id_test"
    key.write_text("not a key\n")
    art = tmp_path / "artifacts"
    # localhost named in an inventory uses the default (ssh) connection: only -c local makes this run
    proc = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", "-u", "svc-deploy", "--private-key", "id_test",
               "--artifact-dir", str(art), "--json", "--", "-e", "out=%s" % (tmp_path / "out.json"), "-e", "mode=0600")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = dumped(tmp_path)
    assert got["mode"] == "0600" and got["secret"] == "svc-deploy"
    (run_dir,) = [p for p in art.iterdir()]
    command = json.loads((run_dir / "command").read_text())["command"]
    for pair in (["--connection", "local"], ["--user", "svc-deploy"], ["--private-key", "id_test"]):
        assert any(command[i:i + 2] == pair for i in range(len(command))), command


def test_verbose_shows_ansibles_own_output(tmp_path):
    play = write_play(tmp_path, "    - name: Say hi\n      ansible.builtin.debug:\n        msg: hello from ansible\n")
    quiet = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local")
    assert quiet.returncode == 0 and "hello from ansible" not in quiet.stdout
    loud = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", "-vv")
    assert loud.returncode == 0, loud.stdout[-2000:] + loud.stderr[-2000:]
    assert "TASK [Say hi]" in loud.stdout and "hello from ansible" in loud.stdout
    assert "config file" in loud.stdout  # printed by ansible-playbook from -v on


def test_facts_are_cached_between_runs(tmp_path):
    gather = write_play(tmp_path, "    - name: Gather\n      ansible.builtin.setup:\n        gather_subset: [min]\n", "gather.yml")
    use = write_play(tmp_path, "    - name: Use cached facts\n      ansible.builtin.assert:\n"
                     "        that: ansible_facts.system is defined\n", "use.yml")
    first = cli(tmp_path, "run", gather, "-i", "localhost,", "-c", "local", "--json")
    assert first.returncode == 0, first.stdout[-2000:]
    second = cli(tmp_path, "run", use, "-i", "localhost,", "-c", "local", "--json")
    assert second.returncode == 0, second.stdout[-2000:]
    # no fact cache configured: the wrapper's shared cache under the user's dgxops cache
    assert [p.name for p in (tmp_path / "state" / "facts").iterdir() if p.name.endswith("localhost")]


def test_users_own_fact_cache_setting_is_respected(tmp_path):
    cache = tmp_path / "mycache"
    (tmp_path / "ansible.cfg").write_text("[defaults]\nfact_caching = jsonfile\nfact_caching_connection = %s\n" % cache)
    gather = write_play(tmp_path, "    - name: Gather\n      ansible.builtin.setup:\n        gather_subset: [min]\n", "gather.yml")
    proc = cli(tmp_path, "run", gather, "-i", "localhost,", "-c", "local", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert [p.name for p in cache.iterdir() if p.name.endswith("localhost")]
    assert not (tmp_path / "state" / "facts").exists()


def test_artifacts_are_kept_rotated_and_readable_by_report(tmp_path):
    from dgxops.report import markdown_report
    from dgxops.runner import load_result

    play = write_play(tmp_path, "    - name: Touch\n      ansible.builtin.file:\n        path: \"{{ f }}\"\n"
                      "        state: touch\n        mode: '0644'\n")
    art = tmp_path / "runs"
    results = []
    for i in range(3):
        proc = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", "-e", "f=%s" % (tmp_path / ("f%d" % i)),
                   "--artifact-dir", str(art), "--keep-runs", "2", "--json")
        assert proc.returncode == 0, proc.stdout[-2000:]
        results.append(json.loads(proc.stdout))
    kept = sorted(p.name for p in art.iterdir())
    assert len(kept) == 2
    assert sorted(os.path.basename(r["artifact_dir"]) for r in results[1:]) == kept
    replayed = load_result(results[2]["artifact_dir"])
    assert replayed.status == "successful" and replayed.rc == 0
    assert replayed.hosts["localhost"]["changed"] == 1
    assert replayed.changed_tasks == [("localhost", "Touch")]
    assert "| localhost | 1 | 1 |" in markdown_report({}, [("kept run", replayed.as_dict())])


def test_missing_ansible_playbook_is_an_environment_error(tmp_path, monkeypatch, capsys):
    from dgxops import cli as dcli
    from dgxops import runner

    monkeypatch.setattr(runner.shutil, "which", lambda *a, **k: None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DGXOPS_STATE_DIR", str(tmp_path / "state"))
    play = write_play(tmp_path, "    - name: Nothing\n      ansible.builtin.debug:\n")
    assert dcli.main(["run", play, "-i", "localhost,"]) == 4
    assert "ansible-playbook not found" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["run", "x.yml", "--vault-password-file", "f", "-K", "--become", "--become-user", "root",
                                   "-u", "me", "--private-key", "k", "-c", "ssh", "-T", "5", "--list-tasks", "--flush-cache",
                                   "--vault-id", "dev@f", "--start-at-task", "X", "-M", "lib", "--", "--step"]])
def test_option_spelling_and_order(argv, monkeypatch):
    from dgxops import cli as dcli

    monkeypatch.setattr("getpass.getpass", lambda prompt: "pw-for-" + prompt.split()[0])
    cut = argv.index("--")
    args = dcli.build_parser().parse_args(argv[:cut])
    args.passthrough = argv[cut + 1:]
    spec = dcli._spec(args, args.playbook)
    assert spec.options == ["--ask-become-pass", "--user", "me", "--private-key", "k", "--connection", "ssh", "--timeout", "5", "--become",
                            "--become-user", "root", "--vault-id", "dev@f", "--vault-password-file", "f",
                            "--module-path", "lib", "--flush-cache", "--start-at-task", "X", "--list-tasks", "--step"]
    assert list(spec.passwords.values()) == ["pw-for-BECOME"]


def test_check_defaults_to_the_collections_site_playbook(tmp_path, monkeypatch):
    from dgxops import cli as dcli
    from dgxops.runner import ROOT as PKG_ROOT

    args = dcli.build_parser().parse_args(["check", "-i", "x"])
    assert args.playbook is None
    # from a checkout: its playbooks/site.yml (absolute, so any directory works); installed: the FQCN
    assert dcli._builtin_playbook("site") == str(PKG_ROOT / "playbooks" / "site.yml")
    monkeypatch.setattr("dgxops.runner.ROOT", tmp_path)
    assert dcli._builtin_playbook("site") == "dgxops.fleet.site"


LAB_INVENTORY = """lab:
  hosts:
    node-a:
    node-b:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""

CONVERGE = """- name: Converge the lab
  hosts: lab
  gather_facts: false
  tasks:
    - name: Write the node file
      ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.conf"
        content: "node {{ inventory_hostname }}\\n"
        mode: "0644"
    - name: Write the head file
      ansible.builtin.copy:
        dest: "{{ out }}/head.conf"
        content: "head\\n"
        mode: "0644"
      when: inventory_hostname == 'node-a'
"""


def test_report_run_reads_kept_artifact_directories_through_the_cli(tmp_path):
    """`dgxops run` keeps its artifacts; `dgxops report --run LABEL=DIR`, the real command, reads them
    back: hosts, per-host counts and changed tasks come from the run's events, under the label."""
    # report runs the collection's facts playbook: the collection where a user has it installed
    (tmp_path / "collections" / "ansible_collections" / "dgxops").mkdir(parents=True)
    (tmp_path / "collections" / "ansible_collections" / "dgxops" / "fleet").symlink_to(ROOT)
    env = env_for(tmp_path, ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))
    (tmp_path / "lab.yml").write_text(LAB_INVENTORY)
    (tmp_path / "converge.yml").write_text(CONVERGE)
    (tmp_path / "out").mkdir()
    dirs = []
    for _ in range(2):  # a converge, then an idempotent rerun
        proc = cli(tmp_path, "run", "converge.yml", "-i", "lab.yml", "-e", "out=%s" % (tmp_path / "out"), "--artifact-dir", "runs", env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        (line,) = [x for x in proc.stdout.splitlines() if x.startswith("artifacts: ")]
        dirs.append(line.split(": ", 1)[1])
    assert [os.path.dirname(d) for d in dirs] == [str(tmp_path / "runs")] * 2
    assert all(os.path.isdir(os.path.join(d, "job_events")) for d in dirs)

    proc = cli(tmp_path, "report", "-i", "lab.yml", "--run", "first converge=%s" % dirs[0], "--run", "idempotent rerun=runs/%s"
               % os.path.basename(dirs[1]), env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = proc.stdout
    first = report.split("## Run: first converge")[1].split("## ")[0]
    rerun = report.split("## Run: idempotent rerun")[1].split("## ")[0]
    assert "status successful, rc 0, 3 change(s), 0 failure(s)" in first
    # host | ok | changed | unreachable | failed | skipped
    assert "| node-a | 2 | 2 | 0 | 0 | 0 |" in first and "| node-b | 1 | 1 | 0 | 0 | 1 |" in first
    assert "Write the node file: `node-a`, `node-b`" in first and "Write the head file: `node-a`" in first
    assert "status successful, rc 0, 0 change(s), 0 failure(s)" in rerun
    assert "| node-a | 2 | 0 | 0 | 0 | 0 |" in rerun and "| node-b | 1 | 0 | 0 | 0 | 1 |" in rerun
    assert "Write the" not in rerun

    # the same as an HTML page written to a file
    proc = cli(tmp_path, "report", "-i", "lab.yml", "--run", "first converge=%s" % dirs[0], "--format", "html", "-o", "r.html", env=env)
    assert proc.returncode == 0 and "report written to r.html" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    page = (tmp_path / "r.html").read_text()
    assert "Run: first converge" in page and "node-a" in page and "node-b" in page and "Write the head file" in page

    # a directory that is no run: said so, not an empty report
    proc = cli(tmp_path, "report", "-i", "lab.yml", "--run", "typo=out", env=env)
    assert proc.returncode != 0 and "no job_events" in proc.stderr and "## Run" not in proc.stdout


# what ansible-playbook prints from each -v level on (a marker per level)
VERBOSITY_MARKERS = {
    1: '"stdout": "hello from ansible"',  # task results
    2: "task path: ",
    3: "ESTABLISH LOCAL CONNECTION",
    4: "Positional arguments: ",  # the parsed command line
}


@pytest.mark.parametrize("level", [0, 1, 2, 3, 4])
def test_each_verbosity_level_shows_ansibles_output_at_that_level(tmp_path, level):
    play = write_play(tmp_path, "    - name: Say hi\n      ansible.builtin.command: echo hello from ansible\n      changed_when: false\n")
    proc = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", *(["-" + "v" * level] if level else []))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    shown = {n for n, marker in VERBOSITY_MARKERS.items() if marker in proc.stdout}
    assert shown == set(range(1, level + 1)), proc.stdout[-3000:]
    assert ("PLAY RECAP" in proc.stdout) == (level > 0)  # from -v on: Ansible's own output, not the progress lines
    assert proc.stdout.rstrip().splitlines()[-1].startswith("artifacts: ")  # and the summary after it


def test_artifact_dir_default_and_retention_touch_only_dgxops_runs(tmp_path):
    """Default: under the user's cache. `--artifact-dir` may be a directory that holds other things:
    retention removes only the oldest of dgxops's own runs, never the user's files or directories."""
    play = write_play(tmp_path, "    - name: Nothing\n      ansible.builtin.debug:\n")
    env = {k: v for k, v in env_for(tmp_path).items() if k not in ("DGXOPS_STATE_DIR", "XDG_CACHE_HOME")}
    proc = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (default,) = (tmp_path / "home" / ".cache" / "dgxops" / "runs").iterdir()
    assert "artifacts: %s" % default in proc.stdout and (default / "dgxops-result.json").is_file()

    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes" / "keep.txt").write_text("mine\n")
    (mine / "readme.txt").write_text("mine\n")
    (mine / "20200101T000000-not-a-run-abcdef").mkdir()  # named like a run, but no ansible-runner artifacts in it
    for p in mine.rglob("*"):
        os.utime(p, (1, 1))  # older than any run: the first to go under a blind rotation
    users = sorted(str(p.relative_to(mine)) for p in mine.rglob("*"))

    def runs():
        return sorted(p.name for p in mine.iterdir() if (p / "command").is_file())

    made = []
    for keep in ("2", "2", "2", "0", "0", "1"):
        proc = cli(tmp_path, "run", play, "-i", "localhost,", "-c", "local", "--artifact-dir", "mine", "--keep-runs", keep, "--json")
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        made.append(os.path.basename(json.loads(proc.stdout)["artifact_dir"]))
        if len(made) == 3:
            assert runs() == sorted(made[1:])  # the newest two
    assert runs() == [made[-1]]
    assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*") if not str(p.relative_to(mine)).startswith(made[-1])) == users
