"""When capacity added in the middle of a level shows in goodput.

The level's goodput per second is the output tokens of its *good* requests
(``goodput.goodput``'s mask: completed and meeting every objective; every completed one
without objectives), each request's tokens spread over its stream, per second of the
measured window (``timeseries.per_second``). Around the scale-up, asked at ``asked_s``
seconds into the window:

- ``before_tok_s``: the median goodput of the whole seconds before it was asked;
- ``after_tok_s``, the new steady state: the median of the last seconds in which the load
  still ran at its level (up to the last request's send: the drain at the end is not the
  engine's capacity), ``window_s`` of them or a third of the time after the ask if more;
- ``shows_at_s``: the first whole second at or after the ask from which ``window_s``
  consecutive seconds each hold at least ``share`` of ``after_tok_s``; ``capacity_s``
  = ``shows_at_s`` - ``asked_s`` (0 when it already held in the second of the ask), the
  figure a scale-up is judged by; None when it never held or there is no gain to see
  (``after_tok_s`` not above ``before_tok_s``: ``gain`` says by how much it changed).

The series has one-second bins: ``capacity_s`` is exact to the second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from pytest_llmslo.records import Run

from .gates import Threshold
from .goodput import goodput
from .timeseries import per_second, request_times

__all__ = ["good_series", "time_to_capacity"]


def good_series(run: Run, objectives: Iterable[Threshold] = ()) -> tuple[float, ...]:
    """The run's goodput (tok/s of good requests) per second of its measured window."""
    samples = {**request_times(run), "ok": goodput(run, objectives).mask.astype(np.float64)}
    series = per_second(samples)
    return () if series is None else series.output_tok_s


def time_to_capacity(
    run: Run,
    asked_s: float,
    objectives: Iterable[Threshold] = (),
    *,
    window_s: float = 3.0,
    share: float = 0.9,
) -> dict[str, Any]:
    """How long capacity added ``asked_s`` seconds into ``run``'s window took to show in
    its goodput (see the module docstring), as JSON data: ``asked_s``, ``before_tok_s``,
    ``after_tok_s``, ``gain``, ``shows_at_s``, ``capacity_s``, ``window_s``, ``share``,
    the per-second ``goodput_tok_s`` and, when it could not be measured, ``why``."""
    series = good_series(run, objectives)
    window = max(1, math.ceil(window_s))
    out: dict[str, Any] = {
        "asked_s": round(asked_s, 3),
        "window_s": window,
        "share": share,
        "goodput_tok_s": [round(v, 1) for v in series],
        "before_tok_s": None,
        "after_tok_s": None,
        "gain": None,
        "shows_at_s": None,
        "capacity_s": None,
    }
    sends = [r.sent_ns for r in run.records]
    last_send = (max(sends) - run.start_ns) / 1e9 if sends else 0.0
    ask = math.floor(max(asked_s, 0.0))
    steady_end = min(math.floor(last_send), len(series))
    values = np.asarray(series, dtype=np.float64)
    if ask < 1 or steady_end - ask < window:
        out["why"] = (
            f"too short to tell: {ask} whole second(s) before the scale-up and "
            f"{max(steady_end - ask, 0)} after it while the load ran (need 1 and {window})"
        )
        return out
    span = max(window, (steady_end - ask) // 3)
    before = float(np.median(values[:ask]))
    after = float(np.median(values[max(steady_end - span, ask) : steady_end]))
    out["before_tok_s"], out["after_tok_s"] = round(before, 1), round(after, 1)
    out["gain"] = round(after / before, 3) if before > 0 else None
    if not after > before:
        out["why"] = (
            f"no gain to see: goodput {before:.1f} tok/s before the scale-up, "
            f"{after:.1f} tok/s at the end of the level"
        )
        return out
    holds = values >= share * after
    for s in range(ask, steady_end - window + 1):
        if holds[s : s + window].all():
            out["shows_at_s"] = s
            out["capacity_s"] = round(max(s - asked_s, 0.0), 3)
            return out
    out["why"] = f"goodput never held {share:.0%} of {after:.1f} tok/s for {window} s"
    return out
