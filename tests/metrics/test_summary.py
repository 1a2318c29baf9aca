"""Run summaries on hand-built records: throughput windows, failures and names."""

from __future__ import annotations

import json
import math

import pytest

from pytest_llmslo import metrics
from pytest_llmslo.metrics import (
    METRICS,
    PERCENTILES,
    RunSummary,
    aggregate_values,
    goodput,
    parse_stat,
    stat_name,
    summarize,
    token_gaps,
)
from pytest_llmslo.records import LoadLevel

try:
    from tests.metrics_helpers import Obj, make_run, rec, steady
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import Obj, make_run, rec, steady  # type: ignore[no-redef]


def test_throughput_over_measured_window() -> None:
    recs = [
        rec(0, sent=0, chunks=[100, 200], end=250, completion=4, prompt=100),
        rec(1, sent=500, chunks=[600], end=900, completion=3, prompt=50),
        rec(2, sent=100, chunks=[], end=150, status=503, kind="http", prompt=None),
    ]
    run = make_run(recs, start=0, end=2000)  # 2 s window
    s = summarize(run)
    assert s.duration_s == pytest.approx(2.0)
    assert s.output_tok_s == pytest.approx(7 / 2.0)
    assert s.total_tok_s == pytest.approx((7 + 150) / 2.0)
    assert s.req_s == pytest.approx(2 / 2.0)
    assert (s.requests, s.completed, s.failed) == (3, 2, 1)
    assert s.failures == {"http": 1}
    assert s.error_rate == pytest.approx(1 / 3)


def test_empty_window_falls_back_to_record_span() -> None:
    recs = [rec(0, sent=1000, chunks=[1100], end=1500, completion=5)]
    run = make_run(recs, start=0, end=0)
    assert summarize(run).duration_s == pytest.approx(0.5)


def test_failures_by_kind() -> None:
    recs = [steady(0, sent=0, ttft=10, gap=1, n=3)]
    recs += [rec(i, sent=0, kind="timeout", status=200) for i in range(1, 4)]
    recs += [rec(4, sent=0, status=500), rec(5, sent=0, status=0)]
    s = summarize(make_run(recs, start=0, end=1000))
    assert s.failures == {"http": 1, "timeout": 3, "unknown": 1}
    assert s.failed == 5
    assert s.error_rate == pytest.approx(5 / 6)


def test_requests_cut_by_the_run_end_are_failures_never_good() -> None:
    # Cut mid-stream by the duration bound: a 200 head, fast chunks so far, no usage.
    # Their timings would meet any threshold; they are still failures, in every count.
    done = steady(0, sent=0, ttft=10, gap=5, n=4)
    cut = rec(1, sent=0, chunks=[10, 15, 20], end=900, kind="cancelled")
    cut_one_chunk = rec(2, sent=0, chunks=[10], end=900, kind="cancelled")
    cut_before_head = rec(3, sent=0, end=900, status=0, kind="cancelled")
    run = make_run([done, cut, cut_one_chunk, cut_before_head], start=0, end=1000)
    assert metrics.failure_counts(run) == {"cancelled": 3}
    objs = [Obj("ttft", 99.0, "<", 500), Obj("itl", 50.0, "<", 30)]
    s = summarize(run, objs)
    assert (s.requests, s.completed, s.failed) == (4, 1, 3)
    assert s.failures == {"cancelled": 3} and s.error_rate == pytest.approx(3 / 4)
    assert s.good == 1 and s.attainment == pytest.approx(1 / 4)
    assert goodput(run, [Obj("itl", 50.0, "<", 30)]).mask.tolist() == [True] + [False] * 3
    # Their partial timings are in no distribution and their tokens in no throughput.
    assert aggregate_values(run, "ttft").tolist() == pytest.approx([10.0])
    assert token_gaps(run).tolist() == pytest.approx([5.0] * 3)
    assert s.output_tokens == 4
    assert RunSummary.from_dict(json.loads(json.dumps(s.to_dict()))).failures == {"cancelled": 3}


def test_empty_run() -> None:
    run = make_run([], start=0, end=0)
    s = summarize(run, objectives=[Obj("ttft", 99.0, "<", 500)])
    assert (s.requests, s.completed, s.failed) == (0, 0, 0)
    assert s.error_rate == 0.0
    assert s.output_tok_s == 0.0
    assert s.goodput_tok_s == 0.0
    assert s.attainment is None
    for m in METRICS:
        d = s.distributions[m]
        assert d.count == 0
        assert math.isnan(d.p(99))
        assert d.ub(99) is None
        assert d.samples_needed[99.0] == 299
    assert token_gaps(run).size == 0
    json.dumps(s.to_dict(), allow_nan=False)
    assert RunSummary.from_dict(s.to_dict()).distributions["ttft"].count == 0


def test_invalid_run_propagates() -> None:
    run = make_run([steady(0, sent=0, ttft=10, gap=1, n=3)], valid=False, reasons=("lag",))
    s = summarize(run)
    assert s.valid is False
    assert s.invalid_reasons == ("lag",)


def test_stat_names() -> None:
    assert parse_stat("p99") == 99.0
    assert parse_stat("p999") == 99.9
    assert parse_stat("P99.9") == 99.9
    assert parse_stat(50) == 50.0
    assert parse_stat("mean") == "mean"
    assert [stat_name(q) for q in PERCENTILES] == ["p50", "p90", "p95", "p99", "p999"]
    assert stat_name("mean") == "mean"
    assert parse_stat(stat_name(99.5)) == 99.5
    assert parse_stat(stat_name(7.5)) == 7.5
    for bad in ("p100", "p0", "x", 0, 100, True):
        with pytest.raises(ValueError):
            parse_stat(bad)


def _waves_of_four(n: int) -> list:
    """``n`` closed-loop requests at c=4, each 100 ms with 10 tokens 10 ms apart, sent in
    waves of four (request i in wave i // 4)."""
    from pytest_llmslo.records import RequestRecord

    ms = 1_000_000
    recs = []
    for i in range(n):
        sent = (i // 4) * 100 * ms
        chunks = [sent + (k + 1) * 10 * ms for k in range(10)]
        recs.append(
            RequestRecord(i, sent, sent, chunks[-1], chunk_ns=chunks, first_content_ns=chunks[0],
                          completion_tokens=10, status=200, finish_reason="length")
        )  # fmt: skip
    return recs


def test_closed_loop_throughput_over_the_steady_window() -> None:
    # c=4, every request 100 ms with 10 tokens 10 ms apart: the engine delivers 400 tok/s.
    # 17 requests are four waves and one request alone: over the measured window the lone
    # last wave reads as 340 tok/s; between the 4th and the last send every slot is busy.
    from pytest_llmslo.records import Run

    recs = _waves_of_four(17)
    run = Run(LoadLevel.concurrency(4), tuple(recs), 0, recs[-1].end_ns)
    s = summarize(run)
    assert s.throughput_window == "steady" and s.throughput_window_s == pytest.approx(0.4)
    assert s.output_tok_s == pytest.approx(400, rel=0.03)
    measured = 170 / (run.end_ns / 1e9)
    assert measured == pytest.approx(340, rel=0.01) and s.output_tok_s > measured * 1.1
    # An open loop, or less than one wave, keeps the measured window.
    assert (
        summarize(Run(LoadLevel.rate(40), tuple(recs), 0, recs[-1].end_ns)).throughput_window
        == "measured"
    )
    short = Run(LoadLevel.concurrency(32), tuple(recs), 0, recs[-1].end_ns)
    assert summarize(short).throughput_window == "measured"


def test_closed_loop_throughput_of_a_short_run_counts_per_slot() -> None:
    # c=4, 6 requests (1.5 waves): the last two run alone, so the measured window reads
    # 300 tok/s; each slot still streams 10 tokens per 100 ms request: 400 tok/s.
    from pytest_llmslo.records import Run

    recs = _waves_of_four(6)
    run = Run(LoadLevel.concurrency(4), tuple(recs), 0, recs[-1].end_ns)
    s = summarize(run)
    assert 60 / (run.end_ns / 1e9) == pytest.approx(300)
    assert s.throughput_window == "cycles"
    assert s.throughput_window_s == pytest.approx(0.15)
    assert s.output_tok_s == pytest.approx(400) and s.req_s == pytest.approx(40)
    # Goodput is counted the same way.
    from pytest_llmslo import ttft_p99

    g = summarize(run, [ttft_p99 < 1000])
    assert g.goodput_tok_s == pytest.approx(400)
