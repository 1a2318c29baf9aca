"""The trend section of the HTML report: a history of five runs with a shift injected at
the fourth shows the change point on that run, the run being reported last; without a
history of the same levels the page has no such section."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from history_helpers import T0, run_document, save

from pytest_llmslo.document import Results
from pytest_llmslo.history import store
from pytest_llmslo.history.trend import HistoryRun
from pytest_llmslo.report.html import render_html, render_runs
from pytest_llmslo.report.htmltrend import trend_section

SVG = "{http://www.w3.org/2000/svg}"


def _history(root: Path, gaps: list[float], versions: list[str]) -> list[HistoryRun]:
    for i, (gap, version) in enumerate(zip(gaps, versions, strict=True)):
        save(root, i, gap, version)
    return [
        HistoryRun(e, Results.from_document(store.read_run(e.path)))
        for e in store.list_runs(root)[0]
    ]


def _this_run(gap: float, version: str, day: int) -> tuple[Results, dict[str, Any]]:
    record = {
        "id": store.new_run_id(T0.replace(day=1 + day)),
        "commit": {"id": "b" * 40},
        "engines": {"sim": {"version": version, "image": None}},
    }
    return Results.from_document(run_document(gap, version)), record


def _changepoints(page: str, metric: str) -> list[ET.Element]:
    """The change-point lines of ``metric``'s chart in the page's trend section."""
    start = page.index(f'data-metric="{metric}"')
    svg = page[page.index("<svg", start) : page.index("</svg>", start) + len("</svg>")]
    tree = ET.fromstring(svg)
    return [e for e in tree.iter(f"{SVG}line") if e.get("class") == "changepoint"]


def test_a_shift_at_the_fourth_of_five_runs_is_marked_on_that_run(tmp_path: Path) -> None:
    history = _history(tmp_path, [10.0, 10.1, 9.9, 12.0], ["0.9.2"] * 3 + ["0.10.0"])
    results, record = _this_run(12.1, "0.10.0", day=4)
    page = render_runs(results, (), history=history, record=record)

    assert '<section class="trend" id="trend">' in page
    (mark,) = _changepoints(page, "itl_p50")
    assert mark.get("data-run") == history[3].entry.id
    tip = mark.find(f"{SVG}title")
    assert tip is not None and "engine version 0.9.2 -> 0.10.0" in (tip.text or "")
    # The level with the change point is open and says which metric moved; this run is
    # the last row of the metric's table.
    start = page.index("open><summary>", page.index('id="trend"'))
    summary = page[start : page.index("</summary>", start)]
    assert "sim | test_chat | c4: 5 runs" in summary and "itl_p50" in summary
    itl = page[page.index('data-metric="itl_p50"') :]
    table = itl[itl.index("<table") : itl.index("</table>")]
    assert table.count("<tr") == 6 and table.rindex(record["id"]) > table.rindex(
        history[3].entry.id
    )
    # Longer gaps cut the throughput too, on the same run; an unchanged TTFT is not charted.
    assert [m.get("data-run") for m in _changepoints(page, "throughput")] == [history[3].entry.id]
    assert 'data-metric="ttft_p50"' not in page


def test_no_shift_no_change_point_and_the_level_stays_closed(tmp_path: Path) -> None:
    history = _history(tmp_path, [10.0, 10.1, 9.9, 10.0], ["0.9.2"] * 4)
    results, record = _this_run(10.05, "0.9.2", day=4)
    section = trend_section(results, history, record)
    assert "5 runs, 0 change points" in section
    assert " open>" not in section and 'class="changepoint"' not in section
    assert 'data-metric="itl_p50"' not in section  # unchanged metrics are named, not charted
    assert 'data-metric="throughput"' in section  # but the headline is charted always
    assert "no change point: " in section and "itl_p50" in section


def test_without_a_history_of_the_same_levels_there_is_no_trend(tmp_path: Path) -> None:
    results, record = _this_run(12.1, "0.10.0", day=4)
    assert 'id="trend"' not in render_html(results)
    assert trend_section(results, [], record) == ""
    # One run before this one is too few for a trend (three runs at least).
    history = _history(tmp_path, [10.0], ["0.9.2"])
    assert trend_section(results, history, record) == ""
    # Runs of another level are not this run's trend.
    other = Results.from_document(run_document(10.0))
    other = Results(points=tuple(p for p in other.points if p.level.label != "c4"))
    assert trend_section(other, history * 3, record) == ""
