"""Ground truth: noise of known rate and length injected on the measured CPU
must be found by the probes. The injection signals the sampler thread, whose
handler spins for the length and records its own TSC timestamps."""

from __future__ import annotations

import numpy as np

from noisescope.probes import Injection
from noisescope.scan import SECOND, ScanOptions, scan

from ..helpers import measure_quietly, run_delay_fraction

RATE_HZ = 1000.0
LENGTH_NS = 20_000


def measure(cpu: int, probes: tuple[str, ...], inject: bool):
    injections = (Injection(cpu, RATE_HZ, LENGTH_NS, "signal"),) if inject else ()
    return scan(ScanOptions(cpus=(cpu,), duration_ns=2 * SECOND, probes=probes,
                            injections=injections), argv=["test"])


def test_detour_finds_every_injection(measured_cpu):
    bundle = measure_quietly(
        lambda: measure(measured_cpu, ("detour",), inject=True),
        good=lambda b: b.summaries["detour"][0]["injections"]["found_pct"] >= 99.0,
        busy=run_delay_fraction)
    found = bundle.summaries["detour"][0]["injections"]
    # 2 s at 1 kHz: about 2000 injections inside the measured windows
    assert found["injected"] >= 1900, found
    assert found["found"] >= 0.99 * found["injected"], (found, run_delay_fraction(bundle))

    # Re-derive from the stored tables: each covering detour is at least as
    # long as what was injected inside it.
    from noisescope.analysis.groundtruth import match_injections

    match = match_injections(bundle.detours, bundle.injections, bundle.windows, measured_cpu)
    covered = match.detected_ns >= 0
    assert np.all(match.detected_ns[covered] >= match.injected_ns[covered] - 1)
    assert np.all(match.injected_ns >= LENGTH_NS - 1)  # the injector really spun 20 us


def test_ftq_quanta_with_injections_lose_the_injected_work(measured_cpu):
    def both():
        return measure(measured_cpu, ("ftq",), False), measure(measured_cpu, ("ftq",), True)

    def busy(pair):
        return max(run_delay_fraction(b) for b in pair)

    def deficit(pair):
        clean, noisy = (np.median(b.ftq.work[b.ftq.work > 0]) for b in pair)
        return 1.0 - noisy / clean

    expected = LENGTH_NS * RATE_HZ / 1e9  # 2% of every 1 ms quantum
    clean, noisy = measure_quietly(both, good=lambda p: deficit(p) >= 0.9 * expected, busy=busy)
    assert deficit((clean, noisy)) >= 0.9 * expected

    # Within the noisy run, a quantum holding two injections did less work
    # than one holding a single injection.
    quantum = noisy.parameters["quantum_ns"]
    starts = np.sort(noisy.injections.start_ns)
    per_quantum = (np.searchsorted(starts, noisy.ftq.start_ns + quantum)
                   - np.searchsorted(starts, noisy.ftq.start_ns))
    one = noisy.ftq.work[per_quantum == 1]
    assert len(one) > 0.9 * noisy.ftq.rows
    median_one = np.median(one)
    assert median_one <= (1 - 0.9 * expected) * np.median(clean.ftq.work[clean.ftq.work > 0])
