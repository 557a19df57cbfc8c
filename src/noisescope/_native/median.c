/* Sliding-window medians (median.h). */
#include "median.h"

#include <stdlib.h>
#include <string.h>

/* The first place in sorted[0..count) whose value is not below `value`. */
static int64_t lower_bound(const double *sorted, int64_t count, double value)
{
    int64_t lo = 0, hi = count;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int ns_sliding_median(const double *values, int64_t n, int64_t width, double *out)
{
    if (n < width)
        return 0;
    double *window = malloc((size_t)width * sizeof *window);
    if (window == NULL)
        return -1;
    memcpy(window, values, (size_t)width * sizeof *window);
    /* (insertion sort: the first window only) */
    for (int64_t i = 1; i < width; i++) {
        double value = window[i];
        int64_t j = i;
        for (; j > 0 && window[j - 1] > value; j--)
            window[j] = window[j - 1];
        window[j] = value;
    }
    out[0] = window[width / 2];
    for (int64_t first = 1; first + width <= n; first++) {
        int64_t gone = lower_bound(window, width, values[first - 1]); /* an equal one */
        double coming = values[first + width - 1];
        int64_t at = lower_bound(window, width, coming);
        if (at > gone) { /* the values between move down one */
            at--;
            memmove(window + gone, window + gone + 1, (size_t)(at - gone) * sizeof *window);
        } else {
            memmove(window + at + 1, window + at, (size_t)(gone - at) * sizeof *window);
        }
        window[at] = coming;
        out[first] = window[width / 2];
    }
    free(window);
    return 0;
}
