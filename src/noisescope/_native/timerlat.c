/* Timer latency (the cyclictest measurement). */
#include "clock.h"
#include "probes.h"

#include <string.h>

void ns_timerlat_prepare(struct ns_timerlat *tl)
{
    memset(tl->histogram, 0, tl->histogram_buckets * sizeof *tl->histogram);
    tl->min_ns = UINT64_MAX;
    tl->last_wakeup_mono = 0;
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
    ns_ring_push(&tl->series, latency, woke_ticks);
}

/* Counts as missed the deadlines from `deadline` on that `woke` has passed
 * (those of this window, up to `end`) and returns the first one after it. */
static uint64_t skip_overslept(struct ns_timerlat *tl, uint64_t deadline, uint64_t woke,
                               uint64_t end)
{
    uint64_t interval = tl->interval_ns;
    uint64_t last = woke < end ? woke : end;
    if (last >= deadline)
        tl->missed += (last - deadline) / interval + 1;
    return deadline + ((woke - deadline) / interval + 1) * interval;
}

uint64_t ns_timerlat_window(struct ns_timerlat *tl, uint64_t begin_mono, uint64_t end_mono,
                            volatile int64_t *stop)
{
    uint64_t interval = tl->interval_ns, deadline = begin_mono + interval;
    uint64_t woke_ticks = ns_ticks();
    /* The previous window's last wakeup may have come after this window's
     * first deadlines (back-to-back windows): those were slept through too. */
    if (tl->last_wakeup_mono >= deadline)
        deadline = skip_overslept(tl, deadline, tl->last_wakeup_mono, end_mono);
    while (deadline <= end_mono && !*stop) {
        ns_sleep_until(deadline);
        /* CLOCK_MONOTONIC first (the latency, as cyclictest reads it), then
         * the tick count that puts this wakeup on the detour/trace timeline. */
        uint64_t woke = ns_mono_ns(CLOCK_MONOTONIC);
        woke_ticks = ns_ticks();
        /* An absolute sleep never ends early; the guard keeps the unsigned
         * subtraction safe all the same. */
        timerlat_record(tl, woke > deadline ? woke - deadline : 0, woke_ticks);
        tl->last_wakeup_mono = woke;
        deadline += interval;
        if (woke >= deadline)
            deadline = skip_overslept(tl, deadline, woke, end_mono);
    }
    return woke_ticks;
}
