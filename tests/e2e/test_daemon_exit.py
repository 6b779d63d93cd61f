"""dtsched and dtagent exit clean: run on the ASan+UBSan programs (`make check` runs this
file again with DTCTL_BIN=build/asan/bin), a daemon's sanitizer report at exit (a leak,
an error) lands in its own log file, which nobody reads; this test reads it.

On the developer build the same steps run and the logs must simply say nothing of the
kind (there is no sanitizer to say it).
"""

import re
import time

import pytest

from conftest import LocalCluster

REPORT = re.compile(r"(LeakSanitizer|AddressSanitizer|UndefinedBehaviorSanitizer|runtime error:)")


@pytest.fixture
def local(dtctl_bin, tmp_path):
    c = LocalCluster(dtctl_bin / "dtctl", tmp_path, name="exit")
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_daemons_exit_without_sanitizer_reports(local):
    p = local.dtctl("run", "-n", "1", "--name", "exit", "--", "sh", "-c", "echo hi", timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    for what in (("agents", "stop"), ("head", "stop")):
        p = local.dtctl(*what)
        assert p.returncode == 0, p.stdout + p.stderr
    # the stop returns once the pid file is released; the report is written before that
    time.sleep(0.5)
    for name in ("dtsched.log", "agent.log"):
        text = (local.home / name).read_text(errors="replace")
        m = REPORT.search(text)
        assert not m, "%s at exit in %s:\n%s" % (m.group(1), name, text[max(0, m.start() - 200):][:3000])
