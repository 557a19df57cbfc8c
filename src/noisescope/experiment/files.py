"""Experiment files (TOML): read them into an `Experiment`; every mistake is a
UsageError naming the file, the line and the key."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import UsageError, unit_free
from ..placement import Placement
from ..probes import PROBES, Injection
from ..units import parse_cpu_list, parse_positive_duration
from ..workload import Metric, Workload
from .model import Configuration, Experiment, ProbePlan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


class _Where:
    """Names a place in an experiment file for error messages: file:line, section, key."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.lines = text.splitlines()

    def line_of(self, section: str, index: int | None, key: str | None) -> int | None:
        """Line of `key` inside the index-th [[section]] (or [section]); best effort."""
        header = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"' -]+?)\s*\]\]?")
        count, inside, block_start = -1, section == "", None
        for number, line in enumerate(self.lines, 1):
            found = header.match(line)
            if found:
                name = found.group(1).strip("\"' ")
                if name == section:
                    count += 1
                    inside = index is None or count == index
                    if inside:
                        block_start = number
                elif not name.startswith(section + "."):
                    inside = False
                continue
            if inside and key and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
                return number
            if inside and key and re.search(rf"[{{,]\s*[\"']?{re.escape(key)}[\"']?\s*=", line):
                return number
        return block_start

    def error(self, problem: str, hint: str, section: str, index: int | None,
              key: str | None) -> UsageError:
        line = self.line_of(section, index, key)
        at = f"{self.path}:{line}" if line else str(self.path)
        return UsageError(f"{at}: {problem}", hint)

    def from_library(self, error: UsageError, section: str, index: int | None, *,
                     key: str | None = None, table: dict | None = None) -> UsageError:
        """A library error about a value of this file, its options said as the
        file's keys; its line is that of `key`, or of the key of `table` it names."""
        said = error.said_as(file_key)
        culprit = _culprit(table, said) if table is not None else key
        return self.error(said.problem, said.hint or "", section, index, culprit)


# Library options whose key in an experiment file is not their name without its unit.
_KEYS = {"fifo_priority": "fifo"}


def file_key(name: str, example: str | None) -> str:
    """An option as an experiment file spells it: timeout_ns -> timeout = "10m"."""
    key = _KEYS.get(name) or unit_free(name)
    if example is None:
        return key
    return f"{key} = {example}" if re.fullmatch(r"-?\d+", example) else f'{key} = "{example}"'


_TYPE_NAMES = {int: "an integer", str: "a string", bool: "true or false", list: "a list",
               dict: "a table"}


def _check_table(table: dict, allowed: dict[str, tuple[type, ...]], where: _Where, section: str,
                 index: int | None, title: str) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise where.error(f"unknown key {key!r} in {title}",
                              f"known keys: {', '.join(sorted(allowed))}", section, index, key)
        kinds = allowed[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(_TYPE_NAMES[k] for k in kinds)
            raise where.error(f"{key} in {title} must be {wanted}, not {value!r}",
                              f"e.g. {_EXAMPLES.get(key, key + ' = ...')}", section, index, key)


_EXAMPLES = {"runs": "runs = 10", "warmup": "warmup = 1", "timeout": 'timeout = "10m"',
             "command": 'command = ["xz", "-9", "file"]', "shell": 'shell = "make -j2"',
             "cpus": 'cpus = "0-3"', "ncpus": "ncpus = 4", "layout": 'layout = "spread"',
             "fifo": "fifo = 50", "inject": 'inject = ["1kHz:20us@cpu1"]',
             "metrics": 'metrics = { tps = "tps: ([0-9.]+)" }', "env": 'env = { OMP_NUM_THREADS = "4" }',
             "before": 'before = ["detour"]', "after": 'after = ["detour"]',
             "duration": 'duration = "5s"', "name": 'name = "compile"', "cwd": 'cwd = "src"',
             "order": 'order = "interleaved"', "core_scheduling": "core_scheduling = true",
             "smt": 'smt = "off"'}

_SECTIONS = {"experiment": dict, "probes": dict, "workload": list, "configuration": list}
_EXPERIMENT_KEYS = {"name": (str,), "runs": (int,), "warmup": (int,), "timeout": (str, int, float),
                    "order": (str,)}
_PROBE_KEYS = {"before": (list,), "after": (list,), "duration": (str, int, float),
               "cpus": (str, int)}
_WORKLOAD_KEYS = {"name": (str,), "command": (list,), "shell": (str,), "cwd": (str,),
                  "env": (dict,), "metrics": (dict,)}
_CONFIGURATION_KEYS = {"name": (str,), "cpus": (str, int), "ncpus": (int,), "layout": (str,),
                       "fifo": (int,), "core_scheduling": (bool,), "inject": (list,),
                       "env": (dict,), "smt": (str,)}
_METRIC_KEYS = {"pattern": (str,), "better": (str,)}


def load_experiment(path: str | os.PathLike[str]) -> Experiment:
    """Read an experiment file; every mistake is a UsageError naming file, line and key."""
    file = Path(path)
    try:
        text = file.read_text()
    except OSError as error:
        raise UsageError(f"cannot read experiment file {file}: {error.strerror}",
                         "check the path") from None
    except UnicodeDecodeError:
        raise UsageError(f"experiment file {file} is not text (not UTF-8)",
                         "give a TOML file, see docs/examples/run.md") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{file}: not valid TOML: {error}", "fix the syntax at that line") from None
    where = _Where(file, text)
    base = file.resolve().parent
    for key, value in data.items():
        if key not in _SECTIONS:
            raise where.error(f"unknown section {key!r}", "sections: [experiment], [probes], "
                              "[[workload]], [[configuration]]", key, None, None)
        if not isinstance(value, _SECTIONS[key]):
            shape = f"[[{key}]]" if _SECTIONS[key] is list else f"[{key}]"
            raise where.error(f"{key} must be written as {shape}", "see docs/examples/run.md",
                              key, None, None)
    settings = data.get("experiment", {})
    _check_table(settings, _EXPERIMENT_KEYS, where, "experiment", None, "[experiment]")
    probes = data.get("probes", {})
    _check_table(probes, _PROBE_KEYS, where, "probes", None, "[probes]")
    workloads = tuple(_workload(entry, i, where, base)
                      for i, entry in enumerate(data.get("workload", [])))
    configurations = tuple(_configuration(entry, i, where)
                           for i, entry in enumerate(data.get("configuration", [])))

    try:
        plan = ProbePlan(
            before=_probe_names(probes.get("before", []), where, "before"),
            after=_probe_names(probes.get("after", []), where, "after"),
            duration_ns=parse_positive_duration(probes.get("duration", "5s"),
                                                what="probe duration"),
            cpus=parse_cpu_list(str(probes["cpus"])) if "cpus" in probes else None)
    except UsageError as error:
        raise where.from_library(error, "probes", None, table=probes) from None
    try:
        return Experiment(
            workloads=workloads, configurations=configurations or (Configuration(),),
            runs=settings.get("runs", 10), warmup=settings.get("warmup", 1),
            timeout_ns=parse_positive_duration(settings.get("timeout", "10m"), what="timeout"),
            order=settings.get("order", "interleaved"), probes=plan,
            name=settings.get("name"), source=str(file))
    except UsageError as error:
        raise where.from_library(error, "experiment", None, table=settings) from None


def _culprit(table: dict, error: UsageError) -> str | None:
    """The key of `table` an error message is about (for its line number): one
    the message names, else one whose value it quotes."""
    text = str(error).lower()
    named = [key for key in table if re.search(rf"\b{re.escape(key.lower())}\b", text)]
    quoted = [key for key, value in table.items()
              if isinstance(value, (str, int)) and f"{value}".lower() in text]
    return next(iter(named + quoted), None)


def _probe_names(names: list, where: _Where, key: str) -> tuple[str, ...]:
    for name in names:
        if name not in PROBES:
            raise where.error(f"unknown probe {name!r} in [probes] {key}",
                              f"choose from {', '.join(PROBES)}", "probes", None, key)
    return tuple(names)


def _workload(entry: dict, index: int, where: _Where, base: Path) -> Workload:
    title = f"[[workload]] {index + 1}"
    _check_table(entry, _WORKLOAD_KEYS, where, "workload", index, title)
    if ("command" in entry) == ("shell" in entry):
        raise where.error(f"{title} needs either command (a list) or shell (a string)",
                          _EXAMPLES["command"], "workload", index, None)
    command = entry.get("command")
    if command is not None and (not command or not all(isinstance(a, str) for a in command)):
        raise where.error(f"command in {title} must be a non-empty list of strings",
                          _EXAMPLES["command"], "workload", index, "command")
    argv = tuple(command) if command is not None else (entry["shell"],)
    name = entry.get("name") or os.path.basename(argv[0].split()[0] if argv[0].split() else "x")
    metrics = []
    for metric_name, spec in entry.get("metrics", {}).items():
        if isinstance(spec, dict):
            _check_table(spec, _METRIC_KEYS, where, "workload", index,
                         f"metric {metric_name} of {title}")
            pattern, better = spec.get("pattern"), spec.get("better", "higher")
        else:
            pattern, better = spec, "higher"
        if not isinstance(pattern, str):
            raise where.error(f"metric {metric_name} of {title} needs a pattern (a string)",
                              _EXAMPLES["metrics"], "workload", index, metric_name)
        try:
            metrics.append(Metric(metric_name, pattern, better))
        except UsageError as error:
            raise where.from_library(error, "workload", index, key=metric_name) from None
    env = _env(entry, where, "workload", index, title)
    cwd = entry.get("cwd")
    try:
        return Workload(name, argv, shell="shell" in entry,
                        cwd=str(base / cwd) if cwd is not None else str(base),
                        env=env, metrics=tuple(metrics))
    except UsageError as error:
        raise where.from_library(error, "workload", index) from None


def _configuration(entry: dict, index: int, where: _Where) -> Configuration:
    title = f"[[configuration]] {index + 1}"
    _check_table(entry, _CONFIGURATION_KEYS, where, "configuration", index, title)
    if "name" not in entry:
        raise where.error(f"{title} has no name", 'e.g. name = "packed"', "configuration",
                          index, None)
    try:
        placement = Placement(
            cpus=parse_cpu_list(str(entry["cpus"])) if "cpus" in entry else None, ncpus=entry.get("ncpus"),
            layout=entry.get("layout", "packed"), fifo_priority=entry.get("fifo", 0),
            core_scheduling=entry.get("core_scheduling", False))
        injections = tuple(Injection.parse(str(spec), default_mode="thread")
                           for spec in entry.get("inject", []))
        configuration = Configuration(entry["name"], placement, injections, smt=entry.get("smt"))
    except UsageError as error:
        raise where.from_library(error, "configuration", index, table=entry) from None
    return replace(configuration, env=_env(entry, where, "configuration", index, title))


def _env(entry: dict, where: _Where, section: str, index: int,
         title: str) -> tuple[tuple[str, str], ...]:
    """The `env` table of a workload or configuration: text values only."""
    env = entry.get("env", {})
    if not all(isinstance(v, str) for v in env.values()):
        raise where.error(f"env values in {title} must be strings", _EXAMPLES["env"], section,
                          index, "env")
    return tuple(env.items())
