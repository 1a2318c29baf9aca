"""Judging a run: evaluate, strict mode, confidence, and settled verdicts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_llmslo import slo
from pytest_llmslo.errors import SloViolation
from pytest_llmslo.slo import (
    ObjectiveResult,
    Verdict,
    assert_slo,
    bind_run,
    evaluate,
    itl,
    itl_p50,
    ttft,
    ttft_p50,
    ttft_p99,
)

try:
    from tests.metrics_helpers import make_run, rec, steady, uniform_run
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec, steady, uniform_run  # type: ignore[no-redef]


def test_evaluate_pass_and_fail() -> None:
    run = uniform_run(400)  # TTFT from 100 to 199.75 ms, ITL exactly 10 ms
    v = evaluate(run, [ttft_p99 < 500, itl_p50 < 30])
    assert v.passed
    assert [r.passed for r in v.results] == [True, True]
    r0 = v.results[0]
    expect = np.percentile([100 + 100 * i / 400 for i in range(400)], 99)
    assert r0.observed == pytest.approx(expect)
    assert r0.count == 400
    assert r0.samples_needed == 299
    assert r0.bound is not None and r0.bound >= r0.observed
    assert v.results[1].count == 400 * 10
    assert v.attainment == pytest.approx(1.0)
    assert v.good == 400

    bad = evaluate(run, [ttft_p99 < 150, itl_p50 < 30])
    assert not bad.passed
    assert [r.passed for r in bad.results] == [False, True]


def test_evaluate_accepts_text() -> None:
    v = evaluate(uniform_run(10), "ttft_p50<1000, itl_p50<30")
    assert v.passed and len(v.results) == 2


def test_strict_mode_gates_on_bound() -> None:
    run = uniform_run(100)  # too few for a P99 bound (needs 299)
    loose = evaluate(run, [ttft_p99 < 500])
    strict = evaluate(run, [ttft_p99 < 500], strict=True)
    assert loose.passed
    assert not strict.passed
    assert strict.results[0].bound is None
    assert strict.results[0].gated_on == "bound"
    assert "too few" in strict.format()
    # with enough samples, a threshold between the estimate and the bound separates them
    big = uniform_run(1000)
    r = evaluate(big, [ttft_p99 < 1000]).results[0]
    assert r.bound is not None and r.bound > r.observed
    mid = (r.observed + r.bound) / 2
    assert evaluate(big, [ttft_p99 < mid]).passed
    assert not evaluate(big, [ttft_p99 < mid], strict=True).passed


def test_strict_greater_than_uses_lower_bound() -> None:
    run = uniform_run(1000)
    r = evaluate(run, [ttft.p50 > 0]).results[0]
    assert r.bound is not None and r.bound < r.observed
    mid = (r.observed + r.bound) / 2
    assert evaluate(run, [ttft.p50 > mid]).passed
    assert not evaluate(run, [ttft.p50 > mid], strict=True).passed


def test_mean_objective_uses_normal_bound() -> None:
    run = uniform_run(200)
    r = evaluate(run, [ttft.mean < 1000], strict=True).results[0]
    assert r.bound_method == "normal"
    assert r.passed
    assert r.bound is not None and r.bound > r.observed
    assert r.samples_needed is not None and r.samples_needed >= 2
    assert "normal-approximation" in evaluate(run, [ttft.mean < 1000]).format()


def test_failed_requests_lower_attainment_and_are_never_good() -> None:
    recs = [steady(i, sent=0, ttft=100, gap=10, n=5) for i in range(8)]
    recs += [rec(8, sent=0, kind="timeout"), rec(9, sent=0, status=503)]
    run = make_run(recs, start=0, end=1000)
    v = evaluate(run, [ttft_p99 < 500])
    # The gate is over every request: the two failures are +inf, so P99 (and P90) is inf.
    assert not v.passed
    (r,) = v.results
    assert r.failed == 2 and r.count == 10 and math.isinf(r.observed)
    assert v.attainment == pytest.approx(0.8)
    assert v.good == 8
    assert v.failures == {"http": 1, "timeout": 1}
    assert v.error_rate == pytest.approx(0.2)
    # P50 is over the survivors' values still: 8 of 10 are 100 ms.
    assert evaluate(run, [ttft_p50 < 500]).passed
    assert not evaluate(run, [ttft_p50 < 500], min_attainment=0.9).passed
    assert not evaluate(run, [ttft_p50 < 500], max_error_rate=0.1).passed
    assert "timeout: 1" in v.format()
    assert "2 of its 10 samples are failed requests" in v.format()


def test_goodput_gate() -> None:
    run = uniform_run(10)  # 10 requests x 11 tokens in 1 s
    v = evaluate(run, [ttft_p99 < 500], min_goodput_tok_s=100)
    assert v.goodput_tok_s == pytest.approx(110.0)
    assert v.passed
    assert not evaluate(run, [ttft_p99 < 500], min_goodput_tok_s=200).passed


def test_empty_run_fails_with_no_samples() -> None:
    v = evaluate(make_run([], start=0, end=0), [ttft_p99 < 500])
    assert not v.passed
    assert v.results[0].count == 0
    assert math.isnan(v.results[0].observed)
    assert "no samples" in v.format()


def test_invalid_run_fails_with_reason() -> None:
    run = uniform_run(10, valid=False, reasons=("schedule lag p99 120 ms > 10 ms",))
    v = evaluate(run, [ttft_p99 < 500])
    assert all(r.passed for r in v.results)
    assert not v.passed
    text = v.format()
    assert "INVALID RUN" in text and "schedule lag p99 120 ms" in text
    assert "not the engine's" in text


def test_verdict_round_trip() -> None:
    v = evaluate(uniform_run(50), [ttft_p99 < 150, itl.mean < 30])
    d = v.to_dict()
    back = Verdict.from_dict(json.loads(json.dumps(d, allow_nan=False)))
    assert back.to_dict() == d
    assert isinstance(back.results[0], ObjectiveResult)


def test_evaluate_type_and_range_checks() -> None:
    with pytest.raises(TypeError, match="needs a Run"):
        evaluate(object(), [ttft_p99 < 1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="confidence"):
        evaluate(uniform_run(3), [ttft_p99 < 1], confidence=1.0)
    with pytest.raises(ValueError, match="min_attainment"):
        evaluate(uniform_run(3), [ttft_p99 < 1], min_attainment=90)
    with pytest.raises(TypeError, match="bind_run"):
        bind_run("not a run")  # type: ignore[arg-type]


def test_strict_itl_counts_token_gaps() -> None:
    # 30 requests x 10 gaps = 300 samples: enough for a P99 bound, though 30 requests are not.
    run = uniform_run(30)
    r = evaluate(run, [slo.itl_p99 < 20], strict=True).results[0]
    assert r.count == 300
    assert r.bound == pytest.approx(10.0)
    assert r.passed


def test_strict_too_few_samples_message() -> None:
    with pytest.raises(SloViolation) as info:
        assert_slo(uniform_run(50), ttft_p99 < 10_000, strict=True)
    msg = str(info.value)
    assert "too few samples: 50" in msg.splitlines()[0]
    assert "50 samples are too few for a 95% bound; 299 needed" in msg


def test_bound_uses_requested_confidence() -> None:
    run = uniform_run(400)
    r95 = evaluate(run, [ttft_p99 < 1000], confidence=0.95).results[0]
    r99 = evaluate(run, [ttft_p99 < 1000], confidence=0.99).results[0]
    assert r95.samples_needed == 299 and r99.samples_needed == 459
    assert r95.bound is not None and r99.bound is None  # 400 < 459
    assert "bound(99%)" in evaluate(run, [ttft_p99 < 1000], confidence=0.99).format()


def test_settled_shows_a_violation_by_its_lower_bound() -> None:
    from pytest_llmslo.slo import settled

    slow = make_run([steady(i, sent=0, ttft=900, gap=10, n=5) for i in range(400)], start=0, end=1)
    reason = settled(slow, [ttft_p99 < 500])
    assert reason and reason.startswith("ttft_p99 < 500 ms is violated at 95% confidence")
    assert "lower bound is" in reason
    # Too few completed requests: nothing is settled yet.
    assert settled(slow, [ttft_p99 < 500], min_completed=500) is None
    fast = make_run([steady(i, sent=0, ttft=100, gap=10, n=5) for i in range(400)], start=0, end=1)
    assert settled(fast, [ttft_p99 < 500]) is None  # a pass is settled in strict mode only
    assert "every objective holds" in (settled(fast, [ttft_p99 < 500], strict=True) or "")
    # 299 samples make a P99 bound exist: below that even a clear pass is not settled.
    few = make_run([steady(i, sent=0, ttft=100, gap=10, n=5) for i in range(150)], start=0, end=1)
    assert settled(few, [ttft_p99 < 500], strict=True) is None
    # A mean has no distribution-free bound: a pass with one is never settled early.
    assert settled(fast, [ttft_p99 < 500, ttft.mean < 500], strict=True) is None


def test_settled_by_the_error_gate() -> None:
    from pytest_llmslo.slo import settled

    recs = [steady(i, sent=0, ttft=100, gap=10, n=5) for i in range(20)]
    recs += [rec(20 + i, sent=0, kind="timeout") for i in range(6)]
    run = make_run(recs, start=0, end=1)
    reason = settled(run, [ttft_p99 < 500], max_error_rate=0.01, planned=500)
    assert reason and "6 failed requests already exceed 1.0% of the 500 planned" in reason
    assert settled(run, [ttft_p99 < 500], max_error_rate=0.05, planned=500) is None
