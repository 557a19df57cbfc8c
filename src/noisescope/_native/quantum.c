/* FTQ (fixed time quantum) and FWQ (fixed work quantum). */
#include "clock.h"
#include "probes.h"
#include "work.h"

/* Quanta are laid out on absolute deadlines begin + k*quantum, so the
 * series never drifts. A unit of work that ends past a deadline counts for
 * the quantum it ends in; quanta the thread missed entirely record zero. */
uint64_t ns_ftq_window(struct ns_ftq *f, uint64_t begin, uint64_t end, volatile int64_t *stop)
{
    uint64_t deadline = begin + f->quantum, done = 0, x = f->sink + 1, now = begin;
    while (deadline <= end) {
        x = ns_work_unit(x, f->unit_iters);
        done++;
        now = ns_ticks();
        if (now < deadline)
            continue;
        while (now >= deadline && deadline <= end) {
            ns_ring_push(&f->samples, deadline - f->quantum, done);
            done = 0;
            deadline += f->quantum;
        }
        if (*stop)
            break;
    }
    f->sink = x;
    return now;
}

uint64_t ns_fwq_window(struct ns_fwq *f, uint64_t begin, uint64_t end, volatile int64_t *stop)
{
    uint64_t x = f->sink + 1, now = begin;
    do {
        uint64_t started = ns_ticks();
        for (uint64_t u = 0; u < f->work_units; u++)
            x = ns_work_unit(x, f->unit_iters);
        now = ns_ticks();
        ns_ring_push(&f->samples, started, now - started);
    } while (now < end && !*stop);
    f->sink = x;
    return now;
}

/* One FWQ sample on its own, for callers that do other things between samples
 * (cluster bsp: work, then an MPI collective): `units` units, timed. */
uint64_t ns_timed_work(uint64_t units, uint64_t unit_iters)
{
    uint64_t x = 1, started = ns_ticks();
    for (uint64_t u = 0; u < units; u++)
        x = ns_work_unit(x, unit_iters);
    uint64_t took = ns_ticks() - started;
    __asm__ volatile("" : : "r"(x));
    return took;
}
