"""Throughput: the window a run's rates are counted over, and the tokens and requests in it.

For an open loop, and a closed loop of less than one wave, the measured window
``run.start_ns .. run.end_ns`` (falling back to the span of the records when it is empty):
``output_tok_s`` = Σ output_tokens of completed requests / window, ``total_tok_s`` adds
their prompt tokens, ``req_s`` = completed requests / window. For a closed loop at
concurrency c, the *steady* window from the c-th measured send to the last one, in which
every slot runs a measured request: ``output_tok_s`` = the output tokens of completed
requests whose chunks arrived in it / its length, ``req_s`` = the completed requests that
ended in it / its length, ``total_tok_s`` adds the prompt tokens of the completed requests
sent in it. The summary says which (``throughput_window``). A closed loop of one to two
waves has no steady window worth the name: its rate is counted per slot (``cycles``:
Σ output tokens / (Σ request latencies / c), renewal-reward), so one long answer at the
end of a short run does not read as a slow engine. Goodput is counted over the same window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from pytest_llmslo.records import Run

from .columns import Columns, columns

__all__ = ["Window", "WindowKind", "in_window", "rate", "throughput_window", "window_s"]


def window_s(run: Run, arr: Columns | None = None) -> float:
    """The measured window: ``run.start_ns .. run.end_ns``; when it is empty, the span of
    the records (first send to last byte)."""
    if run.end_ns > run.start_ns:
        return (run.end_ns - run.start_ns) / 1e9
    if run.records:
        a = arr or columns(run)
        span = int(a.end_ns.max()) - int(a.sent_ns.min())
        return max(span, 0) / 1e9
    return 0.0


def rate(x: float, seconds: float) -> float:
    return x / seconds if seconds > 0 else 0.0


WindowKind = Literal["steady", "cycles", "measured"]


@dataclass(frozen=True, slots=True)
class Window:
    """The span throughput is measured over. ``steady``: a closed loop's window in which
    every slot ran a measured request, from the c-th measured send to the last one;
    ``cycles``: a closed loop of one to two waves, where no such window is long enough: its
    length is the time one slot was busy, the sum of the measured requests' latencies over
    c (renewal-reward: a slot's rate is its tokens per request over its time per request);
    ``measured``: the whole measured window (open loops, and closed loops of less than
    one wave)."""

    start_ns: int
    end_ns: int
    kind: WindowKind

    @property
    def seconds(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9


def throughput_window(run: Run) -> Window:
    """The window of :class:`Window`. In a closed loop at concurrency c the first
    measured sends overlap the warm-up's last requests and the last ones are a partial
    wave with slots falling idle: over the whole measured window a run of 3.9 waves at c64
    read 9 % below what the engine delivered. Between the c-th and the last measured send
    every slot is busy, so the engine's rate at c is what streams in between."""
    arr = columns(run)
    secs = window_s(run, arr)
    measured = Window(run.start_ns, run.start_ns + int(secs * 1e9), "measured")
    c = int(run.level.value) if run.level.mode == "concurrency" else 0
    if c < 1 or arr.n < c:
        return measured
    if arr.n >= 2 * c:
        sent = np.sort(arr.sent_ns)
        start, end = int(sent[c - 1]), int(sent[-1])
        if end <= start or (end - start) < 0.25 * secs * 1e9:
            return measured
        return Window(start, end, "steady")
    # Too few waves for a steady window: the last requests of a short run are a partial
    # wave (a long answer alone at the end), and the whole window reads low (a 1.3-wave run
    # at c48 read 40 % of the engine's rate). Each slot's rate is its tokens per request
    # over its time per request, whatever the tail.
    busy = int(np.clip(arr.end_ns - arr.sent_ns, 0, None).sum())
    if busy <= 0:
        return measured
    return Window(run.start_ns, run.start_ns + busy // c, "cycles")


def in_window(run: Run, window: Window, mask: np.ndarray) -> tuple[int, int]:
    """(output tokens, completed requests) of the requests in ``mask`` within ``window``:
    all of them for the measured window; for the steady window the tokens of their chunks
    that arrived in it, and the requests that ended in it."""
    arr = columns(run)
    if window.kind != "steady":
        return int(arr.output_tokens[mask].sum()), int(mask.sum())
    end = arr.end_ns
    done = mask & (end >= window.start_ns) & (end < window.end_ns)
    return arr.tokens_in(mask, window.start_ns, window.end_ns), int(done.sum())
