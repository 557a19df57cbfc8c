/* Timer latency (the cyclictest measurement). */
#include "clock.h"
#include "probes.h"

#include <string.h>

void ns_timerlat_prepare(struct ns_timerlat *tl)
{
    memset(tl->histogram, 0, tl->histogram_buckets * sizeof *tl->histogram);
    tl->min_ns = UINT64_MAX;
}

static void timerlat_record(struct ns_timerlat *tl, uint64_t latency, uint64_t woke_ticks)
{
    tl->samples++;
    tl->sum_ns += latency;
    if (latency < tl->min_ns)
        tl->min_ns = latency;
    if (latency > tl->max_ns)
        tl->max_ns = latency;
    uint64_t bucket = latency / 1000u;
    if (bucket < tl->histogram_buckets)
        tl->histogram[bucket]++;
    else
        tl->histogram_overflow++;
    if (tl->stored < tl->latency.capacity) {
        tl->latency.data[tl->stored] = latency;
        tl->wakeup.data[tl->stored] = woke_ticks;
        tl->stored++;
    } else if (tl->latency.capacity > 0) {
        tl->overflow++;
    }
}

uint64_t ns_timerlat_window(struct ns_timerlat *tl, uint64_t begin_mono, uint64_t end_mono,
                            volatile int64_t *stop)
{
    uint64_t interval = tl->interval_ns, deadline = begin_mono + interval;
    uint64_t woke_ticks = ns_ticks();
    while (deadline <= end_mono && !*stop) {
        ns_sleep_until(deadline);
        /* CLOCK_MONOTONIC first (the latency, as cyclictest reads it), then
         * the tick count that puts this wakeup on the detour/trace timeline. */
        uint64_t woke = ns_mono_ns(CLOCK_MONOTONIC);
        woke_ticks = ns_ticks();
        /* An absolute sleep never ends early; the guard keeps the unsigned
         * subtraction safe all the same. */
        timerlat_record(tl, woke > deadline ? woke - deadline : 0, woke_ticks);
        deadline += interval;
        if (woke >= deadline) {
            /* Overslept whole periods: skip their deadlines (inside this
             * window) and count them. */
            uint64_t last = woke < end_mono ? woke : end_mono;
            if (last >= deadline) {
                uint64_t skipped = (last - deadline) / interval + 1;
                tl->missed += skipped;
                deadline += skipped * interval;
            }
        }
    }
    return woke_ticks;
}
