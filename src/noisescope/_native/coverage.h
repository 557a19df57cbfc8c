/* Time covered by intervals, per bin (analysis/spectrum.py: a lost-time series). */
#ifndef NOISESCOPE_COVERAGE_H
#define NOISESCOPE_COVERAGE_H

#include <stdint.h>

/* Adds to covered[k] the nanoseconds of [begin + k * bin_ns, begin + (k + 1) * bin_ns)
 * that each interval [starts[i], starts[i] + lengths[i]) covers, for the `bins` bins
 * (intervals that overlap each other each count; the parts outside the bins and
 * intervals of no length count nothing). One pass over the intervals and the bins
 * they touch, in any order. bin_ns > 0. */
void ns_covered_time(const int64_t *starts, const int64_t *lengths, int64_t n, int64_t begin,
                     int64_t bin_ns, int64_t bins, int64_t *covered);

#endif
