"""An injection of noise of known rate and length, as a value: parsed from
the command line, stored in manifests, handed to the probes (which run it
beside their samplers) and to the runners in `inject`.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import UsageError
from ..units import format_duration, format_rate, parse_noise_spec

MODES = ("signal", "thread")
MAX_RECORDS = 1_000_000  # per injection (16 MB); later ones are counted as overflow
_SPEC = re.compile(r"^(?P<noise>[^@]+)@(?:cpu)?(?P<cpu>\d+)(?:/(?P<mode>\w+))?$")


@dataclass(frozen=True)
class Injection:
    cpu: int
    rate_hz: float
    length_ns: int
    mode: str = "signal"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown injection mode {self.mode!r}", "use signal or thread")

    @classmethod
    def parse(cls, text: str, *, default_mode: str = "signal") -> Injection:
        """'1kHz:20us@cpu1' or '1kHz:20us@1/thread'."""
        match = _SPEC.match(text.strip())
        if not match:
            raise UsageError(f"cannot read injection {text!r}",
                             "write RATE:LENGTH@cpuN[/signal|/thread], e.g. 1kHz:20us@cpu1")
        rate, length = parse_noise_spec(match.group("noise"))
        return cls(int(match.group("cpu")), rate, length, match.group("mode") or default_mode)

    @property
    def period_ns(self) -> int:
        return int(round(1e9 / self.rate_hz))

    @property
    def fraction(self) -> float:
        return self.length_ns / self.period_ns

    def describe(self) -> str:
        return (f"{format_rate(self.rate_hz)} x {format_duration(self.length_ns)} on CPU "
                f"{self.cpu} ({self.mode})")

    def native(self, ticks_per_ns: float, elapsed_ns: int, priority: int = 0) -> dict:
        expected = math.ceil(elapsed_ns / self.period_ns * 1.05) + 64
        capacity = min(expected, MAX_RECORDS)
        return {
            "cpu": self.cpu,
            "priority": priority,
            "period_ns": self.period_ns,
            "length_ticks": max(1, int(round(self.length_ns * ticks_per_ns))),
            "start": np.empty(capacity, np.uint64),
            "end": np.empty(capacity, np.uint64),
        }

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Injection:
        return cls(**data)
