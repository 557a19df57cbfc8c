"""Reading a recorded trace: the text `trace` file vs the raw per-CPU pages.

    sudo python bench/trace_read.py [--seconds 5] [--rounds 3]

Records a detour run on every CPU (as `noisescope scan` traces it), then
reads the same buffer both ways: the kernel's text rendering (`trace`, read
without consuming, `--rounds` times) parsed by parse_text, and the raw pages
(`per_cpu/cpuN/trace_pipe_raw`, consumed once) decoded by decode_raw (the
decoding repeated `--rounds` times). CPU time of this process, which
includes the kernel's work of formatting or copying, per 1000 events.
"""

from __future__ import annotations

import argparse
import statistics
import time

from noisescope.clock import measurement_clock
from noisescope.host import default_cpus, read_host_facts
from noisescope.probes import ProbeContext
from noisescope.probes import detour as detour_probe
from noisescope.probes.schedule import plan_windows
from noisescope.trace.events import decode_raw, parse_text
from noisescope.trace.session import TraceSession


def cpu_seconds(work) -> tuple[float, object]:
    begun = time.process_time()
    result = work()
    return time.process_time() - begun, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    facts = read_host_facts()
    cpus = default_cpus(facts)
    clock = measurement_clock(facts.tsc_flags)
    schedule, _ = plan_windows(int(args.seconds * 1e9), rt=False)
    with TraceSession(cpus, clock, recording_ns=schedule.elapsed_ns) as session:
        session.start()
        detour_probe.run(ProbeContext(cpus, schedule, clock), threshold_ns=1_000)
        session.instance.write("tracing_on", "0")
        to_ns = session.trace_clock.to_ns
        text_read, text_parse = [], []
        for _ in range(args.rounds):
            read_s, text = cpu_seconds(lambda: session.instance.read("trace"))
            parse_s, parsed = cpu_seconds(lambda t=text: parse_text(t.splitlines(), to_ns))
            text_read.append(read_s)
            text_parse.append(parse_s)
        raw_read, pages = cpu_seconds(lambda: {cpu: b"".join(session.raw_batches(cpu)) for cpu in cpus})
        raw_decode = []
        for _ in range(args.rounds):
            decode_s, (decoded, _) = cpu_seconds(
                lambda: decode_raw(pages, session.formats, session.layout, to_ns, session.symbols))
            raw_decode.append(decode_s)
    events = parsed.events.rows + parsed.switches.rows
    assert decoded.events.rows + decoded.switches.rows == events, "the readers disagree"
    per_k = 1000 / max(events, 1) * 1000  # ms per 1000 events
    text_total = statistics.median(text_read) + statistics.median(text_parse)
    raw_total = raw_read + statistics.median(raw_decode)
    print(f"{events:,} events on CPUs {','.join(map(str, cpus))} in {args.seconds:g} s "
          f"({len(text) / 1e6:.1f} MB of text, {sum(map(len, pages.values())) / 1e6:.1f} MB of pages)")
    print(f"text: read {statistics.median(text_read) * per_k:.2f} + parse "
          f"{statistics.median(text_parse) * per_k:.2f} = {text_total * per_k:.2f} ms CPU per 1000 events")
    print(f"raw:  read {raw_read * per_k:.2f} + decode {statistics.median(raw_decode) * per_k:.2f} = "
          f"{raw_total * per_k:.2f} ms CPU per 1000 events")
    print(f"ratio text/raw: {text_total / raw_total:.2f}")


if __name__ == "__main__":
    main()
