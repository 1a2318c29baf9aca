"""What the regression tests share: runs with known timings, their points and results,
sweeps, capacity searches, constants with engines of their own."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_llmslo import metrics, regression, slo
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document import (
    Results,
    build_document,
    compact_samples,
    constants,
)
from pytest_llmslo.document.samples import with_good
from pytest_llmslo.records import LoadLevel, RequestRecord, Run
from pytest_llmslo.sweep import SweepPoint

MS = 1_000_000


OBJECTIVES = (slo.Objective("ttft", 99, "<", 1000.0), slo.Objective("itl", 50, "<", 30.0))


CONSTANTS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "precision": "fp8",
    "hardware": {"machine": "x86_64", "cpus": 16, "python": "3.11.9", "sim_profile": "h100"},
    "workload": {"kind": "synthetic", "path": None, "isl": 512, "osl": 16, "tokenizer": "/a"},
    "dataset": None,
    "isl": 512,
    "osl": 16,
    "slo": [o.to_dict() for o in OBJECTIVES],
    "warmup": 10,
}


def run_with(
    ttft_ms: Sequence[float],
    *,
    level: LoadLevel | None = None,
    gap_ms: float = 10.0,
    tokens: int = 16,
    failed: int = 0,
    duration_scale: float = 1.0,
) -> Run:
    """A run with one request per TTFT value, sent back to back; the first ``failed``
    requests fail. ``duration_scale`` stretches the timeline with idle time between the
    requests (the same requests, lower throughput)."""
    records = []
    t = 0.0
    for i, ttft in enumerate(ttft_ms):
        bad = i < failed
        chunks = tuple(int((t + ttft + k * gap_ms) * MS) for k in range(tokens))
        records.append(
            RequestRecord(
                index=i,
                scheduled_ns=int(t * MS),
                sent_ns=int(t * MS),
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
        span = (chunks[-1] / MS) + 1.0 - t
        t += span * duration_scale
    start = records[0].sent_ns
    end = start + int((records[-1].end_ns - start) * duration_scale)
    return Run(level or LoadLevel.concurrency(1), tuple(records), start, end)


def point(
    ttft_ms: Sequence[float],
    *,
    engine: str = "vllm",
    test: str = "test_chat",
    level: LoadLevel | None = None,
    objectives: Sequence[slo.Objective] | None = OBJECTIVES,
    samples: bool = True,
    **kw: Any,
) -> SweepPoint:
    level = level or LoadLevel.concurrency(8)
    run = run_with(ttft_ms, level=level, **kw)
    objs = tuple(objectives or ())
    summary = metrics.summarize(run, objs)
    verdict = slo.evaluate(run, objs) if objectives is not None else None
    # The samples a session stores: with the good flags under the verdict's objectives.
    stored = with_good(compact_samples(run), run, objs) if samples else None
    return SweepPoint(engine, test, level, summary, verdict, stored)


def results(
    points: Sequence[SweepPoint],
    constants: dict[str, Any] | None = None,
    version: str = "0.9",
    capacities: dict[tuple[str, str], CapacityResult] | None = None,
) -> Results:
    """The results of a session that measured ``points`` (engines of ``version``)."""
    engines = {p.engine: {"version": version} for p in points}
    return Results.of(
        points, constants=constants or CONSTANTS, engines=engines, capacities=capacities
    )


def document(
    points: Sequence[SweepPoint], constants: dict[str, Any] | None = None, version: str = "0.9"
) -> dict[str, Any]:
    return build_document(results(points, constants, version))


def normal(mean: float, sd: float, n: int, seed: int) -> list[float]:
    return np.abs(np.random.default_rng(seed).normal(mean, sd, n)).tolist()


def row(c: regression.Comparison, metric: str) -> regression.ComparisonRow:
    (r,) = [r for r in c.rows if r.metric == metric]
    return r


def sweep(
    engine: str, scale: float, levels: Sequence[int] = (1, 4, 8), seed: int = 0
) -> list[SweepPoint]:
    return [
        point(
            [v * scale for v in normal(100.0 * c, 10.0 * c, 400, seed + c)],
            engine=engine,
            level=LoadLevel.concurrency(c),
        )
        for c in levels
    ]


def capacity(value: int | None, probes: Sequence[tuple[int, bool]], mode: str = "concurrency"):
    history = tuple((LoadLevel.concurrency(c), passed) for c, passed in probes)
    failed = [c for c, passed in probes if not passed]
    return CapacityResult(
        mode=mode,  # type: ignore[arg-type]
        capacity=None if value is None else LoadLevel.concurrency(value),
        lower=None if value is None else float(value),
        upper=float(min(failed)) if failed else None,
        probes=len(probes),
        history=history,
        done=True,
        reason="bracketed to the resolution",
    )


CAP8 = [(1, True), (2, True), (4, True), (8, True), (16, False), (12, False), (10, False)]


CAP6 = [(1, True), (2, True), (4, True), (8, False), (6, True), (7, False)]


CAP7 = [(1, True), (2, True), (4, True), (8, False), (6, True), (7, True)]


def gpu_meta(kind: str = "vllm", gpus: Any = None, **kw: Any) -> dict[str, Any]:
    listed = [
        "NVIDIA H100 80GB HBM3, 81559 MiB, 535.104.05",
        "NVIDIA H100 80GB HBM3, 81559 MiB, 535.104.05",
        "NVIDIA A100-SXM4-40GB, 40960 MiB, 535.104.05",
    ]
    return {"kind": kind, "gpus": gpus, "model": "m", "hardware": {"cpus": 8, "gpus": listed}, **kw}


def json_text(value: Any) -> str:
    return json.dumps(value)


def per_engine_constants(**engines: dict[str, Any]) -> dict[str, Any]:
    base = {k: v for k, v in CONSTANTS.items() if k not in constants.ENGINE_CONSTANTS}
    return {
        **base,
        "model": ",".join(sorted({e["model"] for e in engines.values()})),
        "hardware": {n: e["hardware"] for n, e in engines.items()},
        "client": {"machine": "x86_64", "cpus": 8, "python": "3.11.9"},
        "per_engine": engines,
    }


H100 = {"model": "llama", "precision": "fp8", "hardware": {"gpus": ["NVIDIA H100"]}}


A100 = {"model": "llama", "precision": "bf16", "hardware": {"gpus": ["NVIDIA A100"]}}
