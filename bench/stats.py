"""Percentiles and summaries of latency samples, shared by both benchmarks."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], pct: float) -> float | None:
    """Nearest-rank percentile (``pct`` in 0..100); None when there are no samples."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return None
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: Iterable[float]) -> dict:
    """count, p50, p99 and max of the samples (seconds in, seconds out)."""
    samples = [v for v in values if v is not None]
    return {
        "count": len(samples),
        "p50": percentile(samples, 50),
        "p99": percentile(samples, 99),
        "max": max(samples) if samples else None,
    }


def ms(value: float | None) -> str:
    """Seconds as a short millisecond string for tables."""
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"
