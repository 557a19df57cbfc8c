/* Thread orchestration: pin, prioritise, pre-touch, start together, run the
 * window schedule, and collect per-thread scheduler statistics. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "histogram.h"
#include "probes.h"

/* How long each detour sampler measures its own loop before the run. */
#define RESOLUTION_CALIBRATION_TICKS (20u * 1000u * 1000u)

/* All threads check in here before the first window; the caller then lets
 * them go (or tells them to give up when a thread could not be created). */
struct start_gate {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    size_t ready;
    enum { GATE_WAIT, GATE_GO, GATE_ABORT } state;
};

struct run {
    struct ns_thread *threads;
    struct ns_injection *injectors;
    size_t nthreads, ninjectors;
    struct ns_schedule schedule;
    const struct ns_control *control;
    struct start_gate gate;
};

struct thread_arg {
    struct run *run;
    size_t index;
};

static int gate_pass(struct start_gate *gate)
{
    pthread_mutex_lock(&gate->lock);
    gate->ready++;
    pthread_cond_broadcast(&gate->changed);
    while (gate->state == GATE_WAIT)
        pthread_cond_wait(&gate->changed, &gate->lock);
    int go = gate->state == GATE_GO;
    pthread_mutex_unlock(&gate->lock);
    return go;
}

static void gate_wait_ready(struct start_gate *gate, size_t expected)
{
    pthread_mutex_lock(&gate->lock);
    while (gate->ready < expected)
        pthread_cond_wait(&gate->changed, &gate->lock);
    pthread_mutex_unlock(&gate->lock);
}

static void gate_open(struct start_gate *gate, int go)
{
    pthread_mutex_lock(&gate->lock);
    gate->state = go ? GATE_GO : GATE_ABORT;
    pthread_cond_broadcast(&gate->changed);
    pthread_mutex_unlock(&gate->lock);
}

static const char *set_up_cpu(int cpu, int priority)
{
    cpu_set_t set;
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
        errno = EINVAL;
        return "sched_setaffinity";
    }
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        return "sched_setaffinity";
    if (priority > 0) {
        struct sched_param param = {.sched_priority = priority};
        if (sched_setscheduler(0, SCHED_FIFO, &param) != 0)
            return "sched_setscheduler(SCHED_FIFO)";
    }
    return NULL;
}

/* Writes every page so no fault can happen inside a window. */
static void touch_series(struct ns_series *series)
{
    if (series->data != NULL)
        memset(series->data, 0, series->capacity * sizeof *series->data);
}

static void touch_stack(void)
{
    volatile char stack[64 * 1024];
    memset((char *)stack, 0, sizeof stack);
}

struct ns_ring *ns_thread_ring(struct ns_thread *t)
{
    switch (t->kind) {
    case NS_PROBE_DETOUR:
        return &t->probe.detour.samples;
    case NS_PROBE_FTQ:
        return &t->probe.ftq.samples;
    case NS_PROBE_FWQ:
        return &t->probe.fwq.samples;
    case NS_PROBE_TIMERLAT:
        return &t->probe.timerlat.series;
    case NS_PROBE_IDLE:
        break;
    }
    return NULL;
}

static void touch_probe(struct ns_thread *t)
{
    if (t->kind == NS_PROBE_DETOUR)
        ns_detour_prepare(&t->probe.detour);
    if (t->kind == NS_PROBE_TIMERLAT)
        ns_timerlat_prepare(&t->probe.timerlat);
    struct ns_ring *ring = ns_thread_ring(t);
    if (ring != NULL) {
        touch_series(&ring->first);
        touch_series(&ring->second);
    }
    touch_series(&t->window_start);
    touch_series(&t->window_end);
    if (t->signal_injection != NULL) {
        touch_series(&t->signal_injection->start);
        touch_series(&t->signal_injection->end);
    }
}

/* Nanoseconds this thread spent runnable but waiting for the CPU. */
static uint64_t read_run_delay_ns(void)
{
    char text[128];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t got = read(fd, text, sizeof text - 1);
    close(fd);
    if (got <= 0)
        return 0;
    text[got] = '\0';
    unsigned long long on_cpu = 0, waiting = 0;
    if (sscanf(text, "%llu %llu", &on_cpu, &waiting) != 2)
        return 0;
    return waiting;
}

struct thread_usage {
    uint64_t run_delay_ns, involuntary, minor, major;
};

static struct thread_usage read_usage(void)
{
    struct rusage usage;
    struct thread_usage now = {.run_delay_ns = read_run_delay_ns()};
    if (getrusage(RUSAGE_THREAD, &usage) == 0) {
        now.involuntary = (uint64_t)usage.ru_nivcsw;
        now.minor = (uint64_t)usage.ru_minflt;
        now.major = (uint64_t)usage.ru_majflt;
    }
    return now;
}

/* Sleeps until `mono_ns`, waking every IDLE_CHECK_NS to honour the stop flag. */
#define IDLE_CHECK_NS 100000000ull
static void idle_until(uint64_t mono_ns, volatile int64_t *stop)
{
    for (uint64_t now = ns_mono_ns(CLOCK_MONOTONIC); now < mono_ns && !*stop;
         now = ns_mono_ns(CLOCK_MONOTONIC))
        ns_sleep_until(mono_ns - now > IDLE_CHECK_NS ? now + IDLE_CHECK_NS : mono_ns);
}

static uint64_t window_runtime(const struct ns_schedule *s, uint64_t window)
{
    return window + 1 == s->windows ? s->last_runtime_ns : s->runtime_ns;
}

static uint64_t measure_window(struct ns_thread *t, const struct ns_schedule *s, uint64_t window,
                               uint64_t begin, volatile int64_t *stop)
{
    uint64_t runtime_ns = window_runtime(s, window);
    uint64_t end = begin + (uint64_t)((double)runtime_ns * s->ticks_per_ns);
    uint64_t begin_mono = s->start_mono_ns + window * s->period_ns;
    switch (t->kind) {
    case NS_PROBE_DETOUR:
        return ns_detour_window(&t->probe.detour, begin, end, stop);
    case NS_PROBE_FTQ:
        return ns_ftq_window(&t->probe.ftq, begin, end, stop);
    case NS_PROBE_FWQ:
        return ns_fwq_window(&t->probe.fwq, begin, end, stop);
    case NS_PROBE_TIMERLAT:
        return ns_timerlat_window(&t->probe.timerlat, begin_mono, begin_mono + runtime_ns, stop);
    case NS_PROBE_IDLE:
        idle_until(begin_mono + runtime_ns, stop);
        return ns_ticks();
    }
    return begin;
}

static void run_windows(struct ns_thread *t, size_t index, const struct ns_schedule *s,
                        const struct ns_control *control)
{
    int back_to_back = s->runtime_ns >= s->period_ns;
    uint64_t last_end = 0;
    for (uint64_t w = 0; w < s->windows && !*control->stop; w++) {
        uint64_t begin;
        if (w > 0 && back_to_back) {
            begin = last_end;
        } else {
            ns_sleep_until(s->start_mono_ns + w * s->period_ns);
            begin = ns_ticks();
        }
        last_end = measure_window(t, s, w, begin, control->stop);
        if (w < t->window_start.capacity && w < t->window_end.capacity) {
            t->window_start.data[w] = begin;
            t->window_end.data[w] = last_end;
        }
        t->windows_done = w + 1;
        control->threads[index * NS_CONTROL_STRIDE + NS_SLOT_PROGRESS] = (int64_t)(w + 1);
    }
}

static const char *probe_name(enum ns_probe_kind kind)
{
    switch (kind) {
    case NS_PROBE_DETOUR:
        return "detour";
    case NS_PROBE_FTQ:
        return "ftq";
    case NS_PROBE_FWQ:
        return "fwq";
    case NS_PROBE_TIMERLAT:
        return "timerlat";
    case NS_PROBE_IDLE:
        return "target";
    }
    return "probe";
}

/* What every thread does first: block signals (all, or all but the
 * injection signal), take its name (so traces can tell it apart), move to
 * its CPU and policy. Returns the failed stage or NULL; sets *tid, *error. */
static const char *thread_begin(const char *role, int cpu, int priority, int allow_injection,
                                pid_t *tid, int *error)
{
    char name[16];
    sigset_t blocked;
    sigfillset(&blocked);
    if (allow_injection)
        sigdelset(&blocked, ns_injection_signal());
    pthread_sigmask(SIG_SETMASK, &blocked, NULL);
    *tid = (pid_t)syscall(SYS_gettid);
    snprintf(name, sizeof name, "ns-%s/%d", role, cpu);
    prctl(PR_SET_NAME, name);
    const char *stage = set_up_cpu(cpu, priority);
    *error = stage != NULL ? errno : 0;
    return stage;
}

static void *sampler_main(void *opaque)
{
    struct thread_arg *arg = opaque;
    struct run *run = arg->run;
    struct ns_thread *t = &run->threads[arg->index];

    t->error_stage = thread_begin(probe_name(t->kind), t->cpu, t->priority,
                                  t->signal_injection != NULL, &t->tid, &t->error);
    /* A SCHED_OTHER sleeper's wakeups are deferred by up to its timer slack
     * (50 us by default) on purpose; that is not latency the OS imposes.
     * (SCHED_FIFO threads have no slack anyway.) */
    if (t->kind == NS_PROBE_TIMERLAT)
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    touch_probe(t);
    touch_stack();
    if (t->kind == NS_PROBE_DETOUR)
        t->probe.detour.resolution = ns_loop_resolution_ticks(RESOLUTION_CALIBRATION_TICKS);
    struct thread_usage before = read_usage();

    if (!gate_pass(&run->gate) || t->error != 0)
        return NULL;

    struct ns_armed_injection armed;
    if (t->signal_injection != NULL) {
        const char *stage = ns_signal_injection_arm(t->signal_injection, t->tid,
                                                    run->schedule.start_mono_ns, &armed);
        if (stage != NULL) {
            t->error = errno;
            t->error_stage = stage;
            return NULL;
        }
    }
    run_windows(t, arg->index, &run->schedule, run->control);
    if (t->signal_injection != NULL)
        ns_signal_injection_disarm(&armed);

    struct thread_usage after = read_usage();
    t->run_delay_ns = after.run_delay_ns - before.run_delay_ns;
    t->involuntary_switches = after.involuntary - before.involuntary;
    t->minor_faults = after.minor - before.minor;
    t->major_faults = after.major - before.major;
    return NULL;
}

static uint64_t schedule_end_ns(const struct ns_schedule *s)
{
    if (s->windows == 0)
        return s->start_mono_ns;
    return s->start_mono_ns + (s->windows - 1) * s->period_ns + s->last_runtime_ns;
}

static void *injector_main(void *opaque)
{
    struct thread_arg *arg = opaque;
    struct run *run = arg->run;
    struct ns_injection *inj = &run->injectors[arg->index];

    inj->error_stage = thread_begin("inject", inj->cpu, inj->priority, 0, &inj->tid, &inj->error);
    touch_series(&inj->start);
    touch_series(&inj->end);
    touch_stack();
    if (!gate_pass(&run->gate) || inj->error != 0)
        return NULL;
    ns_thread_injection_loop(inj, run->schedule.start_mono_ns, schedule_end_ns(&run->schedule),
                             run->control->stop);
    return NULL;
}

int ns_run(struct ns_thread *threads, size_t nthreads, struct ns_injection *injectors,
           size_t ninjectors, const struct ns_schedule *schedule, const struct ns_control *control)
{
    size_t total = nthreads + ninjectors;
    struct run run = {
        .threads = threads,
        .injectors = injectors,
        .nthreads = nthreads,
        .ninjectors = ninjectors,
        .schedule = *schedule,
        .control = control,
        .gate = {.lock = PTHREAD_MUTEX_INITIALIZER,
                 .changed = PTHREAD_COND_INITIALIZER,
                 .state = GATE_WAIT},
    };
    pthread_t *handles = calloc(total, sizeof *handles);
    struct thread_arg *args = calloc(total, sizeof *args);
    if (handles == NULL || args == NULL) {
        free(handles);
        free(args);
        return ENOMEM;
    }

    int uses_signals = 0;
    for (size_t i = 0; i < nthreads; i++)
        uses_signals |= threads[i].signal_injection != NULL;
    int error = uses_signals ? ns_signal_injection_install() : 0;
    int installed = uses_signals && error == 0;

    size_t created = 0;
    for (; error == 0 && created < total; created++) {
        args[created].run = &run;
        args[created].index = created < nthreads ? created : created - nthreads;
        void *(*body)(void *) = created < nthreads ? sampler_main : injector_main;
        error = pthread_create(&handles[created], NULL, body, &args[created]);
        if (error != 0)
            break;
    }
    if (error == 0) {
        /* Let everyone finish pre-touching before fixing the start time, so
         * large buffers cannot make the threads miss it. */
        gate_wait_ready(&run.gate, total);
        uint64_t earliest = ns_mono_ns(CLOCK_MONOTONIC) + 20000000ull;
        if (run.schedule.start_mono_ns < earliest)
            run.schedule.start_mono_ns = earliest;
    }
    gate_open(&run.gate, error == 0);
    for (size_t i = 0; i < created; i++)
        pthread_join(handles[i], NULL);
    if (installed)
        ns_signal_injection_release();
    free(handles);
    free(args);
    return error;
}
