"""The assertion helpers, the bound run and what a failure says."""

from __future__ import annotations

import re
import threading

import pytest

from pytest_llmslo import slo
from pytest_llmslo.errors import LoadError, SloViolation
from pytest_llmslo.slo import (
    Verdict,
    assert_goodput,
    assert_slo,
    assertions,
    bind_run,
    current_run,
    evaluate,
    itl_p50,
    ttft,
    ttft_p99,
    unbind_run,
)
from pytest_llmslo.slo.judging import current_judging, judging

try:
    from tests.metrics_helpers import make_run, rec, steady, uniform_run
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from metrics_helpers import make_run, rec, steady, uniform_run  # type: ignore[no-redef]


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
    for fn in (slo.assert_goodput, slo.assert_slo, assertions._check):
        assert "__tracebackhide__" in fn.__code__.co_varnames


def test_the_open_judging_gets_every_evaluation_and_hands_it_back() -> None:
    run, other = uniform_run(20), uniform_run(10)
    with judging(run=run) as (open_judging, opened):
        assert opened and current_run() is run
        assert assert_slo(ttft_p99 < 500).passed  # returned to the caller
        with pytest.raises(SloViolation) as failed:  # raised to the caller
            assert_goodput(other, ttft_p99 < 1)
        evaluate(run, [ttft_p99 < 500])  # plain evaluate judges nothing for the test
        judged = open_judging.take()
        assert [(j.run, j.verdict.passed) for j in judged.verdicts] == [(run, True), (other, False)]
        assert judged.verdicts[1].verdict is failed.value.verdict  # type: ignore[attr-defined]
        assert not open_judging.take()  # handed over once
        with judging() as (inner, inner_opened):  # a nested block uses the open one
            assert inner is open_judging and not inner_opened
    assert current_judging() is None and current_run() is None
    assert_slo(run, ttft_p99 < 500)  # none open: nobody is told


def test_each_thread_judges_in_its_own_context() -> None:
    runs = [uniform_run(20) for _ in range(4)]
    seen: dict[int, tuple[object, ...]] = {}
    barrier = threading.Barrier(len(runs))

    def body(i: int) -> None:
        with judging(run=runs[i]) as (open_judging, _):
            barrier.wait(timeout=30)  # every thread's judging is open at once
            assert_goodput(ttft_p99 < 500)
            seen[i] = tuple(j.run for j in open_judging.take().verdicts)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert seen == {i: (runs[i],) for i in range(len(runs))}


def test_bind_run_outside_a_judging_opens_one_that_unbind_closes() -> None:
    run = uniform_run(20)
    assert bind_run(run) is None and current_run() is run
    assert bind_run(None) is run and current_run() is None
    bind_run(run)
    unbind_run()
    assert current_judging() is None


def test_objectives_may_be_grouped_or_text() -> None:
    run = uniform_run(20)
    v = assert_slo(run, [ttft_p99 < 500, itl_p50 < 30], "e2e_p99 < 10s")
    assert [r.objective.metric for r in v.results] == ["ttft", "itl", "e2e"]
    with pytest.raises(TypeError, match="compare it with a threshold"):
        assert_slo(run, ttft_p99)


def test_no_objectives_fails() -> None:
    with pytest.raises(SloViolation, match="no objectives"):
        assert_slo(uniform_run(5))
