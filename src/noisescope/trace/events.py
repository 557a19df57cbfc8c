"""Kernel trace events as tables: which tracepoints noisescope records, and
two readers that turn a trace into the same tables.

- `decode_raw`: the binary per-CPU ring-buffer pages (`trace_pipe_raw`),
  decoded with the kernel's own format descriptions (`events/*/*/format`,
  `events/header_page`); the cheaper reader, and the only one with full
  nanosecond precision for nanosecond trace clocks (see docs/benchmarks.md).
- `parse_text`: the kernel's text rendering (`trace` file); used where the
  raw page layout is not the one this decoder knows, and for hand-written
  trace fixtures.

Both give a `TraceEvents`: an `events` table (every event except
sched_switch) and a `switches` table (sched_switch), timestamps converted
by the caller's `to_ns` onto the bundle's timeline.

events columns: cpu, timestamp_ns, event (tracepoint name), pid (the task
the event interrupted or ran in), number, name. What `number` and `name`
hold depends on the event (see `TRACEPOINTS`): the vector, IRQ number or
softirq vector and its name, a function (hrtimer, workqueue item, NMI
handler), a page fault's error code, an osnoise event's duration, or the
pid and command of a woken or newly forked task.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import numpy as np

from .. import _native
from ..tables import Table, dictionary_codes, objects

SOFTIRQ_NAMES = ("HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED",
                 "HRTIMER", "RCU")
# x86 interrupt vectors with entry/exit tracepoints (irq_vectors system).
IPI_VECTORS = ("reschedule", "call_function", "call_function_single", "irq_work")
OTHER_VECTORS = ("x86_platform_ipi", "thermal_apic", "threshold_apic", "deferred_error_apic",
                 "error_apic", "spurious_apic")
LOCAL_TIMER = "local_timer"

ToNs = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Tracepoint:
    system: str
    name: str
    number: str | None = None  # format field stored in the `number` column
    label: str | None = None  # format field stored in the `name` column
    label_kind: str = "string"  # "string", "symbol" (a kernel address) or "softirq" (a vector)

    @property
    def path(self) -> str:
        return f"{self.system}/{self.name}"


def _vector_events(vectors: Iterable[str]) -> list[Tracepoint]:
    return [Tracepoint("irq_vectors", f"{v}_{edge}", number="vector")
            for v in vectors for edge in ("entry", "exit")]


SCHED_SWITCH = Tracepoint("sched", "sched_switch")
# Who was woken (number: pid, name: comm), in the context of the task the
# wakeup interrupted: tells a timer interrupt that woke the measuring thread
# from one that woke another task.
SCHED_WAKEUP = Tracepoint("sched", "sched_wakeup", number="pid", label="comm")
# A new task (number: child pid, name: child comm), in the forking task's
# context; recorded only where the tasks of a process tree are needed (SMT
# occupancy of a workload), not by scans.
SCHED_FORK = Tracepoint("sched", "sched_process_fork", number="child_pid", label="child_comm")
HRTIMER_EXPIRE = Tracepoint("timer", "hrtimer_expire_entry", label="function", label_kind="symbol")
TRACEPOINTS: tuple[Tracepoint, ...] = (
    *_vector_events((LOCAL_TIMER, *IPI_VECTORS, *OTHER_VECTORS)),
    Tracepoint("irq", "irq_handler_entry", number="irq", label="name"),
    Tracepoint("irq", "irq_handler_exit", number="irq"),
    Tracepoint("irq", "softirq_entry", number="vec", label="vec", label_kind="softirq"),
    Tracepoint("irq", "softirq_exit", number="vec", label="vec", label_kind="softirq"),
    Tracepoint("nmi", "nmi_handler", number="delta_ns", label="handler", label_kind="symbol"),
    Tracepoint("exceptions", "page_fault_user", number="error_code"),
    Tracepoint("exceptions", "page_fault_kernel", number="error_code"),
    # Which hrtimer a local timer interrupt ran: the tick or someone's wakeup.
    HRTIMER_EXPIRE,
    Tracepoint("workqueue", "workqueue_execute_start", label="function", label_kind="symbol"),
    Tracepoint("workqueue", "workqueue_execute_end", label="function", label_kind="symbol"),
    # The osnoise tracer's own accounting, where the kernel has it and the
    # tracer runs: noise already split by source, with durations.
    Tracepoint("osnoise", "irq_noise", number="duration", label="desc"),
    Tracepoint("osnoise", "softirq_noise", number="duration", label="vector", label_kind="softirq"),
    Tracepoint("osnoise", "nmi_noise", number="duration"),
    Tracepoint("osnoise", "thread_noise", number="duration", label="comm"),
    SCHED_WAKEUP,
    SCHED_SWITCH,
)
BY_NAME = {tp.name: tp for tp in (*TRACEPOINTS, SCHED_FORK)}
SWITCH_COLUMNS = ("cpu", "timestamp_ns", "prev_comm", "prev_pid", "prev_prio", "prev_state",
                  "next_comm", "next_pid", "next_prio")
EVENT_COLUMNS = ("cpu", "timestamp_ns", "event", "pid", "number", "name")

# sched_switch prev_state letters as the kernel prints them (4.14+); a
# format's own print fmt overrides this when it lists its flags.
DEFAULT_STATE_FLAGS = ((0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"),
                       (0x20, "Z"), (0x40, "P"), (0x80, "I"))


@dataclass
class TraceEvents:
    """Decoded trace: `events` (all but sched_switch) and `switches` tables."""

    events: Table
    switches: Table
    in_order: bool = False  # both tables one CPU's, in time order (a decoded batch): read
    # by slicing, never sorted

    @classmethod
    def empty(cls) -> TraceEvents:
        return cls(_event_table([], [], [], [], [], []), _switch_table({}), True)

    @classmethod
    def concat(cls, parts: Iterable[TraceEvents]) -> TraceEvents:
        """The parts joined; in order if they are and follow one another (then
        never sorted again: a CPU's consecutive batches, as a read joins them)."""
        parts = list(parts)
        if not parts:
            return cls.empty()
        if len(parts) == 1:
            return parts[0]
        return cls(Table.concat(p.events for p in parts), Table.concat(p.switches for p in parts),
                   all(p.in_order for p in parts) and _one_after_another(parts))

    def sorted(self) -> TraceEvents:
        """Ordered by CPU, then time (stable: equal times keep buffer order)."""
        if self.in_order:
            return self
        return TraceEvents(_sort(self.events), _sort(self.switches))

    def read(self, cpu: int, start_ns: int, end_ns: int) -> TraceEvents:
        """Events of one CPU with start_ns <= time <= end_ns, in time order."""
        if self.in_order:
            return TraceEvents(*(_slice(t, cpu, start_ns, end_ns) for t in (self.events,
                                                                             self.switches)), True)
        return TraceEvents(_between(self.events, cpu, start_ns, end_ns),
                           _between(self.switches, cpu, start_ns, end_ns)).sorted()

    def event_names(self) -> set[str]:
        names = set(dictionary_codes(self.events["event"])[1]) if self.events.rows else set()
        return names | ({SCHED_SWITCH.name} if self.switches.rows else set())


def _one_after_another(parts: list[TraceEvents]) -> bool:
    """Whether parts each in order (one CPU's, by time) are, one after the
    other, one CPU's in time order: the same CPU, no table's times going back."""
    cpus = set()
    for name in ("events", "switches"):
        tables = [table for table in (getattr(p, name) for p in parts) if table.rows]
        cpus.update(int(table["cpu"][0]) for table in tables)
        if any(int(a["timestamp_ns"][-1]) > int(b["timestamp_ns"][0])
               for a, b in pairwise(tables)):
            return False
    return len(cpus) <= 1


def _between(table: Table, cpu: int, start_ns: int, end_ns: int) -> Table:
    ts, cpus = table["timestamp_ns"], table["cpu"]
    if table.rows and cpus[0] == cpu == cpus[-1] and _in_order(table):
        return _slice(table, cpu, start_ns, end_ns)
    return table.filter((cpus == cpu) & (ts >= start_ns) & (ts <= end_ns))


def _slice(table: Table, cpu: int, start_ns: int, end_ns: int) -> Table:
    """The rows of a table of one CPU's rows in time order that `_between` picks:
    a slice, no copy."""
    if not table.rows or table["cpu"][0] != cpu:
        return table.filter(slice(0, 0))
    ts = table["timestamp_ns"]
    return table.filter(slice(np.searchsorted(ts, start_ns, side="left"),
                              np.searchsorted(ts, end_ns, side="right")))


def _in_order(table: Table) -> bool:
    """Whether the rows are ordered by CPU, then time (as `_sort` orders them)."""
    cpu_steps, ts_steps = np.diff(table["cpu"]), np.diff(table["timestamp_ns"])
    return bool(((cpu_steps > 0) | ((cpu_steps == 0) & (ts_steps >= 0))).all())


def _sort(table: Table) -> Table:
    if table.rows == 0 or _in_order(table):
        return table
    order = np.lexsort((table["timestamp_ns"], table["cpu"]))
    return Table({name: values[order] for name, values in table.items()})


class _Interner:
    """One str object per distinct value, so object columns cost a pointer a row."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        return self._seen.setdefault(text, text)


def _event_table(cpu, ts, event, pid, number, name) -> Table:
    return Table({
        "cpu": np.asarray(cpu, np.int32),
        "timestamp_ns": np.asarray(ts, np.int64),
        "event": np.asarray(event, dtype=object),
        "pid": np.asarray(pid, np.int32),
        "number": np.asarray(number, np.int64),
        "name": np.asarray(name, dtype=object),
    })


def _switch_table(columns: dict) -> Table:
    types = {"cpu": np.int32, "timestamp_ns": np.int64, "prev_comm": object, "prev_pid": np.int32,
             "prev_prio": np.int32, "prev_state": object, "next_comm": object,
             "next_pid": np.int32, "next_prio": np.int32}
    return Table({name: np.asarray(columns.get(name, []), dtype=types[name])
                  for name in SWITCH_COLUMNS})


def prev_state_text(value: int, flags: tuple[tuple[int, str], ...] = DEFAULT_STATE_FLAGS) -> str:
    """The kernel's letters for a sched_switch prev_state ('R', 'S', 'D', 'R+', ...)."""
    mask = 0
    for bit, _ in flags:
        mask |= bit
    preempted = (max(bit for bit, _ in flags) << 1)
    letters = "|".join(letter for bit, letter in flags if value & mask & bit) or "R"
    return letters + ("+" if value & preempted else "")


# -- format files ------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    signed: bool
    data_loc: bool  # __data_loc: u32 holding (length << 16 | offset) of a string
    array: bool = False  # fixed-size array, e.g. char comm[16]


@dataclass(frozen=True)
class EventFormat:
    name: str
    id: int
    fields: dict[str, Field]
    print_fmt: str = ""

    def state_flags(self) -> tuple[tuple[int, str], ...]:
        pairs = re.findall(r'\{\s*(0x[0-9a-fA-F]+|\d+)\s*,\s*"(\w)"\s*\}', self.print_fmt)
        return tuple((int(v, 0), letter) for v, letter in pairs) or DEFAULT_STATE_FLAGS


_FIELD = re.compile(r"field:(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
                    r"\s*signed:(?P<signed>\d+);")


def parse_format(text: str) -> EventFormat:
    name = re.search(r"^name:\s*(\S+)", text, re.M)
    ident = re.search(r"^ID:\s*(\d+)", text, re.M)
    if not name or not ident:
        raise ValueError("not an event format description (no name or ID)")
    fields = {}
    for match in _FIELD.finditer(text):
        decl = match.group("decl").strip()
        field_name = re.sub(r"\[.*\]$", "", decl.split()[-1])
        fields[field_name] = Field(field_name, int(match.group("offset")), int(match.group("size")),
                                   match.group("signed") == "1", decl.startswith("__data_loc"),
                                   decl.endswith("]") and not decl.startswith("__data_loc"))
    fmt = re.search(r"^print fmt:\s*(.*)$", text, re.M)
    return EventFormat(name.group(1), int(ident.group(1)), fields, fmt.group(1) if fmt else "")


@dataclass(frozen=True)
class PageLayout:
    """Where the page timestamp, commit word and data sit in a ring-buffer page."""

    timestamp_offset: int = 0
    commit_offset: int = 8
    commit_size: int = 8
    data_offset: int = 16
    page_size: int = 4096


def parse_header_page(text: str, page_size: int | None = None) -> PageLayout:
    fields = {m.group("decl").split()[-1]: (int(m.group("offset")), int(m.group("size")))
              for m in _FIELD.finditer(text.replace("field: ", "field:"))}
    try:
        timestamp, commit, data = fields["timestamp"], fields["commit"], fields["data"]
    except KeyError as missing:
        raise ValueError(f"header_page has no {missing} field") from None
    return PageLayout(timestamp[0], commit[0], commit[1], data[0],
                      page_size or data[0] + data[1])


# -- raw ring-buffer pages -----------------------------------------------------

@dataclass
class RawRecords:
    """Where each record's payload starts in `data`, and its time stamp."""

    data: bytes
    offsets: np.ndarray
    timestamps: np.ndarray
    missed_pages: int = 0  # pages flagged by the kernel as following lost events


def walk_pages(data: bytes, layout: PageLayout) -> RawRecords:
    """Every data record on the pages in `data` (a whole number of pages),
    found by the native core (`_native/pages.c`: the record types are there)."""
    # a record takes at least 4 bytes: room for every record the pages can hold
    room = (len(data) // layout.page_size + 1) * (layout.page_size // 4)
    offsets, stamps = np.empty(room, np.int64), np.empty(room, np.uint64)
    found, missed = _native.walk_pages(data, (layout.timestamp_offset, layout.commit_offset,
                                              layout.commit_size, layout.data_offset,
                                              layout.page_size), offsets, stamps)
    return RawRecords(data, offsets[:found].copy(), stamps[:found].copy(), missed)


class Symbols:
    """Kernel function names for addresses, from /proc/kallsyms (root sees them)."""

    def __init__(self, kallsyms: str | Path = "/proc/kallsyms"):
        self.kallsyms = Path(kallsyms)
        self._names: dict[int, str] = {}

    def resolve(self, addresses: Iterable[int]) -> dict[int, str]:
        addresses = list(addresses)
        wanted = {a for a in addresses if a and a not in self._names}
        if wanted:
            prefixes = {f"{address:016x}": address for address in wanted}
            try:
                with open(self.kallsyms) as lines:  # line by line: the file is megabytes
                    for line in lines:
                        address = prefixes.get(line[:16])
                        if address is not None and address not in self._names:
                            parts = line.split()
                            if len(parts) >= 3:
                                self._names[address] = parts[2]
            except OSError:
                pass
            for address in wanted - self._names.keys():  # not there: do not look again
                self._names[address] = f"0x{address:x}"
        return {a: self._names.get(a, f"0x{a:x}") for a in addresses}


# How the text of a decoded key is made (the native decoder's key tags).
_TAG_STRING, _TAG_SYMBOL, _TAG_SOFTIRQ, _TAG_STATE = range(4)
_U64 = (1 << 64) - 1
# The fields the native decoder takes of each record, in its order.
_EVENT_FIELDS = ("pid", "number", "name")
_SWITCH_FIELDS = ("prev_pid", "prev_prio", "prev_state", "next_pid", "next_prio", "prev_comm",
                  "next_comm")


def _int_field(field: Field | None) -> tuple[int, ...]:
    """(kind, offset, size, signed, tag) of a field read as an integer."""
    if field is None or field.array or field.data_loc or field.size not in (1, 2, 4, 8):
        return (_native.FIELD_ABSENT, 0, 0, 0, 0)
    return (_native.FIELD_INT, field.offset, field.size, int(field.signed), 0)


def _key_field(field: Field | None, tag: int) -> tuple[int, ...]:
    """(kind, offset, size, signed, tag) of a field numbered as a key: a string
    (a char array, a __data_loc string) or an integer named by `tag`."""
    if field is None:
        return (_native.FIELD_ABSENT, 0, 0, 0, 0)
    if field.data_loc:
        return (_native.FIELD_DATA_LOC, field.offset, 4, 0, _TAG_STRING)
    if tag == _TAG_STRING or field.array or field.size not in (1, 2, 4, 8):
        return (_native.FIELD_BYTES, field.offset, field.size, 0, _TAG_STRING)
    return (_native.FIELD_INT_KEY, field.offset, field.size, int(field.signed), tag)


def _format_row(fmt: EventFormat) -> list[int]:
    """A format as the native decoder takes it: role, then each field's spec."""
    fields = fmt.fields
    if fmt.name == SCHED_SWITCH.name:
        specs = [_int_field(fields.get("prev_pid")), _int_field(fields.get("prev_prio")),
                 _key_field(fields.get("prev_state"), _TAG_STATE),
                 _int_field(fields.get("next_pid")), _int_field(fields.get("next_prio")),
                 _key_field(fields.get("prev_comm"), _TAG_STRING),
                 _key_field(fields.get("next_comm"), _TAG_STRING)]
        role = _native.ROLE_SWITCH
    else:
        spec = BY_NAME.get(fmt.name, Tracepoint("", fmt.name))
        tag = {"symbol": _TAG_SYMBOL, "softirq": _TAG_SOFTIRQ}.get(spec.label_kind, _TAG_STRING)
        specs = [_int_field(fields.get("common_pid")),
                 _int_field(fields.get(spec.number) if spec.number else None),
                 _key_field(fields.get(spec.label) if spec.label else None, tag)]
        role = _native.ROLE_EVENT
    specs += [(_native.FIELD_ABSENT, 0, 0, 0, 0)] * (_native.RECORD_FIELDS - len(specs))
    return [role, *(value for spec in specs for value in spec)]


class RawDecoder:
    """Decodes raw pages into event tables, one batch of pages at a time (so
    a long recording never sits in memory as raw pages and as tables at once).
    The native core reads every record's fields (`_native/pages.c`) and numbers
    the strings, symbols and states it meets; each distinct one becomes text
    once, and one str object serves every row that holds it."""

    def __init__(self, formats: dict[str, EventFormat], layout: PageLayout, to_ns: ToNs,
                 symbols: Symbols | None = None):
        self.layout = layout
        self.to_ns = to_ns
        self.symbols = symbols or Symbols()
        self.by_id = {fmt.id: fmt for fmt in formats.values()}
        ids = sorted(i for i in self.by_id if 0 <= i < 65536)  # slots in id order
        self._slot_of_id = np.full(65536, -1, np.int16)
        self._slot_of_id[ids] = np.arange(len(ids), dtype=np.int16)
        self._formats = np.array([_format_row(self.by_id[i]) for i in ids], np.int64).reshape(
            len(ids), 1 + 5 * _native.RECORD_FIELDS)
        kinds = self._formats[:, 1::5]  # each field's kind
        self._keys_per_record = max(1, int((kinds >= _native.FIELD_BYTES).sum(axis=1).max(
            initial=0)))
        self._intern = _Interner()  # one str object per distinct text
        self._event_names = objects([self._intern(self.by_id[i].name) for i in ids])
        switch = next((fmt for fmt in self.by_id.values() if fmt.name == SCHED_SWITCH.name), None)
        self._state_flags = switch.state_flags() if switch else DEFAULT_STATE_FLAGS
        self._key_texts: dict[tuple[int, bytes | int], str] = {}
        self.missed_pages = 0  # pages the kernel flagged as following lost events

    def decode(self, cpu: int, pages: bytes) -> TraceEvents:
        """The events on `pages` (a whole number of pages of one CPU) in time
        order; events at the same time by format id, then as recorded."""
        records = walk_pages(pages, self.layout)
        self.missed_pages += records.missed_pages
        events, switches, keys = self._room(len(records.offsets))
        n_events, n_switches, n_keys = _native.decode_records(
            pages, records.offsets, records.timestamps, self._slot_of_id, self._formats, events,
            switches, keys)
        texts = self._texts_of(pages, keys[:, :n_keys])
        return TraceEvents(self._events(cpu, events[:, :n_events], texts),
                           self._switches(cpu, switches[:, :n_switches], texts), in_order=True)

    def _room(self, records: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The native decoder's output arrays (events, switches, keys) with room
        for `records`: new for each batch and gone with it (a decoder lives through
        a scan's attribution). Only what the decoder writes takes memory."""
        rows = 2 + _native.RECORD_FIELDS  # stamp, slot, the fields
        return (np.empty((rows, records), np.int64), np.empty((rows, records), np.int64),
                np.empty((3, self._keys_per_record * records), np.int64))

    def _texts_of(self, pages: bytes, keys: np.ndarray) -> np.ndarray:
        """The text of each key the native decoder numbered (key k at k; 0: none)."""
        found = [(tag, pages[where:where + length] if length >= 0 else where)
                 for tag, where, length in keys.T.tolist()]
        new = [key for key in found if key not in self._key_texts]
        resolved = self.symbols.resolve({value & _U64 for tag, value in new if tag == _TAG_SYMBOL})
        for tag, value in new:
            if tag == _TAG_SYMBOL:
                text = resolved[value & _U64]
            elif tag == _TAG_SOFTIRQ:
                text = softirq_name(value)
            elif tag == _TAG_STATE:
                text = prev_state_text(value, self._state_flags)
            else:
                text = value.decode(errors="replace")
            self._key_texts[(tag, value)] = self._intern(text)
        texts = np.empty(len(found) + 1, dtype=object)
        texts[0] = self._intern("")
        texts[1:] = [self._key_texts[key] for key in found]
        return texts

    def _by_time(self, decoded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The decoded rows in time order (at equal times by format, then as
        recorded), and their times in ns. A CPU's pages are mostly in order
        already: sorted only where they are not."""
        stamps = self.to_ns(decoded[0].view(np.uint64))
        steps = np.diff(stamps)
        if len(steps) and not ((steps > 0).all() or (
                (steps >= 0).all() and (np.diff(decoded[1])[steps == 0] >= 0).all())):
            order = np.lexsort((decoded[1], stamps))
            decoded, stamps = decoded[:, order], stamps[order]
        return decoded, stamps

    def _events(self, cpu: int, decoded: np.ndarray, texts: np.ndarray) -> Table:
        decoded, stamps = self._by_time(decoded)
        slot, (pid, number, name) = decoded[1], decoded[2:2 + len(_EVENT_FIELDS)]
        return _event_table(np.full(len(stamps), cpu, np.int32), stamps, self._event_names[slot],
                            pid, number.copy(), texts[name])

    def _switches(self, cpu: int, decoded: np.ndarray, texts: np.ndarray) -> Table:
        decoded, stamps = self._by_time(decoded)
        fields = dict(zip(_SWITCH_FIELDS, decoded[2:2 + len(_SWITCH_FIELDS)], strict=True))
        for name in ("prev_state", "prev_comm", "next_comm"):
            fields[name] = texts[fields[name]]
        return _switch_table({"cpu": np.full(len(stamps), cpu), "timestamp_ns": stamps, **fields})


def decode_raw(per_cpu_pages: dict[int, bytes], formats: dict[str, EventFormat],
               layout: PageLayout, to_ns: ToNs, symbols: Symbols | None = None) -> tuple[TraceEvents, int]:
    """Decode the raw pages of each CPU; returns the events and how many pages
    the kernel flagged as following lost events."""
    decoder = RawDecoder(formats, layout, to_ns, symbols)
    parts = [decoder.decode(cpu, pages) for cpu, pages in sorted(per_cpu_pages.items())]
    return TraceEvents.concat(parts), decoder.missed_pages


def softirq_name(vector: int) -> str:
    return SOFTIRQ_NAMES[vector] if 0 <= vector < len(SOFTIRQ_NAMES) else str(vector)


# -- text ----------------------------------------------------------------------

_LINE = re.compile(r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+"
                   r"(?:[^\s\d]\S*\s+)?(?P<ts>\d+(?:\.\d+)?):\s+(?P<event>\w+):\s?(?P<fields>.*)$")
_VECTOR = r"vector=(?P<number>-?\d+)"
_NOISE = r"start \S+ duration (?P<number>\d+) ns"
_TEXT_FIELDS = {
    "irq_handler_entry": r"irq=(?P<number>-?\d+) name=(?P<label>.*)",
    "irq_handler_exit": r"irq=(?P<number>-?\d+)",
    "softirq_entry": r"vec=(?P<number>\d+)",
    "softirq_exit": r"vec=(?P<number>\d+)",
    "nmi_handler": r"(?P<label>[^\s(]+)(?:\(\))? delta_ns: (?P<number>-?\d+)",
    "page_fault_user": r".*error_code=(?P<number>0x[0-9a-fA-F]+|\d+)",
    "page_fault_kernel": r".*error_code=(?P<number>0x[0-9a-fA-F]+|\d+)",
    "hrtimer_expire_entry": r".*function=(?P<label>\S+)",
    "workqueue_execute_start": r"work struct [0-9a-fA-Fx]+: function (?P<label>\S+)",
    "workqueue_execute_end": r"work struct [0-9a-fA-Fx]+(?:: function (?P<label>\S+))?",
    "irq_noise": rf"(?P<label>.*):-?\d+ {_NOISE}",
    "softirq_noise": rf"\s*(?P<label>\S+):\d+ {_NOISE}",
    "thread_noise": rf"\s*(?P<label>.*):-?\d+ {_NOISE}",
    "nmi_noise": _NOISE,
    "sched_wakeup": r"comm=(?P<label>.*) pid=(?P<number>\d+) prio=",
    "sched_process_fork": r"comm=.* pid=-?\d+ child_comm=(?P<label>.*) child_pid=(?P<number>\d+)",
}
_SWITCH = re.compile(r"prev_comm=(?P<prev_comm>.*) prev_pid=(?P<prev_pid>-?\d+) "
                     r"prev_prio=(?P<prev_prio>-?\d+) prev_state=(?P<prev_state>\S+) ==> "
                     r"next_comm=(?P<next_comm>.*) next_pid=(?P<next_pid>-?\d+) "
                     r"next_prio=(?P<next_prio>-?\d+)")


@dataclass
class _TextColumns:
    events: list[list] = field(default_factory=lambda: [[] for _ in EVENT_COLUMNS])
    switches: dict[str, list] = field(default_factory=lambda: {n: [] for n in SWITCH_COLUMNS})


def text_timestamp(text: str) -> int:
    """A trace text time stamp as an integer in the trace clock's unit: a
    counter ('4315096455970') as is, seconds ('1662.372007') as nanoseconds."""
    if "." not in text:
        return int(text)
    seconds, fraction = text.split(".")
    return int(seconds) * 1_000_000_000 + int(fraction.ljust(9, "0")[:9])


def parse_text(lines: Iterable[str], to_ns: ToNs) -> TraceEvents:
    """Trace text as printed by the kernel's `trace` file (default options)."""
    patterns = {name: re.compile(p) for name, p in _TEXT_FIELDS.items()}
    vector = re.compile(_VECTOR)
    intern = _Interner()
    out = _TextColumns()
    stamps: list[int] = []
    switch_stamps: list[int] = []
    for line in lines:
        if line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            continue
        name, fields = match.group("event"), match.group("fields")
        cpu, ts = int(match.group("cpu")), text_timestamp(match.group("ts"))
        if name == SCHED_SWITCH.name:
            switch = _SWITCH.match(fields)
            if switch:
                for key in ("prev_comm", "prev_state", "next_comm"):
                    out.switches[key].append(intern(switch.group(key)))
                for key in ("prev_pid", "prev_prio", "next_pid", "next_prio"):
                    out.switches[key].append(int(switch.group(key)))
                out.switches["cpu"].append(cpu)
                switch_stamps.append(ts)
            continue
        spec = BY_NAME.get(name)
        if spec is None:
            continue
        found = (patterns.get(name) or vector).match(fields)
        groups = found.groupdict() if found else {}
        number = int(groups["number"], 0) if groups.get("number") else 0
        label = groups.get("label")
        if spec.label_kind == "softirq":
            label = softirq_name(number) if name.startswith("softirq_e") else label
        for column, value in zip(out.events, (cpu, 0, intern(name), int(match.group("pid")), number,
                                              intern(label or "")), strict=True):
            column.append(value)
        stamps.append(ts)
    out.events[1] = to_ns(np.array(stamps, np.uint64)) if stamps else []
    out.switches["timestamp_ns"] = (to_ns(np.array(switch_stamps, np.uint64)) if switch_stamps
                                    else [])
    return TraceEvents(_event_table(*out.events), _switch_table(out.switches)).sorted()
