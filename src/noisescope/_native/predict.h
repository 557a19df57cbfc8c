/* The prediction engine's inner loops: noise replay on a trace axis and the LogGP
 * rounds of the recursive-doubling allreduce (analysis/predict/replay.py and
 * loggp.py describe the model; these loops are its only implementation). */
#ifndef NS_PREDICT_H
#define NS_PREDICT_H

#include <stdint.h>

/* replay.TraceAxis: every trace's detours on one global time axis. */
struct ns_trace_axis {
    const int64_t *starts;     /* detours + 1: sorted starts, a sentinel "never" last */
    const int64_t *ends;       /* detours + 1: start + duration, the sentinel last */
    const int64_t *cumulative; /* detours + 1: summed durations of the detours before i */
    const int64_t *first;      /* per bucket of 2^bucket_shift ns: first start >= its edge */
    int64_t detours;
    int bucket_shift;
    int max_steps; /* bucket walk steps before a binary search */
    const int64_t *origin, *span, *total; /* per trace: block origin, span, summed detours */
    int64_t shortest_span;
};

/* replay.NoiseReplay: per process, where it is on the axis and its next detour. */
struct ns_replay {
    struct ns_trace_axis axis;
    int64_t *shift;            /* axis time = simulated time + shift */
    int64_t *next_start;       /* first detour at or after its last busy window's end */
    const int64_t *trace_of;   /* trace of each process; NULL with a single trace */
};

/* loggp.SimulatedMachine: the clocks of every process. */
struct ns_machine {
    int64_t *ready;
    int64_t *next_send, *next_receive; /* NULL when the gap can never bind (g <= 2 o) */
    struct ns_replay *noise;           /* NULL: noise-free */
    int64_t latency, overhead, gap, transfer;
};

/* Noise charged to windows [at[i], at[i] + busy) (axis times in their block's first
 * period) of a trace of `span` with `total` summed detours: every detour starting
 * inside, plus the rest of one in progress at the start if in_progress. */
void ns_trace_windows(const struct ns_trace_axis *axis, const int64_t *at, int64_t count,
                      int64_t busy, int64_t span, int64_t total, int in_progress,
                      int64_t *noise);

/* end[i] = end of the busy window [start[i], start[i] + busy) of process first + i. */
void ns_replay_finish(struct ns_replay *replay, const int64_t *start, int64_t *end,
                      int64_t count, int64_t first, int64_t busy);

/* Every process computes for `length` ns from its ready time, with `threads` threads. */
void ns_machine_compute(struct ns_machine *machine, int64_t procs, int64_t length, int threads);

/* The log2(power) exchange rounds of recursive doubling among slots [0, power):
 * in cache-sized blocks of `block` slots within groups of `group` slots, then
 * the rounds between groups on tiles of `group` slots, with `threads` threads. */
void ns_allreduce_rounds(struct ns_machine *machine, int64_t power, int64_t block,
                         int64_t group, int threads);

#endif
