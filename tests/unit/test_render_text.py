"""Text from bundles (labels, workload names) can hold anything: it must not
drive the terminal nor break a Markdown table."""

from __future__ import annotations

import io
import re

from noisescope.analysis.compare import compare
from noisescope.render.compare import markdown, print_comparison
from noisescope.render.text import SafeConsole, md_escape, visible

from .test_compare import bench_bundle

HOSTILE = "<script>alert(1)</script>|x\ny\x1b[2J*_`\\"


def hostile_comparison():
    return compare([bench_bundle(HOSTILE, [1.0, 1.1, 1.2, 1.0, 1.05], workload=HOSTILE),
                    bench_bundle("b", [1.3, 1.4, 1.35, 1.5, 1.45], workload=HOSTILE)])


def test_visible_writes_control_characters_out():
    assert visible("a\x1b[2Jb\x07\rc\td\ne") == "a\\x1b[2Jb\\x07\\x0dc d\ne"
    assert visible("\x9b31m") == "\\x9b31m"  # C1 control sequence introducer


def test_markdown_cells_keep_the_table_whole():
    md = markdown(hostile_comparison())
    assert "<script>" not in md and "&lt;script&gt;" in md and "\x1b" not in md
    tables = re.findall(r"(?:^\|.*\|$\n?)+", md, flags=re.M)
    assert tables
    for table in tables:
        cells = {len(re.findall(r"(?<!\\)\|", line)) for line in table.splitlines()}
        assert len(cells) == 1, table  # every row has the header's columns
    assert not re.search(r"^y", md, flags=re.M)  # no row broken by the label's newline
    assert md_escape(HOSTILE).count("\n") == 0


def test_terminal_output_shows_control_characters_as_escapes():
    console = SafeConsole(file=io.StringIO(), force_terminal=True, width=300)
    print_comparison(hostile_comparison(), console)
    text = console.file.getvalue()
    assert "\x1b[2J" not in text and "\\x1b[2J" in text
    assert "\x1b[1m" in text  # rich's own styling still reaches the terminal
