/* Sliding-window medians (analysis/spectrum.py: a spectrum's background level). */
#ifndef NOISESCOPE_MEDIAN_H
#define NOISESCOPE_MEDIAN_H

#include <stdint.h>

/* out[i] = the median of values[i .. i + width - 1] for each of the
 * n - width + 1 windows (width odd, values finite: the middle one of each
 * window in order). A sorted copy of the window moves along: one value out,
 * one in, each found by bisection. 0, or -1 when out of memory. */
int ns_sliding_median(const double *values, int64_t n, int64_t width, double *out);

#endif
