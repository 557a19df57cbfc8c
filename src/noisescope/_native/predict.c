/* The prediction engine's inner loops (see predict.h). Plain C, no Python API.
 *
 * One pass per round does what took numpy about ten (send, receive, the noise
 * check, the copies), and the rounds go block by block so that a block's
 * clocks stay in the CPU cache across rounds. Every process's windows are
 * charged in the same order as the model states (per process: compute, then
 * per round its send before its receive), so the results do not depend on
 * the blocking or on the threads: processes that run concurrently never share
 * state. */
#include "predict.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>

#define HOT static inline __attribute__((always_inline))
/* The rounds' loops are compiled twice, for AVX2 (4 processes per instruction) and
 * for any x86-64, and the CPU's own chosen when the library loads. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Index of the first detour starting after axis time x, walking from detour i (every
 * detour before i starts at or before x). */
static int64_t first_after(const struct ns_trace_axis *a, int64_t x, int64_t i)
{
    for (int step = 0; a->starts[i] <= x; step++) {
        if (step == a->max_steps) { /* a crowded stretch: binary search from here */
            int64_t high = a->detours; /* starts[high] is the sentinel, > x */
            while (i < high) {
                int64_t middle = i + (high - i) / 2;
                if (a->starts[middle] <= x)
                    i = middle + 1;
                else
                    high = middle;
            }
            break;
        }
        i++;
    }
    return i;
}

/* Index of the last detour starting at or before axis time x: a walk from the
 * first detour of x's bucket (buckets hold about half a detour on average). */
static int64_t last_at_or_before(const struct ns_trace_axis *a, int64_t x)
{
    return first_after(a, x, a->first[x >> a->bucket_shift]) - 1;
}

/* Noise of one window at axis time `at`; *following: the first detour starting at or
 * after its end; *periods: whole trace periods it covers (each adds all detours). */
static int64_t window(const struct ns_trace_axis *a, int64_t at, int64_t busy, int64_t span,
                      int64_t total, int in_progress, int64_t *following, int64_t *periods)
{
    int64_t whole = busy >= a->shortest_span ? busy / span : 0;
    int64_t first = last_at_or_before(a, at);
    int64_t noise = in_progress && a->ends[first] > at ? a->ends[first] - at : 0;
    int64_t next = a->starts[first + 1];
    int64_t finish = at + (busy - whole * span);
    if (next < finish) { /* detours start inside the window: walk on from the first */
        int64_t last = first_after(a, finish - 1, first + 2) - 1;
        noise += a->cumulative[last + 1] - a->cumulative[first + 1];
        next = a->starts[last + 1];
    }
    *following = next;
    *periods = whole;
    return noise + whole * total;
}

void ns_trace_windows(const struct ns_trace_axis *axis, const int64_t *at, int64_t count,
                      int64_t busy, int64_t span, int64_t total, int in_progress,
                      int64_t *noise)
{
    int64_t following, periods;
    for (int64_t i = 0; i < count; i++)
        noise[i] = window(axis, at[i], busy, span, total, in_progress, &following, &periods);
}

/* The exact noise of process k's window; moves its cache to the window's end. */
__attribute__((noinline)) static int64_t charge(struct ns_replay *r, int64_t k, int64_t start, int64_t busy)
{
    const struct ns_trace_axis *a = &r->axis;
    int64_t trace = r->trace_of ? r->trace_of[k] : 0;
    int64_t origin = a->origin[trace], span = a->span[trace];
    int64_t shift = r->shift[k];
    int64_t at = start + shift;
    if (at >= origin + span) { /* past the first period of its block: the trace repeats */
        int64_t back = (at - origin) / span * span;
        at -= back;
        shift -= back;
    }
    int64_t following, periods;
    int64_t noise = window(a, at, busy, span, a->total[trace], 1, &following, &periods);
    shift -= periods * span; /* keep the window's end inside its block */
    r->shift[k] = shift;
    r->next_start[k] = following - shift;
    return noise;
}

/* A machine's arrays and costs as plain values: the hot loops take them by value,
 * so that they stay in registers (a store into the clocks cannot change them). */
struct clocks {
    int64_t *ready, *next_send, *next_receive;
    struct ns_replay *noise; /* NULL: noise-free */
    int64_t *next_start;     /* the noise's */
    int64_t latency, overhead, gap, transfer;
};

static struct clocks clocks_of(const struct ns_machine *m)
{
    return (struct clocks){m->ready, m->next_send, m->next_receive, m->noise,
                           m->noise ? m->noise->next_start : NULL, m->latency, m->overhead,
                           m->gap, m->transfer};
}

/* End of process k's busy window: without a detour before its end, one comparison
 * (an empty window is hit only by a detour starting at or before it). */
static inline int64_t busy(struct clocks c, int64_t k, int64_t start, int64_t length)
{
    int64_t end = start + length;
    if (c.noise == NULL)
        return end;
    int64_t next = c.next_start[k];
    if (__builtin_expect(next > end || (length && next == end), 1))
        return end;
    return end + charge(c.noise, k, start, length);
}

void ns_replay_finish(struct ns_replay *replay, const int64_t *start, int64_t *end,
                      int64_t count, int64_t first, int64_t length)
{
    struct clocks c = {.noise = replay, .next_start = replay->next_start};
    for (int64_t i = 0; i < count; i++)
        end[i] = busy(c, first + i, start[i], length);
}

/* Process k sends: returns the arrival time of its message. */
static inline int64_t send(struct clocks c, int64_t k)
{
    int64_t start = c.ready[k];
    if (c.next_send) {
        if (c.next_send[k] > start)
            start = c.next_send[k];
        c.next_send[k] = start + c.gap + c.transfer;
    }
    int64_t done = busy(c, k, start, c.overhead);
    c.ready[k] = done;
    return done + c.latency;
}

/* Process k receives a message arriving at `arrival`. */
static inline void receive(struct clocks c, int64_t k, int64_t arrival)
{
    int64_t start = arrival > c.ready[k] ? arrival : c.ready[k];
    if (c.next_receive) {
        if (c.next_receive[k] > start)
            start = c.next_receive[k];
        c.next_receive[k] = start + c.gap + c.transfer;
    }
    c.ready[k] = busy(c, k, start, c.overhead) + c.transfer;
}

/* Slots one + i and other + i (i < count) swap messages, one pair at a time. */
HOT void exchange_pairs(struct clocks c, int64_t one, int64_t other, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        int64_t from_one = send(c, one + i), from_other = send(c, other + i);
        receive(c, one + i, from_other);
        receive(c, other + i, from_one);
    }
}

/* 4 x int64 in GCC's vector extension; the helpers below are always inlined and take
 * vectors by address, so the ABI of passing them without AVX (-Wpsabi) never applies. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef int64_t lanes __attribute__((vector_size(32)));
enum { LANES = sizeof(lanes) / sizeof(int64_t) };

HOT lanes load(const int64_t *from)
{
    lanes value;
    memcpy(&value, from, sizeof value);
    return value;
}

HOT void store(int64_t *to, const lanes *value)
{
    memcpy(to, value, sizeof *value);
}

HOT lanes larger(const lanes *a, const lanes *b)
{
    lanes more = *a > *b;
    return (*a & more) | (*b & ~more);
}

HOT int any(const lanes *hit)
{
    int64_t some = 0;
    for (int lane = 0; lane < LANES; lane++)
        some |= (*hit)[lane];
    return some != 0;
}

/* LANES pairs at once, without gap clocks: what send and receive do when no detour
 * touches either window. Returns 0 (and changes nothing) if one might: the receive
 * ends after the send, so a detour missing the receive window's end (starting at or
 * after it; after it for an empty window) misses both windows. */
HOT int exchange_lanes(struct clocks c, int64_t one, int64_t other)
{
    lanes sent_one = load(c.ready + one) + c.overhead;
    lanes sent_other = load(c.ready + other) + c.overhead;
    lanes from_one = sent_one + c.latency, from_other = sent_other + c.latency;
    lanes done_one = larger(&from_other, &sent_one) + c.overhead;
    lanes done_other = larger(&from_one, &sent_other) + c.overhead;
    if (c.noise) {
        lanes next_one = load(c.next_start + one), next_other = load(c.next_start + other);
        lanes hit = c.overhead ? (next_one < done_one) | (next_other < done_other)
                               : (next_one <= done_one) | (next_other <= done_other);
        if (any(&hit))
            return 0;
    }
    done_one += c.transfer;
    done_other += c.transfer;
    store(c.ready + one, &done_one);
    store(c.ready + other, &done_other);
    return 1;
}

enum { AHEAD = 512 }; /* slots: how far ahead the wide rounds fetch `shift` */

/* Slots one + i and other + i (i < count) swap messages. */
HOT void exchange(struct clocks c, int64_t one, int64_t other, int64_t count)
{
    int64_t i = 0;
    if (c.next_send == NULL) /* the gap clocks never bind */
        for (; i + LANES <= count; i += LANES) {
            if (c.noise && i % 8 == 0 && i + AHEAD < count) { /* see prefetch_shifts */
                __builtin_prefetch(c.noise->shift + one + i + AHEAD);
                __builtin_prefetch(c.noise->shift + other + i + AHEAD);
            }
            if (!exchange_lanes(c, one + i, other + i))
                exchange_pairs(c, one + i, other + i, LANES);
        }
    exchange_pairs(c, one + i, other + i, count - i);
}

/* The round at distance 1 or 2 for slots [at, at + LANES), partners among them
 * (exchange_lanes with the partners' sends swapped inside one vector). */
HOT int near_lanes(struct clocks c, int64_t at, int64_t distance)
{
    lanes sent = load(c.ready + at) + c.overhead;
    lanes partner = distance == 1 ? __builtin_shuffle(sent, (lanes){1, 0, 3, 2})
                                  : __builtin_shuffle(sent, (lanes){2, 3, 0, 1});
    lanes arrival = partner + c.latency;
    lanes done = larger(&arrival, &sent) + c.overhead;
    if (c.noise) {
        lanes next = load(c.next_start + at);
        lanes hit = c.overhead ? next < done : next <= done;
        if (any(&hit))
            return 0;
    }
    done += c.transfer;
    store(c.ready + at, &done);
    return 1;
}

/* One round at `distance` among slots [begin, end) (partners inside). */
HOT void round_within(struct clocks c, int64_t begin, int64_t end, int64_t distance)
{
    if (distance < LANES && c.next_send == NULL && (end - begin) % LANES == 0) {
        for (int64_t at = begin; at < end; at += LANES)
            if (!near_lanes(c, at, distance))
                for (int64_t low = at; low < at + LANES; low += 2 * distance)
                    exchange_pairs(c, low, low + distance, distance);
        return;
    }
    for (int64_t low = begin; low < end; low += 2 * distance)
        exchange(c, low, low + distance, distance);
}

/* Processes that waited across a detour need their `shift` (which the rounds
 * otherwise never read): bring a block's into the cache with the block, rather
 * than each from memory when its lookup needs it. */
HOT void prefetch_shifts(struct clocks c, int64_t begin, int64_t count)
{
    if (c.noise == NULL)
        return;
    int64_t sum = 0; /* loads, not prefetches: a burst of those is dropped */
    for (int64_t k = begin; k < begin + count; k += 64 / sizeof(int64_t))
        sum += c.noise->shift[k];
    __asm__ volatile("" : : "r"(sum));
}

/* What the threads share: the machine and the shape of the work. */
struct work {
    struct ns_machine *machine;
    int64_t power, block, group; /* allreduce rounds */
    int64_t procs, length;       /* compute */
};

enum { COMPUTE_CHUNK = 1 << 16 }; /* processes per item of the compute phase */

static void compute_chunk(const struct work *w, int64_t chunk)
{
    int64_t begin = chunk * COMPUTE_CHUNK;
    int64_t end = begin + COMPUTE_CHUNK < w->procs ? begin + COMPUTE_CHUNK : w->procs;
    struct clocks c = clocks_of(w->machine);
    for (int64_t k = begin; k < end; k++)
        c.ready[k] = busy(c, k, c.ready[k], w->length);
}

/* All rounds at distances below `group` in group g (slots [g group, (g + 1) group)):
 * each block runs its rounds below `block`, then block pairs the wider ones. */
VECTOR_CLONES static void group_rounds(const struct work *w, int64_t g)
{
    struct clocks c = clocks_of(w->machine);
    int64_t begin = g * w->group, end = begin + w->group;
    for (int64_t block = begin; block < end; block += w->block) {
        prefetch_shifts(c, block, w->block);
        for (int64_t distance = 1; distance < w->block; distance *= 2)
            round_within(c, block, block + w->block, distance);
    }
    for (int64_t distance = w->block; distance < w->group; distance *= 2)
        for (int64_t low = begin; low < end; low += 2 * distance)
            for (int64_t first = low; first < low + distance; first += w->block)
                exchange(c, first, first + distance, w->block);
}

/* All rounds at distances of `group` and more for tile t: the slots whose offset in
 * their group is in [t width, (t + 1) width), width = group^2 / power, so a tile
 * holds `group` slots (its partners all in it) in contiguous runs of `width`. */
VECTOR_CLONES static void tile_rounds(const struct work *w, int64_t t)
{
    struct clocks c = clocks_of(w->machine);
    int64_t width = w->group / (w->power / w->group);
    int64_t column = t * width;
    for (int64_t distance = w->group; distance < w->power; distance *= 2)
        for (int64_t low = 0; low < w->power; low += 2 * distance)
            for (int64_t first = low; first < low + distance; first += w->group)
                exchange(c, first + column, first + column + distance, width);
}

struct share {
    const struct work *work;
    void (*run)(const struct work *, int64_t);
    int64_t begin, end;
};

static void *run_share(void *argument)
{
    struct share *s = argument;
    for (int64_t item = s->begin; item < s->end; item++)
        s->run(s->work, item);
    return NULL;
}

/* run(work, item) for items [0, items), split evenly over up to `threads` threads
 * (the calling one among them; it also runs the share of a thread that cannot start). */
static void parallel(const struct work *w, void (*run)(const struct work *, int64_t),
                     int64_t items, int threads)
{
    enum { MOST = 64 };
    if (threads > MOST)
        threads = MOST;
    if (threads > items)
        threads = (int)items;
    if (threads < 1)
        threads = 1;
    struct share shares[MOST];
    pthread_t handles[MOST];
    int started[MOST] = {0};
    for (int t = 0; t < threads; t++)
        shares[t] = (struct share){w, run, items * t / threads, items * (t + 1) / threads};
    for (int t = 1; t < threads; t++)
        started[t] = pthread_create(&handles[t], NULL, run_share, &shares[t]) == 0;
    run_share(&shares[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t])
            pthread_join(handles[t], NULL);
        else
            run_share(&shares[t]);
    }
}

void ns_machine_compute(struct ns_machine *machine, int64_t procs, int64_t length, int threads)
{
    struct work w = {.machine = machine, .procs = procs, .length = length};
    parallel(&w, compute_chunk, (procs + COMPUTE_CHUNK - 1) / COMPUTE_CHUNK, threads);
}

void ns_allreduce_rounds(struct ns_machine *machine, int64_t power, int64_t block,
                         int64_t group, int threads)
{
    if (power < 2)
        return;
    if (block > power)
        block = power;
    if (group > power)
        group = power;
    if (group < block)
        group = block;
    /* a tile (group slots, in runs of group^2 / power) needs power <= group^2 */
    while (group < power && group * group < power)
        group *= 2;
    struct work w = {.machine = machine, .power = power, .block = block, .group = group};
    parallel(&w, group_rounds, power / group, threads);
    if (group < power)
        parallel(&w, tile_rounds, power / group, threads);
}
