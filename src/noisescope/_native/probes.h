/* The native measurement core: plain C, no Python API.
 *
 * A run is a set of sampler threads (one per measured CPU, all running the
 * same probe) plus optional injector threads, all started together and
 * driven through the same window schedule. Every buffer is provided by the
 * caller and touched by the owning thread before the first window, so that
 * nothing inside a window allocates, makes a system call or faults.
 */
#ifndef NOISESCOPE_PROBES_H
#define NOISESCOPE_PROBES_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

enum ns_probe_kind {
    NS_PROBE_DETOUR,
    NS_PROBE_FTQ,
    NS_PROBE_FWQ,
    NS_PROBE_IDLE, /* sleep through the windows: a target for injected signals */
    NS_PROBE_TIMERLAT,
};

/* A caller-provided array of 64-bit values and how many of them are used. */
struct ns_series {
    uint64_t *data;
    size_t capacity;
};

/* The samples a thread hands over while it measures: a ring of pairs that
 * the caller drains as the run goes on (and once more after it). The thread
 * never waits for the caller: a pair that finds no free slot is counted as
 * dropped. `written` counts the pairs stored so far; the thread publishes it
 * through *published after each pair, and the caller says through *taken how
 * many it has copied out (both are slots of the control array). */
struct ns_ring {
    struct ns_series first, second; /* the same capacity */
    uint64_t written, dropped;
    uint64_t written_before_drop; /* `written` when the first pair was dropped */
    volatile int64_t *published, *taken; /* NULL: nobody drains (a buffer that fills once) */
};

static inline void ns_ring_push(struct ns_ring *r, uint64_t first, uint64_t second)
{
    size_t capacity = r->first.capacity;
    uint64_t taken = r->taken ? (uint64_t)__atomic_load_n(r->taken, __ATOMIC_ACQUIRE) : 0;
    if (capacity == 0)
        return;
    if (r->written - taken >= capacity) {
        if (r->dropped++ == 0)
            r->written_before_drop = r->written;
        return;
    }
    size_t slot = (size_t)(r->written % capacity);
    r->first.data[slot] = first;
    r->second.data[slot] = second;
    r->written++;
    if (r->published)
        __atomic_store_n(r->published, (int64_t)r->written, __ATOMIC_RELEASE);
}

/* Detour sampler: tight tick loop, every gap goes into the histogram, gaps
 * at or above `threshold` are stored as (start, length). */
struct ns_detour {
    uint64_t threshold;     /* ticks */
    uint64_t hourglass_cut; /* ticks; Hourglass counts the gaps above it (1 us) */
    uint64_t rare_cut;      /* gaps above this take the slow path (set by the runner) */
    struct ns_ring samples; /* (start, length) of each detour */
    uint64_t *histogram; /* NS_HIST_BINS counters */
    /* results */
    uint64_t detours, lost_ticks, max_gap, hourglass_gaps;
    uint64_t clock_backwards; /* steps where the clock read less than before */
    uint64_t resolution; /* ns_loop_resolution_ticks() on this CPU before the run */
};

/* Fixed time quantum: work units completed in each quantum, absolute deadlines. */
struct ns_ftq {
    uint64_t quantum;    /* ticks */
    uint64_t unit_iters; /* iterations of ns_work_unit per unit */
    struct ns_ring samples; /* (start, work) of each quantum */
    uint64_t sink;
};

/* Fixed work quantum: ticks taken by `work_units` units, repeatedly. */
struct ns_fwq {
    uint64_t work_units, unit_iters;
    struct ns_ring samples; /* (start, duration) of each sample */
    uint64_t sink;
};

/* Timer latency (cyclictest): sleep to absolute CLOCK_MONOTONIC deadlines
 * `interval_ns` apart and record latency = wakeup - deadline. A wakeup at or
 * past the next deadline skips the deadlines it overslept (in this window and,
 * for back-to-back windows, the next) and counts them as missed (cyclictest
 * skips them silently). Every sample goes into the
 * histogram of 1 us buckets (or the overflow count); the series, when given,
 * keeps each latency with the tick count of its wakeup. */
struct ns_timerlat {
    uint64_t interval_ns;
    uint64_t *histogram; /* histogram_buckets counters, bucket k: [k, k+1) us */
    size_t histogram_buckets;
    struct ns_ring series; /* (latency ns, wakeup ticks); optional (capacity 0) */
    /* results */
    uint64_t samples, missed, histogram_overflow;
    uint64_t min_ns, max_ns, sum_ns;
    uint64_t last_wakeup_mono; /* carried from one window to the next */
};

/* Injected noise: busy-wait `length` ticks every `period_ns`. In signal mode
 * a POSIX timer signals the sampler thread and the handler spins; in thread
 * mode a (SCHED_FIFO) thread on the CPU wakes and spins. Every injection
 * records its own start and end ticks: the ground truth for tests. */
struct ns_injection {
    int cpu, priority;
    uint64_t period_ns, length;
    struct ns_series start, end;
    volatile size_t stored;
    volatile uint64_t overflow;
    volatile uint64_t coalesced; /* signal mode: timer expirations merged by the kernel */
    /* thread mode results */
    int error;
    const char *error_stage;
    pid_t tid;
};

/* When the threads measure: `windows` windows of `runtime_ns` each starting
 * `period_ns` apart on CLOCK_MONOTONIC from `start_mono_ns` (the last one
 * `last_runtime_ns` long). runtime == period means back to back. */
struct ns_schedule {
    uint64_t start_mono_ns, runtime_ns, period_ns, last_runtime_ns;
    uint64_t windows;
    double ticks_per_ns;
};

struct ns_thread {
    int cpu, priority; /* priority 0: SCHED_OTHER */
    enum ns_probe_kind kind;
    union {
        struct ns_detour detour;
        struct ns_ftq ftq;
        struct ns_fwq fwq;
        struct ns_timerlat timerlat;
    } probe;
    struct ns_series window_start, window_end; /* ticks of each measured window */
    size_t windows_done;
    struct ns_injection *signal_injection; /* optional */
    /* results */
    int error; /* errno of the failed stage, 0 if fine */
    const char *error_stage;
    pid_t tid;
    uint64_t run_delay_ns;          /* time runnable but not running, from schedstat */
    uint64_t involuntary_switches;  /* from getrusage(RUSAGE_THREAD) */
    uint64_t minor_faults, major_faults;
};

/* Shared between the caller and the threads while a run is going: the stop
 * flag, then NS_CONTROL_STRIDE slots (a cache line) per sampler thread, so
 * that a thread publishing its samples does not slow down the others. */
#define NS_CONTROL_STRIDE 8
enum ns_control_slot {
    NS_SLOT_PROGRESS,  /* windows completed */
    NS_SLOT_PUBLISHED, /* the thread's ring: pairs written */
    NS_SLOT_TAKEN,     /* the thread's ring: pairs the caller copied out */
};
struct ns_control {
    volatile int64_t *stop;    /* set non-zero to end the run at the next check */
    volatile int64_t *threads; /* NS_CONTROL_STRIDE slots per sampler thread */
};

/* The ring a thread's probe fills, NULL for a probe without one. */
struct ns_ring *ns_thread_ring(struct ns_thread *t);

/* Runs the whole thing and returns when every thread has finished. Returns 0,
 * or an errno when the run could not start at all (thread creation). */
int ns_run(struct ns_thread *threads, size_t nthreads, struct ns_injection *injectors,
           size_t ninjectors, const struct ns_schedule *schedule, const struct ns_control *control);

/* Per-window probe loops (detour.c, quantum.c, timerlat.c). `prev` is the tick count
 * the window starts at; they return the tick count at which they stopped. */
void ns_detour_prepare(struct ns_detour *d);
uint64_t ns_detour_window(struct ns_detour *d, uint64_t prev, uint64_t end,
                          volatile int64_t *stop);
uint64_t ns_ftq_window(struct ns_ftq *f, uint64_t begin, uint64_t end, volatile int64_t *stop);
uint64_t ns_fwq_window(struct ns_fwq *f, uint64_t begin, uint64_t end, volatile int64_t *stop);
uint64_t ns_timed_work(uint64_t units, uint64_t unit_iters);
/* Timer latency works on CLOCK_MONOTONIC: deadlines in (begin_mono, end_mono]. */
void ns_timerlat_prepare(struct ns_timerlat *tl);
uint64_t ns_timerlat_window(struct ns_timerlat *tl, uint64_t begin_mono, uint64_t end_mono,
                            volatile int64_t *stop);

/* Helpers used before measuring. */
uint64_t ns_loop_resolution_ticks(uint64_t duration_ticks);
uint64_t ns_min_work_ticks(uint64_t units, uint64_t unit_iters, unsigned repetitions);
/* Ticks per ns against CLOCK_MONOTONIC_RAW; 0 when either clock did not move forward. */
double ns_calibrate_ticks_per_ns(uint64_t duration_ns);

/* Injection in signal mode (inject.c). The handler is shared by every run
 * going on in the process: install it before a run's timers, release it
 * after (the last release puts back what was there before). */
int ns_injection_signal(void);
int ns_signal_injection_install(void);
void ns_signal_injection_release(void);
struct ns_armed_injection {
    timer_t timer;
    uintptr_t key; /* the handler's way back to the injection */
};
/* Called on thread `tid` itself; returns NULL or the failed stage (errno set). */
const char *ns_signal_injection_arm(struct ns_injection *inj, pid_t tid, uint64_t start_mono_ns,
                                    struct ns_armed_injection *armed);
void ns_signal_injection_disarm(struct ns_armed_injection *armed);
/* Thread-mode injector body, called on its own pinned thread. */
void ns_thread_injection_loop(struct ns_injection *inj, uint64_t start_mono_ns,
                              uint64_t end_mono_ns, volatile int64_t *stop);

#endif
