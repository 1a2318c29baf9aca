"""Goodput (DistServe, vLLM ``--goodput``): a request is *good* when it completed and meets
every per-request threshold of all objectives together. ``goodput_tok_s`` /
``goodput_req_s`` are the output tokens / count of good requests over the throughput
window, ``attainment`` = good / all requests (failed requests are never good and count in
all).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from pytest_llmslo.records import Run

from .columns import columns
from .gates import Threshold, meets_threshold
from .throughput import in_window, rate, throughput_window

__all__ = ["Goodput", "goodput"]


@dataclass(frozen=True, slots=True)
class Goodput:
    """Good requests under a set of per-request thresholds. ``attainment`` is good / all
    requests (None for a run without requests)."""

    good: int
    requests: int
    good_output_tokens: int
    duration_s: float
    tok_s: float
    req_s: float
    attainment: float | None
    mask: np.ndarray = field(compare=False, repr=False, default_factory=lambda: np.zeros(0, bool))


def goodput(run: Run, objectives: Iterable[Threshold]) -> Goodput:
    """Goodput of ``run``: a request is good when it completed and meets the per-request
    threshold of every objective (:func:`meets_threshold`); with no objectives every
    completed request is good."""
    arr = columns(run)
    mask = arr.ok.copy()
    for o in objectives:
        mask &= meets_threshold(run, o.metric, o.stat, o.op, o.threshold)
    good = int(mask.sum())
    tokens = int(arr.output_tokens[mask].sum())
    window = throughput_window(run)
    win_tokens, win_good = in_window(run, window, mask)
    secs = window.seconds
    return Goodput(
        good=good,
        requests=arr.n,
        good_output_tokens=tokens,
        duration_s=secs,
        tok_s=rate(win_tokens, secs),
        req_s=rate(win_good, secs),
        attainment=(good / arr.n) if arr.n else None,
        mask=mask,
    )
