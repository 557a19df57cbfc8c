/* Log-scale histogram of tick counts (HDR-style): bucket 0 holds everything
 * below NS_HIST_FLOOR (the detour loop counts those in a register, which
 * keeps its fast path as cheap as a bare TSC loop), then NS_HIST_SUB buckets
 * per power of two (about 6% resolution) up to 2^64.
 */
#ifndef NOISESCOPE_HISTOGRAM_H
#define NOISESCOPE_HISTOGRAM_H

#include <stdint.h>

#define NS_HIST_FLOOR_BITS 7
#define NS_HIST_FLOOR (1u << NS_HIST_FLOOR_BITS)
#define NS_HIST_SUB_BITS 4
#define NS_HIST_SUB (1u << NS_HIST_SUB_BITS)
#define NS_HIST_BINS (1 + (64 - NS_HIST_FLOOR_BITS) * NS_HIST_SUB)

static inline unsigned ns_hist_bucket(uint64_t value)
{
    if (value < NS_HIST_FLOOR)
        return 0;
    unsigned exponent = 63u - (unsigned)__builtin_clzll(value);
    unsigned sub = (unsigned)(value >> (exponent - NS_HIST_SUB_BITS)) & (NS_HIST_SUB - 1);
    return 1 + (exponent - NS_HIST_FLOOR_BITS) * NS_HIST_SUB + sub;
}

/* Smallest value that falls into `bucket`. */
static inline uint64_t ns_hist_lower(unsigned bucket)
{
    if (bucket == 0)
        return 0;
    unsigned exponent = (bucket - 1) / NS_HIST_SUB + NS_HIST_FLOOR_BITS;
    uint64_t sub = (bucket - 1) % NS_HIST_SUB;
    return (1ull << exponent) + (sub << (exponent - NS_HIST_SUB_BITS));
}

#endif
