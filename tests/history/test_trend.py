"""Trends across a history: the change point on the run that shifted, annotated with what
changed; and ``llmslo history``/``trend``/``compare`` on such a history."""

from __future__ import annotations

from pathlib import Path

from history_helpers import save

from pytest_llmslo import cli
from pytest_llmslo.document import Results
from pytest_llmslo.history import store
from pytest_llmslo.history.trend import HistoryRun, series_of


def _runs(root: Path) -> list[HistoryRun]:
    entries, _ = store.list_runs(root)
    return [HistoryRun(e, Results.from_document(store.read_run(e.path))) for e in entries]


def test_five_runs_with_a_shift_mark_the_fourth(history) -> None:
    root = history([10.0, 10.1, 9.9, 12.0, 12.1], ["0.9.2"] * 3 + ["0.10.0"] * 2)
    (series,) = series_of(_runs(root), "itl_p50")
    assert (series.test, series.engine, series.level) == ("test_chat", "sim", "c4")
    assert [c.index for c in series.changes] == [3]
    assert series.changes[0].change > 0.15
    assert series.notes[3] == ("engine version 0.9.2 -> 0.10.0", "commit aaaaaaaaaa -> bbbbbbbbbb")


def test_a_steady_history_has_no_change_point(history) -> None:
    root = history([10.0, 10.1, 9.9, 10.0, 10.05, 9.95])
    (series,) = series_of(_runs(root), "itl_p50")
    assert series.changes == ()
    assert len(series.values) == 6


def test_filters_leave_out_other_series(history) -> None:
    root = history([10.0, 10.0])
    assert series_of(_runs(root), "itl_p50", engine="vllm") == []
    assert len(series_of(_runs(root), "itl_p50", level="c4")) == 1


def test_llmslo_trend_and_history_print_the_runs(history, capsys) -> None:
    root = history([10.0, 10.1, 9.9, 12.0, 12.1], ["0.9.2"] * 3 + ["0.10.0"] * 2)
    assert cli.main(["trend", "itl_p50", "--history", str(root)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "sim | test_chat | c4 | itl_p50 (ms, lower is better)" in out
    marked = [line for line in out.splitlines() if "<- change" in line]
    assert len(marked) == 1 and marked[0].lstrip().startswith("20260104T")
    assert "engine version 0.9.2 -> 0.10.0" in marked[0]

    assert cli.main(["history", "--history", str(root)]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert out.count("sim 0.9.2") == 3 and out.count("sim 0.10.0") == 2

    assert cli.main(["history", "show", "latest~4", "--history", str(root)]) == cli.EXIT_OK
    assert "sim | test_chat" in capsys.readouterr().out


def test_llmslo_compare_takes_runs_of_the_history(history, capsys) -> None:
    root = history([10.0, 13.0])
    code = cli.main(["compare", "latest~1", "latest", "--history", str(root)])
    out = capsys.readouterr().out
    assert code == cli.EXIT_REGRESSED
    assert "itl_p50" in out and "REGRESSED" in out


def test_bad_references_and_metrics_are_usage_errors(history, capsys) -> None:
    root = history([10.0])
    assert cli.main(["compare", "latest~1", "latest", "--history", str(root)]) == cli.EXIT_USAGE
    assert "no run 1 before the latest" in capsys.readouterr().err
    assert cli.main(["trend", "itl_p42", "--history", str(root)]) == cli.EXIT_USAGE
    assert "unknown metric 'itl_p42'" in capsys.readouterr().err
    assert cli.main(["history", "show", "--history", str(root)]) == cli.EXIT_USAGE


def test_a_run_whose_client_was_the_bottleneck_is_left_out(history, tmp_path: Path) -> None:
    root = history([10.0, 10.1, 9.9, 10.0])
    save(root, 9, 30.0, valid=False)  # a client-starved run: its numbers are not the engine's
    (series,) = series_of(_runs(root), "itl_p50")
    assert len(series.values) == 4 and series.changes == ()
