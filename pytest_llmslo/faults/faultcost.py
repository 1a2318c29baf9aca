"""What a fault cost, from the level's requests: its per-second series, and around each
fault the requests failed, the dip in goodput and attainment, and the recovery time.

The **series** (``level_series``) is ``metrics.timeseries.per_second`` over the level's
measured window (in flight, completed, errors, output tok/s, TTFT P50/P99 by the second
the first token came, ITL P50/P99 by the second the request ended) plus, per second, the
**goodput** (output tok/s of the *good* requests: completed and meeting every objective of
the test, each request's tokens spread over its stream) and the **attainment** (good
requests over requests that ended in the second; None without one).

Around a fault asked ``asked_s`` seconds into the window (``fault_cost``):

- ``before_tok_s`` / ``before_attainment``: the median goodput of the whole seconds before
  it, and the attainment over them (at least one whole second is needed);
- **recovery**: the first whole second ``s``, from the second of the fault on, that starts
  ``window_s`` seconds in a row each with goodput at ``share`` of ``before_tok_s`` or more
  and no failed request, and over whose ended requests every objective holds (the point
  estimate of its statistic, as a non-strict gate); ``recovered_at_s`` = s and
  ``recovery_s`` = s - ``asked_s`` (0 when it held from the second of the fault on).
  Only seconds in which the load still ran at its level count (up to the last request's
  send: the drain at a level's end is not the engine's state). None, with ``why``, when
  it never held, or the level was too short around the fault;
- ``failed``: the requests that failed ending from the fault to the recovery (to the end of
  the level without one); ``failed_total`` all failed requests of the level;
- the **dip**: the lowest goodput second from the fault to the recovery
  (``goodput_min_tok_s``, ``goodput_dip`` = 1 - it / ``before_tok_s``) and the lowest
  attainment second (``attainment_min``).

The series has one-second bins: the recovery time is exact to the second.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from pytest_llmslo.metrics.columns import columns
from pytest_llmslo.metrics.gates import Threshold, gate_statistic, gate_values
from pytest_llmslo.metrics.goodput import goodput
from pytest_llmslo.metrics.timeseries import SecondSeries, per_second, request_times
from pytest_llmslo.metrics.values import per_request
from pytest_llmslo.records import Run

__all__ = ["fault_cost", "level_series", "objectives_hold"]

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _samples(run: Run, ok: np.ndarray) -> dict[str, np.ndarray]:
    per = per_request(run)
    return {
        **request_times(run),
        "ok": ok.astype(np.float64),
        "ttft_ms": per["ttft"],
        "itl_ms": per["itl"],
    }


def _both(run: Run, objectives: Sequence[Threshold]) -> tuple[SecondSeries, SecondSeries] | None:
    """The series of completed requests and of good ones; None without a timed request."""
    full = per_second(_samples(run, columns(run).ok))
    good = per_second(_samples(run, goodput(run, objectives).mask))
    return None if full is None or good is None else (full, good)


def _r(values: Iterable[float | None], digits: int = 1) -> list[float | None]:
    # + 0.0: a sum that cancels to -0.0 reads 0.0
    return [None if v is None or not math.isfinite(v) else round(v, digits) + 0.0 for v in values]


def _attainment(full: SecondSeries, good: SecondSeries) -> list[float | None]:
    out: list[float | None] = []
    for c, e, g in zip(full.completed, full.errors, good.completed, strict=True):
        out.append(None if c + e == 0 else round(g / (c + e), 3))
    return out


def level_series(run: Run, objectives: Iterable[Threshold] = ()) -> dict[str, Any] | None:
    """The level's per-second series as JSON data (module docstring); None without a
    timed request."""
    both = _both(run, tuple(objectives))
    if both is None:
        return None
    full, good = both
    return {
        "seconds": [int(s) for s in full.seconds],
        "in_flight": _r(full.in_flight, 2),
        "completed": list(full.completed),
        "errors": list(full.errors),
        "output_tok_s": _r(full.output_tok_s),
        "goodput_tok_s": _r(good.output_tok_s),
        "attainment": _attainment(full, good),
        "ttft_p50_ms": _r(full.ttft_p50_ms),
        "ttft_p99_ms": _r(full.ttft_p99_ms),
        "itl_p50_ms": _r(full.itl_p50_ms, 2),
        "itl_p99_ms": _r(full.itl_p99_ms, 2),
    }


def objectives_hold(run: Run, keep: np.ndarray, objectives: Sequence[Threshold]) -> bool:
    """Whether every objective holds over the requests ``keep`` selects (the point
    estimate of its statistic over them, failures counting as its worst value)."""
    records = run.records
    sub = dataclasses.replace(run, records=tuple(records[int(i)] for i in np.flatnonzero(keep)))
    for o in objectives:
        upper = o.op in ("<", "<=")
        values, _ = gate_values(sub, o.metric, upper)
        if values.size == 0:
            continue
        if o.stat == "mean":
            observed = float(values.mean())
        else:
            observed = gate_statistic(values, float(o.stat), upper=upper)[0]
        if math.isnan(observed) or not _OPS[o.op](observed, float(o.threshold)):
            return False
    return True


def _recovered_at(
    run: Run,
    objectives: Sequence[Threshold],
    goodput_s: np.ndarray,
    errors: np.ndarray,
    span: tuple[int, int, int],
    floor_tok_s: float,
    ends: np.ndarray,
) -> int | None:
    first, last, window = span
    holds = (goodput_s >= floor_tok_s) & (errors == 0)
    for s in range(first, last - window + 1):
        if not holds[s : s + window].all():
            continue
        keep = (ends >= s) & (ends < s + window)
        if not objectives or objectives_hold(run, keep, objectives):
            return s
    return None


def fault_cost(
    run: Run,
    asked_s: float,
    objectives: Iterable[Threshold] = (),
    *,
    window_s: float = 3.0,
    share: float = 0.9,
) -> dict[str, Any]:
    """What the fault asked ``asked_s`` seconds into ``run``'s window cost (module
    docstring), as JSON data."""
    objs = tuple(objectives)
    window = max(1, math.ceil(window_s))
    times = request_times(run)
    ends = times["end_s"]
    failed_ends = np.sort(ends[times["ok"] == 0.0]).tolist()
    out: dict[str, Any] = {
        "window_s": window,
        "share": share,
        "before_tok_s": None,
        "before_attainment": None,
        "recovered_at_s": None,
        "recovery_s": None,
        "failed": sum(1 for e in failed_ends if e >= asked_s),
        "failed_total": len(failed_ends),
        "goodput_min_tok_s": None,
        "goodput_dip": None,
        "attainment_min": None,
    }
    both = _both(run, objs)
    if both is None or not ends.size:
        out["why"] = "no request of the level was timed"
        return out
    full, good = both
    last_send = float(times["sent_s"].max())
    ask = math.floor(max(asked_s, 0.0))
    steady_end = min(math.floor(last_send), len(full.seconds))
    if ask < 1:
        out["why"] = "too short to tell: the fault came in the level's first second"
        return out
    goodput_s = np.asarray(good.output_tok_s, dtype=np.float64)
    errors = np.asarray(full.errors)
    attainment = _attainment(full, good)
    before = float(np.median(goodput_s[:ask]))
    ended_before = int(np.sum(full.completed[:ask]) + np.sum(full.errors[:ask]))
    out["before_tok_s"] = round(before, 1)
    if ended_before:
        out["before_attainment"] = round(int(np.sum(good.completed[:ask])) / ended_before, 3)
    span = (ask, steady_end, window)
    at = _recovered_at(run, objs, goodput_s, errors, span, share * before, ends)
    stop = steady_end if at is None else max(at, ask + 1)
    dip = goodput_s[ask:stop]
    if dip.size:
        out["goodput_min_tok_s"] = round(float(dip.min()), 1) + 0.0
        out["goodput_dip"] = round(1 - float(dip.min()) / before, 3) if before > 0 else None
    seen = [a for a in attainment[ask:stop] if a is not None]
    out["attainment_min"] = min(seen) if seen else None
    if at is None:
        out["why"] = (
            f"the level's load ran {max(steady_end - ask, 0)} s from the fault's second on: "
            f"too short for a window of {window} s"
            if steady_end - ask < window
            else f"never {window} s in a row with goodput >= {share:.0%} of {before:.1f} tok/s, "
            "no error and the objectives met"
        )
        return out
    out["recovered_at_s"] = at
    out["recovery_s"] = round(max(at - asked_s, 0.0), 3)
    out["failed"] = sum(1 for e in failed_ends if asked_s <= e < at + window)
    return out
