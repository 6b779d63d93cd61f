"""The documentation holds together: every link and named file of README.md, docs/*.md and the
sources' comments exists in this repository; the man pages, rendered by dtctl from the same
option tables as --help, are valid roff; the bash completion offers the commands, options,
subcommands and job ids that dtctl itself names."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, LocalCluster

DOCS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
SOURCES = sorted(p for d in ("cli", "lib", "agent", "scheduler", "trainer", "scripts", "mk",
                             "tests/e2e")
                 for p in (REPO / d).rglob("*") if p.suffix in (".c", ".h", ".py", ".sh", ".mk"))
SOURCES += [REPO / "Makefile"]
# a path into the repository, as prose names one: docs/x.md, templates/y.yaml
NAMED = re.compile(r"(?<![\w./~-])((?:docs|templates)/[\w.-]+(?:/[\w.-]+)*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MD = re.compile(r"(?<![\w./~-])([A-Z][A-Z_]*\.md)\b")   # DESIGN.md, STATUS.md: bare doc names


def rel(p):
    return p.relative_to(REPO)


def named_path_exists(name):
    name = name.rstrip(".,:;)")
    if any(ch in name for ch in "*<>{}"):   # a pattern (docs/man/dtctl-*.1), not a file
        return True
    return (REPO / name).exists()


def test_markdown_links_resolve():
    bad = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#")[0]
            if path and not (doc.parent / path).exists():
                bad.append("%s: link to %s" % (rel(doc), target))
    assert not bad, "\n".join(bad)


def test_named_files_exist():
    """`docs/...` and `templates/...` in the docs and the sources' comments, and bare doc
    names (DESIGN.md): each is a file of this repository (it must be self-contained)."""
    bad = []
    for f in DOCS + SOURCES:
        if f == Path(__file__):
            continue
        text = f.read_text(errors="replace")
        for name in NAMED.findall(text):
            if not named_path_exists(name):
                bad.append("%s: %s" % (rel(f), name))
        for name in MD.findall(text):
            if not ((REPO / name).exists() or (REPO / "docs" / name).exists()
                    or (f.parent / name).exists()):
                bad.append("%s: %s" % (rel(f), name))
    assert not bad, "names of files that are not in the repository:\n" + "\n".join(bad)


def test_no_stale_placeholders():
    bad = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            if re.search(r"\bfor now\b|until the .* is wired|\bnot yet wired\b", line, re.I):
                bad.append("%s:%d: %s" % (rel(doc), i, line.strip()))
    assert not bad, "\n".join(bad)


def commands(dtctl):
    p = dtctl("__complete")
    assert p.returncode == 0, p.stderr
    return [w for w in p.stdout.split() if not w.startswith("-") and w != "help"]


def test_man_pages_from_the_option_tables(dtctl, tmp_path):
    """`dtctl help --man CMD` is CMD's man page: its summary from the command table, every
    option --help lists; groff renders every page without a warning."""
    cmds = commands(dtctl)
    assert {"run", "init", "sweep", "ps", "show"} <= set(cmds), cmds
    groff = shutil.which("groff")
    pages = {"dtctl": dtctl("help", "--man")}
    for c in cmds:
        pages["dtctl-" + c] = dtctl("help", "--man", c)
    for name, p in pages.items():
        assert p.returncode == 0 and p.stdout.startswith(".TH %s 1 " % name.upper()), \
            (name, p.stdout[:200], p.stderr)
    for c in cmds:
        page = pages["dtctl-" + c].stdout
        helptext = dtctl(c, "--help").stdout
        for opt in re.findall(r"--([a-z][a-z-]*)", helptext.split("\n\n", 1)[1]):
            assert "\\-\\-" + opt.replace("-", "\\-") in page, (c, opt)
    assert "\\fB\\-\\-accept\\-new\\-hosts\\fR" in pages["dtctl-init"].stdout
    assert "dtctl\\-run \\- run a distributed job" in pages["dtctl-run"].stdout
    assert all(".BR dtctl\\-%s (1)" % c in pages["dtctl"].stdout for c in cmds)
    if not groff:
        pytest.skip("groff not installed: roff not linted")
    for name, p in pages.items():
        r = subprocess.run([groff, "-man", "-ww", "-z"], input=p.stdout, capture_output=True,
                           text=True)
        assert r.returncode == 0 and not r.stderr, (name, r.stderr)


def complete(words, env=None, cwd=None):
    """The bash completion's answer for the command line `words` (the last word is the one
    being completed), as bash computes it: `complete -p` and _dtctl with COMP_WORDS."""
    script = REPO / "scripts" / "dtctl-completion.bash"
    prog = ("source %s; complete -p dtctl; COMP_WORDS=(%s); COMP_CWORD=%d; _dtctl; "
            "printf '%%s\\n' \"${COMPREPLY[@]}\"" %
            (script, " ".join("'%s'" % w for w in words), len(words) - 1))
    r = subprocess.run(["bash", "--norc", "-c", prog], capture_output=True, text=True,
                       env=env, cwd=cwd, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "complete -F _dtctl dtctl", lines
    return [l for l in lines[1:] if l]


@pytest.fixture
def path_env(dtctl_bin, tmp_home):
    import os
    env = dict(os.environ, PATH="%s:%s" % (dtctl_bin, os.environ["PATH"]))
    env.pop("DTCTL_CLUSTER", None)
    return env


def test_bash_completion_words(path_env, tmp_home):
    env = path_env
    assert "sweep" in complete(["dtctl", "sw"], env) and "show" not in complete(["dtctl", "sw"], env)
    assert set(complete(["dtctl", ""], env)) >= {"run", "init", "ps", "nodes", "--cluster"}
    assert complete(["dtctl", "run", "--num"], env) == ["--num-nodes"]
    assert complete(["dtctl", "init", "--acc"], env) == ["--accept-new-hosts"]
    assert complete(["dtctl", "-c", "x.yaml", "ps", "--al"], env) == ["--all"]
    assert sorted(complete(["dtctl", "agents", "st"], env)) == ["start", "status", "stop"]
    assert {"list", "status", "best", "report", "pause"} <= set(complete(["dtctl", "sweep", ""], env))
    assert complete(["dtctl", "help", "--m"], env) == ["--man"]
    # no cluster here: no ids, and no dtsched was started to find some
    assert complete(["dtctl", "show", ""], env) == []
    assert not (tmp_home / "dtsched.pid").exists()


def test_bash_completion_job_ids(dtctl_bin, tmp_path):
    import os
    with LocalCluster(dtctl_bin / "dtctl", tmp_path) as c:
        p = c.dtctl("run", "--detach", "--json", "-n", "1", "--", "true")
        assert p.returncode == 0, p.stderr
        job = json.loads(p.stdout)["job"]["id"]
        env = dict(c.env, PATH="%s:%s" % (dtctl_bin, os.environ["PATH"]))
        assert complete(["dtctl", "show", ""], env) == [job]
        assert complete(["dtctl", "cancel", job[:3]], env) == [job]
        assert complete(["dtctl", "sweep", "status", ""], env) == []
