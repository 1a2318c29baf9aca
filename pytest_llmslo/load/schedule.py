"""When requests are sent: arrival offsets for open loops, against absolute times.

An open loop sends request i at ``t0 + offsets[i]`` where ``t0`` is one absolute
``perf_counter_ns()`` shared by every client process: a late send never shifts the ones
after it (no summed sleeps, so errors do not accumulate). A closed loop has no offsets: a
slot sends its next request as soon as its previous one ends, and that moment is the
request's scheduled time.
"""

from __future__ import annotations

import math

import numpy as np

from .. import arrivals
from ..records import LoadLevel, Profile


def arrival_offsets_ns(level: LoadLevel, n: int) -> list[int]:
    """Offsets (ns from t0) of at most n arrivals of an open-loop level, its process's
    gaps from the arrivals registry (``arrivals.py``):

    - ``constant``: i / rate;
    - ``poisson``: exponential gaps of mean 1 / rate;
    - ``gamma``: gamma gaps of shape ``burstiness`` and mean 1 / rate, as vLLM bench draws
      them (``vllm/benchmarks/serve.py``, v0.10: ``theta = 1 / (rate * burstiness)``,
      ``np.random.gamma(shape=burstiness, scale=theta)``): the gaps' coefficient of
      variation is 1 / sqrt(burstiness), so 1 is Poisson and below 1 is burstier;
    - any other registered process: its ``gaps``.

    Gaps come from ``numpy.random.default_rng(level.seed)``, the first arrival at 0: the
    same seed gives the same schedule. With a ``profile`` (a ramp, steps) the same process
    runs on the profile's clock: arrival i is where the expected count of arrivals
    ``Λ(t) = ∫ rate`` reaches the i-th point of a unit-rate process, so a Poisson process
    stays Poisson at every instant's rate; arrivals past the profile's end are dropped
    (fewer than n may come back). A trace level's offsets come from its trace
    (``traces.Trace.offsets_ns``).
    """
    if level.mode != "rate":
        raise ValueError("arrival offsets are for open-loop (rate) levels")
    if level.arrival == "trace":
        raise ValueError("a trace level's arrivals come from its trace")
    if n <= 0:
        return []
    if not level.profile:
        rate = float(level.value)
        process = arrivals.get(level.arrival)
        if process.gaps is None:
            return [round(i * 1e9 / rate) for i in range(n)]
        gaps = process.gaps(np.random.default_rng(level.seed), n - 1, rate, level.params)
        offs = np.concatenate(([0.0], np.cumsum(gaps)))
        return [int(x) for x in np.rint(offs * 1e9)]
    units = _unit_arrivals(level, n)
    times = _invert_profile(level.profile, units)
    times = times[np.isfinite(times)]
    return [int(x) for x in np.rint(times * 1e9)]


def _unit_arrivals(level: LoadLevel, n: int) -> np.ndarray:
    """n points of a unit-rate process of the level's kind (cumulative, from 0)."""
    process = arrivals.get(level.arrival)
    if process.gaps is None:
        return np.arange(n, dtype=float)
    gaps = process.gaps(np.random.default_rng(level.seed), n - 1, 1.0, level.params)
    return np.concatenate(([0.0], np.cumsum(gaps)))


def _invert_profile(profile: Profile, units: np.ndarray) -> np.ndarray:
    """The times (s) at which ``Λ(t)`` reaches each of ``units``; inf past the end."""
    out = np.full(len(units), np.inf)
    t0 = 0.0
    lam0 = 0.0
    for secs, a, b in profile:
        lam1 = lam0 + secs * (a + b) / 2
        sel = (units >= lam0) & (units < lam1)
        if sel.any():
            left = units[sel] - lam0
            if a == b:
                t = left / a
            else:
                # a t + (b - a) t² / (2 secs) = left, for t in [0, secs].
                slope = (b - a) / secs
                t = (np.sqrt(np.maximum(a * a + 2 * slope * left, 0.0)) - a) / slope
            out[sel] = t0 + np.clip(t, 0.0, secs)
        t0 += secs
        lam0 = lam1
    return out


def expected_arrivals(level: LoadLevel, duration_s: float | None) -> int:
    """How many arrivals an open level makes: over ``duration_s`` at its rate, or over its
    profile (whichever ends first), with a margin for a random process's spread (its
    registry entry's)."""
    if level.profile:
        secs = level.profile_s if duration_s is None else min(duration_s, level.profile_s)
        mean = _arrivals_by(level.profile, secs)
    else:
        mean = level.value * float(duration_s or 0.0)
    spread = arrivals.get(level.arrival).spread(mean, level.params)
    return math.ceil(mean + spread) + 1


def _arrivals_by(profile: Profile, secs: float) -> float:
    total = 0.0
    for s, a, b in profile:
        if secs <= 0:
            break
        take = min(s, secs)
        total += take * a + (b - a) * take * take / (2 * s)
        secs -= take
    return total


def split_round_robin(n: int, parts: int) -> list[list[int]]:
    """Indices 0..n-1 dealt to ``parts`` workers in turn (so each sees the whole time
    span of an open-loop schedule at 1/parts of the rate)."""
    return [list(range(p, n, parts)) for p in range(parts)]


def split_concurrency(concurrency: int, parts: int) -> list[int]:
    """Closed-loop slots per worker, as even as possible, none empty."""
    parts = max(1, min(parts, concurrency))
    base, extra = divmod(concurrency, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]
