/* The measurement clock: the TSC on x86, CLOCK_MONOTONIC_RAW elsewhere.
 *
 * "Ticks" are whatever ns_ticks() counts. Python converts them to
 * nanoseconds with the frequency it determined (kernel-stated or
 * calibrated); on the fallback clock one tick is one nanosecond.
 */
#ifndef NOISESCOPE_CLOCK_H
#define NOISESCOPE_CLOCK_H

#include <errno.h>
#include <stdint.h>
#include <time.h>

/* NS_FORCE_MONOTONIC builds the portable clock on x86 too (the tests use it
 * to check that everything works without a TSC). NS_SCRIPTED_CLOCK leaves
 * both clocks to the program linked with the core (the tests' harness,
 * tests/unit/native_harness.c, feeds it readings no real clock would give). */
#if defined(NS_SCRIPTED_CLOCK)
#define NS_HAVE_TSC 0
uint64_t ns_scripted_ticks(void);
uint64_t ns_scripted_mono_ns(clockid_t clock);
static inline uint64_t ns_ticks(void) { return ns_scripted_ticks(); }
static inline void ns_relax(void) {}
#elif (defined(__x86_64__) || defined(__i386__)) && !defined(NS_FORCE_MONOTONIC)
#include <x86intrin.h>
#define NS_HAVE_TSC 1
static inline uint64_t ns_ticks(void) { return __rdtsc(); }
static inline void ns_relax(void) { _mm_pause(); }
#else
#define NS_HAVE_TSC 0
static inline uint64_t ns_ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline void ns_relax(void) {}
#endif

static inline uint64_t ns_mono_ns(clockid_t clock)
{
#if defined(NS_SCRIPTED_CLOCK)
    return ns_scripted_mono_ns(clock);
#else
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

/* Sleeps until an absolute CLOCK_MONOTONIC time, through signal interruptions. */
static inline void ns_sleep_until(uint64_t mono_ns)
{
    struct timespec when = {.tv_sec = (time_t)(mono_ns / 1000000000ull),
                            .tv_nsec = (long)(mono_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &when, NULL) == EINTR)
        ;
}

/* Busy-wait for `length` ticks starting now; returns the tick count at the end. */
static inline uint64_t ns_spin_ticks(uint64_t start, uint64_t length)
{
    uint64_t now;
    do {
        ns_relax();
        now = ns_ticks();
    } while (now - start < length);
    return now;
}

#endif
