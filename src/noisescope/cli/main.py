"""Entry point: the click group, and the error policy every command shares.

User errors (UsageError, bad options) print one line and exit 2; Ctrl-C
exits 130 after the command has saved what it measured. Every stopping
signal (SIGTERM, SIGHUP, SIGQUIT, ...: `interrupts.STOPPING`) is treated like
Ctrl-C, so that a killed run also keeps its data and restores settings.
"""

from __future__ import annotations

import importlib
import os
import sys

# Arrow's default allocator (mimalloc) keeps ~15 MB of arenas after writing a
# bundle; the system allocator is plenty for our tables. Read at pyarrow import.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

import click

from .. import __version__, interrupts
from ..errors import UsageError
from ..memory import hand_back_large_allocations
from ..render.text import visible
from .common import EXIT_INTERRUPTED, EXIT_USAGE, flag, refuse_empty_values

# Each command's module, imported only when that command runs: a scan does not
# carry the libraries of compare, predict or cluster (about 5 MB of memory).
COMMANDS = {
    "scan": "scan:scan_command",
    "show": "show:show_command",
    "inject": "inject:inject_command",
    "timerlat": "timerlat:timerlat_command",
    "import": "importing:import_command",
    "bench": "bench:bench_command",
    "run": "run:run_command",
    "compare": "compare:compare_command",
    "predict": "predict:predict_command",
    "export-trace": "predict:export_trace_command",
    "explain": "explain:explain_command",
    "cleanup": "cleanup:cleanup_command",
    "cluster": "cluster:cluster_group",
    "system": "system:system_group",
    "report": "report:report_command",
    "tune": "tune:tune_command",
}


class LazyGroup(click.Group):
    """A group whose commands (COMMANDS) are imported on first use; commands
    added with add_command() work as in any group."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        module, attribute = COMMANDS[name].split(":")
        return refuse_empty_values(
            getattr(importlib.import_module(f".{module}", __package__), attribute))


@click.group(cls=LazyGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="noisescope")
def cli():
    """Measure operating-system noise on Linux CPUs, explain it, compare
    configurations and predict its cost at scale."""


def _fail(message: str) -> int:
    """One line, whatever the message quotes (a label, a path) holds."""
    print(f"noisescope: error: {visible(message).replace(chr(10), ' ')}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    hand_back_large_allocations()
    with interrupts.handled():
        try:
            return _run(argv)
        except KeyboardInterrupt:  # another signal while the end was being said
            return EXIT_INTERRUPTED


def _run(argv: list[str] | None) -> int:
    try:
        status = cli.main(args=argv, prog_name="noisescope", standalone_mode=False)
    except UsageError as error:
        return _fail(error.render(flag))
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
    if interrupts.interrupted() and not status:  # came while the measurement was being saved
        status = EXIT_INTERRUPTED
    if status == EXIT_INTERRUPTED:
        print("noisescope: interrupted; kept what was measured", file=sys.stderr)
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
