"""Hand-built records with exactly known timings for the metrics and SLO tests."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_llmslo.records import ClientHealth, FailureKind, LoadLevel, RequestRecord, Run

MS = 1_000_000  # ns per ms


def rec(
    index: int = 0,
    *,
    sent: float = 0.0,
    chunks: Sequence[float] = (),
    end: float | None = None,
    tokens: Sequence[int] | None = None,
    exact: bool = False,
    content: float | None = -1.0,
    completion: int | None = None,
    prompt: int | None = 10,
    status: int = 200,
    kind: FailureKind | None = None,
) -> RequestRecord:
    """A record with times in ms. ``content=-1`` means "first content = first chunk"."""
    chunk_ns = tuple(round(c * MS) for c in chunks)
    if content == -1.0:
        first_content = chunk_ns[0] if chunk_ns else None
    else:
        first_content = None if content is None else round(content * MS)
    end_ms = end if end is not None else (chunks[-1] if chunks else sent)
    return RequestRecord(
        index=index,
        scheduled_ns=round(sent * MS),
        sent_ns=round(sent * MS),
        end_ns=round(end_ms * MS),
        chunk_ns=chunk_ns,
        chunk_tokens=tuple(tokens) if tokens is not None else (1,) * len(chunk_ns),
        tokens_exact=exact,
        first_content_ns=first_content,
        prompt_tokens=prompt,
        completion_tokens=completion,
        status=status,
        error_kind=kind,
        error=None if kind is None else f"{kind} error",
    )


def make_run(
    records: Sequence[RequestRecord],
    *,
    start: float | None = None,
    end: float | None = None,
    valid: bool = True,
    reasons: tuple[str, ...] = (),
    level: LoadLevel | None = None,
) -> Run:
    """A run over ``records``; the window defaults to first send .. last byte."""
    if start is None:
        start = min((r.sent_ns for r in records), default=0) / MS
    if end is None:
        end = max((r.end_ns for r in records), default=0) / MS
    return Run(
        level=level or LoadLevel.concurrency(4),
        records=tuple(records),
        start_ns=round(start * MS),
        end_ns=round(end * MS),
        health=ClientHealth(valid=valid, reasons=reasons),
    )


def steady(
    index: int, *, sent: float, ttft: float, gap: float, n: int, completion: int | None = None
) -> RequestRecord:
    """A request whose first of ``n`` one-token chunks comes ``ttft`` ms after sending and
    the rest every ``gap`` ms; it ends at its last chunk."""
    chunks = [sent + ttft + i * gap for i in range(n)]
    return rec(index, sent=sent, chunks=chunks, completion=n if completion is None else completion)


class Obj:
    """A minimal threshold (metrics must not depend on slo)."""

    def __init__(self, metric: str, stat: float | str, op: str, threshold: float) -> None:
        self.metric, self.stat, self.op, self.threshold = metric, stat, op, threshold


def uniform_run(n: int, *, ttft_ms: float = 100.0, gap: float = 10.0, tokens: int = 11, **kw):
    """n requests, TTFT spread evenly over [ttft_ms, 2*ttft_ms), constant token gaps."""
    recs = [steady(i, sent=0, ttft=ttft_ms + ttft_ms * i / n, gap=gap, n=tokens) for i in range(n)]
    return make_run(recs, start=0, end=1000, **kw)
