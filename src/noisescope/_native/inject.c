/* Noise injection: known noise of a given rate and length, the ground truth
 * for tests and a tool for experiments (Ferreira-style injection). */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>

#include "clock.h"
#include "probes.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

int ns_injection_signal(void) { return SIGRTMIN + 4; }

static void injection_record(struct ns_injection *inj, uint64_t start, uint64_t end)
{
    size_t slot = inj->stored;
    if (slot < inj->start.capacity) {
        inj->start.data[slot] = start;
        inj->end.data[slot] = end;
        inj->stored = slot + 1;
    } else {
        inj->overflow++;
    }
}

/* Runs on the signalled thread itself; only touches the injection record
 * the timer carries, which is async-signal-safe. */
static void injection_handler(int signo, siginfo_t *info, void *context)
{
    (void)signo;
    (void)context;
    struct ns_injection *inj = info->si_value.sival_ptr;
    if (inj == NULL)
        return;
    /* Expirations that fell while the signal was still pending (the thread
     * was not running) are merged into this one by the kernel. */
    if (info->si_code == SI_TIMER && info->si_overrun > 0)
        inj->coalesced += (uint64_t)info->si_overrun;
    uint64_t start = ns_ticks();
    injection_record(inj, start, ns_spin_ticks(start, inj->length));
}

int ns_signal_injection_install(struct sigaction *saved)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = injection_handler;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    return sigaction(ns_injection_signal(), &action, saved) == 0 ? 0 : errno;
}

void ns_signal_injection_restore(const struct sigaction *saved)
{
    sigaction(ns_injection_signal(), saved, NULL);
}

/* A periodic POSIX timer whose signal goes to thread `tid`, first firing at
 * `start_mono_ns`. */
int ns_signal_injection_arm(struct ns_injection *inj, pid_t tid, uint64_t start_mono_ns,
                            timer_t *timer)
{
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = ns_injection_signal();
    event.sigev_value.sival_ptr = inj;
    event.sigev_notify_thread_id = tid;
    if (timer_create(CLOCK_MONOTONIC, &event, timer) != 0)
        return errno;
    struct itimerspec spec = {
        .it_interval = {.tv_sec = (time_t)(inj->period_ns / 1000000000ull),
                        .tv_nsec = (long)(inj->period_ns % 1000000000ull)},
        .it_value = {.tv_sec = (time_t)(start_mono_ns / 1000000000ull),
                     .tv_nsec = (long)(start_mono_ns % 1000000000ull)},
    };
    if (timer_settime(*timer, TIMER_ABSTIME, &spec, NULL) != 0) {
        int error = errno;
        timer_delete(*timer);
        return error;
    }
    return 0;
}

/* Injects until end_mono_ns on the clock: an injection that cannot keep up
 * with its period (wakeup and spin longer than the period) falls behind its
 * deadlines, and must not run on past the end to catch up with them. */
void ns_thread_injection_loop(struct ns_injection *inj, uint64_t start_mono_ns,
                              uint64_t end_mono_ns, volatile int64_t *stop)
{
    for (uint64_t next = start_mono_ns;
         next < end_mono_ns && !*stop && ns_mono_ns(CLOCK_MONOTONIC) < end_mono_ns;
         next += inj->period_ns) {
        ns_sleep_until(next);
        uint64_t start = ns_ticks();
        injection_record(inj, start, ns_spin_ticks(start, inj->length));
    }
}
