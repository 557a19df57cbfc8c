"""The prediction engine: LogGP schedules without noise (derived by hand), the fast
noise replay against a plain per-process reference, order statistics against
closed forms, and the properties the model must show."""

from __future__ import annotations

import math

import numpy as np
import pytest

from noisescope.analysis.predict import (
    LogGP,
    NoiseTrace,
    expected_maximum,
    loggp,
    predict,
    replay,
    synthetic_trace,
)
from noisescope.analysis.predict.loggp import SimulatedMachine, make_collective
from noisescope.analysis.predict.model import PredictOptions, simulate
from noisescope.analysis.predict.replay import NoiseReplay

# Defaults: L = 2500, o = 1500, g = 1000, G = 6 ns/byte.
OVERHEAD, LATENCY = 1500, 2500


def noise_free(procs, collective, *, compute_ns=0, iterations=1, message_bytes=8, **loggp):
    options = PredictOptions((procs,), compute_ns, collective, message_bytes, iterations,
                             loggp=LogGP(**loggp))
    return simulate(procs, options, [])


# -- LogGP without noise ---------------------------------------------------------

def test_dissemination_barrier_on_16_processes():
    # 4 rounds; each: send (o), the partner's message arrives L after its send
    # overhead, receive (o): 2o + L per round, 1-byte messages (no G).
    assert noise_free(16, "barrier") == 4 * (2 * OVERHEAD + LATENCY) == 22_000


def test_dissemination_barrier_with_a_gap_that_binds():
    # g = 10 us > 2o: a process may start its next send only g after the last one.
    # Sends at 0, 10, 20, 30 us; the last message arrives at 30 + o + L = 34 us
    # (the receive gap, g after the previous receive at 24 us, allows it), and
    # is received by 34 + o = 35.5 us.
    assert noise_free(16, "barrier", gap_ns=10_000) == 35_500


def test_barrier_rounds_up_for_non_powers_of_two():
    assert noise_free(5, "barrier") == 3 * (2 * OVERHEAD + LATENCY)


def test_recursive_doubling_allreduce_on_8_processes():
    # 3 rounds of pairwise exchange; 8-byte messages add (8 - 1) G = 42 ns on receive.
    assert noise_free(8, "allreduce") == 3 * (2 * OVERHEAD + LATENCY + 7 * 6) == 16_626


def test_recursive_doubling_allreduce_with_a_gap_that_binds():
    # g = 10 us: sends at 0, g + 7G = 10042 and 2 (g + 7G) = 20084; the last message
    # arrives at 20084 + o + L = 24084, received by + o + 7G = 25626.
    assert noise_free(8, "allreduce", gap_ns=10_000) == 25_626


def test_allreduce_on_6_processes_pairs_up_the_extra_ranks():
    # Ranks 0 and 2 hand their data to 1 and 3 (received at o + L + o + 7G = 5542);
    # {1, 3, 4, 5} do two rounds: 1 and 3 exchange (sending at 5542, received at
    # 11084), then 1<->4 and 3<->5: 1 sends at 11084 and is done receiving 4's early
    # message at 14126; 4 receives 1's message at 11084 + o + L = 15084 (done 16626).
    # Finally 1 and 3 send the result back at 14126: received by 0 and 2 at
    # 14126 + o + L + o + 7G = 19668.
    assert noise_free(6, "allreduce") == 19_668


def test_iterations_repeat_compute_and_collective():
    step = 1_000_000 + 4 * (2 * OVERHEAD + LATENCY)
    assert noise_free(16, "barrier", compute_ns=1_000_000, iterations=3) == 3 * step
    assert noise_free(16, "none", compute_ns=1_000_000, iterations=3) == 3_000_000


# -- the fast replay against a plain per-process reference -------------------------

class ReferenceNoise:
    """LogGOPSim's get_noise, stateless, one process at a time: on the periodic trace,
    the rest of the last detour starting at or before the window start, plus every
    detour starting inside the window (strictly before its end)."""

    def __init__(self, traces, trace_of, phases):
        self.traces, self.trace_of, self.phases = traces, trace_of, phases

    def noise(self, process, start, busy):
        trace = self.traces[self.trace_of[process]]
        span, starts, lengths = trace.span_ns, trace.starts_ns, trace.durations_ns
        if not len(starts):
            return 0
        at = start + self.phases[process]
        latest = starts + (at - starts) // span * span  # latest copy of each detour <= at
        last = int(np.flatnonzero(latest == latest.max())[-1])
        rest = max(0, int(latest[last] + lengths[last] - at))
        if busy == 0:
            return rest
        copies = (at + busy - 1 - starts) // span - (at - starts) // span
        return rest + int((lengths * copies).sum())


class ReferenceMachine:
    """LogGP as the loggp docstring states it, one process and one message at a time in
    plain Python, the allreduce's rounds in order over all processes (no blocks, no
    threads), the gap clocks always kept, noise from ReferenceNoise."""

    def __init__(self, procs, loggp, noise):
        self.procs, self.loggp, self.noise = procs, loggp, noise
        self.ready = np.zeros(procs, np.int64)
        self.next_send = np.zeros(procs, np.int64)
        self.next_receive = np.zeros(procs, np.int64)

    def _busy(self, process, start, length):
        return start + length + self.noise.noise(process, start, length)

    def compute(self, busy_ns):
        for k in range(self.procs):
            self.ready[k] = self._busy(k, int(self.ready[k]), busy_ns)

    def send(self, procs, message_bytes):
        p, arrival = self.loggp, []
        for k in range(*procs.indices(self.procs)):
            start = max(int(self.ready[k]), int(self.next_send[k]))
            self.next_send[k] = start + p.gap_ns + p.transfer_ns(message_bytes)
            self.ready[k] = self._busy(k, start, p.overhead_ns)
            arrival.append(self.ready[k] + p.latency_ns)
        return np.array(arrival, np.int64)

    def receive(self, procs, arrival, message_bytes):
        p = self.loggp
        for k, at in zip(range(*procs.indices(self.procs)), arrival, strict=True):
            start = max(int(at), int(self.ready[k]), int(self.next_receive[k]))
            self.next_receive[k] = start + p.gap_ns + p.transfer_ns(message_bytes)
            self.ready[k] = self._busy(k, start, p.overhead_ns) + p.transfer_ns(message_bytes)

    def exchange_rounds(self, power, message_bytes):
        everyone, distance = slice(0, power), 1
        while distance < power:
            arrival = self.send(everyone, message_bytes)
            self.receive(everyone, arrival[np.arange(power) ^ distance], message_bytes)
            distance *= 2


def random_trace(rng, span, count, longest, name="random"):
    starts = np.sort(rng.choice(span, count, replace=False))
    lengths = rng.integers(1, longest, count)
    return NoiseTrace(name, starts, lengths, span, "file")


def run_both(traces, procs, collective, compute_ns, iterations, *, synchronized=False, seed=3,
             threads=None, offsets=None, **costs):
    collective_ = make_collective(collective, 8)
    trace_of = collective_.slot_ranks(procs) % len(traces)
    fast_noise = NoiseReplay(traces, trace_of, np.random.default_rng(seed),
                             synchronized=synchronized, offsets=offsets)
    phases = fast_noise.shift - fast_noise.timeline.origin[trace_of]
    machines = (SimulatedMachine(procs, LogGP(**costs), fast_noise, threads),
                ReferenceMachine(procs, LogGP(**costs), ReferenceNoise(traces, trace_of, phases)))
    results = []
    for machine in machines:
        ends = []
        for _ in range(iterations):
            if compute_ns:
                machine.compute(compute_ns)
            collective_.run(machine)
            ends.append(machine.ready.copy())
        results.append(np.array(ends))
    return results


@pytest.mark.parametrize("procs, collective, compute_ns, synchronized, costs", [
    (16, "allreduce", 50_000, False, {}),
    (6, "allreduce", 20_000, False, {}),
    (12, "allreduce", 20_000, False, {"gap_ns": 4_000}),  # the gap binds: g > 2 o
    (7, "barrier", 30_000, True, {}),
    (9, "barrier", 30_000, False, {"gap_ns": 4_000}),
    (5, "none", 70_000, False, {}),
])
def test_replay_matches_the_reference(procs, collective, compute_ns, synchronized, costs):
    rng = np.random.default_rng(7)
    # Dense, overlapping detours on short traces, so windows wrap around the trace
    # end and the compute window can be longer than a whole trace; plus a quiet one.
    traces = [random_trace(rng, 200_000, 40, 20_000, "a"),
              random_trace(rng, 45_000, 12, 9_000, "b"),
              NoiseTrace("quiet", [], [], 1_000_000, "file")]
    fast, reference = run_both(traces, procs, collective, compute_ns, 25,
                               synchronized=synchronized, **costs)
    np.testing.assert_array_equal(fast, reference)
    assert (fast[-1] > noise_free(procs, collective, compute_ns=compute_ns, iterations=25,
                                  **costs)).any()


@pytest.mark.parametrize("overhead_ns", [1500, 0])
def test_replay_matches_the_reference_when_windows_end_exactly_at_detours(overhead_ns):
    # Every time on a 500 ns grid (detours, phases, L, o; no per-byte cost, no gap), so
    # that windows often end exactly where a detour starts (no delay) or 500 ns after
    # (all of it), in every kind of round: the fast paths must not differ at the edges
    # (an empty window, o = 0, is delayed by a detour starting exactly at it). Sparse
    # detours (one per 100 us): the fast paths skip most windows, so the edges are
    # theirs to get right (about one window in 200 ends at a detour).
    rng = np.random.default_rng(13)
    grid = 500
    traces = [NoiseTrace(name, np.sort(rng.choice(span // grid, count, replace=False)) * grid,
                         rng.integers(1, 4, count) * grid, span, "file")
              for name, span, count in (("a", 2_000_000, 20), ("b", 1_000_000, 10))]
    offsets = rng.integers(0, 4000, 128) * grid
    fast, reference = run_both(traces, 128, "allreduce", 20_000, 16, offsets=offsets,
                               overhead_ns=overhead_ns, gap_ns=0, gap_per_byte_ns=0)
    np.testing.assert_array_equal(fast, reference)


def test_replay_matches_the_reference_with_binary_search(monkeypatch):
    # With no bucket walk at all, every lookup of a detour goes to the binary search.
    monkeypatch.setattr(replay, "MAX_STEPS", 0)
    rng = np.random.default_rng(11)
    traces = [random_trace(rng, 3_000_000, 900, 3_000), random_trace(rng, 2_000_000, 50, 30_000)]
    fast, reference = run_both(traces, 32, "allreduce", 200_000, 10)
    np.testing.assert_array_equal(fast, reference)


@pytest.mark.parametrize("block, group, procs, threads", [
    (2, 4, 16, 1), (2, 4, 16, 3), (4, 8, 13, 2), (2, 8, 40, 2), (1, 2, 64, 2)])
def test_the_allreduce_in_blocks_matches_the_reference(monkeypatch, block, group, procs,
                                                       threads):
    """The rounds run block by block, group by group and tile by tile (for the cache at
    millions of processes), on several threads: the same result as the reference's
    rounds in order, power of two or not."""
    monkeypatch.setattr(loggp, "ROUND_BLOCK", block)
    monkeypatch.setattr(loggp, "ROUND_GROUP", group)
    rng = np.random.default_rng(5)
    traces = [random_trace(rng, 300_000, 60, 20_000), random_trace(rng, 70_000, 9, 15_000)]
    fast, reference = run_both(traces, procs, "allreduce", 30_000, 8, threads=threads)
    np.testing.assert_array_equal(fast, reference)
    assert (fast[-1] > noise_free(procs, "allreduce", compute_ns=30_000, iterations=8)).any()


def test_traces_are_assigned_to_ranks_round_robin():
    # Six ranks, two traces: odd ranks replay the noisy one. The allreduce orders its
    # slots (ranks 1, 3, 4, 5 do the recursive doubling; 0 and 2 pair up with 1 and 3).
    collective = make_collective("allreduce", 8)
    ranks = collective.slot_ranks(6)
    assert ranks.tolist() == [1, 3, 4, 5, 0, 2]
    quiet = NoiseTrace("quiet", [], [], 1000, "file")
    always = NoiseTrace("always", [0], [999], 1000, "file")  # busy 99.9% of the time
    noise = NoiseReplay([quiet, always], ranks % 2, np.random.default_rng(1))
    machine = SimulatedMachine(6, LogGP(), noise)
    machine.compute(10_000)
    noisy_slots = machine.ready > 10_000
    assert (ranks[noisy_slots] % 2 == 1).all() and noisy_slots.sum() == 3


def test_detours_at_the_window_edges():
    # Detours at 1000 (500 long) and 3000 (200 long); the process starts at offset 0.
    trace = NoiseTrace("edges", [1000, 3000], [500, 200], 10_000, "file")

    def finish(start, busy):
        noise = NoiseReplay([trace], np.zeros(1, int), np.random.default_rng(), offsets=[0])
        return int(noise.finish(np.array([start]), busy, slice(0, 1))[0])

    assert finish(0, 1000) == 1000  # starts exactly as the window ends: no delay
    assert finish(500, 2500) == 3500  # one inside, the next exactly at the end
    assert finish(1000, 100) == 1600  # starts exactly as the window starts: all of it
    assert finish(1200, 100) == 1600  # in progress: the rest of it
    assert finish(3100, 0) == 3200  # an empty window still waits out a detour in progress
    assert finish(13_000, 1) == 13_201  # the trace repeats every 10 us
    assert finish(0, 25_000) == 25_000 + 3 * 700  # 2.5 periods: detours at 1, 3, 11, 13, 21, 23 us


# -- order statistics ---------------------------------------------------------------

def exponential_quantiles(rate, samples):
    return -np.log(1 - (np.arange(samples) + 0.5) / samples) / rate


@pytest.mark.parametrize("procs", [1, 2, 10, 100, 1000])
def test_expected_maximum_of_exponentials_is_harmonic_over_rate(procs):
    rate = 2.0
    samples = exponential_quantiles(rate, 1_000_000)
    harmonic = sum(1 / k for k in range(1, procs + 1))
    assert expected_maximum([samples], [procs]) == pytest.approx(harmonic / rate, rel=0.01)


def test_expected_maximum_of_uniforms():
    samples = (np.arange(100_000) + 0.5) / 100_000
    for procs in (1, 3, 50):
        assert expected_maximum([samples], [procs]) == pytest.approx(procs / (procs + 1), rel=1e-3)


def test_expected_maximum_over_several_traces_splits_the_processes():
    samples = exponential_quantiles(1.0, 100_000)
    alone = expected_maximum([samples], [64])
    assert expected_maximum([samples, samples], [40, 24]) == pytest.approx(alone, rel=1e-9)
    # a quiet trace contributes zeros: the maximum is that of the noisy processes
    quiet = np.zeros(100)
    assert expected_maximum([samples, quiet], [64, 64]) == pytest.approx(alone, rel=1e-9)


# -- what the model must show ----------------------------------------------------------

def test_co_scheduled_noise_costs_its_net_fraction_at_every_scale():
    # 100 Hz x 250 us = 2.5% of the CPU. Co-scheduled, all processes lose the same
    # time together, so the run is about 2.5% slower whatever P is.
    eta = 0.025
    result = predict("100Hz:250us", [2, 64, 1024], 1_000_000, iterations=200, seeds=2,
                     sync_noise=True)
    for point in result.points:
        assert point.slowdowns.mean() == pytest.approx(eta, rel=0.25), point
        assert point.analytic_slowdown == pytest.approx(eta, rel=0.25), point
    independent = predict("100Hz:250us", [1024], 1_000_000, iterations=200, seeds=2)
    assert independent.points[0].slowdowns.min() > 10 * eta  # the same noise, unsynchronized


def test_rare_detours_follow_the_probability_that_any_process_is_hit():
    # 10 Hz x 20 us with W = 1 ms: a process's step is hit with p = rate (W + length);
    # a step costs one detour more whenever any of P processes is hit:
    # 1 - (1 - p)^P. With L = 0 the delay reaches every process in full (with
    # L > 0, recursive doubling absorbs up to L per round the delay does not cross).
    rate, length, compute = 10, 20_000, 1_000_000
    p = rate * (compute + length) / 1e9
    iterations = 500
    for procs in (2, 16, 128, 1024):
        point = predict(f"{rate}Hz:{length}ns", [procs], compute, iterations=iterations, seeds=4,
                        loggp=LogGP(latency_ns=0)).points[0]
        excess = (np.mean(point.runtimes_ns) - point.noise_free_ns) / iterations / length
        assert excess == pytest.approx(1 - (1 - p) ** procs, abs=0.06), procs


def test_noise_in_the_collective_grows_with_log_p():
    # No compute: every busy window is a message overhead; each of the log2 P
    # rounds adds a chance to wait for a delayed partner.
    counts = [4, 64, 1024, 16384]
    result = predict("2kHz:5us", counts, 0, "allreduce", iterations=30, seeds=2)
    excess = [np.mean(p.runtimes_ns) - p.noise_free_ns for p in result.points]
    steps = np.diff(excess)
    assert (steps > 0).all(), excess
    assert steps[-1] > 0.4 * steps.mean(), excess  # still growing at 16k processes
    # the order-statistics estimate covers the compute phase only: none here
    assert all(p.analytic_ns is None and p.analytic_slowdown is None for p in result.points)


def test_without_synchronization_noise_averages_out():
    # No collective: each process runs alone, so the run takes the slowest process's
    # own total, close to W (1 + eta) for frequent small detours.
    result = predict("1kHz:10us", [1024], 1_000_000, "none", iterations=50, seeds=2)
    assert result.points[0].slowdowns.max() < 0.02 + 0.01


def test_seeds_and_synthetic_phases_are_reproducible():
    first = predict("250Hz:2us+1Hz:200us", [64], seeds=2, iterations=5)
    again = predict("250Hz:2us+1Hz:200us", [64], seeds=2, iterations=5)
    assert first.points == again.points


def test_synthetic_trace_repeats_after_the_common_period():
    trace = synthetic_trace("250Hz:2us+1Hz:200us", seed=4)
    assert trace.span_ns == 1_000_000_000
    assert trace.detours == 251
    assert trace.noise_fraction == pytest.approx(250 * 2e-6 + 200e-6)
    assert math.isclose(trace.rate_hz, 251)
