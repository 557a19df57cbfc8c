/* The attribution's replays of one CPU's trace events, in time order: the
 * switches the trace missed (trace/switches.py) and the timeline of handler
 * contexts and tasks (trace/attribute.py), whose docstrings hold the rules.
 * Python decides what each event does once per distinct event name, text and
 * command, and hands in int64 arrays; no strings here, no Python API. */
#ifndef NOISESCOPE_REPLAY_H
#define NOISESCOPE_REPLAY_H

#include <stdint.h>

/* -- switches.complete_switches -- */

/* What an event is to the switches' replay. */
enum ns_switch_event {
    NS_SWITCH_OTHER = 0,
    NS_SWITCH_HANDLER_ENTRY = 1, /* a hard or soft interrupt handler begins */
    NS_SWITCH_HANDLER_EXIT = 2,
    NS_SWITCH_WAKEUP = 3, /* sched_wakeup: woken[i] is the task it woke */
};

/* One CPU's events and switches, and where the inferred switches go. A task's
 * command is never copied, only named by where it was read: the text of event
 * i is command i, switch j's prev_comm n_events + j, its next_comm
 * n_events + n_switches + j. */
struct ns_switch_replay {
    int64_t n_events;
    const int64_t *event_ts, *event_what, *event_pid, *woken; /* woken: pids of wakeups */
    int64_t n_switches;
    const int64_t *switch_ts, *prev_pid, *next_pid;
    const int64_t *order; /* n_events + n_switches: i < n_events event i, else switch i - n_events */
    /* out: the switches inferred (at most n_events + n_switches); commands as above */
    int64_t *out_ts, *out_prev_pid, *out_prev_comm, *out_next_pid, *out_next_comm;
};

/* The switches inferred, in the order found (-1: out of memory). */
int64_t ns_replay_switches(const struct ns_switch_replay *r);

/* -- attribute.build_timeline -- */

/* The items of the merged stream: events, switches (recorded or inferred),
 * and the overlays (activity known by its end and length) opening and closing. */
enum ns_timeline_item {
    NS_ITEM_EVENT = 0,
    NS_ITEM_SWITCH = 1,
    NS_ITEM_OVERLAY_ENTRY = 2,
    NS_ITEM_OVERLAY_EXIT = 3,
};

/* What an event does to the CPU's stack of open handlers. Every event first
 * closes a page fault on top of the stack (a fault lasts until the next event);
 * all but SKIP then mark the timeline at the event's time. */
enum ns_timeline_action {
    NS_ACT_SKIP = 0,        /* its class is taken from osnoise events */
    NS_ACT_MARK = 1,        /* nothing else */
    NS_ACT_PUSH = 2,        /* open (kind, key) labelled `value` */
    NS_ACT_PUSH_HARD = 3,   /* a hard IRQ: its label may follow the hrtimers it runs */
    NS_ACT_PUSH_TIMER = 4,  /* the timer interrupt: a hard IRQ named by its hrtimers */
    NS_ACT_POP = 5,         /* close the innermost (kind, key) and all above it */
    NS_ACT_HRTIMER = 6,     /* the innermost hard IRQ runs hrtimer function `value` */
    NS_ACT_OWNER_WAKEUP = 7, /* the span owner is woken */
};

/* Handler kinds fixed here; Python numbers the others (IRQs, softirqs, vectors) from 2. */
enum { NS_KIND_FAULT = 0, NS_KIND_OVERLAY = 1 };

/* One CPU's merged stream and what each item does. Labels are indices into the
 * caller's list of candidate labels; first_use[l] (-1 on entry) gets the order
 * in which label l was first given to a context, for the caller to number its
 * labels in that order. */
struct ns_timeline_replay {
    int64_t n_items;
    const int64_t *item_kind, *item_ref; /* in replay order; ref: row of its table */
    const int64_t *event_ts, *action, *kind, *key, *value;
    const int64_t *switch_ts, *switch_task, *switch_pid, *owner_sleeps; /* sleeps: 0/1 */
    const int64_t *overlay_start, *overlay_end, *overlay_label, *overlay_timer;
    /* per hrtimer function f, and f = n_functions for an owner woken before any */
    const int64_t *function_tick, *function_label, *function_own_label;
    int64_t n_functions, n_labels, tick_label;
    int64_t task, pid; /* current before the first switch */
    /* out: segments (at most n_items + 1), context labels, owner wakeups and
     * sleeps (at most n_items each), first_use (n_labels) */
    int64_t *segment_start, *segment_context, *segment_task, *segment_pid, *segment_since;
    int64_t *context_label, *wakeups, *sleeps, *first_use;
    int64_t segments, contexts, n_wakeups, n_sleeps; /* counts written */
};

/* 0, or -1 when out of memory. */
int ns_replay_timeline(struct ns_timeline_replay *r);

/* -- attribute._split: each span's time among its causes -- */

/* One CPU's timeline (from replay_timeline: segment 0 begins at INT64_MIN,
 * labels resolved, -1 for none) and spans in order of their start, each
 * overlapping segments first[i]..last[i]. A piece is a span's part of one
 * segment; its cause is the innermost handler (a page fault only when the
 * span's owner faulted), else another task's thread when that task holds the
 * CPU (`foreign`), else noise injected meanwhile, else unexplained.
 * Spans of the running task (woken_at NULL): the owner is owner[i], and a
 * task is foreign when it was switched in during the span. A sleeper's spans
 * (woken_at[i]: when span i's owner became runnable): every task but the
 * owner and the idle task is foreign once the owner was woken; before that
 * its time is `before_wakeup`, the idle task's `cpu_idle`. */
struct ns_span_split {
    int64_t n_segments;
    const int64_t *segment_start, *segment_label, *segment_task, *segment_pid, *segment_since;
    int64_t n_spans;
    const int64_t *start, *end, *first, *last, *owner, *woken_at; /* woken_at may be NULL */
    int64_t n_labels;
    const int64_t *is_fault, *explains, *rank; /* per label: 0/1, 0/1, its place in order */
    int64_t n_tasks;
    const int64_t *thread_label; /* per task: the label of its thread's time */
    int64_t no_guest, outside, cpu_idle, before_wakeup, unexplained; /* fallback labels */
    /* injected noise: n_injected sets of merged intervals, set j the rows
     * injected_rows[j]..injected_rows[j + 1] of injected_start/_length/_before
     * (the length of the set's intervals before each), labelled injected_label[j] */
    int64_t n_injected;
    const int64_t *injected_label, *injected_rows, *injected_start, *injected_length,
        *injected_before;
    /* out: one row (span, label, ns) per cause with time in a span, a span's
     * in the order its causes first come (room for every piece and every
     * injected set of every span); primary[i], span i's explained cause with
     * the most time (of equal times the least rank), else `unexplained` */
    int64_t *out_span, *out_label, *out_ns, *primary;
};

enum { NS_IDLE_PID = 0 }; /* the idle task's pid */

/* The rows written (-1: out of memory). */
int64_t ns_split_spans(const struct ns_span_split *r);

#endif
