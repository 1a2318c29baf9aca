"""Metrics on hand-built records with exactly known answers."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from pytest_llmslo import metrics
from pytest_llmslo.metrics import (
    METRICS,
    PERCENTILES,
    Distribution,
    RunSummary,
    aggregate_values,
    goodput,
    lower_confidence_bound,
    lower_rank,
    parse_stat,
    per_request,
    percentile,
    request_values,
    samples_needed,
    stat_name,
    summarize,
    token_gaps,
    upper_confidence_bound,
    upper_rank,
)
from pytest_llmslo.records import LoadLevel

try:
    from tests.metrics_helpers import make_run, rec, steady
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec, steady  # type: ignore[no-redef]


class Obj:
    """A minimal threshold (metrics must not depend on slo.py)."""

    def __init__(self, metric: str, stat: float | str, op: str, threshold: float) -> None:
        self.metric, self.stat, self.op, self.threshold = metric, stat, op, threshold


# ------------------------------------------------------------------ per-request values


def test_ttft_e2e_tpot_exact() -> None:
    # sent at 100 ms, chunks at 150, 160, 170, 180 ms, last byte at 185 ms, 4 tokens.
    r = rec(sent=100, chunks=[150, 160, 170, 180], end=185, completion=4)
    v = per_request(make_run([r]))
    assert v["ttft"][0] == pytest.approx(50.0)
    assert v["ttfot"][0] == pytest.approx(50.0)
    assert v["e2e"][0] == pytest.approx(85.0)
    # (85 - 50) / (4 - 1)
    assert v["tpot"][0] == pytest.approx(35.0 / 3)
    assert v["itl"][0] == pytest.approx(10.0)


def test_ttfot_with_reasoning_chunks() -> None:
    # Reasoning chunks at 20 and 30 ms; content starts at 45 ms.
    r = rec(sent=0, chunks=[20, 30, 45, 50], content=45, completion=4)
    v = per_request(make_run([r]))
    assert v["ttft"][0] == pytest.approx(20.0)
    assert v["ttfot"][0] == pytest.approx(45.0)
    # ITL runs over every output chunk, reasoning included.
    assert token_gaps(make_run([r])).tolist() == pytest.approx([10.0, 15.0, 5.0])


def test_ttfot_nan_without_content() -> None:
    r = rec(sent=0, chunks=[20, 30], content=None, completion=2)
    v = per_request(make_run([r]))
    assert v["ttft"][0] == pytest.approx(20.0)
    assert math.isnan(v["ttfot"][0])


def test_tpot_uses_server_usage_that_agrees_with_the_stream_and_nan_for_one_token() -> None:
    # 3 chunks and the server says 5 tokens (within 2 of the stream): TPOT = (e2e - ttft) / 4.
    many = rec(0, sent=0, chunks=[10, 40, 70], end=70, completion=5)
    one = rec(1, sent=0, chunks=[10], end=10, completion=1)
    # 3 chunks and a claim of 7: usage disagrees, the 3 streamed tokens count.
    claim = rec(2, sent=0, chunks=[10, 40, 70], end=70, completion=7)
    v = per_request(make_run([many, one, claim]))
    assert v["tpot"][0] == pytest.approx(60.0 / 4)
    assert math.isnan(v["tpot"][1])
    assert v["tpot"][2] == pytest.approx(60.0 / 2)


def test_itl_spread_over_multi_token_chunks() -> None:
    # chunk 1 arrives 30 ms after chunk 0 carrying 3 tokens -> three gaps of 10 ms;
    # chunk 2 arrives 8 ms later with 1 token -> one gap of 8 ms. Tokens of chunk 0 give none.
    r = rec(sent=0, chunks=[100, 130, 138], tokens=[2, 3, 1], exact=True, completion=6)
    gaps = token_gaps(make_run([r]))
    assert sorted(gaps.tolist()) == pytest.approx([8.0, 10.0, 10.0, 10.0])
    assert per_request(make_run([r]))["itl"][0] == pytest.approx(38.0 / 4)


def test_itl_inexact_counts_spread_only_usage_that_agrees_with_the_stream() -> None:
    # 4 chunks counted as 1 token each, usage says 8: it disagrees with the stream (by
    # more than 2 tokens and 5 %), so nothing is spread and the gaps are the chunks' own.
    r = rec(sent=0, chunks=[10, 30, 50, 70], exact=False, completion=8)
    gaps = token_gaps(make_run([r]))
    assert gaps.tolist() == pytest.approx([20.0] * 3)
    # Usage of 6 agrees (2 more than the chunks): E = 2 over 4 chunks, shares
    # floor((j+1)*2/4) - floor(j*2/4) = 0, 1, 0, 1.
    r2 = rec(sent=0, chunks=[10, 30, 50, 70], exact=False, completion=6)
    assert token_gaps(make_run([r2])).tolist() == pytest.approx([10.0, 10.0, 20.0, 10.0, 10.0])


def test_itl_exact_counts_ignore_usage_and_usage_below_chunks() -> None:
    exact = rec(0, sent=0, chunks=[10, 30], tokens=[1, 1], exact=True, completion=5)
    fewer = rec(1, sent=0, chunks=[10, 30, 50], exact=False, completion=2)
    gaps = token_gaps(make_run([exact, fewer]))
    assert gaps.tolist() == pytest.approx([20.0, 20.0, 20.0])


def test_records_without_chunk_tokens_count_one_per_chunk() -> None:
    r = rec(sent=0, chunks=[10, 20, 40], tokens=[], completion=None)
    run = make_run([r])
    assert token_gaps(run).tolist() == pytest.approx([10.0, 20.0])
    assert per_request(run)["tpot"][0] == pytest.approx(30.0 / 2)


def test_failed_requests_are_nan_and_not_in_distributions() -> None:
    good = steady(0, sent=0, ttft=50, gap=10, n=5)
    bad = rec(1, sent=0, chunks=[5, 6, 7], end=8, status=200, kind="truncated")
    run = make_run([good, bad])
    v = per_request(run)
    assert all(math.isnan(v[m][1]) for m in ("ttft", "ttfot", "tpot", "e2e", "itl"))
    assert aggregate_values(run, "ttft").tolist() == pytest.approx([50.0])
    assert token_gaps(run).tolist() == pytest.approx([10.0] * 4)


def test_request_values_itl_own_percentile() -> None:
    # gaps 10, 20, 30, 100 -> p50 = 25 (linear), mean = 40, p90 = 30 + 0.7 * 70 = 79.
    r = rec(0, sent=0, chunks=[0, 10, 30, 60, 160], completion=5)
    short = rec(1, sent=0, chunks=[5], completion=1)
    run = make_run([r, short])
    p50 = request_values(run, "itl", 50.0)
    assert p50[0] == pytest.approx(25.0)
    assert math.isnan(p50[1])
    assert request_values(run, "itl", "mean")[0] == pytest.approx(40.0)
    assert request_values(run, "itl", 90.0)[0] == pytest.approx(79.0)
    assert request_values(run, "ttft", 99.0)[1] == pytest.approx(5.0)


def test_request_values_itl_matches_numpy_per_request() -> None:
    rng = np.random.default_rng(1)
    recs = []
    for i in range(40):
        n = int(rng.integers(1, 30))
        t = np.cumsum(rng.exponential(10.0, n)) + 5
        recs.append(rec(i, sent=0, chunks=t.tolist(), completion=n))
    run = make_run(recs)
    got = request_values(run, "itl", 90.0)
    for i, r in enumerate(recs):
        g = np.diff(np.asarray(r.chunk_ns)) / 1e6
        if g.size == 0:
            assert math.isnan(got[i])
        else:
            assert got[i] == pytest.approx(np.percentile(g, 90))


def test_unknown_metric() -> None:
    with pytest.raises(ValueError, match="valid metrics"):
        request_values(make_run([]), "latency", 50.0)


# ------------------------------------------------------------------ run figures


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


# ------------------------------------------------------------------ goodput


def _goodput_run():
    # ttft / own mean itl (ms) per request; r4 failed; r5 has one token (no gap).
    recs = [
        steady(0, sent=0, ttft=100, gap=10, n=11),  # good for both
        steady(1, sent=0, ttft=600, gap=10, n=11),  # ttft too slow
        steady(2, sent=0, ttft=100, gap=50, n=11),  # itl too slow
        steady(3, sent=0, ttft=200, gap=20, n=11),  # good
        rec(4, sent=0, chunks=[10, 20], kind="reset", completion=2),  # failed, never good
        rec(5, sent=0, chunks=[300], end=300, completion=1),  # no gap: itl met vacuously
    ]
    # Six requests at once: a wave of c8 that did not fill (the measured window counts).
    return make_run(recs, start=0, end=2000, level=LoadLevel.concurrency(8))


def test_goodput_and_attainment_with_several_objectives() -> None:
    run = _goodput_run()
    objs = [Obj("ttft", 99.0, "<", 500), Obj("itl", 50.0, "<", 30)]
    gp = goodput(run, objs)
    assert gp.mask.tolist() == [True, False, False, True, False, True]
    assert gp.good == 3
    assert gp.attainment == pytest.approx(3 / 6)
    assert gp.req_s == pytest.approx(3 / 2.0)
    assert gp.tok_s == pytest.approx((11 + 11 + 1) / 2.0)
    s = summarize(run, objs)
    assert s.good == 3
    assert s.attainment == pytest.approx(0.5)
    assert s.goodput_tok_s == pytest.approx(11.5)
    assert s.objectives == ("ttft_p99 < 500 ms", "itl_p50 < 30 ms")


def test_goodput_single_objective_and_failed_never_good() -> None:
    run = _goodput_run()
    gp = goodput(run, [Obj("ttft", 99.0, "<", 10_000)])
    assert gp.good == 5  # all completed ones; the failed one never
    assert not gp.mask[4]


def test_goodput_event_metric_undefined_is_not_met() -> None:
    no_content = rec(0, sent=0, chunks=[10, 20], content=None, completion=2)
    run = make_run([no_content])
    assert goodput(run, [Obj("ttfot", 50.0, "<", 1e9)]).good == 0
    assert goodput(run, [Obj("tpot", 50.0, "<", 1e9)]).good == 1


def test_goodput_greater_than_objective() -> None:
    run = _goodput_run()
    gp = goodput(run, [Obj("ttft", 50.0, ">=", 200)])
    assert gp.mask.tolist() == [False, True, False, True, False, True]


def test_no_objectives_means_no_goodput_fields() -> None:
    s = summarize(_goodput_run())
    assert s.goodput_tok_s is None and s.attainment is None and s.good is None


# ------------------------------------------------------------------ percentiles and bounds


def test_percentile_linear_matches_numpy() -> None:
    rng = np.random.default_rng(7)
    x = rng.lognormal(3, 1, 1001)
    d = Distribution.of("ttft", x)
    for q in PERCENTILES:
        assert d.p(q) == pytest.approx(np.percentile(x, q, method="linear"))
        assert percentile(x, q) == pytest.approx(np.percentile(x, q))
    assert d.mean == pytest.approx(x.mean())
    assert d.std == pytest.approx(x.std())
    assert (d.min, d.max, d.count) == (x.min(), x.max(), 1001)


def test_percentile_drops_nan() -> None:
    x = [1.0, float("nan"), 3.0, float("inf")]
    assert percentile(x, 50) == pytest.approx(2.0)
    assert math.isnan(percentile([float("nan")], 50))
    assert Distribution.of("e2e", x).count == 2


def _brute_upper_k(n: int, q: float, c: float) -> int | None:
    p = Fraction(q).limit_denominator(10_000) / 100
    cdf = Fraction(0)
    for k in range(1, n + 1):
        cdf += math.comb(n, k - 1) * p ** (k - 1) * (1 - p) ** (n - k + 1)
        if cdf >= Fraction(c).limit_denominator(10_000):
            return k
    return None


def _brute_lower_k(n: int, q: float, c: float) -> int | None:
    p = Fraction(q).limit_denominator(10_000) / 100
    cc = Fraction(c).limit_denominator(10_000)
    best = None
    for k in range(1, n + 1):
        tail = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
        if tail >= cc:
            best = k
    return best


@pytest.mark.parametrize("n", [1, 2, 5, 10, 29, 58, 59, 100, 298, 299, 300, 450])
@pytest.mark.parametrize("q", [50.0, 90.0, 95.0, 99.0])
def test_upper_rank_against_brute_force_binomial(n: int, q: float) -> None:
    assert upper_rank(n, q, 0.95) == _brute_upper_k(n, q, 0.95)


@pytest.mark.parametrize("n", [1, 3, 10, 60, 200])
@pytest.mark.parametrize("q", [5.0, 50.0, 95.0])
def test_lower_rank_against_brute_force_binomial(n: int, q: float) -> None:
    assert lower_rank(n, q, 0.95) == _brute_lower_k(n, q, 0.95)


def test_upper_rank_other_confidence_against_brute_force() -> None:
    for n in (10, 100, 700):
        for q in (50.0, 99.0):
            assert upper_rank(n, q, 0.99) == _brute_upper_k(n, q, 0.99)
            assert upper_rank(n, q, 0.8) == _brute_upper_k(n, q, 0.8)


def test_upper_bound_is_that_order_statistic() -> None:
    x = np.arange(1, 1001, dtype=float)  # X_(k) = k
    k = upper_rank(1000, 99.0)
    assert k is not None and k > 990
    assert upper_confidence_bound(np.random.default_rng(0).permutation(x), 99.0) == float(k)
    assert lower_confidence_bound(x, 99.0) == float(lower_rank(1000, 99.0))
    d = Distribution.of("ttft", x)
    assert d.ub(99) == float(k)
    assert d.ub(50) >= d.p(50)


def test_samples_needed() -> None:
    assert samples_needed(99, 0.95) == 299
    assert samples_needed(99.9, 0.95) == 2995
    assert samples_needed(95, 0.95) == 59
    assert samples_needed(50, 0.95) == 5
    assert samples_needed(99, 0.99) == 459
    assert samples_needed(5, 0.95, "lower") == 59
    for q in (50.0, 90.0, 99.0, 99.9):
        n = samples_needed(q)
        assert upper_rank(n, q) is not None
        assert upper_rank(n - 1, q) is None


def test_bound_none_below_samples_needed() -> None:
    x = np.linspace(1, 2, 298)
    assert upper_confidence_bound(x, 99.0) is None
    assert upper_confidence_bound(np.linspace(1, 2, 299), 99.0) == pytest.approx(2.0)


def test_large_n_bound_is_fast_and_sane() -> None:
    k = upper_rank(10_000_000, 99.0)
    assert k is not None
    # normal approximation: n p + z sqrt(n p (1-p)), z_0.95 = 1.645
    approx = 10_000_000 * 0.99 + 1.645 * math.sqrt(10_000_000 * 0.99 * 0.01)
    assert abs(k - approx) < 5


def test_confidence_validation() -> None:
    with pytest.raises(ValueError):
        samples_needed(99, 1.0)
    with pytest.raises(ValueError):
        upper_rank(10, 99, 0.0)


# ------------------------------------------------------------------ names and round trips


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


def test_summary_metric_lookup() -> None:
    s = summarize(_goodput_run(), [Obj("ttft", 99.0, "<", 500)])
    assert s.metric("ttft", 99) == s.distributions["ttft"].p(99)
    assert s.metric("ttft", "p99") == s.metric("ttft_p99")
    assert s.metric("itl", "mean") == s.distributions["itl"].mean
    assert s.metric("output_tok_s") == s.output_tok_s
    with pytest.raises(KeyError):
        s.metric("ttft", 42)
    with pytest.raises(KeyError):
        s.metric("bogus_p99")


def test_summary_round_trip() -> None:
    run = _goodput_run()
    s = summarize(run, [Obj("ttft", 99.0, "<", 500), Obj("itl", 50.0, "<", 30)])
    d = s.to_dict()
    text = json.dumps(d, allow_nan=False)
    back = RunSummary.from_dict(json.loads(text))
    assert back.to_dict() == d
    assert back.level == LoadLevel.concurrency(8)
    assert back.distributions["ttft"].p(99) == s.distributions["ttft"].p(99)
    assert back.distributions["ttft"].ub(99) is None  # 5 samples


def test_distribution_round_trip_with_nan() -> None:
    d = Distribution.of("itl", [])
    back = Distribution.from_dict(json.loads(json.dumps(d.to_dict(), allow_nan=False)))
    assert back.count == 0 and math.isnan(back.mean) and math.isnan(back.p(50))


def test_cache_is_per_run_identity() -> None:
    a = make_run([steady(0, sent=0, ttft=10, gap=1, n=3)])
    b = make_run([steady(0, sent=0, ttft=20, gap=1, n=3)])
    assert per_request(a)["ttft"][0] == pytest.approx(10)
    assert per_request(b)["ttft"][0] == pytest.approx(20)
    # callers get copies: mutating one does not poison the cache
    per_request(a)["ttft"][0] = -1
    assert per_request(a)["ttft"][0] == pytest.approx(10)
    assert metrics.aggregate_values(a, "ttft")[0] == pytest.approx(10)


def test_request_itl_percentiles_with_mixed_chunk_sizes() -> None:
    # Requests of very different lengths land in different padded blocks; multi-token
    # chunks expand into several samples. Check against a per-request numpy computation.
    rng = np.random.default_rng(3)
    recs = []
    expected: list[np.ndarray] = []
    for i in range(60):
        n = int(rng.choice([1, 2, 3, 17, 64, 200]))
        t = np.cumsum(rng.integers(1, 50, n)).astype(float)
        toks = rng.integers(1, 4, n).tolist()
        recs.append(
            rec(i, sent=0, chunks=t.tolist(), tokens=toks, exact=True, completion=sum(toks))
        )
        gaps = np.diff(t)
        expected.append(np.repeat(gaps / np.asarray(toks[1:]), toks[1:]))
    run = make_run(recs)
    for q in (50.0, 90.0, 99.0):
        got = request_values(run, "itl", q)
        for i, e in enumerate(expected):
            if e.size == 0:
                assert math.isnan(got[i])
            else:
                assert got[i] == pytest.approx(np.percentile(e, q))
    means = request_values(run, "itl", "mean")
    for i, e in enumerate(expected):
        if e.size:
            assert means[i] == pytest.approx(e.mean())
    pooled = np.concatenate(expected)
    assert np.sort(token_gaps(run)) == pytest.approx(np.sort(pooled))


def test_zero_token_counts_are_treated_as_one() -> None:
    r = rec(sent=0, chunks=[10, 20, 30], tokens=[1, 0, 2], exact=True, completion=3)
    assert sorted(token_gaps(make_run([r])).tolist()) == pytest.approx([5.0, 5.0, 10.0])


def test_failed_request_chunks_excluded_from_gap_blocks() -> None:
    bad = rec(0, sent=0, chunks=[1, 2, 3, 4], kind="reset")
    good = rec(1, sent=0, chunks=[10, 30, 60], completion=3)
    run = make_run([bad, good])
    assert token_gaps(run).tolist() == pytest.approx([20.0, 30.0])
    v = request_values(run, "itl", 50.0)
    assert math.isnan(v[0]) and v[1] == pytest.approx(25.0)


def test_request_values_accepts_stat_names() -> None:
    run = make_run([rec(0, sent=0, chunks=[0, 10, 30, 60, 160], completion=5)])
    assert request_values(run, "itl", "p50")[0] == pytest.approx(25.0)
    assert request_values(run, "itl", "mean")[0] == pytest.approx(40.0)
    with pytest.raises(ValueError):
        request_values(run, "itl", "p0")


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
    from pytest_llmslo.records import LoadLevel, Run

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
    from pytest_llmslo.records import LoadLevel, Run

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
