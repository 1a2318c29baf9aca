"""The SLO DSL: symbols, objectives, evaluate, strict mode, assertion helpers, parsing."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator

import numpy as np
import pytest

from pytest_llmslo import slo
from pytest_llmslo.errors import ConfigError, LoadError, SloViolation
from pytest_llmslo.slo import (
    Objective,
    ObjectiveResult,
    Verdict,
    assert_goodput,
    assert_slo,
    bind_run,
    current_run,
    e2e_p99,
    evaluate,
    itl,
    itl_mean,
    itl_p50,
    parse_objectives,
    tpot_p90,
    ttft,
    ttft_p50,
    ttft_p99,
    ttft_p999,
    unbind_run,
)

try:
    from tests.metrics_helpers import make_run, rec, steady
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec, steady  # type: ignore[no-redef]


@pytest.fixture(autouse=True)
def _no_bound_run() -> Iterator[None]:
    unbind_run()
    yield
    unbind_run()


def uniform_run(n: int, *, ttft_ms: float = 100.0, gap: float = 10.0, tokens: int = 11, **kw):
    """n requests, TTFT spread evenly over [ttft_ms, 2*ttft_ms), constant token gaps."""
    recs = [steady(i, sent=0, ttft=ttft_ms + ttft_ms * i / n, gap=gap, n=tokens) for i in range(n)]
    return make_run(recs, start=0, end=1000, **kw)


# ------------------------------------------------------------------ symbols


def test_symbols_build_objectives() -> None:
    o = ttft_p99 < 500
    assert o == Objective("ttft", 99.0, "<", 500.0)
    assert (ttft.p99 < 500) == o
    assert (ttft.p(99) < 500) == o
    assert (500 > ttft_p99) == o  # reflected comparison
    assert (itl.p50 <= 30).op == "<="
    assert (itl_mean >= 2).stat == "mean"
    assert (ttft_p999 < 900).stat == 99.9
    assert slo.e2e_mean.metric == "e2e"
    assert slo.ttfot_p95.stat == 95.0


def test_labels() -> None:
    assert (ttft_p99 < 500).label == "ttft_p99 < 500 ms"
    assert (ttft_p999 < 1.5).label == "ttft_p999 < 1.5 ms"
    assert (itl_mean <= 30).label == "itl_mean <= 30 ms"
    assert str(tpot_p90 > 2) == "tpot_p90 > 2 ms"


def test_bare_assert_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"assert ttft_p99 < 500.*cannot be evaluated"):
        assert ttft_p99 < 500
    with pytest.raises(TypeError, match="assert_goodput"):
        bool(itl_p50 < 30)
    with pytest.raises(TypeError, match="assert_slo"):
        if e2e_p99 < 1:
            pass


def test_metric_without_stat_and_bad_threshold() -> None:
    with pytest.raises(TypeError, match=r"ttft\.p99"):
        ttft < 500  # noqa: B015
    with pytest.raises(TypeError, match="number of milliseconds"):
        ttft_p99 < "500"  # noqa: B015
    with pytest.raises(ValueError):
        Objective("latency", 99.0, "<", 1)
    with pytest.raises(ValueError):
        Objective("ttft", 99.0, "==", 1)


def test_objective_round_trip() -> None:
    o = itl.p(99.5) <= 12.5
    assert Objective.from_dict(json.loads(json.dumps(o.to_dict()))) == o
    assert o.label == "itl_p995 <= 12.5 ms"


# ------------------------------------------------------------------ evaluate


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


# ------------------------------------------------------------------ assert_* helpers


def test_assert_goodput_explicit_run_passes_and_returns_verdict() -> None:
    v = assert_goodput(uniform_run(20), ttft_p99 < 500, itl_p50 < 30)
    assert isinstance(v, Verdict) and v.passed
    assert v.min_attainment == slo.DEFAULT_MIN_ATTAINMENT


def test_assert_goodput_current_run() -> None:
    run = uniform_run(20)
    assert bind_run(run) is None
    assert current_run() is run
    assert_goodput(ttft_p99 < 500, itl_p50 < 30)
    with pytest.raises(SloViolation):
        assert_goodput(ttft_p99 < 100)
    unbind_run()
    assert current_run() is None
    with pytest.raises(LoadError, match="no current run"):
        assert_goodput(ttft_p99 < 500)


def test_assert_goodput_attainment_default() -> None:
    # 20 requests with TTFT 100..195 ms: aggregate P50 < 160 holds (P50 = 147.5), but only
    # 12/20 requests are below 160 ms on their own: attainment 60 % < 90 %.
    run = uniform_run(20)
    assert assert_slo(run, ttft.p50 < 160).passed
    with pytest.raises(SloViolation, match=r"attainment 60\.0% < required 90\.0%"):
        assert_goodput(run, ttft.p50 < 160)
    assert assert_goodput(run, ttft.p50 < 160, min_attainment=None).passed


def test_violation_message_lists_every_objective() -> None:
    run = uniform_run(300)
    with pytest.raises(SloViolation) as info:
        assert_slo(run, ttft_p99 < 150, itl_p50 < 30)
    err = info.value
    assert isinstance(err, AssertionError)
    msg = str(err)
    first = msg.splitlines()[0]
    assert first.startswith("SLO not met: ttft_p99 < 150 ms (observed")
    assert "ttft_p99 < 150 ms" in msg and "itl_p50 < 30 ms" in msg
    assert "FAIL" in msg and "pass" in msg
    assert "bound(95%)" in msg
    assert "299" in msg  # samples needed for P99
    assert "300" in msg  # sample count
    assert "3000" in msg  # itl gap count
    assert "goodput" in msg and "attainment" in msg
    assert isinstance(err.verdict, Verdict)
    assert not err.verdict.passed


def test_message_names_completed_requests_without_output() -> None:
    # A server can finish a request (usage says 16 tokens) without streaming any text:
    # its TTFT is undefined and it is not good; the message says so next to the numbers.
    recs = [steady(i, sent=0, ttft=50, gap=5, n=16) for i in range(7)]
    recs.append(rec(7, sent=0, chunks=(), end=120, completion=16))
    run = make_run(recs, start=0, end=200)
    with pytest.raises(SloViolation) as info:
        assert_goodput(run, ttft_p99 < 500)
    msg = str(info.value)
    assert "attainment 87.5% (7/8 good)" in msg
    assert "ttft_p99: 1 completed request(s) streamed no output chunk" in msg
    ok = evaluate(uniform_run(10), [ttft_p99 < 500]).format()
    assert "streamed no" not in ok


def test_an_invalid_run_is_inconclusive_not_an_slo_failure() -> None:
    from pytest_llmslo.errors import Inconclusive

    run = uniform_run(20, valid=False, reasons=("client CPU 100%",))
    for helper in (assert_slo, slo.assert_goodput):
        with pytest.raises(Inconclusive, match="client CPU 100%") as info:
            helper(run, ttft_p99 < 500)
        assert not isinstance(info.value, AssertionError)
        assert str(info.value).startswith("inconclusive: the load generator, not the engine")


def test_failed_requests_fail_the_engine_even_when_the_client_was_flagged() -> None:
    # The failure gates are judged before the client's health: failed requests are the
    # engine's answers, and no busy client turns them into an inconclusive level.
    every = [rec(i, sent=0, chunks=(5.0,), end=300, kind="reset") for i in range(8)]
    some = [steady(i, sent=0, ttft=50, gap=5, n=16) for i in range(8)] + every[:2]
    for recs, problem in ((every, "every request failed (8 of 8)"), (some, "error rate 20.0%")):
        run = make_run(recs, valid=False, reasons=("the client was slow",))
        assert slo.failures_fail(run, 0.01)
        with pytest.raises(SloViolation, match=re.escape(problem)) as info:
            assert_slo(run, ttft_p99 < 500)
        assert "reset 2" in str(info.value) or "reset 8" in str(info.value)
        assert "the failed requests decide the verdict" in str(info.value)
        assert evaluate(run, [ttft_p99 < 500], max_error_rate=0.01).failures_decide
    # Within the allowed error rate the client's health still decides: inconclusive.
    from pytest_llmslo.errors import Inconclusive

    run = make_run(some, valid=False, reasons=("the client was slow",))
    assert not slo.failures_fail(run, 0.5)
    with pytest.raises(Inconclusive):
        assert_slo(run, ttft_p99 < 500, max_error_rate=0.5)


def test_tracebackhide() -> None:
    for fn in (slo.assert_goodput, slo.assert_slo, slo._check):
        assert "__tracebackhide__" in fn.__code__.co_varnames


def test_the_bound_callback_gets_every_evaluation() -> None:
    seen: list[tuple[object, bool]] = []

    def cb(run, verdict) -> None:
        seen.append((run, verdict.passed))

    run = uniform_run(20)
    bind_run(run, on_verdict=cb)
    try:
        assert_slo(ttft_p99 < 500)
        with pytest.raises(SloViolation):
            assert_goodput(run, ttft_p99 < 1)
        evaluate(run, [ttft_p99 < 500])  # plain evaluate does not notify
    finally:
        unbind_run()
    assert_slo(run, ttft_p99 < 500)  # unbound: nobody is told
    assert seen == [(run, True), (run, False)]
    # A new binding without a callback does not keep the old one.
    bind_run(run, on_verdict=cb)
    bind_run(run)
    assert_slo(run, ttft_p99 < 500)
    unbind_run()
    assert len(seen) == 2


def test_objectives_may_be_grouped_or_text() -> None:
    run = uniform_run(20)
    v = assert_slo(run, [ttft_p99 < 500, itl_p50 < 30], "e2e_p99 < 10s")
    assert [r.objective.metric for r in v.results] == ["ttft", "itl", "e2e"]
    with pytest.raises(TypeError, match="compare it with a threshold"):
        assert_slo(run, ttft_p99)


def test_no_objectives_fails() -> None:
    with pytest.raises(SloViolation, match="no objectives"):
        assert_slo(uniform_run(5))


# ------------------------------------------------------------------ parse_objectives


def test_parse_objectives_forms() -> None:
    got = parse_objectives("ttft_p99<500,itl_p50<30")
    assert got == (ttft_p99 < 500, itl_p50 < 30)
    assert parse_objectives("ttft.p99 < 500ms") == (ttft_p99 < 500,)
    assert parse_objectives("ttft.p99 < 0.5s; e2e_p999 <= 20 s\nitl_mean>=1us") == (
        ttft_p99 < 500,
        slo.e2e_p999 <= 20000,
        itl_mean >= 0.001,
    )
    assert parse_objectives(["tpot_p90<20", "ttft_p99.5<700"]) == (
        tpot_p90 < 20,
        ttft.p(99.5) < 700,
    )
    assert parse_objectives("TTFT_P99 < 5e2") == (ttft_p99 < 500,)
    assert parse_objectives("") == ()


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("latency_p99<500", "unknown metric 'latency'"),
        ("ttft_p42x<500", "cannot parse"),
        ("ttft_q99<500", "unknown statistic 'q99'"),
        ("ttft<500", "needs a statistic"),
        ("ttft_p99=500", "cannot parse"),
        ("ttft_p99<fast", "cannot parse"),
        ("ttft_p99<500,itl_p50", "'itl_p50'"),
        ("ttft_p100<500", "unknown statistic 'p100'"),
    ],
)
def test_parse_objectives_errors(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_objectives(text, source="--slo")
    msg = str(info.value)
    assert needle in msg
    assert "(from --slo)" in msg
    assert "valid metrics: ttft, ttfot, itl, tpot, e2e" in msg
    assert "p50, p90, p95, p99, p999, mean" in msg


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
