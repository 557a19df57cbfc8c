"""Text from bundles made safe where it is shown: labels, workload and task
names, host facts may hold anything, and must neither drive a terminal nor
break a Markdown document."""

from __future__ import annotations

import html
import re

from rich.console import Console
from rich.segment import Segment

# C0 controls but newline, DEL and C1 controls: ESC starts terminal commands,
# CR and backspace overwrite what was printed.
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """Control characters written out as escapes ('\\x1b'), tabs as a space."""
    return _CONTROL.sub(lambda m: " " if m.group() == "\t" else f"\\x{ord(m.group()):02x}",
                        str(text))


def md_escape(text: str) -> str:
    """Text from a bundle, safe inside Markdown (no HTML, no table breaks, no emphasis,
    no control characters)."""
    escaped = html.escape(visible(text).replace("\\", "\\\\"), quote=False)
    escaped = escaped.replace("|", "\\|").replace("\n", " ")
    for mark in "`*_[]#":
        escaped = escaped.replace(mark, "\\" + mark)
    return escaped


class SafeConsole(Console):
    """A rich Console that prints control characters inside text as escapes: only
    rich's own styling reaches the terminal as commands."""

    def render(self, renderable, options=None):
        for segment in super().render(renderable, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text), segment.style)
