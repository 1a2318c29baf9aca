"""Token gaps: the ITL samples of a run, one per token after each request's first chunk.

A gap g between chunk i−1 and chunk i that carries t_i tokens gives t_i samples of g / t_i
(speculative decoding and frontends such as Dynamo pack several tokens into one chunk).
t_i is ``chunk_tokens[i]`` (1 when absent). When ``tokens_exact`` is False and the
request's credited output tokens N (``RequestRecord.credit``: usage only when it agrees
with the stream) exceed the counted Σ t_i, the E = N − Σ t_i uncounted tokens are spread
evenly over the request's m chunks in integer shares (chunk j gets ⌊(j+1)E/m⌋ − ⌊jE/m⌋
more), so the samples of a request add up to its last − first chunk time and their count
matches its credit. A usage that disagrees with the stream is not credited, so it never
spreads: the gaps are the chunks' own. Tokens that arrived in the first chunk have no
preceding chunk and give no sample (their time is in TTFT). When usage reports fewer
tokens than the chunks show, the chunks win.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from pytest_llmslo.records import RequestRecord, Run
from pytest_llmslo.recordstore import NONE, RecordStore

from .ragged import Ragged

__all__ = ["TokenGaps", "build_token_gaps"]

_NS_PER_MS = 1e6


class TokenGaps(NamedTuple):
    """The gaps (ms, grouped by request) and every output chunk's arrival (ns) and tokens,
    in record order. ``chunk_tokens`` is None when every chunk carried one token;
    ``chunk_ns`` is None for a run whose records are in a ``RecordStore`` (read from it
    again when asked: a long run's chunk times are the largest array it has)."""

    gaps: Ragged
    chunk_ns: np.ndarray | None
    chunk_tokens: np.ndarray | None


#: Token gaps are computed this many chunks at a time (the differences of a block are the
#: only temporary array, so a long run's peak is its chunk times and its gaps).
_BLOCK = 1 << 20


def build_token_gaps(
    run: Run, chunk_counts: np.ndarray, ok: np.ndarray, output_tokens: np.ndarray
) -> TokenGaps:
    """The token gaps of ``run`` (module docstring); the arrays are the run's columns.
    Failed requests give no samples."""
    recs = run.records
    n = len(recs)
    counts = chunk_counts
    total = int(counts.sum())
    sample_counts = np.zeros(n, dtype=np.int64)
    if total == 0:
        empty = np.empty(0, dtype=np.int64)
        return TokenGaps(Ragged(np.empty(0), sample_counts), empty, None)
    toks = _counted_tokens(run, counts, total, output_tokens)
    per_rec = np.maximum(counts - 1, 0)
    if not ok.all():
        per_rec = np.where(ok, per_rec, 0)
    if toks is None and isinstance(recs, RecordStore):
        # A segment at a time: the run's chunk times are never whole in memory.
        return TokenGaps(Ragged(_store_gaps(recs, counts, ok, per_rec), per_rec), None, None)
    ts = chunk_times(recs)
    # diff[k] = ts[k+1] - ts[k] is a gap unless chunk k+1 starts a request; a request
    # with m chunks gives m - 1 gaps, in record order. Failed requests give none.
    keep = _gap_mask(counts, ok, total)
    kept_ts = None if isinstance(recs, RecordStore) else ts
    if toks is None:
        return TokenGaps(Ragged(_kept_gaps(ts, keep), per_rec), kept_ts, None)
    gap_ns = np.diff(ts)[keep]
    w = toks[1:][keep]
    gaps = np.repeat(gap_ns / (w * _NS_PER_MS), w)
    has = per_rec > 0
    offsets = np.cumsum(per_rec[has]) - per_rec[has]
    sample_counts[has] = np.add.reduceat(w, offsets) if offsets.size else 0
    return TokenGaps(Ragged(gaps, sample_counts), kept_ts, toks)


def _gap_mask(counts: np.ndarray, ok: np.ndarray, total: int) -> np.ndarray:
    """Which differences of consecutive chunk times are gaps: not across two requests,
    not in a failed request."""
    starts = np.cumsum(counts) - counts
    keep = np.ones(max(total - 1, 0), dtype=bool)
    boundary = starts[(counts > 0) & (starts > 0)] - 1
    keep[boundary] = False
    if not ok.all():
        keep &= np.repeat(ok, counts)[1:]
    return keep


def _store_gaps(
    store: RecordStore, counts: np.ndarray, ok: np.ndarray, per_rec: np.ndarray
) -> np.ndarray:
    """The gaps (ms) of a store's records, read a segment at a time, in record order:
    the same values as over the flat chunk times (a segment ends with a request)."""
    out = np.empty(int(per_rec.sum()), dtype=np.float64)
    at = row = 0
    for fixed, ns, _ in store.segments():
        m = len(fixed)
        c, o = counts[row : row + m], ok[row : row + m]
        row += m
        if ns.size > 1:
            block = _kept_gaps(ns, _gap_mask(c, o, ns.size))
            out[at : at + block.size] = block
            at += block.size
    return out


def _kept_gaps(ts: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``np.diff(ts)[keep]`` in ms, a block at a time."""
    out = np.empty(int(np.count_nonzero(keep)), dtype=np.float64)
    at = 0
    for a in range(0, keep.size, _BLOCK):
        b = min(a + _BLOCK, keep.size)
        block = (ts[a + 1 : b + 1] - ts[a:b])[keep[a:b]]
        out[at : at + block.size] = block / _NS_PER_MS
        at += block.size
    return out


def chunk_times(recs: Sequence[RequestRecord]) -> np.ndarray:
    """Every record's chunk arrival times (ns), flat in record order."""
    if isinstance(recs, RecordStore):
        return recs.chunk_ns()
    # Records keep their chunk times in compact int64 arrays: gather them with C copies.
    flat = array("q")
    for r in recs:
        flat.extend(r.chunk_ns)
    return np.frombuffer(flat, dtype=np.int64)


def _multi_chunk_counts(recs: Sequence[RequestRecord], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(the records whose chunks carry counts of their own, those counts flat)."""
    if isinstance(recs, RecordStore):
        n_counts = recs.column("n_counts").astype(np.int64)
        # A record keeps counts only when some chunk carried more than one token.
        multi = (n_counts == recs.column("n_chunks")) & (n_counts > 0)
        flat = recs.chunk_tokens()
        return multi, flat[np.repeat(multi, n_counts)]
    # Most records carry one token per chunk (or no counts at all): only the others'
    # counts are flattened; array.count runs in C, so the check is cheap.
    multi = np.fromiter(
        (
            len(r.chunk_tokens) == len(r.chunk_ns)
            and r.chunk_tokens.count(1) != len(r.chunk_tokens)
            for r in recs
        ),
        dtype=bool,
        count=n,
    )
    counted_flat = array("I")
    for i in np.flatnonzero(multi).tolist():
        counted_flat.extend(recs[i].chunk_tokens)
    return multi, np.frombuffer(counted_flat, dtype=np.uint32)


def _exact_and_usage(recs: Sequence[RequestRecord], n: int) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(recs, RecordStore):
        return recs.column("tokens_exact"), recs.column("completion_tokens") != NONE
    exact = np.fromiter((r.tokens_exact for r in recs), dtype=bool, count=n)
    has_usage = np.fromiter((r.completion_tokens is not None for r in recs), bool, count=n)
    return exact, has_usage


def _counted_tokens(
    run: Run, counts: np.ndarray, total: int, output_tokens: np.ndarray
) -> np.ndarray | None:
    """The tokens of every chunk (None: one each), with a credited total above the counted
    one spread over the request's chunks (module docstring)."""
    recs = run.records
    n = len(recs)
    multi, counted_vals = _multi_chunk_counts(recs, n)
    counted = counts.copy()
    toks: np.ndarray | None = None
    if multi.any():
        sel = np.flatnonzero(multi)
        vals = counted_vals.astype(np.int64)
        np.maximum(vals, 1, out=vals)  # a chunk in chunk_ns carried output: >= 1 token
        toks = np.ones(total, dtype=np.int64)
        toks[np.repeat(multi, counts)] = vals
        offsets = np.cumsum(counts[sel]) - counts[sel]
        counted[sel] = np.add.reduceat(vals, offsets)
    starts = np.cumsum(counts) - counts
    # Inexact counts and a credited total above them (usage that agrees with the stream,
    # within its tolerance): spread the extra tokens evenly over the request's chunks
    # (integer shares, floor((j+1)E/m) - floor(jE/m)), so the request's token count
    # matches what it is credited and each gap is split over its share.
    exact, has_usage = _exact_and_usage(recs, n)
    extra = np.maximum(np.where(~exact & has_usage, output_tokens - counted, 0), 0)
    if extra.any():
        group = np.repeat(np.arange(n, dtype=np.int64), counts)
        pos = np.arange(total, dtype=np.int64) - starts[group]
        e = extra[group]
        m = counts[group]
        if toks is None:
            toks = np.ones(total, dtype=np.int64)
        toks = toks + ((pos + 1) * e) // m - (pos * e) // m
        del group, pos, e, m
    return toks
