"""Synthetic sweeps for the tests of the results document and its reports: runs with
known timings, summarised and evaluated by the real metrics and slo modules (the
``point_factory`` and ``sweep_factory`` fixtures of tests/report and tests/document)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pytest_llmslo import metrics, slo
from pytest_llmslo.document import compact_samples
from pytest_llmslo.records import ClientHealth, LoadLevel, RequestRecord, Run
from pytest_llmslo.sweep import SweepPoint

MS = 1_000_000

OBJECTIVES = (
    slo.Objective("ttft", 99, "<", 500.0),
    slo.Objective("itl", 50, "<", 30.0),
)


def synthetic_run(
    level: LoadLevel,
    *,
    ttft_ms: float,
    gap_ms: float,
    tokens: int = 16,
    requests: int = 60,
    failed: int = 0,
    valid: bool = True,
) -> Run:
    """A closed loop at ``level``: batches of ``c`` requests, each batch sent when the
    previous one ended; request ``i``'s TTFT rises by up to 20 % across a batch so the
    percentiles differ."""
    c = max(int(level.value), 1)
    records = []
    e2e = ttft_ms * 1.2 + gap_ms * (tokens - 1)
    for i in range(requests):
        sent = (i // c) * (e2e + 1.0)
        ttft = ttft_ms * (1.0 + 0.2 * (i % c) / c) + 0.01 * i
        chunks = tuple(int((sent + ttft + k * gap_ms) * MS) for k in range(tokens))
        bad = i < failed
        records.append(
            RequestRecord(
                index=i,
                scheduled_ns=int(sent * MS),
                sent_ns=int(sent * MS),
                end_ns=chunks[-1],
                chunk_ns=() if bad else chunks,
                chunk_tokens=() if bad else (1,) * tokens,
                first_content_ns=None if bad else chunks[0],
                prompt_tokens=32,
                completion_tokens=None if bad else tokens,
                status=500 if bad else 200,
                error_kind="http" if bad else None,
                error="HTTP 500" if bad else None,
            )
        )
    health = ClientHealth(
        valid=valid, reasons=() if valid else ("schedule lag p99 48.0 ms > 10 ms",)
    )
    start = min(r.sent_ns for r in records)
    end = max(r.end_ns for r in records)
    return Run(level=level, records=tuple(records), start_ns=start, end_ns=end, health=health)


def make_point(
    c: float,
    *,
    ttft_ms: float,
    gap_ms: float = 10.0,
    engine: str = "sim",
    test: str = "test_chat",
    objectives: Sequence[slo.Objective] | None = OBJECTIVES,
    valid: bool = True,
    failed: int = 0,
    samples: bool = False,
    rate: bool = False,
    **kw: Any,
) -> SweepPoint:
    level = LoadLevel.rate(c) if rate else LoadLevel.concurrency(int(c))
    run = synthetic_run(level, ttft_ms=ttft_ms, gap_ms=gap_ms, valid=valid, failed=failed, **kw)
    objs = tuple(objectives or ())
    summary = metrics.summarize(run, objs)
    verdict = slo.evaluate(run, objs) if objectives is not None else None
    return SweepPoint(
        engine, test, level, summary, verdict, compact_samples(run) if samples else None
    )


def make_sweep(
    engine: str = "sim",
    *,
    levels: Sequence[int] = (1, 4, 8, 16, 32),
    ttft: Callable[[int], float] = lambda c: 50.0 * c,
    **kw: Any,
) -> list[SweepPoint]:
    """TTFT grows with load, so with TTFT P99 < 500 ms the knee is the highest level whose
    TTFT P99 (about 1.2 x ttft(c)) stays below 500 ms: c4 with the default curve."""
    return [make_point(c, ttft_ms=ttft(c), engine=engine, **kw) for c in levels]
