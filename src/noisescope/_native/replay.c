/* The attribution's replays (replay.h). */
#include "replay.h"

#include <stdlib.h>

/* Grows *items (of `size` bytes each) to hold at least `need`; 0 or -1. */
static int reserve(void **items, int64_t *capacity, int64_t need, size_t size)
{
    if (need <= *capacity)
        return 0;
    int64_t grown = *capacity ? *capacity : 16;
    while (grown < need)
        grown *= 2;
    void *moved = realloc(*items, (size_t)grown * size);
    if (moved == NULL)
        return -1;
    *items = moved;
    *capacity = grown;
    return 0;
}

/* -- the switches' replay -------------------------------------------------- */

/* What the replay knows of a task since the last switch: whether it was woken
 * (its place in the woken list, and by which wakeup: its command) and when it
 * was first seen in an event. A slot belongs to the map's current generation
 * or is free: a switch forgets every task at once by starting a generation. */
struct task_slot {
    int64_t pid;
    uint64_t generation;
    int64_t woken; /* place in the woken list, -1: not woken */
    int64_t comm;
    int64_t seen; /* valid if has_seen */
    int has_seen;
};

struct task_map {
    struct task_slot *slots;
    int64_t capacity; /* a power of two */
    int64_t used;     /* slots of the current generation */
    uint64_t generation;
};

static uint64_t slot_of(int64_t pid, int64_t capacity)
{
    return ((uint64_t)pid * 0x9E3779B97F4A7C15ULL >> 20) & (uint64_t)(capacity - 1);
}

static struct task_slot *map_find(const struct task_map *m, int64_t pid)
{
    for (uint64_t i = slot_of(pid, m->capacity);; i = (i + 1) & (uint64_t)(m->capacity - 1)) {
        struct task_slot *s = &m->slots[i];
        if (s->generation != m->generation)
            return NULL;
        if (s->pid == pid)
            return s;
    }
}

static int map_grow(struct task_map *m)
{
    int64_t capacity = m->capacity ? m->capacity * 2 : 64;
    struct task_slot *slots = calloc((size_t)capacity, sizeof *slots);
    if (slots == NULL)
        return -1;
    uint64_t generation = m->generation ? m->generation : 1; /* 0 marks the free slots */
    for (int64_t i = 0; i < m->capacity; i++) {
        struct task_slot *s = &m->slots[i];
        if (s->generation != m->generation)
            continue;
        uint64_t j = slot_of(s->pid, capacity);
        while (slots[j].generation == generation)
            j = (j + 1) & (uint64_t)(capacity - 1);
        slots[j] = *s;
        slots[j].generation = generation;
    }
    free(m->slots);
    m->slots = slots;
    m->capacity = capacity;
    m->generation = generation;
    return 0;
}

/* The task's slot, made (not woken, not seen) if it has none; NULL: no memory. */
static struct task_slot *map_get(struct task_map *m, int64_t pid)
{
    struct task_slot *s = m->capacity ? map_find(m, pid) : NULL;
    if (s != NULL)
        return s;
    if (2 * (m->used + 1) > m->capacity && map_grow(m) < 0)
        return NULL;
    uint64_t i = slot_of(pid, m->capacity);
    while (m->slots[i].generation == m->generation)
        i = (i + 1) & (uint64_t)(m->capacity - 1);
    s = &m->slots[i];
    *s = (struct task_slot){pid, m->generation, -1, -1, 0, 0};
    m->used++;
    return s;
}

/* The CPU as switches.py's docstring tells it: who runs, and since the last
 * switch the tasks woken (in order: `woken` of them), when the handler that
 * woke each ended, and when each other task was first seen. A handler ends for
 * every task woken so far at once, so those with an end are the first `ended`
 * woken: the first `bulk` at bulk_ts, the others at handler_end[i]. */
struct switch_state {
    const struct ns_switch_replay *r;
    int64_t pid, comm, depth;
    struct task_map tasks;
    int64_t woken, *handler_end, handler_end_capacity;
    int64_t ended, bulk, bulk_ts;
    int64_t inferred;
};

static void switched(struct switch_state *s, int64_t pid, int64_t comm)
{
    s->pid = pid, s->comm = comm, s->depth = 0;
    s->tasks.generation++; /* forget every task */
    s->tasks.used = 0;
    s->woken = s->ended = s->bulk = 0;
}

/* The task got the CPU without a switch in the trace: when the handler that
 * woke it ended, else when it was first seen, else at the evidence. */
static void missed(struct switch_state *s, int64_t evidence_ts, int64_t pid, int64_t comm)
{
    const struct task_slot *t = s->tasks.capacity ? map_find(&s->tasks, pid) : NULL;
    int64_t ts = evidence_ts;
    if (t != NULL && t->woken >= 0 && t->woken < s->ended)
        ts = t->woken < s->bulk ? s->bulk_ts : s->handler_end[t->woken];
    else if (t != NULL && t->has_seen)
        ts = t->seen;
    const struct ns_switch_replay *r = s->r;
    int64_t i = s->inferred++;
    r->out_ts[i] = ts, r->out_prev_pid[i] = s->pid, r->out_prev_comm[i] = s->comm;
    r->out_next_pid[i] = pid, r->out_next_comm[i] = comm;
    switched(s, pid, comm);
}

static int switch_event(struct switch_state *s, int64_t i)
{
    const struct ns_switch_replay *r = s->r;
    int64_t ts = r->event_ts[i], pid = r->event_pid[i];
    if (pid == s->pid) { /* still running: the woken tasks did not get the CPU yet */
        s->ended = s->bulk = 0;
    } else if (s->pid >= 0 && pid >= 0) {
        struct task_slot *t = map_get(&s->tasks, pid);
        if (t == NULL)
            return -1;
        if (!t->has_seen)
            t->has_seen = 1, t->seen = ts;
        if (t->woken >= 0)
            missed(s, ts, pid, t->comm);
    }
    switch (r->event_what[i]) {
    case NS_SWITCH_HANDLER_ENTRY:
        s->depth++;
        break;
    case NS_SWITCH_HANDLER_EXIT:
        s->depth = s->depth > 0 ? s->depth - 1 : 0;
        break;
    case NS_SWITCH_WAKEUP: {
        struct task_slot *t = map_get(&s->tasks, r->woken[i]);
        if (t == NULL || reserve((void **)&s->handler_end, &s->handler_end_capacity,
                                 s->woken + 1, sizeof *s->handler_end) < 0)
            return -1;
        if (t->woken < 0)
            t->woken = s->woken++, t->comm = i; /* the first wakeup's command */
        break;
    }
    }
    if (s->depth == 0) { /* every task woken so far: its handler has ended */
        if (s->ended == 0) {
            s->bulk = s->ended = s->woken;
            s->bulk_ts = ts;
        } else {
            for (int64_t k = s->ended; k < s->woken; k++)
                s->handler_end[k] = ts;
            s->ended = s->woken;
        }
    }
    return 0;
}

int64_t ns_replay_switches(const struct ns_switch_replay *r)
{
    struct switch_state s = {.r = r, .pid = -1, .comm = -1};
    int64_t result = 0;
    for (int64_t n = 0; n < r->n_events + r->n_switches; n++) {
        int64_t i = r->order[n];
        if (i < r->n_events) {
            if (switch_event(&s, i) < 0) {
                result = -1;
                break;
            }
            continue;
        }
        int64_t j = i - r->n_events, prev = r->prev_pid[j];
        if (s.pid >= 0 && prev >= 0 && prev != s.pid)
            missed(&s, r->switch_ts[j], prev, r->n_events + j);
        switched(&s, r->next_pid[j], r->n_events + r->n_switches + j);
    }
    if (result == 0)
        result = s.inferred;
    free(s.tasks.slots);
    free(s.handler_end);
    return result;
}

/* -- the timeline's replay ------------------------------------------------- */

/* A handler open on the CPU; a hard IRQ's label may be decided when it closes,
 * from the hrtimers it ran (how many, the first, the last, whether one was the
 * tick's) and whether it woke the owner (by which function: `woke`). */
struct open_handler {
    int64_t kind, key, context;
    int hard, timer, any_tick;
    int64_t functions, first_function, last_function, woke; /* woke: -1 none */
};

struct timeline_state {
    struct ns_timeline_replay *r;
    struct open_handler *stack;
    int64_t depth, capacity;
    int64_t task, pid, since;
    int64_t first_uses;
};

static int64_t use_label(struct timeline_state *s, int64_t label)
{
    if (s->r->first_use[label] < 0)
        s->r->first_use[label] = s->first_uses++;
    return label;
}

/* A segment from ts on: the innermost handler's context, the task. */
static void mark(struct timeline_state *s, int64_t ts)
{
    struct ns_timeline_replay *r = s->r;
    int64_t context = s->depth ? s->stack[s->depth - 1].context : -1;
    int64_t n = r->segments;
    if (n && r->segment_context[n - 1] == context && r->segment_task[n - 1] == s->task)
        return;
    if (n && r->segment_start[n - 1] == ts) /* a zero-length segment: replace it */
        n--;
    r->segment_start[n] = ts, r->segment_context[n] = context, r->segment_task[n] = s->task;
    r->segment_pid[n] = s->pid, r->segment_since[n] = s->since;
    r->segments = n + 1;
}

static int push(struct timeline_state *s, int64_t kind, int64_t key, int64_t label, int hard,
                int timer)
{
    if (reserve((void **)&s->stack, &s->capacity, s->depth + 1, sizeof *s->stack) < 0)
        return -1;
    struct ns_timeline_replay *r = s->r;
    r->context_label[r->contexts] = use_label(s, label);
    s->stack[s->depth++] = (struct open_handler){kind, key, r->contexts++, hard, timer, 0, 0, -1,
                                                 -1, -1};
    return 0;
}

/* A hard IRQ's label from the hrtimers it ran (attribute.py's docstring). */
static void close_hard(struct timeline_state *s, const struct open_handler *h)
{
    const struct ns_timeline_replay *r = s->r;
    int64_t label;
    if (h->any_tick || (h->timer && h->functions == 0))
        label = r->tick_label;
    else if (h->timer && h->woke >= 0)
        label = r->function_own_label[h->woke];
    else if (h->timer)
        label = r->function_label[h->first_function];
    else
        return;
    r->context_label[h->context] = use_label(s, label);
}

/* Closes the innermost (kind, key) and whatever is above it (it lost its exit). */
static void pop(struct timeline_state *s, int64_t kind, int64_t key)
{
    for (int64_t d = s->depth - 1; d >= 0; d--) {
        if (s->stack[d].kind == kind && s->stack[d].key == key) {
            s->depth = d;
            if (s->stack[d].hard)
                close_hard(s, &s->stack[d]);
            return;
        }
    }
}

static struct open_handler *innermost_hard(struct timeline_state *s)
{
    for (int64_t d = s->depth - 1; d >= 0; d--)
        if (s->stack[d].hard)
            return &s->stack[d];
    return NULL;
}

static int timeline_event(struct timeline_state *s, int64_t i)
{
    struct ns_timeline_replay *r = s->r;
    int64_t ts = r->event_ts[i], value = r->value[i];
    if (s->depth && s->stack[s->depth - 1].kind == NS_KIND_FAULT)
        s->depth--; /* a fault lasts until the next event */
    struct open_handler *h;
    switch (r->action[i]) {
    case NS_ACT_SKIP:
        return 0;
    case NS_ACT_PUSH:
    case NS_ACT_PUSH_HARD:
    case NS_ACT_PUSH_TIMER:
        if (push(s, r->kind[i], r->key[i], value, r->action[i] != NS_ACT_PUSH,
                 r->action[i] == NS_ACT_PUSH_TIMER) < 0)
            return -1;
        break;
    case NS_ACT_POP:
        pop(s, r->kind[i], r->key[i]);
        break;
    case NS_ACT_HRTIMER:
        if ((h = innermost_hard(s)) != NULL) {
            if (h->functions++ == 0)
                h->first_function = value;
            h->last_function = value;
            h->any_tick |= r->function_tick[value] != 0;
        }
        break;
    case NS_ACT_OWNER_WAKEUP:
        r->wakeups[r->n_wakeups++] = ts;
        if ((h = innermost_hard(s)) != NULL)
            h->woke = h->functions ? h->last_function : r->n_functions;
        break;
    }
    mark(s, ts);
    return 0;
}

int ns_replay_timeline(struct ns_timeline_replay *r)
{
    struct timeline_state s = {.r = r, .task = r->task, .pid = r->pid, .since = INT64_MIN};
    int result = 0;
    r->segments = r->contexts = r->n_wakeups = r->n_sleeps = 0;
    mark(&s, INT64_MIN);
    for (int64_t n = 0; n < r->n_items && result == 0; n++) {
        int64_t ref = r->item_ref[n];
        switch (r->item_kind[n]) {
        case NS_ITEM_EVENT:
            result = timeline_event(&s, ref);
            break;
        case NS_ITEM_SWITCH: /* no handler stays open across a context switch */
            if (r->owner_sleeps[ref])
                r->sleeps[r->n_sleeps++] = r->switch_ts[ref];
            s.depth = 0;
            s.task = r->switch_task[ref], s.pid = r->switch_pid[ref], s.since = r->switch_ts[ref];
            mark(&s, r->switch_ts[ref]);
            break;
        case NS_ITEM_OVERLAY_ENTRY: {
            int timer = r->overlay_timer[ref] != 0;
            result = push(&s, NS_KIND_OVERLAY, ref, r->overlay_label[ref], timer, timer);
            mark(&s, r->overlay_start[ref]);
            break;
        }
        case NS_ITEM_OVERLAY_EXIT:
            pop(&s, NS_KIND_OVERLAY, ref);
            mark(&s, r->overlay_end[ref]);
            break;
        }
    }
    free(s.stack);
    return result;
}

/* -- attribute._split -- */

/* How much of injected set j lies before time t. */
static int64_t injected_before(const struct ns_span_split *r, int64_t j, int64_t t)
{
    int64_t lo = r->injected_rows[j], hi = r->injected_rows[j + 1];
    int64_t first = lo;
    while (lo < hi) { /* the last interval starting at or before t */
        int64_t mid = lo + (hi - lo) / 2;
        if (r->injected_start[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t k = lo > first ? lo - 1 : first;
    int64_t into = t - r->injected_start[k];
    into = into < 0 ? 0 : into > r->injected_length[k] ? r->injected_length[k] : into;
    return r->injected_before[k] + into;
}

/* A piece of a span whose cause waits for the span's end to be known. */
struct piece {
    int64_t label; /* -1: unexplained so far */
    int64_t ns;
    int fallback; /* which unexplained label if none: 0 by the span, 1 idle, 2 before wakeup */
};

int64_t ns_split_spans(const struct ns_span_split *r)
{
    int64_t most = 1;
    for (int64_t i = 0; i < r->n_spans; i++)
        if (r->last[i] - r->first[i] + 1 > most)
            most = r->last[i] - r->first[i] + 1;
    struct piece *pieces = malloc((size_t)most * sizeof *pieces);
    int64_t *injected_ns = calloc((size_t)r->n_injected + 1, sizeof *injected_ns);
    int64_t *row_of = malloc((size_t)(r->n_labels ? r->n_labels : 1) * sizeof *row_of);
    int64_t *row_span = malloc((size_t)(r->n_labels ? r->n_labels : 1) * sizeof *row_span);
    if (pieces == NULL || injected_ns == NULL || row_of == NULL || row_span == NULL) {
        free(pieces), free(injected_ns), free(row_of), free(row_span);
        return -1;
    }
    for (int64_t l = 0; l < r->n_labels; l++)
        row_span[l] = -1;
    int64_t rows = 0;
    for (int64_t i = 0; i < r->n_spans; i++) {
        int64_t start = r->start[i], end = r->end[i], owner = r->owner[i];
        int64_t explained_ns = 0, n = 0;
        for (int64_t j = 0; j < r->n_injected; j++)
            injected_ns[j] = 0;
        for (int64_t seg = r->first[i]; seg <= r->last[i]; seg++, n++) {
            int64_t seg_start = r->segment_start[seg];
            int64_t seg_end = seg + 1 < r->n_segments ? r->segment_start[seg + 1] : INT64_MAX;
            int64_t piece_start = seg_start > start ? seg_start : start;
            int64_t overlap = (seg_end < end ? seg_end : end) - piece_start;
            int64_t task = r->segment_task[seg], pid = r->segment_pid[seg];
            int64_t label = r->segment_label[seg];
            int foreign, before = 0, idle = 0;
            if (r->woken_at == NULL) {
                foreign = pid != owner && task >= 0 && r->segment_since[seg] > start;
            } else {
                int woken = piece_start >= r->woken_at[i];
                idle = task >= 0 && pid == NS_IDLE_PID;
                foreign = pid != owner && task >= 0 && !idle && woken;
                before = pid != owner && task >= 0 && !idle && !woken;
            }
            int handler = label >= 0 && !(r->is_fault[label] && (foreign || before));
            int64_t resolved = handler ? label : foreign ? r->thread_label[task] : -1;
            if (resolved < 0) { /* injected noise takes what nothing else explains */
                int64_t piece_end = piece_start + (overlap > 0 ? overlap : 0);
                for (int64_t j = 0; j < r->n_injected; j++) {
                    int64_t inside = injected_before(r, j, piece_end) -
                                     injected_before(r, j, piece_start);
                    overlap -= inside;
                    injected_ns[j] += inside;
                    explained_ns += inside;
                }
            } else if (overlap > 0) {
                explained_ns += overlap;
            }
            pieces[n] = (struct piece){resolved, overlap, idle ? 1 : before ? 2 : 0};
        }
        int64_t by_span = explained_ns > 0 ? r->outside : r->no_guest;
        int64_t first_row = rows;
        for (int64_t k = 0; k <= n; k++) {
            int64_t label, ns;
            if (k < n) {
                ns = pieces[k].ns;
                label = pieces[k].label >= 0 ? pieces[k].label
                        : pieces[k].fallback == 1 ? r->cpu_idle
                        : pieces[k].fallback == 2 ? r->before_wakeup : by_span;
                if (ns <= 0)
                    continue;
                if (row_span[label] == i) {
                    r->out_ns[row_of[label]] += ns;
                    continue;
                }
                row_span[label] = i, row_of[label] = rows;
                r->out_span[rows] = i, r->out_label[rows] = label, r->out_ns[rows] = ns;
                rows++;
            } else { /* each injected set's time, after the pieces' causes */
                for (int64_t j = 0; j < r->n_injected; j++) {
                    if (injected_ns[j] <= 0)
                        continue;
                    r->out_span[rows] = i, r->out_label[rows] = r->injected_label[j];
                    r->out_ns[rows] = injected_ns[j];
                    rows++;
                }
            }
        }
        int64_t best = -1; /* the row of the primary cause */
        for (int64_t k = first_row; k < rows; k++) {
            int64_t label = r->out_label[k];
            if (r->explains[label] &&
                (best < 0 || r->out_ns[k] > r->out_ns[best] ||
                 (r->out_ns[k] == r->out_ns[best] && r->rank[label] < r->rank[r->out_label[best]])))
                best = k;
        }
        r->primary[i] = best < 0 ? r->unexplained : r->out_label[best];
    }
    free(pieces), free(injected_ns), free(row_of), free(row_span);
    return rows;
}
