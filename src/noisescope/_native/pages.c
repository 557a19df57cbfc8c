/* The ring buffer's page format (kernel/trace/ring_buffer.c): a page header
 * (time stamp, commit = bytes of data, top bits flagging lost events), then
 * records, each a 32-bit word (type_len: 5 bits, time delta: 27 bits) and
 * its payload. type_len 1..28: payload of type_len words; 0: its length in
 * bytes follows; 29: padding (a discarded record, or the end of the page's
 * data when its delta is 0); 30: a time extend; 31: an absolute time stamp. */
#include "pages.h"

#include <string.h>

enum { RB_PADDING = 29, RB_TIME_EXTEND = 30, RB_TIME_STAMP = 31 };
#define TS_SHIFT 27
#define TS_MSB (0xF8ULL << 56) /* absolute time stamps leave out these top bits */
#define COMMIT_MASK ((1ULL << 27) - 1)

static uint32_t u32_at(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t u64_at(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

size_t ns_walk_pages(const uint8_t *data, size_t size, const struct ns_page_layout *layout,
                     int64_t *offsets, uint64_t *stamps, size_t capacity, uint64_t *missed)
{
    size_t found = 0;
    *missed = 0;
    if (layout->page_size == 0 || size < layout->data_offset)
        return 0;
    for (size_t page = 0; page + layout->data_offset <= size; page += layout->page_size) {
        uint64_t ts = u64_at(data + page + layout->timestamp_offset);
        uint64_t commit = layout->commit_size == 8 ? u64_at(data + page + layout->commit_offset)
                                                   : u32_at(data + page + layout->commit_offset);
        if (commit >> 30)
            (*missed)++;
        size_t pos = page + layout->data_offset;
        size_t end = pos + (size_t)(commit & COMMIT_MASK);
        if (end > page + layout->page_size)
            end = page + layout->page_size;
        if (end > size)
            end = size;
        while (pos + 4 <= end) {
            uint32_t word = u32_at(data + pos);
            uint32_t kind = word & 31, delta = word >> 5;
            if ((kind >= RB_PADDING || kind == 0) && pos + 8 > size)
                break; /* the word after the header is cut off */
            if (kind == RB_PADDING) {
                if (delta == 0) /* the rest of the page is empty */
                    break;
                ts += delta;
                pos += 4 + (size_t)u32_at(data + pos + 4);
            } else if (kind == RB_TIME_EXTEND) {
                ts += ((uint64_t)u32_at(data + pos + 4) << TS_SHIFT) + delta;
                pos += 8;
            } else if (kind == RB_TIME_STAMP) {
                uint64_t absolute = ((uint64_t)u32_at(data + pos + 4) << TS_SHIFT) + delta;
                ts = absolute | (ts & TS_MSB);
                pos += 8;
            } else {
                ts += delta;
                size_t payload = kind == 0 ? pos + 8 : pos + 4;
                size_t length = kind == 0 ? ((size_t)u32_at(data + pos + 4) + 3) & ~(size_t)3
                                          : 4 * (size_t)kind;
                if (pos + 4 + length > size) /* its payload is cut off */
                    break;
                if (found < capacity) {
                    offsets[found] = (int64_t)payload;
                    stamps[found] = ts;
                }
                found++;
                pos += 4 + length;
            }
        }
    }
    return found;
}

/* -- the records' fields -- */

#include <stdlib.h>

static int64_t int_at(const uint8_t *p, int64_t size, int is_signed)
{
    switch (size) {
    case 1:
        return is_signed ? (int64_t)(int8_t)p[0] : (int64_t)p[0];
    case 2: {
        uint16_t v;
        memcpy(&v, p, sizeof v);
        return is_signed ? (int64_t)(int16_t)v : (int64_t)v;
    }
    case 4: {
        uint32_t v = u32_at(p);
        return is_signed ? (int64_t)(int32_t)v : (int64_t)v;
    }
    case 8:
        return (int64_t)u64_at(p);
    default:
        return 0;
    }
}

/* The distinct keys of one call: an open-addressing table of their numbers. */
struct key_table {
    const uint8_t *data;
    struct ns_record_keys *keys;
    int64_t *slots; /* -1: empty */
    size_t capacity;
};

/* A step of a key's hash: a word mixed in (a multiply and a shift). */
static uint64_t mix_word(uint64_t hash, uint64_t word)
{
    hash = (hash ^ word) * 0xff51afd7ed558ccdULL;
    return hash ^ (hash >> 32);
}

/* A key's hash, eight bytes at a time (byte by byte, hashing the commands'
 * 16 bytes took a seventh of the native decoding). */
static uint64_t key_hash(int64_t tag, const uint8_t *bytes, int64_t length, int64_t value)
{
    uint64_t hash = 0x9e3779b97f4a7c15ULL * (uint64_t)(tag + 1);
    if (length < 0)
        return mix_word(hash, (uint64_t)value);
    int64_t i = 0;
    for (; i + 8 <= length; i += 8)
        hash = mix_word(hash, u64_at(bytes + i));
    if (i < length) { /* the last bytes, and how many (so that a zero byte counts) */
        uint64_t rest = 0;
        memcpy(&rest, bytes + i, (size_t)(length - i));
        hash = mix_word(hash, rest ^ ((uint64_t)(length - i) << 56));
    }
    return hash;
}

static int key_matches(const struct key_table *t, int64_t k, int64_t tag, int64_t where,
                       int64_t length)
{
    const struct ns_record_keys *keys = t->keys;
    if (keys->tag[k] != tag || keys->length[k] != length)
        return 0;
    if (length < 0)
        return keys->where[k] == where;
    return memcmp(t->data + keys->where[k], t->data + where, (size_t)length) == 0;
}

static int grow_keys(struct key_table *t)
{
    size_t capacity = t->capacity ? 2 * t->capacity : 256;
    int64_t *slots = malloc(capacity * sizeof *slots);
    if (slots == NULL)
        return -1;
    memset(slots, 0xff, capacity * sizeof *slots);
    const struct ns_record_keys *keys = t->keys;
    for (size_t k = 0; k < keys->count; k++) {
        const uint8_t *bytes = keys->length[k] < 0 ? NULL : t->data + keys->where[k];
        size_t at = key_hash(keys->tag[k], bytes, keys->length[k], keys->where[k]) & (capacity - 1);
        while (slots[at] >= 0)
            at = (at + 1) & (capacity - 1);
        slots[at] = (int64_t)k;
    }
    free(t->slots);
    t->slots = slots;
    t->capacity = capacity;
    return 0;
}

/* The number of a key (tag; bytes at data[where..where+length), or the integer
 * `where` when length is -1), numbered anew if it is new; -1 when out of memory
 * or of room. */
static int64_t find_key(struct key_table *t, int64_t tag, int64_t where, int64_t length)
{
    if (2 * (t->keys->count + 1) > t->capacity && grow_keys(t) < 0)
        return -1;
    const uint8_t *bytes = length < 0 ? NULL : t->data + where;
    size_t at = key_hash(tag, bytes, length, where) & (t->capacity - 1);
    while (t->slots[at] >= 0) {
        if (key_matches(t, t->slots[at], tag, where, length))
            return t->slots[at] + 1;
        at = (at + 1) & (t->capacity - 1);
    }
    struct ns_record_keys *keys = t->keys;
    if (keys->count == keys->capacity)
        return -1;
    int64_t k = (int64_t)keys->count++;
    keys->tag[k] = tag, keys->where[k] = where, keys->length[k] = length;
    t->slots[at] = k;
    return k + 1;
}

/* find_key(), the numbers this field of this format had last first (recent[0]
 * the latest, recent[1] the one before; 0: none). A field mostly repeats one
 * of its last two values (the same handler or timer function; the two tasks a
 * CPU switches between), then found by a comparison instead of a hash. */
static int64_t key_number(struct key_table *t, int64_t tag, int64_t where, int64_t length,
                          int64_t *recent)
{
    if (recent[0] > 0 && key_matches(t, recent[0] - 1, tag, where, length))
        return recent[0];
    int64_t number = recent[1] > 0 && key_matches(t, recent[1] - 1, tag, where, length)
                         ? recent[1] : find_key(t, tag, where, length);
    if (number > 0)
        recent[1] = recent[0], recent[0] = number;
    return number;
}

/* One field of the record whose payload starts at `payload`: its value, or
 * its key's number (from 1); 0 when absent or out of the data; -1 when out
 * of memory or of room for keys. */
static int64_t field_value(struct key_table *t, size_t size, size_t payload,
                           const struct ns_record_field *f, int64_t *recent)
{
    if (f->kind == NS_FIELD_ABSENT || f->offset < 0 || f->size <= 0 ||
        payload + (size_t)f->offset + (size_t)f->size > size)
        return 0;
    const uint8_t *at = t->data + payload + f->offset;
    switch (f->kind) {
    case NS_FIELD_INT:
        return int_at(at, f->size, (int)f->is_signed);
    case NS_FIELD_INT_KEY:
        return key_number(t, f->tag, int_at(at, f->size, (int)f->is_signed), -1, recent);
    case NS_FIELD_BYTES: {
        int64_t length = f->size;
        while (length > 0 && at[length - 1] == 0)
            length--;
        return key_number(t, f->tag, (int64_t)(payload + (size_t)f->offset), length, recent);
    }
    case NS_FIELD_DATA_LOC: {
        uint32_t loc = u32_at(at);
        size_t start = payload + (loc & 0xffff), length = loc >> 16;
        if (start > size)
            start = size;
        if (length > size - start)
            length = size - start;
        const uint8_t *end = memchr(t->data + start, 0, length);
        if (end != NULL)
            length = (size_t)(end - (t->data + start));
        return key_number(t, f->tag, (int64_t)start, (int64_t)length, recent);
    }
    default:
        return 0;
    }
}

int ns_decode_records(const uint8_t *data, size_t size, const int64_t *offsets,
                      const uint64_t *stamps, size_t n, const int16_t *slot_of_id,
                      const struct ns_record_format *formats, size_t n_formats,
                      struct ns_decoded *out, struct ns_record_keys *keys)
{
    struct key_table table = {data, keys, NULL, 0};
    /* each format's fields' last two keys (key_number) */
    int64_t *recent = calloc(2 * n_formats * NS_RECORD_FIELDS + 1, sizeof *recent);
    int failed = recent == NULL;
    keys->count = 0;
    for (int role = 0; role < NS_ROLES; role++)
        out[role].count = 0;
    for (size_t r = 0; r < n && !failed; r++) {
        size_t payload = (size_t)offsets[r];
        if (payload + 2 > size)
            continue;
        uint16_t id;
        memcpy(&id, data + payload, sizeof id);
        int16_t slot = slot_of_id[id];
        if (slot < 0 || (size_t)slot >= n_formats)
            continue;
        const struct ns_record_format *format = &formats[slot];
        if (format->role <= NS_ROLE_IGNORED || format->role >= NS_ROLES)
            continue;
        struct ns_decoded *o = &out[format->role];
        size_t i = o->count++;
        o->stamp[i] = stamps[r];
        o->slot[i] = slot;
        for (int f = 0; f < NS_RECORD_FIELDS; f++) {
            const struct ns_record_field *field = &format->field[f];
            int64_t value = field_value(&table, size, payload, field,
                                        &recent[2 * ((size_t)slot * NS_RECORD_FIELDS + f)]);
            if (value < 0 && field->kind != NS_FIELD_INT) { /* a key: out of memory or room */
                failed = 1;
                break;
            }
            if (o->value[f] != NULL)
                o->value[f][i] = value;
        }
    }
    free(table.slots);
    free(recent);
    return failed ? -1 : 0;
}
