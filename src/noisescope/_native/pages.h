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

#endif
