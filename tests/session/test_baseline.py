"""The comparison with a baseline, in the session core: a baseline saved by one session
(``--slo-save``) and the same test compared in the next (``--slo-compare``): within the
tolerance, regressed, or not compared when a pinned constant differs."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmslo import session as core
from pytest_llmslo.errors import RegressionError


def _judged(h: Any) -> None:
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    with core.bound(h.state, run):
        core.call_test(h.state, node, lambda: None)


def test_save_then_compare(harness: Any, tmp_path: Any, slow_fixed_server: str) -> None:
    first = harness(LLMSLO_CONCURRENCY="1", LLMSLO_SLO="ttft_p50<500", LLMSLO_SLO_SAVE="base")
    _judged(first)
    assert core.finish(first.state) is False
    assert (tmp_path / ".llmslo" / "baselines" / "base.json").is_file()
    compare = {
        "LLMSLO_CONCURRENCY": "1",
        "LLMSLO_SLO": "ttft_p50<500",
        "LLMSLO_SLO_COMPARE": "base",
    }

    # The same engine again: within the tolerance.
    same = harness(**compare, LLMSLO_SLO_COMPARE_FAIL="ttft_p50:100%")
    _judged(same)
    ((_, ctx),) = same.tests
    assert ctx.comparison is not None and not ctx.comparison.regressed
    assert [key for key, _ in same.state.comparisons] == ["external t.py::test_chat c1"]

    # A slower engine (TTFT 20 -> 60 ms): the test fails with both runs' numbers.
    slow = harness(slow_fixed_server, **compare, LLMSLO_SLO_COMPARE_FAIL="ttft_p50:20%")
    with pytest.raises(RegressionError, match="regression against baseline base") as err:
        _judged(slow)
    assert "ttft_p50" in str(err.value) and "REGRESSED" in str(err.value)

    # Another ISL: a pinned constant differs, nothing is compared, nothing fails.
    other = harness(**compare, LLMSLO_ISL="32")
    _judged(other)
    ((_, ctx),) = other.tests
    assert ctx.comparison is None and ctx.compare_skip is not None
    assert ctx.compare_skip.startswith("constants differ") and "isl" in ctx.compare_skip
    assert other.state.mismatches[0].startswith("external t.py::test_chat c1: not compared")
