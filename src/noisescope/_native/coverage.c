/* Time covered by intervals, per bin (coverage.h). */
#include "coverage.h"

void ns_covered_time(const int64_t *starts, const int64_t *lengths, int64_t n, int64_t begin,
                     int64_t bin_ns, int64_t bins, int64_t *covered)
{
    const int64_t span = bins * bin_ns;
    for (int64_t i = 0; i < n; i++) {
        int64_t from = starts[i] - begin, to = from + lengths[i];
        if (from < 0)
            from = 0;
        if (to > span)
            to = span;
        if (to <= from)
            continue;
        int64_t first = from / bin_ns, last = (to - 1) / bin_ns;
        if (first == last) {
            covered[first] += to - from;
            continue;
        }
        covered[first] += (first + 1) * bin_ns - from;
        for (int64_t k = first + 1; k < last; k++)
            covered[k] += bin_ns;
        covered[last] += to - last * bin_ns;
    }
}
