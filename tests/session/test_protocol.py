"""The per-test protocol of the session core (``session.run_test``), as ``llmslo run`` drives
it (``call_test`` around a body) and as the plugin's ``pytest_runtest_call`` wrapper does
(``yield from run_test(...)``): the body's verdicts are the test's, the configured gate
judges a test whose body asserted nothing, and a failed body is not judged again."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_llmslo import session as core
from pytest_llmslo import slo
from pytest_llmslo.errors import SloViolation
from pytest_llmslo.session import SessionHooks


def test_the_configured_gate_fails_a_test_whose_body_asserted_nothing(harness: Any) -> None:
    h = harness(LLMSLO_SLO="ttft_p99<1")  # the fixed server's first token takes 20 ms
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    with core.bound(h.state, run), pytest.raises(SloViolation, match="ttft_p99 < 1 ms"):
        core.call_test(h.state, node, lambda: None)
    assert h.state.current is None
    (point,) = h.state.points
    assert point.verdict is not None and not point.verdict.passed
    assert ctx.verdicts == [point.verdict]
    assert point.summary.goodput_tok_s == point.verdict.goodput_tok_s


def test_the_bodys_verdict_is_the_tests_and_its_result_is_returned(harness: Any) -> None:
    h = harness(LLMSLO_SLO="ttft_p99<1")  # configured, but the body asserts its own
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    with core.bound(h.state, run):
        verdict = core.call_test(h.state, node, lambda: slo.assert_goodput(slo.ttft_p99 < 5000))
    assert verdict.passed and ctx.verdicts == [verdict]
    assert h.state.points[0].verdict == verdict


def test_a_failed_body_is_not_judged_again(harness: Any) -> None:
    h = harness(LLMSLO_SLO="ttft_p99<1")
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)

    def body() -> None:
        raise AssertionError("the body's own check")

    with core.bound(h.state, run), pytest.raises(AssertionError, match="the body's own"):
        core.call_test(h.state, node, body)
    assert h.state.points[0].verdict is None and ctx.verdicts == []


def test_the_plugins_wrapper_follows_the_same_protocol(harness: Any) -> None:
    told: list[Any] = []
    h = harness(LLMSLO_SLO="ttft_p99<5000")
    h.state.hooks = SessionHooks(level_result=lambda point, run: told.append((point, run)))
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)

    def wrapper() -> Generator[None, Any, Any]:  # as pluggy drives a wrapper=True hook
        return (yield from core.run_test(h.state, node))

    with core.bound(h.state, run):
        hook = wrapper()
        next(hook)
        assert h.state.current is ctx  # while the body runs
        with pytest.raises(StopIteration) as done:
            hook.send("the body's result")
    assert done.value.value == "the body's result"
    assert h.state.current is None
    (point,) = h.state.points
    assert point.verdict is not None and point.verdict.passed
    assert told == [(point, run)]  # hooks.level_result, once the test judged it
