"""The run history in the session core: every session keeps its run (``--slo-history``),
pruned (``--slo-history-keep``), a history that cannot be written is a warning, and the
next session compares with ``--slo-compare=latest``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo import session as core
from pytest_llmslo.errors import ConfigError, RegressionError
from pytest_llmslo.history import store

SLO = {"LLMSLO_CONCURRENCY": "1", "LLMSLO_SLO": "ttft_p50<500"}


def _session(h: Any) -> None:
    ((node, ctx),) = h.tests
    run = core.load_test(h.state, node, h.handle(), ctx.level, ctx.settings)
    with core.bound(h.state, run):
        core.call_test(h.state, node, lambda: None)
    assert core.finish(h.state) is False


def test_every_session_is_kept_and_the_next_compares_with_latest(
    harness: Any, tmp_path: Path, slow_fixed_server: str
) -> None:
    first = harness(**SLO)
    _session(first)
    runs, problems = store.list_runs(tmp_path / ".llmslo" / "runs")
    assert problems == [] and len(runs) == 1
    (run,) = runs
    assert run.points == 1 and run.complete
    assert set(run.record) == {"id", "time_utc", "commit", "engines", "machine"}
    assert "external" in run.record["engines"]
    assert any(f"run {run.id} kept in the run history" in n for n in first.state.notes)
    assert not first.state.write_errors

    # A slower engine against the last run: latest is the run before this session.
    slow = harness(
        slow_fixed_server,
        **SLO,
        LLMSLO_SLO_COMPARE="latest",
        LLMSLO_SLO_COMPARE_FAIL="ttft_p50:20%",
    )
    assert slow.state.baseline_source == f"latest (run {run.id})"
    ((node, ctx),) = slow.tests
    with pytest.raises(RegressionError, match=rf"against baseline latest \(run {run.id}\)"):
        r = core.load_test(slow.state, node, slow.handle(), ctx.level, ctx.settings)
        with core.bound(slow.state, r):
            core.call_test(slow.state, node, lambda: None)


def test_history_keep_prunes_the_oldest(harness: Any, tmp_path: Path) -> None:
    for _ in range(2):
        _session(harness(**SLO, LLMSLO_SLO_HISTORY_KEEP="1"))
    runs, _ = store.list_runs(tmp_path / ".llmslo" / "runs")
    assert len(runs) == 1


def test_an_unwritable_history_is_a_warning(harness: Any, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    h = harness(**SLO, LLMSLO_SLO_HISTORY=str(blocker / "runs"))
    _session(h)
    assert h.state.write_errors == []  # the session does not fail over it
    (note,) = [n for n in h.state.notes if "run history" in n]
    assert note.startswith("warning: the run was not kept in the run history")
    assert "--slo-history=none" in note


def test_history_none_keeps_nothing(harness: Any, tmp_path: Path) -> None:
    _session(harness(**SLO, LLMSLO_SLO_HISTORY="none"))
    assert not (tmp_path / ".llmslo" / "runs").exists()


def test_latest_without_a_history_is_a_config_error(harness: Any) -> None:
    with pytest.raises(ConfigError, match=r"LLMSLO_SLO_COMPARE.*has no run 0 before the latest"):
        harness(**SLO, LLMSLO_SLO_COMPARE="latest")


def test_compare_history_gates_against_the_last_segment(
    harness: Any, tmp_path: Path, slow_fixed_server: str
) -> None:
    # No history yet: said, nothing compared, nothing fails.
    first = harness(**SLO, LLMSLO_SLO_COMPARE="history")
    assert any("no run in the run history" in n for n in first.state.notes)
    _session(first)
    _session(harness(**SLO))
    runs, _ = store.list_runs(tmp_path / ".llmslo" / "runs")
    assert len(runs) == 2

    fail = {"LLMSLO_SLO_COMPARE": "history", "LLMSLO_SLO_COMPARE_FAIL": "ttft_p50:20%"}
    same = harness(**SLO, **fail)
    _session(same)
    ((_, ctx),) = same.tests
    assert ctx.comparison is not None and not ctx.comparison.regressed
    assert f"started by run {runs[0].id}" in ctx.comparison.format()

    # A slower engine (TTFT 20 -> 60 ms) fails against the history's segment.
    slow = harness(slow_fixed_server, **SLO, **fail)
    ((node, ctx),) = slow.tests
    with pytest.raises(RegressionError, match="regression against the run history"):
        r = core.load_test(slow.state, node, slow.handle(), ctx.level, ctx.settings)
        with core.bound(slow.state, r):
            core.call_test(slow.state, node, lambda: None)


def test_the_html_report_shows_the_trend_with_the_shift_on_its_run(
    harness: Any, tmp_path: Path, slow_fixed_server: str
) -> None:
    """Five sessions, the last two against an engine whose first token is 40 ms slower:
    the fifth session's HTML report marks the TTFT change point on the fourth run."""
    html = tmp_path / "report.html"
    for i in range(5):
        url = {"url": slow_fixed_server} if i >= 3 else {}
        h = harness(**url, **SLO, LLMSLO_SLO_HTML=str(html))
        _session(h)
        assert not h.state.write_errors
    runs, _ = store.list_runs(tmp_path / ".llmslo" / "runs")
    assert len(runs) == 5
    page = html.read_text()
    start = page.index('data-metric="ttft_p50"', page.index('id="trend"'))
    chart = page[start : page.index("</svg>", start)]
    assert re.findall(r"class='changepoint' data-run='([^']+)'", chart) == [runs[3].id]
    # This run is the history's last: the report named it as the history keeps it.
    assert runs[4].id in chart
