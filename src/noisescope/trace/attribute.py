"""Split the time of each detour (or any span a CPU was taken away) into causes.

The kernel events of each CPU are replayed into a timeline of segments, each
labelled with what ran: the innermost open handler (local timer, device IRQ,
IPI, softirq, NMI, a page fault) and the task that was current. A span's
owner is the task current when it began (the sampler, for a detour). Every
nanosecond of a span then goes to exactly one cause:

- the innermost handler open at that moment (`tick`, `timer`, `irq`, `ipi`,
  `softirq`, `nmi`; `fault` when the owner faulted);
- otherwise, while another task ran: `thread` (by command name);
- otherwise, inside noise that noisescope injected itself (its injector
  records when each injection ran): `injected` (by mode). A signal
  handler's spin runs in user space in the sampler's own thread, where the
  kernel records nothing; when another task preempts the spin, that task's
  time is its own and the rest of the spin is still `injected`;
- otherwise `unexplained`: the CPU was gone and the guest kernel did nothing
  visible. Detail `no guest activity` when the whole span holds no guest
  activity at all (the hypervisor, firmware/SMI, hardware); `outside guest
  handlers` for the rest of spans that do (interrupt entry and exit, and on
  a VM the host's work to deliver the interrupt).

A span can also belong to a task that is not running when it begins: a
late timer wakeup (timerlat) runs from the deadline to the moment the
sleeping thread got the CPU back. With an owner pid per CPU:

- a local timer interrupt that woke the owner (sched_wakeup of its pid) is
  `timer <function> (own)`: the wakeup's own interrupt, not interference;
- once the owner was woken (or from the start, when no wakeup of it is in
  the span: it was runnable already), every other task's time counts as
  `thread`: the task that kept the CPU (it had a higher priority, or could
  not be preempted) or took it first;
- before that, a task's time outside handlers is `unexplained: before the
  timer interrupt`: the interrupt came late (on a VM, the host delivers it)
  or the task had interrupts disabled; the guest cannot tell which;
- the idle task's time outside handlers is `unexplained: CPU idle` (the
  interrupt came late, or leaving the idle state took that long);
- the events from OWNER_MARGIN_NS before the span are replayed too, so
  that a handler already running at the deadline is seen, and those until
  OWNER_MARGIN_NS after it, which show who had taken the CPU when the
  switch to it is missing (below).

Switches missing from the trace (out of the idle task on some kernels) are
put back first (`switches.complete_switches`).

Spans outside the traced time (before tracing started, or after a CPU's
buffer filled) are `untraced`. A span's primary cause is its explained
cause with the most time (`unexplained` if none; of equal times, the first
(cause, detail) in sorted order).

A local timer interrupt is the `tick` when it ran the tick's hrtimer (or
no hrtimer at all, as periodic ticks do); otherwise it is a `timer` interrupt
named after the hrtimer it ran (e.g. `hrtimer_wakeup`, a sleeping task's
timeout). Page faults have no exit event: a fault lasts until the next event
on its CPU. The osnoise tracer's noise events are used for a class of
activity (IRQ, softirq, NMI, thread) only when the trace has no entry/exit
events of that class; with `osnoise="prefer"` they replace the entry/exit
events of every class they cover but threads (the timeline needs the
switches): the kernel's own accounting, to cross-check the attribution.
An osnoise IRQ is named as its entry event would be (a vector's IPI or
interrupt name, `tick` or `timer` from the hrtimers it ran).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .. import _native
from ..tables import Table, dictionary_codes, factorize, inside_windows
from .events import IPI_VECTORS, LOCAL_TIMER, OTHER_VECTORS
from .osnoise import OSNOISE_CLASSES, osnoise_classes, preferred_osnoise_classes
from .store import EventSource
from .switches import UNKNOWN_STATE, complete_switches, int64_column

CAUSES = ("tick", "timer", "irq", "ipi", "softirq", "nmi", "fault", "thread", "injected",
          "unexplained", "untraced")
NO_GUEST_ACTIVITY = "no guest activity"
OUTSIDE_HANDLERS = "outside guest handlers"
CPU_IDLE = "CPU idle"
BEFORE_WAKEUP = "before the timer interrupt"
OWN_SUFFIX = " (own)"  # a timer interrupt's detail when it woke the span's owner
OWNER_MARGIN_NS = 1_000_000  # events replayed before and after a sleeper's spans
TICK_FUNCTION_PREFIX = "tick_"  # tick_sched_timer, tick_nohz_handler, tick_nohz_highres_handler
IPI_NAMES = {v: v.replace("_", " ") for v in IPI_VECTORS}
VECTOR_IRQ_NAMES = {"x86_platform_ipi": "platform IPI", "thermal_apic": "thermal",
                    "threshold_apic": "MCE threshold", "deferred_error_apic": "deferred error",
                    "error_apic": "APIC error", "spurious_apic": "spurious"}
TIMER_IRQ_NAMES = {"local_timer", "arch_timer"}  # osnoise's name for the timer interrupt
CHUNK_NS = 1_000_000_000  # spans attributed together, with their events read at once


class Labels:
    """(cause, detail) pairs <-> small integers, numbered as they come. Where
    an order among labels shows in a result (a span's causes, a tie for its
    primary cause), it is that of the pairs themselves (`ranks`): the result
    does not depend on which CPUs were numbered together or first."""

    def __init__(self) -> None:
        self.pairs: list[tuple[str, str]] = []
        self._ids: dict[tuple[str, str], int] = {}
        self._ranks = np.zeros(0, np.int32)

    def id(self, cause: str, detail: str = "") -> int:
        key = (cause, detail)
        if key not in self._ids:
            self._ids[key] = len(self.pairs)
            self.pairs.append(key)
        return self._ids[key]

    def ranks(self) -> np.ndarray:
        """Each label's place among all the pairs in sorted order."""
        if len(self._ranks) != len(self.pairs):
            self._ranks = np.empty(len(self.pairs), np.int32)
            self._ranks[sorted(range(len(self.pairs)), key=self.pairs.__getitem__)] = \
                np.arange(len(self.pairs), dtype=np.int32)
        return self._ranks


@dataclass
class Timeline:
    """One CPU's segments: from starts[i] to starts[i+1], `label` (innermost
    handler, -1 for none) ran in task `task` (-1 unknown) with process id
    `pid`, current since `since` (its sched_switch)."""

    starts: np.ndarray
    label: np.ndarray
    task: np.ndarray
    pid: np.ndarray
    since: np.ndarray
    event_times: np.ndarray  # every event on the CPU, in time order
    event_pids: np.ndarray  # the task each event interrupted (a switch: the one leaving)
    owner_wakeups: np.ndarray  # when the owner (if one was given) was woken, in time order
    owner_sleeps: np.ndarray  # when it went to sleep (a switch away from it, not runnable)


# Handler kinds on a CPU's stack, for the native replay to match exits with
# entries (fault and overlay are its own; a vector's entry and exit share one).
_STACK_KINDS = {"irq": 2, "softirq": 3, **{f"vector:{v}": 4 + i for i, v in
                                           enumerate((LOCAL_TIMER, *IPI_VECTORS, *OTHER_VECTORS))}}


def _action(name: str, osnoise: set[str]) -> tuple[int, int, tuple[str, str] | None]:
    """What an event of this name does to the handler stack (replay.h): the
    native replay's action, the kind of handler, and the label it opens (None:
    none, or the event's text names it: irq_handler_entry, softirq_entry)."""
    vector = name.rsplit("_", 1)[0]
    if _native_class(name) in osnoise:
        return _native.ACT_SKIP, 0, None  # osnoise events stand for this class
    if name.endswith("_entry") and vector in IPI_NAMES:
        return _native.ACT_PUSH, _STACK_KINDS[f"vector:{vector}"], ("ipi", IPI_NAMES[vector])
    if name == f"{LOCAL_TIMER}_entry":
        return _native.ACT_PUSH_TIMER, _STACK_KINDS[f"vector:{vector}"], ("tick", "")
    if name.endswith("_entry") and vector in VECTOR_IRQ_NAMES:
        return _native.ACT_PUSH, _STACK_KINDS[f"vector:{vector}"], ("irq", VECTOR_IRQ_NAMES[vector])
    if name.endswith("_exit") and f"vector:{vector}" in _STACK_KINDS:
        return _native.ACT_POP, _STACK_KINDS[f"vector:{vector}"], None
    if name in ("page_fault_user", "page_fault_kernel"):
        return _native.ACT_PUSH, _native.KIND_FAULT, ("fault", name[len("page_fault_"):])
    if name in ("irq_handler_entry", "softirq_entry"):
        return (_native.ACT_PUSH_HARD if name == "irq_handler_entry" else _native.ACT_PUSH,
                _STACK_KINDS[name.split("_")[0]], None)
    if name in ("irq_handler_exit", "softirq_exit"):
        return _native.ACT_POP, _STACK_KINDS[name.split("_")[0]], None
    if name == "hrtimer_expire_entry":
        return _native.ACT_HRTIMER, 0, None
    return _native.ACT_MARK, 0, None  # (a wakeup of the owner: decided by event)


class _EventActions:
    """What each event of one CPU does (`_action`, decided once per distinct
    name, and per distinct text for the labels and hrtimer functions it names),
    as the native replay's arrays. `candidates` numbers the labels the replay
    may give; the caller's Labels number them as the replay first gives them."""

    def __init__(self, events: Table, names: list[str], codes: np.ndarray, osnoise: set[str],
                 owner: int | None, candidates: Labels):
        numbered_kinds = (_STACK_KINDS["irq"], _STACK_KINDS["softirq"])  # keyed by their number
        by_name = np.array([(action, kind, candidates.id(*label) if label else -1,
                             kind in numbered_kinds)
                            for action, kind, label in (_action(name, osnoise) for name in names)],
                           np.int64).reshape(-1, 4)
        # one gather for the four, each a contiguous row of the result
        self.action, self.kind, self.value, numbered = np.take(by_name.T, codes, axis=1)
        self.key = np.where(numbered != 0, events["number"], 0).astype(np.int64)
        texts = events["name"]
        for name, cause in (("irq_handler_entry", "irq"), ("softirq_entry", "softirq")):
            rows = self._rows(names, codes, name)
            if len(rows) and self.action[rows[0]] != _native.ACT_SKIP:  # named by its text
                text_codes, distinct = dictionary_codes(texts[rows])
                self.value[rows] = np.array([candidates.id(cause, t) for t in distinct])[text_codes]
        rows = self._rows(names, codes, "hrtimer_expire_entry")
        self.value[rows], functions = dictionary_codes(texts[rows])
        functions.append("hrtimer")  # the function of a wakeup of the owner before any ran
        self.functions = (
            np.array([f.startswith(TICK_FUNCTION_PREFIX) for f in functions], np.int64),
            np.array([candidates.id("timer", f) for f in functions], np.int64),
            np.array([candidates.id("timer", f + OWN_SUFFIX) for f in functions], np.int64))
        if owner is not None:
            wakeups = self._rows(names, codes, "sched_wakeup")
            self.action[wakeups[events["number"][wakeups] == owner]] = _native.ACT_OWNER_WAKEUP

    @staticmethod
    def _rows(names: list[str], codes: np.ndarray, name: str) -> np.ndarray:
        return np.flatnonzero(codes == names.index(name)) if name in names else np.zeros(0, np.int64)


def _overlays(events: Table, names: list[str], codes: np.ndarray, labels: Labels, osnoise: set[str],
              candidates: Labels) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Activity known by its end and length: NMIs (nmi_handler fires when the
    handler is done) and osnoise events. (event index, start, candidate label,
    whether it is a timer interrupt: its label then follows the hrtimers it
    ran). Their labels are numbered in `labels` first, in the events' order."""
    wanted = [name for name, cls in OSNOISE_CLASSES.items() if cls in osnoise]
    if "nmi" not in osnoise:
        wanted.append("nmi_handler")
    index = np.flatnonzero(np.isin(codes, [names.index(n) for n in wanted if n in names]))
    text_codes, texts = dictionary_codes(events["name"][index])
    pair = codes[index].astype(np.int64) * max(len(texts), 1) + text_codes
    distinct, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    label = np.zeros(len(distinct), np.int64)
    timer = np.zeros(len(distinct), bool)
    for k in np.argsort(first).tolist():  # numbered in the order the events come
        name, text = names[codes[index[first[k]]]], texts[text_codes[first[k]]]
        real, timer[k] = _overlay_label(labels, name, text)
        label[k] = candidates.id(*labels.pairs[real])
    start = events["timestamp_ns"][index] - np.maximum(events["number"][index], 0)
    return index, start, label[inverse.reshape(-1)], timer[inverse.reshape(-1)]


def _overlay_label(labels: Labels, name: str, text: str) -> tuple[int, bool]:
    if name == "nmi_handler":
        return labels.id("nmi", text), False
    cause = OSNOISE_CLASSES[name]
    if cause != "irq":
        return labels.id(cause, text.strip()), False
    vector = text.split(":")[0].strip()
    if vector in TIMER_IRQ_NAMES:
        return labels.id("tick"), True
    if vector in IPI_NAMES:
        return labels.id("ipi", IPI_NAMES[vector]), False
    return labels.id("irq", VECTOR_IRQ_NAMES.get(vector, vector)), False


def _native_class(name: str) -> str | None:
    """The class of activity an entry/exit event belongs to (None: not one)."""
    if name.startswith("irq_handler_"):
        return "irq"
    if name.startswith("softirq_") and name != "softirq_raise":
        return "softirq"
    base = name.rsplit("_", 1)[0]
    if name.endswith(("_entry", "_exit")) and base in (LOCAL_TIMER, *IPI_VECTORS, *OTHER_VECTORS):
        return "irq"
    return None


def _task_ids(switches: Table, tasks: dict[tuple[int, str], int]) -> tuple[int, np.ndarray]:
    """The task current before the first switch, and each switch's next task,
    as ids in `tasks` (new (pid, command) pairs numbered in the order met)."""
    if not switches.rows:
        return -1, np.zeros(0, np.int64)
    pids = np.concatenate([switches["prev_pid"][:1], switches["next_pid"]]).astype(np.int64)
    next_codes, comms = dictionary_codes(switches["next_comm"])  # (the first's command apart:
    first_comm = switches["prev_comm"][0]  # joining the object columns was a copy of them)
    if first_comm not in comms:
        comms.append(first_comm)
    comm_codes = np.concatenate([[comms.index(first_comm)], next_codes])
    codes, first = factorize(pids * len(comms) + comm_codes)  # numbered in the order met
    ids = np.array([tasks.setdefault((int(pids[k]), comms[comm_codes[k]]), len(tasks))
                    for k in first.tolist()], np.int64)
    task = ids[codes]
    return int(task[0]), task[1:]


def _owner_sleeps(switches: Table, owner: int | None) -> np.ndarray:
    """Which switches put the owner to sleep (away from it, not runnable)."""
    sleeps = np.zeros(switches.rows, np.int64)
    if owner is not None:
        mine = np.flatnonzero(switches["prev_pid"] == owner)
        codes, states = dictionary_codes(switches["prev_state"][mine])
        asleep = np.array([s[:1] not in ("R", UNKNOWN_STATE) for s in states], np.int64)
        sleeps[mine] = asleep.reshape(-1)[codes]
    return sleeps


def build_timeline(events: Table, switches: Table, labels: Labels,
                   tasks: dict[tuple[int, str], int], osnoise: set[str],
                   owner: int | None = None) -> Timeline:
    """Replay one CPU's events (both tables restricted to it, each by time),
    with the switches missing from the trace put back: in the native core
    (replay.h), from what each event does decided here once per distinct
    name and text."""
    codes, names = dictionary_codes(events["event"])
    switches = complete_switches(switches, events, (codes, names))
    candidates = Labels()  # what the replay may label a context with
    actions = _EventActions(events, names, codes, osnoise, owner, candidates)
    overlay, overlay_start, overlay_label, overlay_timer = _overlays(events, names, codes, labels,
                                                                     osnoise, candidates)
    first_task, switch_task = _task_ids(switches, tasks)
    ev_ts, sw_ts = int64_column(events["timestamp_ns"]), int64_column(switches["timestamp_ns"])
    overlay_end = ev_ts[overlay]
    # The merged stream in the order items are handled at equal times: overlays
    # end, tasks switch, overlays begin, then the events in the order the kernel
    # recorded them, then the switches inferred (they follow the exit of the
    # handler that woke the task); each group by row.
    inferred = switches["inferred"]
    groups = [(overlay_end, _native.ITEM_OVERLAY_EXIT, np.arange(len(overlay))),
              (sw_ts[~inferred], _native.ITEM_SWITCH, np.flatnonzero(~inferred)),
              (overlay_start, _native.ITEM_OVERLAY_ENTRY, np.arange(len(overlay))),
              (ev_ts, _native.ITEM_EVENT, np.arange(len(ev_ts))),
              (sw_ts[inferred], _native.ITEM_SWITCH, np.flatnonzero(inferred))]
    order = np.argsort(np.concatenate([times for times, _, _ in groups]), kind="stable")
    item_kind = np.repeat([kind for _, kind, _ in groups], [len(t) for t, _, _ in groups])[order]
    item_ref = np.concatenate([refs for _, _, refs in groups])[order]
    items = len(order)
    segments = tuple(np.empty(items + 1, np.int64) for _ in range(5))
    context_labels = np.empty(items, np.int64)
    wakeups, sleeps = np.empty(items, np.int64), np.empty(items, np.int64)
    tick = candidates.id("tick")
    first_use = np.full(len(candidates.pairs), -1, np.int64)
    first_pid = int(switches["prev_pid"][0]) if switches.rows else -1
    count, contexts, woken, slept = _native.replay_timeline(
        (int64_column(item_kind), int64_column(item_ref)),
        (ev_ts, actions.action, actions.kind, actions.key, actions.value),
        (sw_ts, switch_task, int64_column(switches["next_pid"]), _owner_sleeps(switches, owner)),
        (int64_column(overlay_start), int64_column(overlay_end), overlay_label,
         int64_column(overlay_timer)),
        actions.functions, tick, (first_task, first_pid),
        (segments, context_labels, wakeups, sleeps, first_use))
    # the labels the replay gave, numbered in the order it first gave them
    ids = np.full(len(candidates.pairs), -1, np.int32)
    given = np.flatnonzero(first_use >= 0)
    for candidate in given[np.argsort(first_use[given])].tolist():
        ids[candidate] = labels.id(*candidates.pairs[candidate])
    context_labels = np.append(ids[context_labels[:contexts]], np.int32(-1))
    starts, context, task, pid, since = (column[:count] for column in segments)
    times = np.concatenate([ev_ts, sw_ts])
    pids = np.concatenate([events["pid"], switches["prev_pid"]])
    by_time = np.argsort(times, kind="stable")
    return Timeline(starts, context_labels[context], task, pid, since, times[by_time],
                    pids[by_time], wakeups[:woken], sleeps[:slept])


@dataclass
class Attribution:
    """Per span: primary cause and detail, and how many trace events fell in
    it; per (span, cause, detail): the time."""

    primary: Table  # cause, cause_detail, trace_events (same order as the spans)
    causes: Table  # cpu, start_ns, cause, detail, duration_ns

    def annotate(self, spans: Table) -> Table:
        """The spans with the primary columns added."""
        return Table({**spans, **self.primary})


def attribute(spans: Table, trace: EventSource, coverage: Table,
              owners: Mapping[int, int] | None = None, injected: Table | None = None,
              osnoise: str = "fallback", labels: Labels | None = None,
              tasks: dict[tuple[int, str], int] | None = None) -> Attribution:
    """Split each span (cpu, start_ns, duration_ns) into causes.

    `trace` gives the events by CPU and time (in memory or Parquet);
    `coverage` (cpu, start_ns, end_ns) says when each CPU was traced without
    loss; spans not entirely inside it are `untraced`. `owners` (cpu -> pid)
    gives the spans of those CPUs to a task that need not run when they begin
    (late wakeups; see the module's docstring); by default a span belongs to
    the task its first event interrupted. `injected` (cpu, mode, start_ns,
    duration_ns) is the noise noisescope injected meanwhile, as its injector
    recorded it. `osnoise` is "fallback" (the osnoise tracer's events for
    classes without entry/exit events) or "prefer" (for every class they
    cover but threads). The spans of a CPU are taken CHUNK_NS at a time, so
    only their events are in memory. `labels` and `tasks`, if given, are those
    of an earlier call: spans given a run of whole chunks (`chunk_starts`) per
    call, in order, come out as they would from one call with all of them."""
    labels = labels if labels is not None else Labels()
    for cause in CAUSES:
        labels.id(cause)
    tasks = tasks if tasks is not None else {}
    n = spans.rows
    primary = np.full(n, labels.id("untraced"), np.int32)
    event_counts = np.zeros(n, np.int32)
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # span index, label, ns
    if osnoise not in ("fallback", "prefer"):
        raise ValueError(f"osnoise must be 'fallback' or 'prefer', not {osnoise!r}")
    present = trace.event_names()
    osnoise_from = (preferred_osnoise_classes if osnoise == "prefer" else osnoise_classes)(present)
    for cpu in np.unique(spans["cpu"]).tolist():
        owner = (owners or {}).get(cpu)
        margin = OWNER_MARGIN_NS if owner is not None else 0
        injected_here = _injected_on(injected, cpu, labels)
        index = np.flatnonzero(spans["cpu"] == cpu)
        index = index[np.argsort(spans["start_ns"][index], kind="stable")]
        starts = spans["start_ns"][index]
        ends = starts + spans["duration_ns"][index]
        traced = inside_windows(starts, ends, coverage.where(cpu=cpu))
        untraced = index[~traced]
        rows.append((untraced, np.full(len(untraced), labels.id("untraced"), np.int32),
                     spans["duration_ns"][untraced]))
        index, starts, ends = index[traced], starts[traced], ends[traced]
        for chunk in _chunks(starts):
            first, last = int(starts[chunk][0]) - margin, int(ends[chunk].max()) + margin
            part = trace.read(cpu, first, last)
            timeline = build_timeline(part.events, part.switches, labels, tasks, osnoise_from, owner)
            chunk_index, chunk_starts, chunk_ends = index[chunk], starts[chunk], ends[chunk]
            event_counts[chunk_index] = (
                np.searchsorted(timeline.event_times, chunk_ends, side="right")
                - np.searchsorted(timeline.event_times, chunk_starts, side="left"))
            span_rows, label_rows, ns_rows, primary[chunk_index] = _split(
                timeline, chunk_starts, chunk_ends, labels, tasks, owner, injected_here)
            rows.append((chunk_index[span_rows], label_rows, ns_rows))
    span_index = np.concatenate([r[0] for r in rows]) if rows else np.zeros(0, np.int64)
    label_index = np.concatenate([r[1] for r in rows]) if rows else np.zeros(0, np.int32)
    ns = np.concatenate([r[2] for r in rows]) if rows else np.zeros(0, np.int64)
    ranks = labels.ranks()  # by span, then label (one key: a lexsort took six times as long)
    order = np.argsort(span_index.astype(np.int64) * max(len(ranks), 1) + ranks[label_index],
                       kind="stable")
    span_index, label_index, ns = span_index[order], label_index[order], ns[order]
    pairs = np.array(labels.pairs + [("", "")], dtype=object)
    return Attribution(
        Table({"cause": pairs[primary, 0], "cause_detail": pairs[primary, 1],
               "trace_events": event_counts}),
        Table({"cpu": spans["cpu"][span_index].astype(np.int32),
               "start_ns": spans["start_ns"][span_index],
               "cause": pairs[label_index, 0], "detail": pairs[label_index, 1],
               "duration_ns": ns.astype(np.int64)}))


class _Intervals:
    """The union of some (non-empty set of) time intervals: its intervals'
    starts and lengths, and how much of it lies before each (the native
    split measures what of it falls in a piece of a span)."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        reach = np.maximum.accumulate(ends)
        first = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])  # of each merged interval
        self.starts = starts[first]
        self.lengths = np.maximum.reduceat(ends, first) - self.starts
        self.before = np.cumsum(self.lengths) - self.lengths


def _injected_on(injected: Table | None, cpu: int, labels: Labels) -> list[tuple[int, _Intervals]]:
    """The time of the injections on `cpu`, by label (`injected` and the mode)."""
    if injected is None or not injected.rows:
        return []
    on_cpu = injected.where(cpu=cpu)
    starts, modes = on_cpu["start_ns"], on_cpu["mode"]
    return [(labels.id("injected", mode), _Intervals(starts[modes == mode],
                                                     (starts + on_cpu["duration_ns"])[modes == mode]))
            for mode in sorted(set(modes.tolist()))]


def chunk_starts(starts: np.ndarray, origin: int) -> np.ndarray:
    """Where a chunk begins among (sorted) span starts, the chunks counted from
    `origin` (a CPU's first traced span) as `_chunks` counts them."""
    chunk_of = (starts - origin) // CHUNK_NS
    return np.flatnonzero(np.diff(chunk_of)) + 1


def _chunks(starts: np.ndarray) -> list[slice]:
    """Consecutive runs of (sorted) span starts, each within CHUNK_NS.

    Replaying a chunk's events from an empty state is exact: when a span
    begins, its owner is running, so no handler is open on the CPU (a late
    wakeup's owner is asleep: its chunks start OWNER_MARGIN_NS earlier)."""
    if len(starts) == 0:
        return []
    bounds = [0, *chunk_starts(starts, int(starts[0])).tolist(), len(starts)]
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _split(timeline: Timeline, starts: np.ndarray, ends: np.ndarray, labels: Labels,
           tasks: dict[tuple[int, str], int], owner: int | None = None,
           injected: list[tuple[int, _Intervals]] = ()
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(span, label, ns) for every cause with time in each span, and each
    span's primary cause: its explained cause with the most time (of equal
    times, the first label in sorted order), `unexplained` where none.
    `injected`: the time noisescope injected on this CPU, by label; it takes
    what no kernel handler and no other task explains. The rules are the
    module's; the pieces are cut and counted in the native core (replay.h
    ns_split_spans)."""
    seg_starts = timeline.starts
    first = np.searchsorted(seg_starts, starts, side="right") - 1
    last = np.maximum(np.searchsorted(seg_starts, ends, side="left") - 1, first)
    thread_label = np.zeros(len(tasks), np.int64)
    for (_, comm), task in tasks.items():
        thread_label[task] = labels.id("thread", comm)
    if owner is None:
        # The owner (the task the span took the CPU from) is the one its first
        # event interrupted; time is another task's only when that task was
        # switched in during the span (a switch missing from the trace must not
        # leak into later spans).
        first_event = np.searchsorted(timeline.event_times, starts, side="left")
        owners = (timeline.event_pids[np.minimum(first_event, len(timeline.event_pids) - 1)]
                  if len(timeline.event_pids) else np.full(len(starts), -1))
        woken_at = None
    else:  # a sleeper's span: whoever held the CPU once it was woken delayed it
        owners = np.full(len(starts), owner)
        woken_at = _woken_at(timeline, starts, ends)
    no_guest, outside = (labels.id("unexplained", NO_GUEST_ACTIVITY),
                         labels.id("unexplained", OUTSIDE_HANDLERS))
    sleeper = ((labels.id("unexplained", CPU_IDLE), labels.id("unexplained", BEFORE_WAKEUP))
               if owner is not None else (no_guest, no_guest))  # (numbered only when given)
    fallbacks = (no_guest, outside, *sleeper, labels.id("unexplained"))
    causes = [cause for cause, _ in labels.pairs]
    per_label = (np.array([cause == "fault" for cause in causes], np.int64),
                 np.array([cause not in ("unexplained", "untraced") for cause in causes], np.int64),
                 labels.ranks().astype(np.int64))
    sets = [intervals for _, intervals in injected]
    injected_sets = (np.array([label for label, _ in injected], np.int64),
                     np.cumsum([0, *(len(s.starts) for s in sets)], dtype=np.int64))
    intervals = tuple(np.concatenate([np.zeros(0, np.int64), *(getattr(s, name) for s in sets)])
                      .astype(np.int64) for name in ("starts", "lengths", "before"))
    room = int((last - first + 1).sum()) + len(starts) * len(injected)
    out = tuple(np.empty(room, np.int64) for _ in range(3))
    primary = np.empty(len(starts), np.int64)
    rows = _native.split_spans(
        (seg_starts, int64_column(timeline.label), timeline.task, timeline.pid, timeline.since),
        (int64_column(starts), int64_column(ends), first, last, int64_column(owners)), woken_at,
        per_label, thread_label, fallbacks, injected_sets, intervals, out, primary)
    span, label, ns = (column[:rows] for column in out)
    return span, label.astype(np.int32), ns, primary.astype(np.int32)


def _woken_at(timeline: Timeline, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """When each span's owner became runnable: its first wakeup in the span
    if it was asleep at the start (no wakeup since it last went to sleep, or
    nothing known), else (or without a wakeup in the span) the start."""
    never = np.iinfo(np.int64).min
    wakeups, sleeps = timeline.owner_wakeups, timeline.owner_sleeps
    last_wakeup = np.append(never, wakeups)[np.searchsorted(wakeups, starts, side="left")]
    last_sleep = np.append(never, sleeps)[np.searchsorted(sleeps, starts, side="left")]
    next_wakeup = np.append(wakeups, np.iinfo(np.int64).max)[np.searchsorted(wakeups, starts, side="left")]
    asleep = last_wakeup <= last_sleep
    return np.where(asleep & (next_wakeup <= ends), next_wakeup, starts)
