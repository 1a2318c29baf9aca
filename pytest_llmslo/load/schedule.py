"""When requests are sent: arrival offsets for open loops, against absolute times.

An open loop sends request i at ``t0 + offsets[i]`` where ``t0`` is one absolute
``perf_counter_ns()`` shared by every client process: a late send never shifts the ones
after it (no summed sleeps, so errors do not accumulate). A closed loop has no offsets: a
slot sends its next request as soon as its previous one ends, and that moment is the
request's scheduled time.
"""

from __future__ import annotations

import numpy as np

from ..records import LoadLevel


def arrival_offsets_ns(level: LoadLevel, n: int) -> list[int]:
    """Offsets (ns from t0) of n arrivals of an open-loop level.

    ``constant``: i / rate. ``poisson``: exponential gaps of mean 1 / rate drawn from
    ``numpy.random.default_rng(level.seed)``, the first arrival at 0; the same seed gives
    the same schedule.
    """
    if level.mode != "rate":
        raise ValueError("arrival offsets are for open-loop (rate) levels")
    if n <= 0:
        return []
    rate = float(level.value)
    if level.arrival == "constant":
        return [round(i * 1e9 / rate) for i in range(n)]
    if level.arrival == "poisson":
        rng = np.random.default_rng(level.seed)
        gaps = rng.exponential(1.0 / rate, n - 1)
        offs = np.concatenate(([0.0], np.cumsum(gaps)))
        return [int(x) for x in np.rint(offs * 1e9)]
    raise ValueError(f"unknown arrival {level.arrival!r}")


def split_round_robin(n: int, parts: int) -> list[list[int]]:
    """Indices 0..n-1 dealt to ``parts`` workers in turn (so each sees the whole time
    span of an open-loop schedule at 1/parts of the rate)."""
    return [list(range(p, n, parts)) for p in range(parts)]


def split_concurrency(concurrency: int, parts: int) -> list[int]:
    """Closed-loop slots per worker, as even as possible, none empty."""
    parts = max(1, min(parts, concurrency))
    base, extra = divmod(concurrency, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
