"""Latency statistics. Timing is measured here and in benchmarks/, never asserted in tests."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np


def summarize(samples_ms: list[float]) -> dict:
    """p50/p90/p99/max/mean/stdev/jitter (p99/p50) of latencies in ms; percentiles by linear interpolation."""
    if not samples_ms:
        raise ValueError("no latency samples")
    a = np.asarray(samples_ms, dtype=np.float64)
    p50, p90, p99 = (float(np.percentile(a, q)) for q in (50, 90, 99))
    return {
        "runs": int(a.size),
        "p50_ms": p50,
        "p90_ms": p90,
        "p99_ms": p99,
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "mean_ms": float(a.mean()),
        "stdev_ms": float(statistics.stdev(a)) if a.size > 1 else 0.0,
        "jitter": p99 / p50 if p50 > 0 else float("nan"),
    }


def time_calls(fn: Callable[[], object], runs: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out
