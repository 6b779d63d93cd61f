"""dtctl sweep report: the HTML page rendered from a sweep export (cli/sweep-report.c),
through the hidden test driver `dtctl sweep-report-file EXPORT.json -o PAGE.html`.

The fixture tests/e2e/data/sweep-export.json is make_export(24, 20, seed=7) below (a bayes
sweep with ASHA pruning, one failed and one pending trial); regenerate it with
`python3 tests/e2e/test_sweep_report.py > tests/e2e/data/sweep-export.json`.

The screenshot test renders the page in headless Chromium and checks the pixels of the two
chart regions (found by their plot-area background colour); it skips, saying so, when
/usr/bin/chromium is absent (scripts/deps.sh installs it).
"""
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "data" / "sweep-export.json"
CHROMIUM = "/usr/bin/chromium"
PLOT_BG = (0xfa, 0xfb, 0xfd)      # .bg fill of both charts' plot areas


def _ts(sec):
    h, rem = divmod(sec, 3600)
    m, s = divmod(rem, 60)
    d, h = divmod(h, 24)
    return "2026-11-%02dT%02d:%02d:%02d.%06dZ" % (22 + d, 10 + h, m, s, (sec * 7919) % 1000000)


def make_export(n, epochs, seed=7, spread=1.0):
    """A plausible export: val_loss curves that depend on lr, hidden, dropout, optimizer;
    ASHA-style pruning at epochs 1, 3 and 9; the last trials running or pending.
    spread > 1 stretches the values over more decades (for the log scale)."""
    rng = random.Random(seed)
    hiddens, opts = ["128", "256", "512", "1024"], ["adam", "adamw", "sgd"]
    trials, t0 = [], 0
    for i in range(1, n + 1):
        lr = 10 ** rng.uniform(-4, -1)
        hidden, opt = rng.choice(hiddens), rng.choice(opts)
        dropout = rng.uniform(0, 0.5)
        batch = rng.randint(16, 128)
        quality = (abs(math.log10(lr) + 2.5) * 0.35 + abs(hiddens.index(hidden) - 2) * 0.08
                   + abs(dropout - 0.2) * 0.4 + (0.25 if opt == "sgd" else 0))
        floor = (0.12 + quality) ** spread
        start = 2.3 ** spread
        tau = 2 + 4 * rng.random()
        state = "COMPLETED"
        stop = epochs
        if i == n:
            state, stop = "PENDING", 0
        elif i == n - 1:
            state, stop = "FAILED", 0
        elif i > n - 5:
            state, stop = "RUNNING", rng.randint(min(2, epochs - 1), max(2, epochs - 2))
        elif quality > 0.75:
            state, stop = "PRUNED", 1
        elif quality > 0.5:
            state, stop = "PRUNED", 3
        elif quality > 0.4:
            state, stop = "PRUNED", 9
        metrics, last = [], None
        for e in range(1, stop + 1):
            v = floor + (start - floor) * math.exp(-e / tau)
            v *= 1 + rng.gauss(0, 0.015)
            last = round(v, 5)
            m = {"epoch": e, "step": e * 100, "val_loss": last, "train_loss": round(v * 0.9, 5)}
            metrics.append(m)
        if metrics and i % 5 == 0:          # a report without the metric: skipped
            metrics.insert(1, {"epoch": 1, "step": 150, "lr": lr})
        value = last if state in ("COMPLETED", "PRUNED") else None
        started = t0 + i * 37
        trials.append({
            "trial": i,
            "job_id": None if state == "PENDING" else "j-%06d" % (100 + i),
            "params": {"lr": "%.4g" % lr, "hidden": hidden, "dropout": "%.3f" % dropout,
                       "optimizer": opt, "batch": str(batch)},
            "state": state, "value": value, "no_metric": state == "FAILED",
            "resource": stop if stop else None,
            "created_at": _ts(started),
            "ended_at": _ts(started + 40 * stop + 15) if state not in ("RUNNING", "PENDING")
            else None,
            "metrics": metrics,
        })
    done = [t for t in trials if t["state"] == "COMPLETED"]
    best = min(done, key=lambda t: (t["value"], t["trial"])) if done else None
    return {
        "protocol": 1,
        "sweep": {
            "id": "s-000001", "name": "mlp-cifar lr/width search", "method": "bayes",
            "metric": {"name": "val_loss", "goal": "minimize"}, "state": "RUNNING",
            "reason": None, "max_trials": n + 8, "parallel": 6,
            "created_at": _ts(0), "ended_at": None,
            "parameters": [
                {"name": "lr", "kind": "log_uniform", "min": 0.0001, "max": 0.1},
                {"name": "hidden", "kind": "values", "values": hiddens},
                {"name": "dropout", "kind": "uniform", "min": 0, "max": 0.5},
                {"name": "optimizer", "kind": "values", "values": opts},
                {"name": "batch", "kind": "int_uniform", "min": 16, "max": 128},
            ],
        },
        "trials": trials,
        "best": {"trial": best["trial"], "value": best["value"], "params": best["params"]}
        if best else None,
    }


def render(dtctl, tmp_path, export, name="page.html"):
    src = tmp_path / (name + ".json")
    if isinstance(export, Path):
        src = export
    else:
        src.write_text(json.dumps(export))
    out = tmp_path / name
    r = dtctl("sweep-report-file", src, "-o", out)
    assert r.returncode == 0, "expected exit 0, got %d: %s" % (r.returncode, r.stderr)
    assert r.stderr == ""
    return out.read_text()


def svg(html, ident):
    m = re.search(r'<svg id="%s".*?</svg>' % ident, html, re.S)
    assert m, "expected an <svg id=%r> in the page" % ident
    return m.group(0)


def test_fixture_is_current():
    assert json.loads(FIXTURE.read_text()) == make_export(24, 20), \
        "tests/e2e/data/sweep-export.json differs from make_export(24, 20): regenerate it"


def test_page_structure(dtctl, tmp_path):
    ex = json.loads(FIXTURE.read_text())
    html = render(dtctl, tmp_path, FIXTURE)
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert html.count("<svg") == 2
    with_metrics = [t for t in ex["trials"] if any("val_loss" in m for m in t["metrics"])]
    finished = [t for t in ex["trials"] if t["state"] in ("COMPLETED", "PRUNED")]
    assert svg(html, "curves").count("<polyline") == len(with_metrics)
    assert svg(html, "parallel").count("<polyline") == len(finished)
    assert svg(html, "curves").count('stroke-dasharray="5 3"') >= \
        sum(t["state"] == "PRUNED" for t in ex["trials"])
    best = re.search(r'<table id="best">.*?<tbody>\s*<tr data-t="(\d+)"', html, re.S)
    assert best and int(best.group(1)) == ex["best"]["trial"]
    assert len(re.findall(r"<tr data-t=", html.split('<table id="trials"')[1])) == len(ex["trials"])
    # no network: the only URL is the SVG namespace
    assert set(re.findall(r"https?://[^\s\"'<>)]*", html)) == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"<(link|img|iframe)\b|@import|url\((?!#)", html)
    # deterministic
    assert render(dtctl, tmp_path, FIXTURE, "again.html") == html


def test_escaping_and_errors(dtctl, tmp_path):
    ex = make_export(6, 5)
    ex["trials"][0]["params"]["optimizer"] = "<script>alert(1)</script>"
    ex["sweep"]["name"] = "a&b \"<i>\""
    html = render(dtctl, tmp_path, ex)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<i>" not in html and "a&amp;b &quot;&lt;i&gt;&quot;" in html
    assert html.count("<script>") == 1          # the hover script only

    bad = make_export(3, 3)
    bad["trials"][2]["metrics"] = {"epoch": 1}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    r = dtctl("sweep-report-file", p, "-o", tmp_path / "bad.html")
    assert r.returncode == 1 and "'trials[2].metrics'" in r.stderr, r.stderr
    assert not (tmp_path / "bad.html").exists()
    p.write_text("{\"protocol\": 1,")
    r = dtctl("sweep-report-file", p)
    assert r.returncode == 1 and "line 1" in r.stderr and r.stdout == ""


def test_size_200_trials(dtctl, tmp_path):
    ex = make_export(200, 30, seed=3, spread=3.0)
    html = render(dtctl, tmp_path, ex)
    assert len(html.encode()) < 300 * 1024, "expected < 300 KiB, got %d bytes" % len(html)
    assert "val_loss (log)" in svg(html, "curves"), "expected a log y-scale for > 2 decades"


# --------------------------------------------------------------------------- screenshot

def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB/RGBA PNG."""
    try:
        from PIL import Image
        im = Image.open(path).convert("RGB")
        w, h = im.size
        px = list(im.getdata())
        return w, h, [px[y * w:(y + 1) * w] for y in range(h)]
    except ImportError:
        pass
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and not interlace
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def chart_regions(w, h, rows):
    """Bounding boxes (x0, y0, x1, y1) of the bands of rows holding a wide run of the
    plot-area background colour: one per chart, top to bottom."""
    def is_bg(p):
        return all(abs(p[i] - PLOT_BG[i]) <= 2 for i in range(3))
    bands, cur = [], None
    for y in range(h):
        xs = [x for x in range(0, w, 2) if is_bg(rows[y][x])]
        if len(xs) > 150:
            if cur and y - cur[3] <= 3:
                cur[:] = [min(cur[0], xs[0]), cur[1], max(cur[2], xs[-1]), y]
            else:
                cur = [xs[0], y, xs[-1], y]
                bands.append(cur)
        # short gaps (a horizontal line drawn across) keep the band open
    return [tuple(b) for b in bands if b[3] - b[1] > 150]


def ink(rows, box):
    """(pixels that are neither white, background nor grey, distinct coloured hues)."""
    x0, y0, x1, y1 = box
    n, hues = 0, set()
    for y in range(y0, y1 + 1):
        for x in range(x0, x1 + 1):
            r, g, b = rows[y][x]
            if max(r, g, b) - min(r, g, b) < 24:    # white, background, grid, text
                continue
            n += 1
            hues.add((r >> 4, g >> 4, b >> 4))
    return n, len(hues)


@pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                    reason="no %s (scripts/deps.sh installs chromium)" % CHROMIUM)
def test_screenshot(dtctl, tmp_path):
    render(dtctl, tmp_path, FIXTURE)
    shot = Path(os.environ.get("SWEEP_REPORT_SHOT") or tmp_path / "page.png")
    profile = tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", "--force-color-profile=srgb", "--hide-scrollbars",
           "--user-data-dir=" + profile, "--screenshot=" + str(shot), "--window-size=1400,2200",
           "file://" + str(tmp_path / "page.html")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert shot.exists(), "chromium wrote no screenshot (exit %d): %s" % (r.returncode,
                                                                         r.stderr[-2000:])
    w, h, rows = read_png(shot)
    assert (w, h) == (1400, 2200)
    boxes = chart_regions(w, h, rows)
    assert len(boxes) == 2, "expected 2 chart plot areas, found %r" % (boxes,)
    for name, box, want_px, want_hues in (("curves", boxes[0], 3000, 8),
                                          ("parallel", boxes[1], 3000, 8)):
        n, hues = ink(rows, box)
        assert n >= want_px, "%s: expected >= %d coloured pixels, got %d" % (name, want_px, n)
        assert hues >= want_hues, "%s: expected >= %d line colours, got %d" % (name, want_hues,
                                                                              hues)
    shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    json.dump(make_export(24, 20), sys.stdout, indent=1)
    sys.stdout.write("\n")
