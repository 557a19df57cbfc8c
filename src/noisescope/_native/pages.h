/* Ring-buffer pages as tracefs gives them (per_cpu/cpuN/trace_pipe_raw):
 * finding the data records and their time stamps. Plain C, no Python API. */
#ifndef NOISESCOPE_PAGES_H
#define NOISESCOPE_PAGES_H

#include <stddef.h>
#include <stdint.h>

/* Where the page time stamp, commit word and data sit (events/header_page). */
struct ns_page_layout {
    size_t timestamp_offset;
    size_t commit_offset;
    size_t commit_size; /* 4 or 8 bytes */
    size_t data_offset;
    size_t page_size;
};

/* Walks every page in data[0..size) (a page counts if its header is there)
 * and writes, for each data record, where its payload starts (bytes into
 * data) and its time stamp. Returns how many records there were; only the
 * first `capacity` are written (a page of page_size bytes holds at most
 * page_size / 4). *missed counts the pages the kernel flagged as following
 * lost events. Data cut off in the middle of a record ends the walk. */
size_t ns_walk_pages(const uint8_t *data, size_t size, const struct ns_page_layout *layout,
                     int64_t *offsets, uint64_t *stamps, size_t capacity, uint64_t *missed);

/* -- the records' fields (trace.events.RawDecoder) -- */

/* How a field of a record becomes a number. Keys are numbered per call from
 * 1 in order of first appearance (0: none): records repeat a few names
 * (commands, IRQ names, hrtimer functions) millions of times, and the caller
 * turns each distinct key into text once. */
enum ns_field_kind {
    NS_FIELD_ABSENT = 0,   /* the format has no such field: 0 */
    NS_FIELD_INT = 1,      /* an integer of 1, 2, 4 or 8 bytes */
    NS_FIELD_BYTES = 2,    /* a char array: a key of its bytes, trailing NULs cut */
    NS_FIELD_DATA_LOC = 3, /* a __data_loc string: a key of its bytes up to the first NUL */
    NS_FIELD_INT_KEY = 4,  /* an integer numbered as a key (a symbol, a vector, a state) */
};

enum { NS_ROLE_IGNORED = 0, NS_ROLE_EVENT = 1, NS_ROLE_SWITCH = 2, NS_ROLES = 3 };
#define NS_RECORD_FIELDS 7

struct ns_record_field {
    int64_t kind, offset, size, is_signed;
    int64_t tag; /* keys of different tags never match (how their text is made differs) */
};

/* A record format: which table its records go to, and the fields taken. */
struct ns_record_format {
    int64_t role;
    struct ns_record_field field[NS_RECORD_FIELDS];
};

/* The records of one role: time stamp, format slot and each field's value
 * (a key's number), in the order recorded; room for every record. */
struct ns_decoded {
    uint64_t *stamp;
    int64_t *slot;
    int64_t *value[NS_RECORD_FIELDS];
    size_t count;
};

/* The distinct keys, key number k at index k - 1: tag, and where the bytes
 * are in data (an integer key: its value) and their length (-1 for an
 * integer); room for `capacity` of them. */
struct ns_record_keys {
    int64_t *tag, *where, *length;
    size_t capacity, count;
};

/* Decodes the records whose payloads start at offsets[0..n) (ns_walk_pages)
 * into out[role] by their format: slot_of_id[common_type] (-1: not taken)
 * indexes formats. A field that does not fit in data reads as absent.
 * Returns 0, or -1 when out of memory or out of room for the keys. */
int ns_decode_records(const uint8_t *data, size_t size, const int64_t *offsets,
                      const uint64_t *stamps, size_t n, const int16_t *slot_of_id,
                      const struct ns_record_format *formats, size_t n_formats,
                      struct ns_decoded *out, struct ns_record_keys *keys);

#endif
