"""Micro-benchmarks of the hot paths, with pytest-benchmark (machine and commit info in
its JSON, runs compared with ``--benchmark-compare``):

    .venv/bin/pytest benchmarks/test_micro.py --benchmark-only [--benchmark-autosave]
    .venv/bin/pytest benchmarks/test_micro.py --benchmark-only --benchmark-compare

- SSE decoding of one streamed response of 1,000 chunks (``load.sse``: split the body into
  events, then decode the chunks: what the load generator does per request after a run);
- ``metrics.summarize`` over 1,000,000 records of 8 chunks (the record walk included,
  cache cleared each round), and over 100,000 records of 100 chunks;
- one step of the sim's scheduler with 256 running sequences and new prompts queued;
- report rendering of a six-engine, eight-level document: terminal tables with the Pareto
  summary, Markdown, SVG and CSV.

Not part of the test suite (``testpaths`` is ``tests``): the figures depend on the machine
and its load. The records are built once per module, outside the timed code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_llmslo import metrics
from pytest_llmslo.document import Results, build_document
from pytest_llmslo.load.sse import decode_stream, split_events
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.report import csvexport, markdown, svg, terminal
from pytest_llmslo.sim.offline import Workload
from pytest_llmslo.sim.profiles import PROFILES
from pytest_llmslo.sim.scheduler import Scheduler, SimRequest
from pytest_llmslo.slo import itl_p50, ttft_p99
from pytest_llmslo.sweep import SweepPoint

sys.path.insert(0, str(Path(__file__).parent))
from bench_metrics import build_run


def _sse_body(chunks: int) -> bytes:
    out = []
    for i in range(chunks):
        obj = {
            "id": "cmpl-1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}],
        }
        out.append(b"data: " + json.dumps(obj).encode() + b"\n\n")
    usage = {"choices": [], "usage": {"prompt_tokens": 512, "completion_tokens": chunks}}
    out.append(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
    return b"".join(out)


def test_sse_decode_1000_chunks(benchmark) -> None:
    body = _sse_body(1000)
    # As read from the socket: 4 KiB pieces, each with its arrival time.
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    times = list(range(len(pieces)))

    def decode():
        ev_times, events, _rest = split_events(times, pieces)
        return decode_stream(ev_times, events)

    result = benchmark(decode)
    assert len(result.chunk_ns) == 1000 and result.completion_tokens == 1000


@pytest.fixture(scope="module")
def million() -> Run:
    return build_run(1_000_000, 8, seed=1)


@pytest.fixture(scope="module")
def hundred_k() -> Run:
    return build_run(100_000, 100, seed=2)


def _summarize(run: Run):
    metrics.clear_cache()
    return metrics.summarize(run, (ttft_p99 < 500, itl_p50 < 30))


def test_summarize_1m_records(benchmark, million) -> None:
    summary = benchmark.pedantic(_summarize, args=(million,), rounds=3, iterations=1)
    assert summary.requests == 1_000_000


def test_summarize_100k_records_100_chunks(benchmark, hundred_k) -> None:
    summary = benchmark.pedantic(_summarize, args=(hundred_k,), rounds=3, iterations=1)
    assert summary.requests == 100_000


def test_sim_scheduler_step_256_running(benchmark) -> None:
    profile = PROFILES["llama3-70b-fp8-4xh100-vllm"]
    isls, osls = Workload(isl=512, osl=10_000, seed=3).lengths(320)

    def setup():
        sched = Scheduler(profile.scheduler_config(), profile.cost_model())
        for i in range(256):
            sched.add(SimRequest(rid=str(i), prompt_tokens=int(isls[i]), max_tokens=int(osls[i])))
        now = 0.0
        while any(r.num_computed < r.prompt_tokens for r in sched.running) or sched.waiting:
            now = sched.step(now).end_s
            if now > 60:
                break
        for i in range(256, 320):  # new prompts waiting: a mixed prefill + decode step
            sched.add(SimRequest(rid=str(i), prompt_tokens=int(isls[i]), max_tokens=int(osls[i])))
        return (sched, now), {}

    def step(sched, now):
        return sched.step(now)

    result = benchmark.pedantic(step, setup=setup, rounds=20, iterations=1)
    assert result is not None


@pytest.fixture(scope="module")
def document() -> dict:
    points = []
    for e, scale in enumerate((1.0, 0.8, 0.9, 0.7, 0.6, 0.65)):
        for c in (1, 4, 8, 16, 32, 48, 64, 96):
            run = build_run(200, 16, seed=e * 100 + c)
            run = Run(LoadLevel.concurrency(c), run.records, run.start_ns, run.end_ns)
            summary = metrics.summarize(run, (ttft_p99 < 500 * scale * 2,))
            points.append(SweepPoint(engine=f"engine-{e}", test="t.py::test_chat", level=run.level,
                                     summary=summary))  # fmt: skip
    return build_document(Results.of(points, constants={"model": "m"}))


def test_render_reports(benchmark, document) -> None:
    def render():
        results = Results.from_document(document)
        lines = terminal.render_summary(results, width=100)
        md = markdown.render_report(results)
        chart = svg.render_svg(results, title="bench")
        table = csvexport.render_csv(results)
        return lines, md, chart, table

    lines, md, chart, table = benchmark(render)
    assert any("Pareto" in ln for ln in lines) and "Pareto" in md and "</svg>" in chart
    assert table.count("\n") == 1 + 48
