/* The reference for bench/detour_loop.py: the plainest selfish-detour loop
 * (read the TSC, store gaps above a threshold), compiled with -O2. */
#include <stdint.h>
#include <x86intrin.h>

#define CAPACITY (1u << 20)
static uint64_t starts[CAPACITY], lengths[CAPACITY];

/* Runs for `duration` ticks; returns iterations, and the ticks spent in
 * gaps >= threshold through *lost. */
uint64_t plain_loop(uint64_t duration, uint64_t threshold, uint64_t *lost)
{
    uint64_t begin = __rdtsc(), end = begin + duration, prev = begin, iterations = 0, n = 0;
    *lost = 0;
    for (;;) {
        uint64_t now = __rdtsc();
        uint64_t gap = now - prev;
        if (gap >= threshold) {
            *lost += gap;
            if (n < CAPACITY) {
                starts[n] = prev;
                lengths[n] = gap;
                n++;
            }
        }
        prev = now;
        iterations++;
        if (now >= end)
            break;
    }
    return iterations;
}
