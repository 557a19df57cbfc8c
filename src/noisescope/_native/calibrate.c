/* Short measurements made before a run: loop resolution, the cost of a
 * unit of work, and the tick rate against CLOCK_MONOTONIC_RAW. */
#include "clock.h"
#include "probes.h"
#include "work.h"

uint64_t ns_min_work_ticks(uint64_t units, uint64_t unit_iters, unsigned repetitions)
{
    uint64_t best = UINT64_MAX, x = 1;
    for (unsigned r = 0; r < repetitions; r++) {
        uint64_t started = ns_ticks();
        for (uint64_t u = 0; u < units; u++)
            x = ns_work_unit(x, unit_iters);
        uint64_t took = ns_ticks() - started;
        if (took < best)
            best = took;
    }
    __asm__ volatile("" : : "r"(x));
    return best;
}

/* A (monotonic-raw ns, ticks) pair read as close together as the machine
 * allows: the tightest of several tick-bracketed clock reads. */
static void clock_pair(uint64_t *mono_ns, uint64_t *ticks)
{
    uint64_t tightest = UINT64_MAX;
    for (int i = 0; i < 32; i++) {
        uint64_t before = ns_ticks();
        uint64_t mono = ns_mono_ns(CLOCK_MONOTONIC_RAW);
        uint64_t after = ns_ticks();
        if (i == 0 || after - before < tightest) {
            tightest = after - before;
            *mono_ns = mono;
            *ticks = before + (after - before) / 2;
        }
    }
}

double ns_calibrate_ticks_per_ns(uint64_t duration_ns)
{
    uint64_t mono0, ticks0, mono1, ticks1;
    clock_pair(&mono0, &ticks0);
    ns_sleep_until(ns_mono_ns(CLOCK_MONOTONIC) + duration_ns);
    clock_pair(&mono1, &ticks1);
    /* A clock that stood still (a coarse clock over a short duration) or went
     * back gives no rate; 0 says so instead of dividing by zero or wrapping. */
    if (mono1 <= mono0 || ticks1 <= ticks0)
        return 0.0;
    return (double)(ticks1 - ticks0) / (double)(mono1 - mono0);
}
