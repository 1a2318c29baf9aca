"""Benchmark of the metrics core: summarise 100k records x 100 chunks.

    .venv/bin/python benchmarks/bench_metrics.py [--requests 100000] [--chunks 100]

Prints the seconds taken by ``summarize`` on a fresh run (the record walk included), with
goodput objectives (one on ITL, which needs each request's own percentile), and by
``evaluate``. Not a test: the figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from pytest_llmslo import metrics
from pytest_llmslo.metrics import summarize
from pytest_llmslo.records import LoadLevel, RequestRecord, Run
from pytest_llmslo.slo import evaluate, itl_p50, tpot_p90, ttft_p99

T = TypeVar("T")


def build_run(requests: int, chunks: int, seed: int = 0) -> Run:
    """A closed-loop-looking run: TTFT ~ lognormal around 80 ms, gaps ~ 10 ms +- jitter,
    every tenth request with two-token chunks, half a percent failed."""
    rng = np.random.default_rng(seed)
    ms = 1_000_000
    sent = np.cumsum(rng.exponential(2.0, requests)) * ms
    ttft = rng.lognormal(np.log(80.0), 0.4, requests) * ms
    gaps = rng.gamma(20.0, 0.5, (requests, chunks)) * ms  # mean 10 ms
    gaps[:, 0] = 0
    times = (sent[:, None] + ttft[:, None] + np.cumsum(gaps, axis=1)).astype(np.int64)
    ones = (1,) * chunks
    twos = (2,) * chunks
    recs = []
    for i in range(requests):
        row = tuple(times[i].tolist())
        multi = i % 10 == 0
        failed = i % 200 == 7
        recs.append(
            RequestRecord(
                index=i,
                scheduled_ns=int(sent[i]),
                sent_ns=int(sent[i]),
                end_ns=row[-1] + 200_000,
                chunk_ns=row,
                chunk_tokens=twos if multi else ones,
                tokens_exact=multi,
                first_content_ns=row[0],
                prompt_tokens=512,
                completion_tokens=2 * chunks if multi else chunks,
                status=200,
                error_kind="timeout" if failed else None,
            )
        )
    return Run(
        level=LoadLevel.concurrency(64),
        records=tuple(recs),
        start_ns=int(sent[0]),
        end_ns=max(r.end_ns for r in recs),
    )


def timed(label: str, fn: Callable[[], T]) -> T:
    t0 = time.perf_counter()
    out = fn()
    print(f"{label:<58} {time.perf_counter() - t0:8.3f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--chunks", type=int, default=100)
    args = ap.parse_args()
    n, m = args.requests, args.chunks
    print(f"building {n} records x {m} chunks ...")
    t0 = time.perf_counter()
    run = build_run(n, m)
    print(f"  (built in {time.perf_counter() - t0:.1f} s; not part of the figures)")
    objs = (ttft_p99 < 200, itl_p50 < 12, tpot_p90 < 15)

    s = timed("summarize(run), cold: record walk + 5 distributions", lambda: summarize(run))
    metrics.clear_cache()
    timed("summarize(run, objectives incl. itl_p50), cold", lambda: summarize(run, objs))
    timed("summarize(run, objectives), warm (columns cached)", lambda: summarize(run, objs))
    timed("evaluate(run, 3 objectives, strict), warm", lambda: evaluate(run, objs, strict=True))
    metrics.clear_cache()
    v = timed("evaluate(run, 3 objectives), cold", lambda: evaluate(run, objs))
    d = s.distributions["itl"]
    ub = d.ub(99)
    print(
        f"itl samples {d.count}, p50 {d.p(50):.3f} ms, p99 {d.p(99):.3f} ms "
        f"(bound {'n/a' if ub is None else f'{ub:.3f}'}); "
        f"ttft p99 {s.metric('ttft', 99):.1f} ms; attainment {v.attainment}"
    )


if __name__ == "__main__":
    main()
