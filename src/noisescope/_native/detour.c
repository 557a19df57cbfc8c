/* Detour sampler (selfish-detour / Hourglass family). */
#include "clock.h"
#include "histogram.h"
#include "probes.h"

#include <string.h>

#define unlikely(x) __builtin_expect(!!(x), 0)

/* The rare path: a gap long enough to matter to Hourglass or to be a detour. */
static void detour_record(struct ns_detour *d, uint64_t start, uint64_t gap)
{
    if (gap > d->hourglass_cut)
        d->hourglass_gaps++;
    if (gap < d->threshold)
        return;
    d->detours++;
    d->lost_ticks += gap;
    ns_ring_push(&d->samples, start, gap);
}

uint64_t ns_detour_window(struct ns_detour *d, uint64_t prev, uint64_t end,
                          volatile int64_t *stop)
{
    /* The common gap (one loop iteration) is only counted, in a register;
     * only longer gaps touch memory. */
    uint64_t short_gaps = 0, now;
    for (;;) {
        now = ns_ticks();
        uint64_t gap = now - prev;
        prev = now;
        if (__builtin_expect(gap < NS_HIST_FLOOR, 1)) {
            short_gaps++;
        } else if (unlikely((int64_t)gap < 0)) {
            /* The clock stepped back (now < prev): no gap at all, let alone
             * one of nearly 2^64 ticks. Counted so that it is not silent. */
            d->clock_backwards++;
        } else {
            d->histogram[ns_hist_bucket(gap)]++;
            if (gap > d->max_gap)
                d->max_gap = gap;
            if (gap > d->rare_cut) {
                detour_record(d, now - gap, gap);
                if (*stop)
                    break;
            }
        }
        if (unlikely(now >= end))
            break;
    }
    d->histogram[0] += short_gaps;
    return now;
}

void ns_detour_prepare(struct ns_detour *d)
{
    /* One comparison decides the rare path for both the Hourglass count and
     * the detour threshold. */
    d->rare_cut = d->threshold - 1 < d->hourglass_cut ? d->threshold - 1 : d->hourglass_cut;
    memset(d->histogram, 0, NS_HIST_BINS * sizeof *d->histogram);
}

/* The loop's resolution: the shortest gap between two clock reads that
 * occurs in at least 1% of iterations of a bare read loop. (The very
 * shortest can be an artifact: on some virtual TSCs two reads occasionally
 * return nearly the same value.) */
uint64_t ns_loop_resolution_ticks(uint64_t duration_ticks)
{
    uint64_t counts[NS_HIST_FLOOR] = {0}, total = 0;
    uint64_t begin = ns_ticks(), prev = begin, now;
    do {
        now = ns_ticks();
        uint64_t gap = now - prev;
        prev = now;
        if (gap < NS_HIST_FLOOR) {
            counts[gap]++;
            total++;
        }
    } while (now - begin < duration_ticks);
    for (unsigned gap = 0; gap < NS_HIST_FLOOR; gap++)
        if (counts[gap] * 100 >= total && counts[gap] > 0)
            return gap;
    return NS_HIST_FLOOR;
}
