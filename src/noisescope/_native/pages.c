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
