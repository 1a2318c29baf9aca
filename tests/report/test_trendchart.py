"""The trend charts of the run history: a history of five runs with a shift injected at
the fourth shows its change point on that run, in the SVG and the HTML page."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from history_helpers import save

from pytest_llmslo import cli
from pytest_llmslo.document import Results
from pytest_llmslo.history import store
from pytest_llmslo.history.trend import HistoryRun, series_of
from pytest_llmslo.report.trendchart import render_trend_html, render_trend_svg

SVG = "{http://www.w3.org/2000/svg}"


def _shifted(root: Path) -> list[str]:
    versions = ["0.9.2"] * 3 + ["0.10.0"] * 2
    for i, (gap, version) in enumerate(zip([10.0, 10.1, 9.9, 12.0, 12.1], versions, strict=True)):
        save(root, i, gap, version)
    return [e.id for e in store.list_runs(root)[0]]


def _series(root: Path):  # type: ignore[no-untyped-def]
    runs = [
        HistoryRun(e, Results.from_document(store.read_run(e.path)))
        for e in store.list_runs(root)[0]
    ]
    return series_of(runs, "itl_p50")


def test_the_svg_marks_the_change_point_on_the_shifted_run(tmp_path: Path) -> None:
    ids = _shifted(tmp_path)
    tree = ET.fromstring(render_trend_svg(_series(tmp_path)))
    marks = [e for e in tree.iter(f"{SVG}line") if e.get("class") == "changepoint"]
    assert [m.get("data-run") for m in marks] == [ids[3]]
    tip = marks[0].find(f"{SVG}title")
    assert tip is not None and "engine version 0.9.2 -> 0.10.0" in (tip.text or "")
    runs = [c for c in tree.iter(f"{SVG}circle") if c.find(f"{SVG}title") is not None]
    assert len(runs) == 5
    # The change point's line lies between the third and the fourth run's markers.
    xs = [float(c.get("cx", "nan")) for c in runs]
    assert xs[2] < float(marks[0].get("x1", "nan")) < xs[3]


def test_the_html_page_has_the_chart_and_the_runs(tmp_path: Path) -> None:
    ids = _shifted(tmp_path)
    page = render_trend_html(_series(tmp_path))
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert f"data-run='{ids[3]}'" in page
    assert "5 runs, 1 change point" in page
    assert "<tr class='fail'><td>" + ids[3] in page


def test_llmslo_trend_writes_both(tmp_path: Path, capsys) -> None:
    _shifted(tmp_path / "runs")
    code = cli.main(
        [
            "trend", "itl_p50", "--history", str(tmp_path / "runs"),
            "--svg", str(tmp_path / "t.svg"), "--html", str(tmp_path / "t.html"),
        ]
    )  # fmt: skip
    assert code == cli.EXIT_OK
    ET.parse(tmp_path / "t.svg")
    assert "change point" in (tmp_path / "t.html").read_text()
    assert "<- change" in capsys.readouterr().out


def test_an_empty_history_gives_a_chart_that_says_so() -> None:
    assert "no run of the history" in render_trend_svg([])
