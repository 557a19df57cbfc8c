"""Ground truth: noise of known rate and length injected on the measured CPU
must be found by the probes. The injection signals the sampler thread, whose
handler spins for the length and records its own TSC timestamps."""

from __future__ import annotations

import numpy as np

from noisescope.probes import Injection
from noisescope.scan import SECOND, ScanOptions, scan

from ..helpers import RT, measure_quietly, run_delay_fraction

RATE_HZ = 1000.0
LENGTH_NS = 20_000


def measure(cpu: int, probes: tuple[str, ...], inject: bool):
    injections = (Injection(cpu, RATE_HZ, LENGTH_NS, "signal"),) if inject else ()
    return scan(ScanOptions(cpus=(cpu,), duration_ns=2 * SECOND, probes=probes,
                            injections=injections, rt=RT), argv=["test"])


def test_detour_finds_every_injection(measured_cpu):
    expected = 2 * RATE_HZ  # 2 s at 1 kHz inside the measured windows

    def good(bundle):
        found = bundle.summaries["detour"][0]["injections"]
        return found["found_pct"] >= 99.0 and found["injected"] >= 0.95 * expected

    bundle = measure_quietly(lambda: measure(measured_cpu, ("detour",), inject=True),
                             good=good, busy=run_delay_fraction)
    found = bundle.summaries["detour"][0]["injections"]
    # While another task holds the CPU the timer's signal stays pending and
    # the kernel merges further expirations into it (counted as coalesced):
    # every expiration is either delivered inside the windows or merged.
    assert found["injected"] + found["coalesced"] >= 0.95 * expected, found
    assert found["found"] >= 0.99 * found["injected"], (found, run_delay_fraction(bundle))

    # Re-derive from the stored tables: each covering detour is at least as
    # long as what was injected inside it.
    from noisescope.analysis.groundtruth import match_injections

    match = match_injections(bundle.detours, bundle.injections, bundle.windows, measured_cpu)
    covered = match.detected_ns >= 0
    assert np.all(match.detected_ns[covered] >= match.injected_ns[covered] - 1)
    assert np.all(match.injected_ns >= LENGTH_NS - 1)  # the injector really spun 20 us


def test_ftq_quanta_with_injections_lose_the_injected_work(measured_cpu):
    # clean, noisy, clean: the noisy run is compared with runs on either side
    # of it, so that a drift of the machine's speed does not pass for noise.
    def runs():
        return tuple(measure(measured_cpu, ("ftq",), inject) for inject in (False, True, False))

    def busy(triple):
        return max(run_delay_fraction(b) for b in triple)

    # The 90th percentile of work per quantum: the quanta nothing but the
    # injection disturbed, even when other tasks share the CPU now and then.
    def typical_work(bundle):
        return float(np.percentile(bundle.ftq.work, 90))

    def deficit(triple):
        before, noisy, after = (typical_work(b) for b in triple)
        return 1.0 - noisy / ((before + after) / 2)

    expected = LENGTH_NS * RATE_HZ / 1e9  # 2% of every 1 ms quantum
    triple = measure_quietly(runs, good=lambda t: deficit(t) >= 0.9 * expected, busy=busy)
    assert deficit(triple) >= 0.9 * expected, (deficit(triple), busy(triple))

    # The loss sits in the quanta that hold an injection: measured per
    # quantum, those quanta did less work than the clean runs' quanta by at
    # least the injected time.
    noisy = triple[1]
    quantum = noisy.parameters["quantum_ns"]
    starts = np.sort(noisy.injections.start_ns)
    per_quantum = (np.searchsorted(starts, noisy.ftq.start_ns + quantum)
                   - np.searchsorted(starts, noisy.ftq.start_ns))
    hit = noisy.ftq.work[per_quantum >= 1]
    clean = (typical_work(triple[0]) + typical_work(triple[2])) / 2
    assert len(hit) > 0.3 * noisy.ftq.rows
    assert np.percentile(hit, 90) <= (1 - 0.9 * expected) * clean
