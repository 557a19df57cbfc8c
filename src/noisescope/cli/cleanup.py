"""noisescope cleanup: remove what killed runs left behind, put back the settings they
changed; keep what they measured."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from ..knobs import restore_leftovers
from ..leftovers import sweep
from ..trace import TracingUnavailable, cleanup
from .common import stderr, stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope cleanup                # after a run was killed with SIGKILL (as root for tracefs)
  noisescope cleanup results/       # where its bundle was to go
"""


@click.command(epilog=EXAMPLES)
@click.argument("directories", metavar="[DIRECTORY]...", nargs=-1,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
def cleanup_command(directories):
    """Clean up after noisescope runs that were killed (SIGKILL): their tracefs
    instances (instances/noisescope-PID) and the tracefs mount one of them made;
    in DIRECTORY (default: the current and the temporary directory) their work
    directories (.NAME.trace-PID/, .NAME.partial-PID/). A bundle a killed run
    was writing is not deleted but salvaged: it becomes NAME (NAME-salvaged-PID
    if that is taken), marked incomplete, with the tables it holds whole. Only
    directories marked as made by a process that is gone are touched, never
    another tool's or a running noisescope's; one made on another machine (a
    shared file system) or in another container is listed and left. The
    machine settings such a run had changed (SMT, the osnoise tracer's
    options, tune's IRQ and task affinities) are put back from the journal it
    kept in /run/noisescope; the changes tune --apply kept on purpose are left
    alone (tune --restore puts them back)."""
    lines: list[str] = []
    ok = True
    for directory in directories or (Path("."), Path(tempfile.gettempdir())):
        ok &= sweep(directory, salvage=True, say=lines.append)
    try:
        done, failed = cleanup()
    except (TracingUnavailable, PermissionError) as why:  # without root: what it can
        reason = f"{why.strerror} ({why.filename})" if isinstance(why, PermissionError) else why
        done, failed = [], []
        skipped = f"tracefs not checked for leftovers: {reason}; run noisescope cleanup as root for it"
    else:
        skipped = None
    restored, unrestored = restore_leftovers()
    done += [f"restored {line} (changed by a run that is gone)" for line in restored]
    failed += [f"could not restore {line}" for line in unrestored]
    for line in [*lines, *done, *failed]:
        stdout.print(line, markup=False, highlight=False, soft_wrap=True)
    if not (lines or done or failed):
        stdout.print("nothing to clean up")
    if skipped:
        stderr.print(skipped, markup=False, highlight=False, soft_wrap=True)
    return 1 if failed or not ok else 0
