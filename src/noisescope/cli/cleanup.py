"""noisescope cleanup: remove what killed runs left in tracefs, restore the settings they changed."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..knobs import restore_leftovers
from ..trace import TracingUnavailable, cleanup
from .common import stdout

EXAMPLES = """
\b
EXAMPLES
  noisescope cleanup          # as root; after a run was killed with SIGKILL
"""


@click.command(epilog=EXAMPLES)
def cleanup_command():
    """Remove tracefs instances left by noisescope runs that were killed
    (instances/noisescope-PID whose process is gone), and put back the
    machine settings they had changed (SMT, the osnoise tracer's options),
    from the journal each run keeps in /run/noisescope. Instances and
    settings of other tools and of running noisescope processes are left
    alone."""
    try:
        removed, failed = cleanup()
    except TracingUnavailable as why:
        raise UsageError(f"cannot look for leftover trace instances: {why}",
                         "run noisescope cleanup as root") from None
    except PermissionError as error:
        raise UsageError(f"cannot look for leftover trace instances: {error.strerror} "
                         f"({error.filename})", "run noisescope cleanup as root") from None
    for name in removed:
        stdout.print(f"removed tracefs instance {name} (its process is gone)", markup=False)
    for failure in failed:
        stdout.print(f"could not remove tracefs instance {failure}", markup=False)
    restored, unrestored = restore_leftovers()
    for line in restored:
        stdout.print(f"restored {line} (changed by a run that is gone)", markup=False)
    for failure in unrestored:
        stdout.print(f"could not restore {failure}", markup=False)
    failed += unrestored
    if not removed and not failed and not restored:
        stdout.print("nothing to clean up")
    return 1 if failed else 0
