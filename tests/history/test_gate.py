"""``--slo-compare=history``'s judgement: a new point against the last stable segment of
its history, on synthetic histories of known shifts."""

from __future__ import annotations

from pathlib import Path

from history_helpers import run_document
from sweep_helpers import make_point

from pytest_llmslo.document import Results
from pytest_llmslo.history import gate, store
from pytest_llmslo.history.trend import HistoryRun
from pytest_llmslo.regression import Judging

JUDGING = Judging.of("itl_p50:10%,throughput:5%")


def _runs(root: Path) -> list[HistoryRun]:
    entries, _ = store.list_runs(root)
    return [HistoryRun(e, Results.from_document(store.read_run(e.path))) for e in entries]


def _row(comparison, metric: str):
    return next(r for r in comparison.rows if r.metric == metric)


def test_the_new_run_is_judged_against_the_segment_after_the_shift(history) -> None:
    root = history([10.0, 10.1, 9.9, 12.0, 12.1, 11.9])
    runs = _runs(root)
    same = gate.judge_against_history(runs, make_point(4, ttft_ms=50.0, gap_ms=12.0), JUDGING)
    assert same is not None and not same.regressed
    row = _row(same, "itl_p50")
    assert row.status == "within tolerance" and abs(row.old - 12.0) < 0.1
    assert f"itl_p50: segment of 3 runs started by run {runs[3].entry.id}" in same.notes

    slower = gate.judge_against_history(runs, make_point(4, ttft_ms=50.0, gap_ms=14.0), JUDGING)
    assert slower is not None and slower.regressed
    assert _row(slower, "itl_p50").status == "regressed"
    assert "started by run" in slower.format()


def test_a_change_within_the_segments_spread_is_noise(history) -> None:
    root = history([12.0, 13.6, 10.4, 12.2, 11.8])
    point = make_point(4, ttft_ms=50.0, gap_ms=13.5)  # +12 % on the mean, within spread
    comparison = gate.judge_against_history(_runs(root), point, JUDGING)
    assert comparison is not None and not comparison.regressed
    row = _row(comparison, "itl_p50")
    assert row.status == "noise"
    # Noise: the change is smaller than what the segment's spread lets a run show.
    assert row.mde is not None and row.delta is not None and row.mde > abs(row.delta)


def test_runs_with_other_constants_are_left_out(history) -> None:
    root = history([10.0, 10.0])
    runs = _runs(root)
    same = Results.from_document(run_document(10.0)).constants
    assert len(gate.comparable_runs(runs, same, "test_chat", "sim")) == 2
    other = {**same, "isl": 1024}
    assert gate.comparable_runs(runs, other, "test_chat", "sim") == []


def test_a_point_no_run_measured_is_not_compared(history) -> None:
    root = history([10.0])
    point = make_point(8, ttft_ms=50.0, gap_ms=10.0)  # c8: never measured
    assert gate.judge_against_history(_runs(root), point, JUDGING) is None


def test_the_segments_spread_bounds_what_it_can_detect(history) -> None:
    steady = _runs(history([12.0, 12.0, 12.0]))
    point = make_point(4, ttft_ms=50.0, gap_ms=12.0)
    comparison = gate.judge_against_history(steady, point, JUDGING)
    assert comparison is not None and _row(comparison, "itl_p50").mde == 0.0
    assert "detectable" in comparison.format()
