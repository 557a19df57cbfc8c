/* Drives the native core's C functions directly, with a clock the test
 * scripts (built with -DNS_SCRIPTED_CLOCK, see clock.h), for what the real
 * clocks and the Python binding cannot produce. Used by test_native_safety.py.
 *
 *   harness detour THRESHOLD T0 T1 ... TN   the detour loop over tick readings
 *                                           T1..TN, starting from T0, ending at TN
 *   harness calibrate A B                   calibration against clocks that move A
 *                                           ticks and B ns per clock read
 *   harness windows CPU                     a 3-window run whose window_end holds 1
 *
 * Each prints one line of key=value pairs.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "histogram.h"
#include "probes.h"

/* The scripted clocks: a list of tick readings, or two clocks that move a
 * fixed step per read of either; without a script, the real clocks. */
static enum { REAL, LIST, LINEAR } script = REAL;
static uint64_t *readings;
static size_t nreadings, next_reading;
static int64_t ticks_step, mono_step, reads;

static uint64_t real_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ns_scripted_ticks(void)
{
    switch (script) {
    case LIST:
        return readings[next_reading < nreadings ? next_reading++ : nreadings - 1];
    case LINEAR:
        return (uint64_t)(1000000000000 + ticks_step * ++reads);
    case REAL:
        break;
    }
    return real_ns(CLOCK_MONOTONIC_RAW);
}

uint64_t ns_scripted_mono_ns(clockid_t clock)
{
    /* Small values: a sleep until one of them returns at once. */
    if (script == LINEAR)
        return (uint64_t)(1000000 + mono_step * ++reads);
    return real_ns(clock);
}

static int detour(int argc, char **argv)
{
    static uint64_t start[64], length[64], histogram[NS_HIST_BINS];
    struct ns_detour d = {.threshold = strtoull(argv[0], NULL, 0), .hourglass_cut = 1000,
                          .samples = {.first = {start, 64}, .second = {length, 64}},
                          .histogram = histogram};
    script = LIST;
    nreadings = (size_t)argc - 1;
    readings = calloc(nreadings, sizeof *readings);
    for (size_t i = 0; i < nreadings; i++)
        readings[i] = strtoull(argv[i + 1], NULL, 0);
    volatile int64_t stop = 0;
    ns_detour_prepare(&d);
    next_reading = 1;
    ns_detour_window(&d, readings[0], readings[nreadings - 1], &stop);
    uint64_t gaps = 0;
    for (unsigned i = 0; i < NS_HIST_BINS; i++)
        gaps += histogram[i];
    printf("detours=%" PRIu64 " lost=%" PRIu64 " max_gap=%" PRIu64 " backwards=%" PRIu64
           " gaps=%" PRIu64 " lengths=",
           d.detours, d.lost_ticks, d.max_gap, d.clock_backwards, gaps);
    for (size_t i = 0; i < d.samples.written; i++)
        printf("%s%" PRIu64, i ? "," : "", length[i]);
    printf("\n");
    return 0;
}

static int calibrate(char **argv)
{
    script = LINEAR;
    ticks_step = strtoll(argv[0], NULL, 0);
    mono_step = strtoll(argv[1], NULL, 0);
    printf("rate=%.17g\n", ns_calibrate_ticks_per_ns(0));
    return 0;
}

/* window_end is the first element of an array whose others are canaries:
 * a run that writes past its capacity overwrites them. */
static int windows(char **argv)
{
    const uint64_t canary = 0x5afe5afe5afe5afeull;
    uint64_t window_start[3], window_end[3] = {0, canary, canary};
    int64_t control[2 * NS_CONTROL_STRIDE] = {0};
    struct ns_thread thread = {.cpu = atoi(argv[0]), .kind = NS_PROBE_IDLE,
                               .window_start = {window_start, 3},
                               .window_end = {window_end, 1}};
    struct ns_schedule schedule = {.runtime_ns = 1000000, .period_ns = 1000000,
                                   .last_runtime_ns = 1000000, .windows = 3, .ticks_per_ns = 1.0};
    struct ns_control ctl = {.stop = control, .threads = control + NS_CONTROL_STRIDE};
    int error = ns_run(&thread, 1, NULL, 0, &schedule, &ctl);
    printf("error=%d thread_error=%d windows=%zu canaries=%s\n", error, thread.error,
           thread.windows_done,
           window_end[1] == canary && window_end[2] == canary ? "intact" : "overwritten");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "detour") == 0)
        return detour(argc - 2, argv + 2);
    if (argc == 4 && strcmp(argv[1], "calibrate") == 0)
        return calibrate(argv + 2);
    if (argc == 3 && strcmp(argv[1], "windows") == 0)
        return windows(argv + 2);
    fprintf(stderr, "usage: see the comment at the top of %s\n", __FILE__);
    return 2;
}
