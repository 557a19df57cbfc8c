/* Noise injection: known noise of a given rate and length, the ground truth
 * for tests and a tool for experiments (Ferreira-style injection). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "probes.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

int ns_injection_signal(void) { return SIGRTMIN + 4; }

static void injection_record(struct ns_injection *inj, uint64_t start, uint64_t end)
{
    size_t slot = inj->stored;
    if (slot < inj->start.capacity) {
        inj->start.data[slot] = start;
        inj->end.data[slot] = end;
        inj->stored = slot + 1;
    } else {
        inj->overflow++;
    }
}

/* The handler finds its injection through a process-wide registry, never
 * through a pointer taken from the signal: anyone allowed to signal this
 * process can queue our signal with any value (sigqueue, rt_tgsigqueueinfo,
 * even with si_code SI_TIMER). A timer carries a key instead; the handler acts
 * only when the key names a live slot that the very thread it runs on
 * registered. Slots are claimed and released with lock-free atomics, which
 * the handler may read. */
#define REGISTRY_SLOTS 1024u /* a power of two: a key's slot is key % REGISTRY_SLOTS */

_Static_assert(ATOMIC_POINTER_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2 &&
                   ATOMIC_LONG_LOCK_FREE == 2,
               "the signal handler reads the registry, so its atomics must be lock-free");

struct registry_slot {
    _Atomic(struct ns_injection *) injection; /* NULL when free */
    _Atomic(pid_t) tid;                       /* the thread the timer signals */
    _Atomic(uintptr_t) key;                   /* generation * REGISTRY_SLOTS + slot; 0 free */
};

static struct registry_slot registry[REGISTRY_SLOTS];
static _Atomic(uintptr_t) registry_generation;

/* Claims a slot for `inj`, signalled on thread `tid`; returns its key, 0 when
 * every slot is taken. Written in the order the handler checks in reverse
 * (key last), so a half-made slot never matches. */
static uintptr_t registry_add(struct ns_injection *inj, pid_t tid)
{
    for (uintptr_t slot = 0; slot < REGISTRY_SLOTS; slot++) {
        struct ns_injection *free_slot = NULL;
        if (atomic_compare_exchange_strong(&registry[slot].injection, &free_slot, inj)) {
            uintptr_t generation = atomic_fetch_add(&registry_generation, 1) + 1;
            uintptr_t key = generation * REGISTRY_SLOTS + slot;
            atomic_store(&registry[slot].tid, tid);
            atomic_store(&registry[slot].key, key);
            return key;
        }
    }
    return 0;
}

static void registry_remove(uintptr_t key)
{
    struct registry_slot *slot = &registry[key % REGISTRY_SLOTS];
    atomic_store(&slot->key, 0);
    atomic_store(&slot->tid, 0);
    atomic_store(&slot->injection, NULL);
}

/* The injection `key` names if this thread registered it, else NULL. Only
 * the registering thread writes `tid` = its own id, and it cannot be freeing
 * the slot while its own signal handler runs: so a match is live. */
static struct ns_injection *registry_find(uintptr_t key)
{
    struct registry_slot *slot = &registry[key % REGISTRY_SLOTS];
    if (key == 0 || atomic_load(&slot->key) != key)
        return NULL;
    if (atomic_load(&slot->tid) != (pid_t)syscall(SYS_gettid))
        return NULL;
    return atomic_load(&slot->injection);
}

/* Runs on the signalled thread itself; async-signal-safe (atomics, gettid,
 * the injection record). Anything but one of our timers is ignored. */
static void injection_handler(int signo, siginfo_t *info, void *context)
{
    (void)signo;
    (void)context;
    uint64_t start = ns_ticks();
    if (info->si_code != SI_TIMER)
        return;
    int saved_errno = errno;
    struct ns_injection *inj = registry_find((uintptr_t)info->si_value.sival_ptr);
    errno = saved_errno;
    if (inj == NULL)
        return;
    /* Expirations that fell while the signal was still pending (the thread
     * was not running) are merged into this one by the kernel. */
    if (info->si_overrun > 0)
        inj->coalesced += (uint64_t)info->si_overrun;
    injection_record(inj, start, ns_spin_ticks(start, inj->length));
}

/* The handler is process-wide: it is installed by the first run that needs
 * it and the original put back by the last, so concurrent runs share it. */
static pthread_mutex_t handler_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned handler_users;
static struct sigaction handler_saved;

int ns_signal_injection_install(void)
{
    int error = 0;
    pthread_mutex_lock(&handler_lock);
    if (handler_users == 0) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = injection_handler;
        action.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&action.sa_mask);
        if (sigaction(ns_injection_signal(), &action, &handler_saved) != 0)
            error = errno;
    }
    if (error == 0)
        handler_users++;
    pthread_mutex_unlock(&handler_lock);
    return error;
}

void ns_signal_injection_release(void)
{
    pthread_mutex_lock(&handler_lock);
    if (--handler_users == 0)
        sigaction(ns_injection_signal(), &handler_saved, NULL);
    pthread_mutex_unlock(&handler_lock);
}

/* A periodic POSIX timer whose signal goes to thread `tid` (the caller),
 * first firing at `start_mono_ns`. Returns NULL or the failed stage (errno set). */
const char *ns_signal_injection_arm(struct ns_injection *inj, pid_t tid, uint64_t start_mono_ns,
                                    struct ns_armed_injection *armed)
{
    armed->key = registry_add(inj, tid);
    if (armed->key == 0) {
        errno = EBUSY;
        return "injection registry (all slots taken)";
    }
    struct sigevent event;
    memset(&event, 0, sizeof event);
    event.sigev_notify = SIGEV_THREAD_ID;
    event.sigev_signo = ns_injection_signal();
    event.sigev_value.sival_ptr = (void *)armed->key;
    event.sigev_notify_thread_id = tid;
    const char *stage = NULL;
    if (timer_create(CLOCK_MONOTONIC, &event, &armed->timer) != 0) {
        stage = "timer_create(SIGEV_THREAD_ID)";
    } else {
        struct itimerspec spec = {
            .it_interval = {.tv_sec = (time_t)(inj->period_ns / 1000000000ull),
                            .tv_nsec = (long)(inj->period_ns % 1000000000ull)},
            .it_value = {.tv_sec = (time_t)(start_mono_ns / 1000000000ull),
                         .tv_nsec = (long)(start_mono_ns % 1000000000ull)},
        };
        if (timer_settime(armed->timer, TIMER_ABSTIME, &spec, NULL) != 0) {
            stage = "timer_settime";
            int error = errno;
            timer_delete(armed->timer);
            errno = error;
        }
    }
    if (stage != NULL) {
        int error = errno;
        registry_remove(armed->key);
        errno = error;
    }
    return stage;
}

void ns_signal_injection_disarm(struct ns_armed_injection *armed)
{
    timer_delete(armed->timer);
    registry_remove(armed->key);
}

/* Injects until end_mono_ns on the clock: an injection that cannot keep up
 * with its period (wakeup and spin longer than the period) falls behind its
 * deadlines, and must not run on past the end to catch up with them. */
void ns_thread_injection_loop(struct ns_injection *inj, uint64_t start_mono_ns,
                              uint64_t end_mono_ns, volatile int64_t *stop)
{
    for (uint64_t next = start_mono_ns;
         next < end_mono_ns && !*stop && ns_mono_ns(CLOCK_MONOTONIC) < end_mono_ns;
         next += inj->period_ns) {
        ns_sleep_until(next);
        uint64_t start = ns_ticks();
        injection_record(inj, start, ns_spin_ticks(start, inj->length));
    }
}
