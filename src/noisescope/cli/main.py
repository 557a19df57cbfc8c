"""Entry point: the click group, and the error policy every command shares.

User errors (UsageError, bad options) print one line and exit 2; Ctrl-C
exits 130 after the command has saved what it measured; SIGTERM is treated
like Ctrl-C so that a killed run also keeps its data and restores settings.
"""

from __future__ import annotations

import os
import signal
import sys

# Arrow's default allocator (mimalloc) keeps ~15 MB of arenas after writing a
# bundle; the system allocator is plenty for our tables. Read at pyarrow import.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

import click

from .. import __version__
from ..errors import UsageError
from .bench import bench_command
from .cleanup import cleanup_command
from .cluster import cluster_group
from .common import EXIT_INTERRUPTED, EXIT_USAGE
from .compare import compare_command
from .explain import explain_command
from .importing import import_command
from .inject import inject_command
from .predict import export_trace_command, predict_command
from .report import report_command
from .run import run_command
from .scan import scan_command
from .show import show_command
from .system import system_group
from .timerlat import timerlat_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="noisescope")
def cli():
    """Measure operating-system noise on Linux CPUs, explain it, compare
    configurations and predict its cost at scale."""


cli.add_command(scan_command, "scan")
cli.add_command(show_command, "show")
cli.add_command(inject_command, "inject")
cli.add_command(timerlat_command, "timerlat")
cli.add_command(import_command, "import")
cli.add_command(bench_command, "bench")
cli.add_command(run_command, "run")
cli.add_command(compare_command, "compare")
cli.add_command(predict_command, "predict")
cli.add_command(export_trace_command, "export-trace")
cli.add_command(explain_command, "explain")
cli.add_command(cleanup_command, "cleanup")
cli.add_command(cluster_group, "cluster")
cli.add_command(system_group, "system")
cli.add_command(report_command, "report")


def _terminate(signum, frame):
    raise KeyboardInterrupt


def _fail(message: str) -> int:
    print(f"noisescope: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    try:
        status = cli.main(args=argv, prog_name="noisescope", standalone_mode=False)
    except UsageError as error:
        return _fail(str(error))
    except click.exceptions.NoArgsIsHelpError as error:
        print(error.ctx.get_help() if error.ctx else str(error))
        return EXIT_USAGE
    except click.UsageError as error:
        command = error.ctx.command_path if error.ctx else "noisescope"
        return _fail(f"{error.format_message()}; see '{command} --help'")
    except click.ClickException as error:
        return _fail(error.format_message())
    except (KeyboardInterrupt, click.exceptions.Abort):
        print("noisescope: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    if status == EXIT_INTERRUPTED:
        print("noisescope: interrupted; kept what was measured", file=sys.stderr)
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
