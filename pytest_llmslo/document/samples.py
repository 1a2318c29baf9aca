"""The per-request samples a point carries in the results document: compact values (ms,
rounded to µs) aligned with the run's records, so that a later comparison can run rank
tests without the raw records, and when each request was sent, answered and ended
(seconds from the start of the measured window, rounded to the millisecond), so that a
report can draw the level's per-second series."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_llmslo.catalog import METRICS

if TYPE_CHECKING:
    from pytest_llmslo.records import Run

__all__ = ["SAMPLE_METRICS", "SAMPLE_TIMES", "compact_samples", "with_good"]

#: Per-request metrics carried as samples (ms), in this order.
SAMPLE_METRICS: tuple[str, ...] = METRICS

#: Per-request times carried as samples (s from the measured window's start): the send,
#: the first token, the end. Optional: a document written before them has none.
SAMPLE_TIMES: tuple[str, ...] = ("sent_s", "first_token_s", "end_s")


def _seconds(ns: int | None, start_ns: int) -> float | None:
    return None if ns is None else round((ns - start_ns) / 1e9, 3)


def compact_samples(run: Run, *, digits: int = 3) -> dict[str, list[float | None]]:
    """Per-request values of ``run`` for the document: ``<metric>_ms`` for ttft, ttfot,
    itl (the request's own gap statistic), tpot and e2e, rounded to ``digits`` decimals
    (µs), None where undefined (failed request, single-token output); plus ``ok`` (1/0),
    ``output_tokens`` and the times ``sent_s``, ``first_token_s`` (None without a token)
    and ``end_s``: seconds from ``run.start_ns`` (the first measured send), rounded to
    the millisecond. Aligned with ``run.records``."""
    import numpy as np  # only needed when samples are wanted

    from pytest_llmslo import metrics
    from pytest_llmslo.metrics.columns import columns

    per = metrics.per_request(run)
    out: dict[str, list[Any]] = {}
    for name in SAMPLE_METRICS:
        values = per.get(name)
        if values is None:
            continue
        rounded = np.round(np.asarray(values, dtype=np.float64), digits)
        out[f"{name}_ms"] = [v if math.isfinite(v) else None for v in rounded.tolist()]
    # The run's columns, read once (a long run's records are a store of columns).
    cols = columns(run)
    out["ok"] = cols.ok.astype(np.int64).tolist()
    out["output_tokens"] = cols.output_tokens.tolist()
    t0 = run.start_ns
    out["sent_s"] = [_seconds(x, t0) for x in cols.sent_ns.tolist()]
    firsts = cols.first_chunk_ns.tolist()
    has = (cols.chunk_counts > 0).tolist()
    pairs = zip(firsts, has, strict=True)
    out["first_token_s"] = [_seconds(x if h else None, t0) for x, h in pairs]
    out["end_s"] = [_seconds(x, t0) for x in cols.end_ns.tolist()]
    return out


def with_good(
    samples: Mapping[str, Sequence[float | None]] | None, run: Run, objectives: Iterable[Any]
) -> dict[str, Sequence[float | None]] | None:
    """``samples`` with the column ``good``: per request 1 when it is good under
    ``objectives`` (completed and within every per-request threshold of them all, as
    goodput counts it: ``metrics.goodput``), else 0. A comparison takes the good tokens
    of each window of the run from it (goodput's noise bound). None stays None; without
    objectives (no goodput) the column is left out."""
    if samples is None:
        return None
    out = {k: v for k, v in samples.items() if k != "good"}
    objs = list(objectives)
    if objs:
        from pytest_llmslo import metrics

        out["good"] = metrics.goodput(run, objs).mask.astype(int).tolist()
    return out
