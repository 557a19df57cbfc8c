"""Pieces every command uses: consoles, progress on stderr, parsing helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..bundle import MANIFEST, Bundle, load
from ..errors import UsageError, unit_free
from ..render.terminal import print_bundle
from ..render.text import SafeConsole
from ..trace.siblings import OccupancyOptions
from ..units import format_duration

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

# Wide enough for the summary tables when output goes to a file or a pipe.
PIPE_WIDTH = 120
stdout = SafeConsole(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)
stderr = SafeConsole(stderr=True, highlight=False,
                     width=None if sys.stderr.isatty() else PIPE_WIDTH)


# Library options whose flag is not their name without its unit (see flag()).
_FLAGS = {"buffer_kb": "--trace-buffer", "fifo_priority": "--fifo", "message_bytes": "--bytes",
          "output": "-o", "replace": "--force"}


def flag(name: str, example: str | None = None) -> str:
    """A library option (errors.option) as the command line spells it:
    duration_ns -> --duration, with its example value after it."""
    spelled = _FLAGS.get(name) or "--" + unit_free(name).replace("_", "-")
    return spelled if example is None else f"{spelled} {example}"


def plain_stdout() -> None:
    """Plain text at pipe width on stdout: mpirun hands ranks a pseudo-terminal even
    when its own output goes to a file."""
    global stdout
    stdout = SafeConsole(highlight=False, width=PIPE_WIDTH, color_system=None)


def refuse_empty_values(command: click.Command) -> click.Command:
    """Make every text option and argument of `command` (and of its subcommands)
    refuse an empty string: '' would otherwise read as 'not given' (--cpus ''
    measuring every CPU, -o '' the default directory). A COMMAND to run (bench)
    is passed on as it is."""
    for param in command.params:
        if isinstance(param.type, (click.types.StringParamType, click.Path)):
            param.type = NotEmpty(param.type)
    for sub in getattr(command, "commands", {}).values():
        refuse_empty_values(sub)
    return command


class NotEmpty(click.ParamType):
    """A text or path type that refuses '' (click.Path would read it as '.')."""

    def __init__(self, inner: click.ParamType):
        self.inner = inner
        self.name = inner.name

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("must not be empty", param, ctx)
        return self.inner.convert(value, param, ctx)

    def get_metavar(self, *args, **kwargs):
        return self.inner.get_metavar(*args, **kwargs)


def expand(paths: tuple[str, ...]) -> list[Path]:
    """Bundle directories, and directories holding bundles (`noisescope run` output:
    probes-before/, runs/, probes-after/)."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if (path / MANIFEST).is_file() or not path.is_dir():
            found.append(path)  # load() says what is wrong with a non-bundle
            continue
        inner = sorted(p for p in path.iterdir() if (p / MANIFEST).is_file())
        if not inner:
            raise UsageError(f"{path} is not a noisescope bundle and holds none",
                             "give bundle directories (written by scan, bench or run)")
        found.extend(inner)
    return found


def load_all(paths: tuple[str, ...]) -> list[Bundle]:
    """Every bundle the paths name (see expand), all loaded before any is used."""
    return [load(path) for path in expand(paths)]


def _shown(print_line):
    """A progress display whose lines may fail to print (a closed terminal, a
    reader gone from the pipe): it goes quiet, the measurement goes on."""
    def show(self, *args) -> None:
        if self.enabled:
            try:
                print_line(self, *args)
            except OSError:
                self.enabled = False
    return show


class Progress:
    """One line per probe on stderr; on a terminal it updates in place."""

    def __init__(self, total_ns: int, enabled: bool = True):
        self.total_ns = total_ns
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.current: str | None = None

    @property
    def live(self) -> bool:
        """Updates while a probe measures only where someone watches them."""
        return self.enabled and self.tty

    @_shown
    def __call__(self, probe: str, fraction: float) -> None:
        if probe != self.current:
            self.current = probe
            if not self.tty:
                print(f"{probe}: measuring {format_duration(self.total_ns)} ...", file=sys.stderr,
                      flush=True)
        if self.tty:
            done = format_duration(fraction * self.total_ns, precision=2)
            end = "\n" if fraction >= 1.0 else ""
            print(f"\r\x1b[K{probe}: {done} of {format_duration(self.total_ns)}", end=end,
                  file=sys.stderr, flush=True)


def report(bundle: Bundle) -> int:
    """Print a written bundle's summary and where it is; the exit status."""
    print_bundle(bundle, stdout)
    stderr.print(f"bundle: {bundle.path}" + ("" if bundle.complete else " (incomplete)"))
    return 0 if bundle.complete else EXIT_INTERRUPTED


class RunProgress:
    """One line per workload run on stderr; on a terminal it updates in place."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.enabled = True

    @_shown
    def __call__(self, done: int, total: int, step, result) -> None:
        config = f" [{step.configuration.name}]" if step.configuration.name else ""
        kind = "warm-up" if step.warmup else f"run {step.repetition + 1}"
        outcome = format_duration(result.wall_ns) if result.status == "ok" else result.reason
        line = f"{done}/{total} {step.workload.name}{config} {kind}: {outcome}"
        if self.tty:
            end = "\n" if done == total or result.status != "ok" else ""
            print(f"\r\x1b[K{line}", end=end, file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)


def occupancy_options(command):
    """--occupancy/--no-occupancy and --siblings, for bench and run."""
    command = click.option(
        "--siblings", multiple=True, metavar="CPUS",
        help="declare CPUs SMT siblings (repeatable, e.g. --siblings 0,1), instead of the "
             "topology: to try sibling occupancy on a machine without SMT")(command)
    return click.option(
        "--occupancy/--no-occupancy", default=None,
        help="trace what each workload CPU's SMT sibling ran (same workload, idle, foreign); "
             "default: as root where the workload CPUs have siblings")(command)


def occupancy_choice(flag: bool | None, siblings: tuple[str, ...]) -> OccupancyOptions:
    return OccupancyOptions.parse({None: "auto", True: "on", False: "off"}[flag], siblings)
