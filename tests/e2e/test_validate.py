"""dtctl validate: load cluster/job/sweep files, print them resolved, or fail with exit 2
and one "file:line:col: ..." message on stderr (and nothing on stdout)."""
import json
import os
import re

import pytest

from conftest import REPO

TEMPLATES = REPO / "templates"


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("kind", ["cluster", "job", "sweep"])
def test_templates_are_valid(dtctl, kind):
    r = dtctl("validate", TEMPLATES / ("%s.yaml" % kind))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert "%s file, valid" % kind in r.stdout


def test_cluster_json_defaults(dtctl, tmp_path):
    p = write(tmp_path, "cluster.yaml",
              "shared_dir: /mnt/nfs\nuser: alice\nnodes:\n  - host: gpu[01-03]\n"
              "  - {host: local, gpus: 0}\nsetup: {template: setup.sh}\n")
    write(tmp_path, "setup.sh", "#!/bin/sh\n")    # validate checks that it can be read
    r = dtctl("validate", "--json", p)
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)["files"][0]
    assert c["kind"] == "cluster"
    assert c["cluster"] == "dtctl"
    assert c["ssh"] == {"port": 22, "fanout": 32, "connect_timeout": "10s",
                        "connect_timeout_ms": 10000, "command_timeout": "10m",
                        "command_timeout_ms": 600000, "host_key_policy": "tofu",
                        "identity": None}
    assert [n["name"] for n in c["nodes"]] == ["gpu01", "gpu02", "gpu03", "local"]
    assert c["nodes"][0]["gpus"] == "auto" and c["nodes"][3]["gpus"] == 0
    assert c["nodes"][1]["user"] == "alice" and c["nodes"][1]["port"] == 22
    assert c["setup"]["template"] == str(tmp_path / "setup.sh")
    assert c["agent"] == {"port": 7070, "heartbeat": "2s", "heartbeat_ms": 2000,
                          "dead_after": "10s", "dead_after_ms": 10000}
    assert c["install"] == "local" and c["head"]["port"] == 7071
    assert c["job_files"] == "group"


def test_job_json_defaults(dtctl, tmp_path):
    p = write(tmp_path, "job.yaml", "command: [python, train.py]\ntimeout: 1h30m\n")
    r = dtctl("validate", "--json", p)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)["files"][0]
    assert j["kind"] == "job"
    assert j["name"] == "python" and j["launcher"] == "agent"
    assert j["nodes"] == 1 and j["procs_per_node"] == 1 and j["gpus_per_node"] == 0
    assert j["command"] == ["python", "train.py"] and j["trainer"] is None
    assert j["timeout"] == "1h30m" and j["timeout_ms"] == 5400000
    assert j["stall_after"] == "0s" and j["retries"] == 0


def test_sweep_json_with_relative_job(dtctl, tmp_path):
    write(tmp_path, "job.yaml", "trainer: {model: mlp, hidden: [64, 64]}\n")
    sub = tmp_path / "sweeps"
    sub.mkdir()
    write(sub, "s.yaml", "method: grid\nmetric: {name: loss}\nparameters:\n"
          "  lr: {values: [0.1, 0.01]}\n  opt: {parameters: {m: {values: [0.9, 0.99, 0.999]}}}\n"
          "job: ../job.yaml\n")
    r = dtctl("validate", "--json", sub / "s.yaml")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)["files"][0]
    assert s["kind"] == "sweep"
    assert s["max_trials"] == 6 and s["grid_size"] == 6
    assert list(s["parameters"]) == ["lr", "opt.m"]
    assert s["max_failures"] == 3 and s["parallel"] == 0
    assert s["job"]["launcher"] == "mpi"
    assert s["job"]["trainer"] == {"model": "mlp", "hidden": "64,64"}


def test_several_files_and_kind_option(dtctl, tmp_path):
    a = write(tmp_path, "a.yaml", "nodes: 2\n")   # no key says what it is
    r = dtctl("validate", a)
    assert r.returncode == 2
    assert "use --kind" in r.stderr
    b = write(tmp_path, "b.yaml", "nodes: 2\ncommand: [x]\n")
    r = dtctl("validate", "--json", "--kind", "job", b, TEMPLATES / "job.yaml")
    assert r.returncode == 0, r.stderr
    both = json.loads(r.stdout)["files"]
    assert [x["kind"] for x in both] == ["job", "job"]
    r = dtctl("validate", "--kind", "pod", b)
    assert r.returncode == 2 and "--kind" in r.stderr


@pytest.mark.parametrize("name,text,want", [
    ("c.yaml", "shared_dir: /n\nnodes: [local]\nssh:\n  fanout: lots\n",
     "c.yaml:4:11: key 'ssh.fanout': expected a positive integer, found 'lots'"),
    ("c.yaml", "shared_dir: /n\nnodes: [local]\nssh: {fanot: 3}\n",
     "c.yaml:3:7: unknown key 'ssh.fanot'; did you mean 'ssh.fanout'?"),
    ("j.yaml", "command: python train.py\n",
     "j.yaml:1:10: key 'command': expected a list of arguments"),
    ("s.yaml", "method: grid\nprogram: train.py\ncontroller: {type: local}\n",
     "s.yaml:3:1: W&B key 'controller' is unsupported by dtctl"),
])
def test_bad_file(dtctl, tmp_path, name, text, want):
    p = write(tmp_path, name, text)
    r = dtctl("validate", p)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("dtctl: error: %s/%s" % (tmp_path, want))
    assert re.match(r"dtctl: error: .*:\d+:\d+: ", lines[0])


HOSTILE = [
    # a newline in a user name would add a ProxyCommand line to ssh_config
    ('user: "dtu\\n    ProxyCommand touch /tmp/dtctl-e2e-proxycommand-ran"\n', "key 'user': expected a user name"),
    ('nodes: [{host: gpu1, user: "a b"}]\n', "key 'nodes[0].user': expected a user name"),
    ('shared_dir: "/n\\nx"\n', "key 'shared_dir': expected a path without control"),
    ("shared_dir: /n/../etc\n", "key 'shared_dir': expected a path without a '..' component"),
    ("nodes: [%s]\n" % ("h" * 5000), "key 'nodes[0].host': host 'hhhh"),
    ('ssh: {identity: "/k\\ney"}\n', "key 'ssh.identity': expected a path without control"),
    ("ssh: {identity: '/k\"ey'}\n", "key 'ssh.identity': expected a path without quotes"),
    ("user: !!binary aGk=\n", "YAML tags ('!!binary') are not supported"),
]


@pytest.mark.parametrize("extra,want", HOSTILE)
def test_hostile_cluster_values(dtctl, tmp_home, tmp_path, extra, want):
    """Each value that would reach ssh_config, a path or a shell-like context is refused
    where it is read, with its file:line:col (exit 2), by validate and by init alike,
    and init writes nothing (no key, secret, ssh_config or copied cluster.yaml)."""
    base = {"shared_dir": "shared_dir: /n\n", "nodes": "nodes: [gpu1]\n"}
    key = extra.split(":")[0]
    text = "".join(v for k, v in base.items() if k != key) + extra
    p = write(tmp_path, "c.yaml", text)
    line = text.splitlines().index(extra.rstrip("\n")) + 1
    for args in (("validate", p), ("-c", p, "init")):
        r = dtctl(*args)
        assert r.returncode == 2, (args, r.returncode, r.stdout, r.stderr)
        assert r.stdout == ""
        m = re.search(r"dtctl: error: (\S+):(\d+):(\d+): (.*)", r.stderr)
        assert m and m.group(1) == str(p) and int(m.group(2)) == line, r.stderr
        assert want in m.group(4), r.stderr
    assert sorted(os.listdir(tmp_home)) == [], os.listdir(tmp_home)
    assert not os.path.exists("/tmp/dtctl-e2e-proxycommand-ran")


def test_good_and_bad_prints_nothing(dtctl, tmp_path):
    bad = write(tmp_path, "bad.yaml", "shared_dir: /n\nnodes: []\n")
    r = dtctl("validate", TEMPLATES / "job.yaml", bad)
    assert r.returncode == 2
    assert r.stdout == ""
    assert "bad.yaml:2:8: key 'nodes': the node list is empty" in r.stderr


def test_missing_file_and_help(dtctl, tmp_path):
    r = dtctl("validate", tmp_path / "nope.yaml")
    assert r.returncode == 2
    assert "cannot read" in r.stderr and "nope.yaml" in r.stderr
    r = dtctl("validate", "-h")
    assert r.returncode == 0 and "dtctl validate" in r.stdout
    r = dtctl("validate")
    assert r.returncode == 2


@pytest.mark.parametrize("cmd", ["run", "logs", "sweep"])
def test_help_description_is_not_a_usage_form(dtctl, cmd):
    """Usage forms get "or:"; the description after the empty line does not."""
    r = dtctl(cmd, "--help")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("usage: dtctl %s" % cmd), lines[0]
    forms = lines[1:lines.index("")]
    assert all(l.startswith("   or: dtctl %s" % cmd) for l in forms), forms
    desc = lines[lines.index("") + 1]
    assert desc.startswith("    ") and "or:" not in desc and desc.strip()[0].isupper(), desc


def test_text_output_reads_back_as_the_same_strings(dtctl, tmp_path):
    """The text form is YAML: every string a reader would take for something else
    (quotes, backslashes, numbers, booleans, a leading dash, control characters)
    is quoted with escapes, so it reads back as the same string."""
    import yaml
    words = ['echo "DTCTL_METRIC {\\"loss\\": 1}"', "back\\slash", "1e3", "0x10", ".5",
             "yes", "Off", "~", "-x", "a: b", "trailing ", "tab\there", "plain", "caf\u00e9",
             "lr={lr}"]
    p = write(tmp_path, "job.yaml", "command: %s\n" % json.dumps(words))
    r = dtctl("validate", p)
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout)["command"] == words, r.stdout
