"""A metric's values on hand-built records with exactly known answers: per request, token
gaps, and what a goodput threshold checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_llmslo import metrics
from pytest_llmslo.metrics import (
    aggregate_values,
    per_request,
    request_values,
    token_gaps,
)

try:
    from tests.metrics_helpers import make_run, rec, steady
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec, steady  # type: ignore[no-redef]


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
