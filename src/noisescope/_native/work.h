/* The unit of work used by FTQ and FWQ (and by anything else that needs
 * "a fixed amount of computation"): a chain of dependent multiply-adds that
 * touches no memory, so its duration depends only on the core's speed and
 * on whoever takes the core away. The empty asm keeps the compiler from
 * collapsing or vectorising the chain.
 */
#ifndef NOISESCOPE_WORK_H
#define NOISESCOPE_WORK_H

#include <stdint.h>

static inline uint64_t ns_work_unit(uint64_t x, uint64_t iterations)
{
    for (uint64_t i = 0; i < iterations; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

#endif
