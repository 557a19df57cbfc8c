"""`noisescope report` and the report `scan` writes: contents, escaping, formats,
bad input, and the HTML opened in a real (headless) browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

import noisescope

from ..browser import Browser, chromium_path

CLI = [sys.executable, "-m", "noisescope"]
LABEL = 'tuned<script>alert("x")</script> & $HZ$ | *node*'


def run(*args, timeout=180, **kwargs):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, measured_cpu):
    """A real scan with injected noise; the CLI writes report.html into it."""
    out = tmp_path_factory.mktemp("scan") / "bundle"
    done = run("scan", "--cpus", str(measured_cpu), "--duration", "1s", "--inject",
               f"333Hz:20us@cpu{measured_cpu}", "--label", LABEL, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert f"report: {out}/report.html" in done.stderr
    assert "Periodic noise sources" in done.stdout
    return out


def figure_count(html: str) -> int:
    return len(re.findall(r"<figure ", html))


def test_scan_report_holds_every_section_and_escapes_the_label(scanned):
    html = (scanned / "report.html").read_text()
    for heading in ("Configuration and host", "System check", "Warnings", "Detours", "Hourglass",
                    "FTQ", "FWQ", "Periodic noise sources"):
        assert heading in html
    for figure in ("detours-time", "detours-histogram", "hourglass", "ftq-series", "fwq-series",
                   "spectrum"):
        assert f'id="figure-{figure}"' in html
    assert "<script>" not in html and "alert(&#34;x&#34;)" in html
    assert "tuned&lt;script&gt;" in html
    assert "injected noise" in html
    assert 'http-equiv="Content-Security-Policy"' in html
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing external to load


@pytest.mark.skipif(chromium_path() is None, reason="needs Chromium (Debian package chromium)")
def test_report_in_headless_chromium_loads_every_figure_and_nothing_else(scanned):
    html = (scanned / "report.html").read_text()
    with Browser(chromium_path()) as browser:
        browser.open((scanned / "report.html").as_uri())
        images = browser.images()
        title = browser.evaluate("document.title")
        requested = browser.requested_urls
    assert len(images) == figure_count(html) >= 6
    assert all(i["complete"] and i["width"] > 400 and i["height"] > 100 for i in images), images
    assert all(url.startswith(("file:", "data:")) for url in requested), requested
    assert title.startswith("noisescope report: tuned<script>")  # shown as text, not run


@pytest.mark.skipif(chromium_path() is None, reason="needs Chromium (Debian package chromium)")
def test_the_browser_check_sees_a_network_fetch(tmp_path):
    """Control: a page that does load from the network is caught by the same check."""
    page = tmp_path / "page.html"
    page.write_text('<html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    with Browser(chromium_path()) as browser:
        browser.open(page.as_uri())
        images = browser.images()
        requested = browser.requested_urls
    assert "http://127.0.0.1:9/x.png" in requested
    assert images[0]["width"] == 0


def test_several_bundles_are_compared(scanned, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(scanned, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["label"] = "baseline"
    (other / "manifest.json").write_text(json.dumps(manifest))
    done = run("report", str(other), str(scanned), "-o", str(tmp_path / "compare.html"))
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "compare.html").read_text()
    assert 'id="comparison"' in html and 'id="figure-compare-noise"' in html
    assert 'id="figure-compare-detours"' in html
    assert "baseline: " in html  # per-bundle tables are named
    assert html.count("<th>baseline</th>") >= 2  # configuration and system check side by side


def test_markdown_and_png_formats(scanned, tmp_path):
    done = run("report", str(scanned), "--format", "md", "-o", str(tmp_path / "r.md"))
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "r.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert len(links) >= 6 and all((tmp_path / link).is_file() for link in links)
    assert "<script>" not in text and "&lt;script&gt;" in text and r"\| \*node\*" in text
    done = run("report", str(scanned), "--format", "png", "-o", str(tmp_path / "figs"))
    assert done.returncode == 0, done.stderr
    pngs = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert len(pngs) == len(links) and all(p.endswith(".png") for p in pngs)
    assert (tmp_path / "figs" / pngs[0]).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("damage, words", [
    (None, "does not exist"),
    ("manifest", "is corrupt"),
    ("table", "is unreadable"),
])
def test_bad_bundle_is_one_line_exit_2_and_writes_nothing(scanned, tmp_path, damage, words):
    bundle = tmp_path / "b"
    if damage:
        shutil.copytree(scanned, bundle)
        target = bundle / ("manifest.json" if damage == "manifest" else "ftq.parquet")
        target.write_bytes(b"\x00garbage")
    out = tmp_path / "out"
    out.mkdir()
    done = run("report", str(scanned), str(bundle), "-o", str(out / "r.html"))
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and str(bundle) in lines[0], done.stderr
    assert list(out.iterdir()) == []


def test_report_of_a_bundle_without_spectra_computes_them(scanned, tmp_path):
    """Bundles written before spectra existed still get the spectrum section."""
    old = tmp_path / "old"
    shutil.copytree(scanned, old)
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["summaries"]["spectrum"], manifest["tables"]["spectrum"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    (old / "spectrum.parquet").unlink()
    from noisescope.render.report import build_report

    report = build_report([noisescope.load(old)])
    assert "spectrum" in [s.key for s in report.sections]
    assert [f.key for f in report.figures].count("spectrum") == 1


def test_unwritable_output_is_one_line_exit_2(scanned, tmp_path):
    for output in (tmp_path, tmp_path / "missing" / "r.html"):  # a directory; no directory
        done = run("report", str(scanned), "-o", str(output))
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "cannot write" in done.stderr
    assert list(tmp_path.iterdir()) == []
