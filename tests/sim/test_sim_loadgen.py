"""The load generator against the sim engine's own record of when it wrote each token.

The sim's ``--trace-file`` holds, per token, ``perf_counter_ns()`` just before the write;
the load generator timestamps each chunk on arrival with the same monotonic clock. Every
record's first chunk and chunk gaps must match the trace within a few milliseconds.
Tolerances are for a busy, shared 2-core machine: per-request medians, never single
wall-clock samples, except a loose bound on the one first-chunk sample.
"""

from __future__ import annotations

import json
import statistics
from itertools import pairwise
from pathlib import Path

import numpy as np
from sim_helpers import MODEL, start_sim, wait_for

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.metrics import summarize
from pytest_llmslo.records import LoadLevel, RequestRecord

REQUESTS = 16
OSL = 32


def trace_by_request(path: Path) -> dict[str, list[int]]:
    """Write times (ns) of each request's tokens, in token order."""
    rows: dict[str, dict[int, int]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["rid"], {})[row["i"]] = row["t_ns"]
    return {rid: [ts[i] for i in sorted(ts)] for rid, ts in rows.items()}


def match(records: list[RequestRecord], trace: dict[str, list[int]]) -> list[list[int]]:
    """The trace of each record. Records carry no response id, so each is paired with the
    traced request whose write times are closest to its arrival times (smallest median
    difference, pairs taken best first). Requests the engine ran in lockstep have the same
    write times to within the writes' order, so swapping them changes nothing measured."""
    ids = list(trace)
    cost = {
        (k, rid): statistics.median(abs(c - t) for c, t in zip(r.chunk_ns, trace[rid], strict=True))
        for k, r in enumerate(records)
        for rid in ids
        if len(trace[rid]) == len(r.chunk_ns)
    }
    out: dict[int, str] = {}
    used: set[str] = set()
    for (k, rid), _ in sorted(cost.items(), key=lambda kv: kv[1]):
        if k not in out and rid not in used:
            out[k] = rid
            used.add(rid)
    assert len(out) == len(records), "some record matches no traced request"
    return [trace[out[k]] for k in range(len(records))]


def test_load_generator_matches_the_sim_trace(tmp_path: Path) -> None:
    with start_sim(tmp_path, "--max-model-len", "4096", trace=True) as sim:
        # An open loop 50 ms apart: requests start in different steps, then decode together.
        run = run_load_sync(
            LoadJob(
                ClientSettings(sim.url, MODEL, processes=1),
                WorkloadSpec(isl=64, osl=OSL, calibrate=False, seed=11),
                LoadLevel.rate(20, "constant"),
                requests=REQUESTS,
                warmup=0,
            )
        )
        assert sim.trace is not None
        path = sim.trace
        assert wait_for(lambda: len(path.read_text().splitlines()) >= REQUESTS * OSL)
    records = list(run.records)
    assert len(records) == REQUESTS and all(r.ok for r in records), [r.error for r in records]
    assert all(len(r.chunk_ns) == OSL and r.completion_tokens == OSL for r in records)
    trace = trace_by_request(path)
    assert len(trace) == REQUESTS and all(len(t) == OSL for t in trace.values())

    first_delays: list[float] = []
    for r, written in zip(records, match(records, trace), strict=True):
        delays = [(c - t) / 1e6 for c, t in zip(r.chunk_ns, written, strict=True)]
        # Received just after it was written (a lockstep neighbour's write may be a few
        # tens of microseconds later than this one's).
        assert -1.0 < statistics.median(delays) < 5.0, delays
        # The first chunk: TTFT as measured is the engine's, plus the delivery.
        assert -1.0 < delays[0] < 25.0, delays
        first_delays.append(delays[0])
        # Chunk gaps: the client's ITL is the engine's, gap by gap.
        cli = [(b - a) / 1e6 for a, b in pairwise(r.chunk_ns)]
        srv = [(b - a) / 1e6 for a, b in pairwise(written)]
        assert statistics.median(abs(c - s) for c, s in zip(cli, srv, strict=True)) < 3.0
        assert abs(statistics.median(cli) - statistics.median(srv)) < 2.0
        assert r.chunk_ns[0] > r.sent_ns
    assert statistics.median(first_delays) < 5.0

    # The summary's ITL is the engine's: its P50 against the trace's gaps.
    srv_gaps = [(b - a) / 1e6 for t in trace.values() for a, b in pairwise(t)]
    itl_p50 = summarize(run).distributions["itl"].p(50)
    assert abs(itl_p50 - float(np.percentile(srv_gaps, 50))) < 2.0
    # 70B FP8 on 4x H100: decode steps of the low tens of ms.
    assert 8.0 < itl_p50 < 30.0


def test_closed_loop_cools_down_so_the_last_wave_runs_at_the_level(tmp_path: Path) -> None:
    """One measured wave of spread lengths at c8: without a cool-down the longest requests
    end alone, in a batch that shrinks to one, and their last tokens come at the engine's
    c1 pace. With it, the sim runs 8 requests until the last measured token."""
    with start_sim(tmp_path, "--max-model-len", "4096") as sim:
        run = run_load_sync(
            LoadJob(
                ClientSettings(sim.url, MODEL, processes=1),
                WorkloadSpec(
                    isl=64, osl=48, osl_stddev=24, distribution="uniform", calibrate=False, seed=5
                ),
                LoadLevel.concurrency(8),
                requests=8,
                warmup=8,
            )
        )
        # The cool-down requests were cancelled and the engine freed them.
        assert wait_for(lambda: sim.metrics()["vllm:num_requests_running"] == 0)
    records = sorted(run.records, key=lambda r: r.end_ns)
    assert len(records) == 8 and all(r.ok for r in records)
    all_gaps = [(b - a) / 1e6 for r in records for a, b in pairwise(r.chunk_ns)]
    level = float(np.median(all_gaps))
    # The last request's final tokens stream at the level's pace, not the c1 pace (the
    # sim's 70B vLLM-like ITL is about 15 ms at c8 and 12 ms at c1).
    last = records[-1]
    tail = [(b - a) / 1e6 for a, b in pairwise(last.chunk_ns[-10:])]
    assert float(np.median(tail)) > 0.93 * level, (tail, level)
    assert run.meta["cooldown_sent"] >= 1
