"""The trace readers: format files, raw ring-buffer pages and trace text.

The captured fixture holds both renderings of one real buffer (the kernel's
text and its raw pages), so the raw decoder is checked against the kernel's
own formatting of the same events."""

from __future__ import annotations

import gzip
import json
import struct
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from noisescope.clock import MeasurementClock
from noisescope.trace.events import (
    PageLayout,
    RawDecoder,
    Symbols,
    TraceEvents,
    decode_raw,
    parse_format,
    parse_header_page,
    parse_text,
    prev_state_text,
    text_timestamp,
    walk_pages,
)
from noisescope.trace.session import RAW_LAYOUT, TraceClock

from ..conftest import FIXTURES

CAPTURE = FIXTURES / "trace" / "kvm-detour-inject"


def identity(stamps):
    return np.asarray(stamps).astype(np.int64)


def load_capture(path: Path = CAPTURE):
    formats = {p.stem: parse_format(p.read_text()) for p in (path / "formats").glob("*.format")}
    layout = parse_header_page((path / "formats" / "header_page").read_text())
    pages = {int(p.name[3:].split(".")[0]): gzip.decompress(p.read_bytes())
             for p in path.glob("cpu*.raw.gz")}
    text = gzip.decompress((path / "trace.txt.gz").read_bytes()).decode()
    clock = MeasurementClock.from_dict(json.loads((path / "clock.json").read_text()))
    return formats, layout, pages, text, clock


def test_header_page_layout_is_the_one_the_decoder_knows():
    _, layout, *_ = load_capture()
    assert layout == RAW_LAYOUT


def test_format_file_fields():
    formats, *_ = load_capture()
    switch = formats["sched_switch"]
    assert switch.fields["prev_comm"].array and switch.fields["prev_comm"].size == 16
    assert not switch.fields["prev_pid"].array and switch.fields["prev_pid"].signed
    assert switch.state_flags()[0] == (1, "S")
    irq = formats["irq_handler_entry"]
    assert irq.fields["name"].data_loc
    with pytest.raises(ValueError):
        parse_format("nonsense")


def test_raw_pages_decode_to_what_the_kernel_prints():
    formats, layout, pages, text, clock = load_capture()
    to_ns = TraceClock("x86-tsc", clock).to_ns
    raw, missed = decode_raw(pages, formats, layout, to_ns, Symbols(CAPTURE / "kallsyms"))
    printed = parse_text(text.splitlines(), to_ns)
    assert missed == 0
    assert raw.events.rows > 1000 and raw.switches.rows > 500
    for name in raw.events.columns:
        assert np.array_equal(raw.events[name], printed.events[name]), name
    for name in raw.switches.columns:
        assert np.array_equal(raw.switches[name], printed.switches[name]), name
    names = set(raw.events["event"].tolist())
    assert {"local_timer_entry", "local_timer_exit", "hrtimer_expire_entry"} <= names
    functions = set(raw.events.filter(raw.events["event"] == "hrtimer_expire_entry")["name"])
    assert "tick_nohz_handler" in functions and "hrtimer_wakeup" in functions
    # times land on the bundle's timeline, inside the traced interval
    run = json.loads((CAPTURE / "run.json").read_text())
    assert raw.events["timestamp_ns"].min() >= run["coverage"]["start_ns"][0]
    assert raw.events["timestamp_ns"].max() <= run["coverage"]["end_ns"][0]


def test_unresolvable_functions_keep_their_address(tmp_path):
    formats, layout, pages, _, clock = load_capture()
    (tmp_path / "kallsyms").write_text("")
    raw, _ = decode_raw(pages, formats, layout, identity, Symbols(tmp_path / "kallsyms"))
    functions = raw.events.filter(raw.events["event"] == "hrtimer_expire_entry")["name"]
    assert all(f.startswith("0xffffffff") for f in functions)


def _page(records: list[bytes], timestamp: int, size: int = 4096) -> bytes:
    data = b"".join(records)
    head = struct.pack("=QQ", timestamp, len(data))
    return (head + data).ljust(size, b"\0")


def _header(kind: int, delta: int) -> bytes:
    return struct.pack("=I", kind | (delta << 5))


def test_walk_pages_follows_every_record_kind():
    payload = struct.pack("=HBBi", 7, 0, 0, 42) + b"\0" * 4  # 12 bytes
    records = [
        _header(3, 10) + payload,  # small record: type_len = 3 words, +10
        _header(30, 5) + struct.pack("=I", 1),  # time extend: +(1 << 27) + 5
        _header(29, 2) + struct.pack("=I", 8) + b"\0" * 4,  # discarded record (padding), +2
        _header(0, 1) + struct.pack("=I", 4 + 40) + b"\1" * 40,  # long record, +1
        _header(31, 3) + struct.pack("=I", 2),  # absolute time stamp (2 << 27) + 3
        _header(3, 1) + payload,
        _header(29, 0),  # end of the page's data
    ]
    walked = walk_pages(_page(records, 1000), PageLayout())
    assert walked.timestamps.tolist() == [1010, 1010 + (1 << 27) + 5 + 2 + 1, (2 << 27) + 3 + 1]
    assert walked.offsets.tolist() == [16 + 4, 16 + 16 + 8 + 12 + 8, 16 + 16 + 8 + 12 + 48 + 8 + 4]


def _record(delta: int, payload: bytes) -> bytes:
    """A data record: header word (its length in words) and payload, padded to words."""
    payload = payload.ljust(-(-len(payload) // 4) * 4, b"\0")
    return _header(len(payload) // 4, delta) + payload


def _irq_entry(pid: int, irq: int, name: bytes, loc: int | None = None) -> bytes:
    """irq_handler_entry (fixture format 225): its name a __data_loc string after the fields."""
    where = loc if loc is not None else (len(name) << 16) | 16
    return struct.pack("=HBBiiI", 225, 0, 0, pid, irq, where) + name


def _switch(prev: bytes, prev_pid: int, state: int, next_: bytes, next_pid: int) -> bytes:
    return (struct.pack("=HBBi", 372, 0, 0, prev_pid) + prev.ljust(16, b"\0")
            + struct.pack("=iiq", prev_pid, 120, state) + next_.ljust(16, b"\0")
            + struct.pack("=ii", next_pid, 120))


def test_the_native_decoder_reads_every_field_as_the_formats_say():
    formats, layout, *_ = load_capture()
    records = [
        _record(10, _irq_entry(7, 11, b"eth0\0")),
        _record(0, struct.pack("=HBBi", 9999, 0, 0, 5)),  # a format the decoder does not know
        _record(1, _switch(b"a\0b", 7, 1, b"swapper/1", 0)),  # an inner NUL is kept
        _record(0, struct.pack("=HBBi", 224, 0, 0, 7) + struct.pack("=ii", 11, 1)),  # irq exit
        _record(0, struct.pack("=HBBi", 165, 0, 0, 7) + b"\0" * 4),  # local_timer_entry, same time
        _record(3, _irq_entry(8, 12, b"virtio", loc=(64 << 16) | 0xFFF0)),  # points past the data
        _record(1, _irq_entry(9, 13, b"eth0\0")),
    ]
    page = _page(records, 1000)
    decoded = decode_raw({3: page}, formats, layout, identity)[0]
    events, switches = decoded.events, decoded.switches
    # at equal times (1011) by format id: local_timer_entry (165) before irq_handler_exit (224)
    assert events["event"].tolist() == ["irq_handler_entry", "local_timer_entry",
                                        "irq_handler_exit", "irq_handler_entry",
                                        "irq_handler_entry"]
    assert events["timestamp_ns"].tolist() == [1010, 1011, 1011, 1014, 1015]
    assert events["pid"].tolist() == [7, 7, 7, 8, 9] and events["cpu"].tolist() == [3] * 5
    assert events["number"].tolist() == [11, 0, 11, 12, 13]
    # a __data_loc string ends at its NUL; one pointing past the data is empty
    assert events["name"].tolist() == ["eth0", "", "", "", "eth0"]
    assert events["name"][0] is events["name"][4]  # one str object per distinct text
    assert switches["prev_comm"].tolist() == ["a\x00b"] and switches["next_comm"].tolist() == [
        "swapper/1"]
    assert switches["prev_state"].tolist() == ["S"] and switches["next_pid"].tolist() == [0]
    assert switches["timestamp_ns"].tolist() == [1011] and switches["prev_prio"].tolist() == [120]


def test_commands_that_repeat_alternate_or_differ_late_decode_each_as_its_own():
    # the decoder numbers a field's texts by its last two values first, then a hash
    # of 8-byte words: names equal in their first 8 or 15 bytes, or a prefix of
    # another, and runs that alternate, repeat and come back, each keep their text
    formats, layout, *_ = load_capture()
    names = [b"kworker/0:1", b"kworker/0:10", b"abcdefgh", b"abcdefg", b"abcdefgh1234567",
             b"abcdefgh1234568", b"x"]
    rng = np.random.default_rng(7)
    picks = [*[0, 1] * 5, *[2] * 4, *rng.integers(0, len(names), 300).tolist(), 3, 2, 4, 5, 6]
    records = [_record(1, record) for k, (a, b) in enumerate(pairwise(picks))
               for record in (_switch(names[a], 10 + a, 1, names[b], 10 + b),
                              _irq_entry(10 + b, k, names[b] + b"\0"))]
    decoder = RawDecoder(formats, layout, identity)
    per_page = 50  # several pages, decoded in two batches
    pages = [_page(records[i:i + per_page], 1000 + 1000 * i) for i in range(0, len(records), per_page)]
    first = decoder.decode(0, b"".join(pages[:-1]))
    kept = {(table, name): getattr(first, table)[name].copy()
            for table in ("events", "switches") for name in getattr(first, table).columns}
    last = decoder.decode(0, pages[-1])
    for (table, name), values in kept.items():  # a batch's tables are its own
        assert np.array_equal(getattr(first, table)[name], values), name
    both = TraceEvents.concat([first, last])
    switches, events = both.switches, both.events
    assert events["number"].tolist() == list(range(len(picks) - 1))
    assert events["name"].tolist() == [names[b].decode() for b in picks[1:]]
    assert switches["prev_comm"].tolist() == [names[a].decode() for a in picks[:-1]]
    assert switches["next_comm"].tolist() == [names[b].decode() for b in picks[1:]]
    assert switches["prev_pid"].tolist() == [10 + a for a in picks[:-1]]


def test_walk_pages_counts_pages_after_lost_events():
    page = bytearray(_page([_header(3, 1) + b"\0" * 12], 5))
    struct.pack_into("=Q", page, 8, 16 | (1 << 31))  # RB_MISSED_EVENTS
    assert walk_pages(bytes(page) * 2, PageLayout()).missed_pages == 2


def test_walk_pages_with_a_4_byte_commit_word_never_reads_past_a_page():
    layout = PageLayout(commit_size=4, data_offset=16, page_size=64)  # 48 bytes of data
    page = struct.pack("=QIxxxx", 100, 80) + (_header(1, 3) + b"\0" * 4) * 6  # commit says 80
    walked = walk_pages(page * 3, layout)
    assert walked.timestamps.tolist() == [103, 106, 109, 112, 115, 118] * 3
    assert walked.offsets.tolist()[:2] == [16 + 4, 16 + 8 + 4] and walked.offsets[-1] == 128 + 60


def test_walk_pages_stops_at_the_end_of_cut_off_data():
    page = _page([_header(3, 1) + b"\0" * 12] * 10, 0)  # commit: 160 bytes of records
    for cut in (16, 17, 40, 41, 61, 100):  # in a record's header word or payload
        walked = walk_pages(page[:cut], PageLayout())
        assert walked.timestamps.tolist() == list(range(1, (cut - 16) // 16 + 1))
    assert len(walk_pages(page[:15], PageLayout()).offsets) == 0  # no whole page header


@pytest.mark.parametrize("value, text", [
    (0, "R"), (0x100, "R+"), (1, "S"), (2, "D"), (0x80, "I"), (3, "S|D"),
])
def test_prev_state_letters(value, text):
    assert prev_state_text(value) == text


def test_text_timestamps_in_counter_and_seconds_form():
    assert text_timestamp("4315096455970") == 4315096455970
    assert text_timestamp("1662.372007") == 1662_372_007_000
    assert text_timestamp("1662.372007535") == 1662_372_007_535


def test_text_lines_with_odd_commands_and_tgid_columns():
    lines = [
        "# tracer: nop",
        "  memfd:sealed-91-10081   [001] d..2. 100: sched_switch: prev_comm=memfd:sealed-91 "
        "prev_pid=10081 prev_prio=120 prev_state=R+ ==> next_comm=Web Content next_pid=7 next_prio=110",
        "     <idle>-0     (-------) [000] d.h.. 200: irq_handler_entry: irq=25 name=virtio0-input.0",
        "          bash-5       [000] ..s.. 300: softirq_entry: vec=9 [action=RCU]",
        "     swapper/0-0       [000] d.Z.. 400: nmi_handler: perf_event_nmi_handler() delta_ns: 3100 "
        "handled: 1",
        "  kworker/0:1-11      [000] ..... 500: workqueue_execute_end: work struct 00000000deadbeef: "
        "function vmstat_update",
        "  kworker/0:1-11      [000] ..... 600: irq_noise: local_timer:236 start 1.000000100 "
        "duration 2500 ns",
        "  something unparseable",
    ]
    trace = parse_text(lines, identity)
    switch = trace.switches
    assert switch["prev_comm"].tolist() == ["memfd:sealed-91"]
    assert switch["next_comm"].tolist() == ["Web Content"] and switch["prev_state"].tolist() == ["R+"]
    events = trace.events
    assert events["event"].tolist() == ["irq_handler_entry", "softirq_entry", "nmi_handler",
                                        "workqueue_execute_end", "irq_noise"]
    assert events["name"].tolist() == ["virtio0-input.0", "RCU", "perf_event_nmi_handler",
                                       "vmstat_update", "local_timer"]
    assert events["number"].tolist() == [25, 9, 3100, 0, 2500]
    assert events["pid"].tolist() == [0, 5, 0, 11, 11]


def test_concat_and_empty():
    empty = TraceEvents.empty()
    assert empty.events.rows == 0 and "prev_state" in empty.switches.columns
    both = TraceEvents.concat([empty, empty])
    assert both.events.columns == empty.events.columns
