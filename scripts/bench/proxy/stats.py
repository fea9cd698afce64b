"""The samples a measurement collects over its rounds, and their percentiles and ratios."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rounded(value: float, digits: int = 3) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    # Significant digits, not decimals: a slow target against a fast direct is far below 0.001.
    return float(f"{value / base:.4g}")


@dataclass
class Samples:
    total: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    overhead: list[float] = field(default_factory=list)
    round_p50: list[float] = field(default_factory=list)
    errors: int = 0
    error_sample: list[str] = field(default_factory=list)

    def add(self, reply: dict[str, Any]) -> None:
        self.total += reply["total_ms"]
        self.ttfb += reply["ttfb_ms"]
        self.overhead += reply["overhead_ms"]
        if reply["total_ms"]:
            self.round_p50.append(round(percentile(reply["total_ms"], 50), 3))
        self.errors += reply["errors"]
        self.error_sample = (self.error_sample + reply["error_sample"])[:3]


@dataclass
class Throughput:
    completed: int = 0
    seconds: float = 0.0
    round_rps: list[float] = field(default_factory=list)
    errors: int = 0
    error_sample: list[str] = field(default_factory=list)

    def add(self, reply: dict[str, Any]) -> None:
        self.completed += reply["completed"]
        self.seconds += reply["seconds"]
        self.round_rps.append(round(reply["rps"], 1))
        self.errors += reply["errors"]
        self.error_sample = (self.error_sample + reply["error_sample"])[:3]

    @property
    def rps(self) -> float:
        """The mean over rounds of each round's summed per-worker rate (see loadgen.py)."""
        return sum(self.round_rps) / len(self.round_rps) if self.round_rps else math.nan
