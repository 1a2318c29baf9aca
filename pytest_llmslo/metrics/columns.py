"""A run's columns: the per-request arrays extracted once from its records, and each
catalogue metric's values computed from them by its formula (``catalog.Metric.values``).

The Python-object walk over the records is the slow part; everything after it is numpy.
So the columns of a run are cached by identity (:func:`columns`): summarize, evaluate and
the reports all ask about one run. Timestamps are int nanoseconds from
``time.perf_counter_ns()``; every value a formula returns is in milliseconds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pytest_llmslo.catalog import CATALOGUE, Metric
from pytest_llmslo.records import Run
from pytest_llmslo.recordstore import NONE, RecordStore, credits

from .gaps import TokenGaps, build_token_gaps, chunk_times
from .ragged import Ragged

__all__ = ["Columns", "clear_cache", "columns", "entry"]

_NS_PER_MS = 1e6
# Columns of a 100k-request run take a few hundred MB; summarize and evaluate of the same
# run come back to back, so a couple of entries are enough.
_CACHE_SIZE = 2


class Columns:
    """The columns of one run (``catalog.Columns`` is what a formula may read of them).
    Token gaps and a metric's values are built on first use."""

    __slots__ = (
        "_gaps",
        "_values",
        "chunk_counts",
        "end_ns",
        "first_chunk_ns",
        "first_content_ns",
        "n",
        "ok",
        "output_tokens",
        "prompt_tokens",
        "requested_output",
        "run",
        "sent_ns",
        "usage_mismatch",
    )

    def __init__(self, run: Run) -> None:
        recs = run.records
        n = len(recs)
        self.run = run
        self.n = n
        self._gaps: TokenGaps | None = None
        self._values: dict[Metric, Any] = {}
        if isinstance(recs, RecordStore):
            self._from_store(recs)
            return
        self.ok = np.fromiter((r.ok for r in recs), dtype=bool, count=n)
        self.sent_ns = np.fromiter((r.sent_ns for r in recs), dtype=np.int64, count=n)
        self.end_ns = np.fromiter((r.end_ns for r in recs), dtype=np.int64, count=n)
        self.chunk_counts = np.fromiter((len(r.chunk_ns) for r in recs), dtype=np.int64, count=n)
        self.first_chunk_ns = np.fromiter(
            (r.chunk_ns[0] if r.chunk_ns else 0 for r in recs), dtype=np.int64, count=n
        )
        self.first_content_ns = np.fromiter(
            (-1 if r.first_content_ns is None else r.first_content_ns for r in recs),
            dtype=np.int64,
            count=n,
        )
        credits = [r.credit() for r in recs]
        self.output_tokens = np.fromiter((c[0] for c in credits), dtype=np.int64, count=n)
        self.usage_mismatch = np.fromiter((c[1] for c in credits), dtype=bool, count=n)
        self.requested_output = np.fromiter(
            (r.requested_output_tokens or 0 for r in recs), dtype=np.int64, count=n
        )
        self.prompt_tokens = np.fromiter(
            (
                r.prompt_tokens if r.prompt_tokens is not None else (r.requested_prompt_tokens or 0)
                for r in recs
            ),
            dtype=np.int64,
            count=n,
        )

    def _from_store(self, store: RecordStore) -> None:
        """The same columns read from a ``RecordStore``'s own (no record is built)."""
        self.ok = store.ok()
        self.sent_ns = store.column("sent_ns")
        self.end_ns = store.column("end_ns")
        self.chunk_counts = store.column("n_chunks").astype(np.int64)
        self.first_chunk_ns = np.maximum(store.nth_chunk_ns(0), 0)
        first_content = store.column("first_content_ns")
        self.first_content_ns = np.where(first_content == NONE, -1, first_content)
        self.output_tokens, self.usage_mismatch = credits(store)
        requested = store.column("requested_output_tokens")
        self.requested_output = np.where(requested == NONE, 0, requested)
        prompt = store.column("prompt_tokens")
        asked = store.column("requested_prompt_tokens")
        self.prompt_tokens = np.where(prompt != NONE, prompt, np.where(asked == NONE, 0, asked))

    # ----------------------------------------------------------------- for the formulas

    def since_sent(self, ns: np.ndarray, defined: np.ndarray) -> np.ndarray:
        """Milliseconds from each request's send to ``ns``, NaN where not ``defined``."""
        return np.where(defined, (ns - self.sent_ns) / _NS_PER_MS, np.full(self.n, np.nan))

    def per_token(self, ms: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """``ms / tokens``, NaN where ``tokens`` < 1."""
        denom = np.asarray(tokens).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.asarray(tokens) >= 1, ms / denom, np.full(self.n, np.nan))

    def nth_chunk_ns(self, k: int) -> np.ndarray:
        """The arrival of each request's k-th output chunk (0-based); -1 where it has none."""
        if isinstance(self.run.records, RecordStore):
            return self.run.records.nth_chunk_ns(k)
        return np.fromiter(
            (r.chunk_ns[k] if len(r.chunk_ns) > k else -1 for r in self.run.records),
            dtype=np.int64,
            count=self.n,
        )

    def token_gaps(self) -> Ragged:
        """Every ITL sample (ms) of completed requests, grouped by request in record order
        (``gaps.build_token_gaps``)."""
        return self._token_gaps().gaps

    def value(self, metric: str) -> Any:
        """``metric``'s values by its catalogue formula, computed once: a float per record
        (``per="request"``) or the :class:`Ragged` samples (``per="token"``)."""
        m = entry(metric)
        got = self._values.get(m)
        if got is None:
            got = _checked(m, m.values(self), self.n)
            self._values[m] = got
        return got

    # ----------------------------------------------------------------- for the metrics

    def chunks(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(arrival ns, tokens) of every output chunk of every record, in record order;
        tokens as the token gaps count them (usage spread over inexact chunks), None when
        every chunk carried one."""
        g = self._token_gaps()
        ts = g.chunk_ns if g.chunk_ns is not None else chunk_times(self.run.records)
        return ts, g.chunk_tokens

    def tokens_in(self, mask: np.ndarray, start_ns: int, end_ns: int) -> int:
        """The output tokens of the records in ``mask`` whose chunks arrived in
        [``start_ns``, ``end_ns``); a store's chunk times are read a segment at a time."""
        g = self._token_gaps()
        recs = self.run.records
        if g.chunk_ns is None and g.chunk_tokens is None and isinstance(recs, RecordStore):
            total = row = 0
            for fixed, ns, _ in recs.segments():
                m = len(fixed)
                owner = np.repeat(mask[row : row + m], self.chunk_counts[row : row + m])
                total += int(np.count_nonzero(owner & (ns >= start_ns) & (ns < end_ns)))
                row += m
            return total
        ts, toks = self.chunks()
        inside = np.repeat(mask, self.chunk_counts) & (ts >= start_ns) & (ts < end_ns)
        return int(np.count_nonzero(inside)) if toks is None else int(toks[inside].sum())

    def _token_gaps(self) -> TokenGaps:
        if self._gaps is None:
            self._gaps = build_token_gaps(self.run, self.chunk_counts, self.ok, self.output_tokens)
        return self._gaps


def _checked(m: Metric, got: Any, n: int) -> Any:
    """A formula's result, or a TypeError that names the metric and what it should give."""
    if m.per == "token":
        if not isinstance(got, Ragged) or got.n != n:
            raise TypeError(
                f"metric {m.name!r} is per token: its formula must return the samples "
                f"grouped by request (columns.token_gaps()), got {type(got).__name__}"
            )
        return got
    arr = np.asarray(got, dtype=np.float64)
    if arr.shape != (n,):
        raise TypeError(
            f"metric {m.name!r} is per request: its formula must return one value per "
            f"record ({n}), got shape {arr.shape}"
        )
    return arr


def entry(metric: str) -> Metric:
    """The catalogue entry of ``metric``; ValueError naming the valid ones."""
    m = CATALOGUE.get(metric)
    if m is None:
        raise ValueError(f"unknown metric {metric!r}; valid metrics: {', '.join(CATALOGUE)}")
    return m


_cache: dict[int, Columns] = {}


def columns(run: Run) -> Columns:
    """Cached by identity: summarize, evaluate and the reports all ask about one run, and
    the record walk is the expensive part. The entry holds the run, so an id is never
    reused while cached."""
    got = _cache.pop(id(run), None)
    if got is not None and got.run is run:
        _cache[id(run)] = got  # most recently used last
        return got
    cols = Columns(run)
    if len(_cache) >= _CACHE_SIZE:
        _cache.pop(next(iter(_cache)))
    _cache[id(run)] = cols
    return cols


def clear_cache() -> None:
    """Forget the cached columns of every run (benchmarks measure the cold path)."""
    _cache.clear()
