"""The trend section of the HTML report: the run's levels beside the runs of the history.

When the run history (``--slo-history``) holds earlier runs of the same tests, engines and
levels, the page gets a section "Trend across the run history": per test, engine and level
the gated metrics (``regression.tolerances.DEFAULT_TOLERANCES``) across those runs with
this run last, each series searched for change points (``history.changepoint``) as
``llmslo trend`` does. A metric with a change point gets its chart (``trendchart``: the
change point's line carries ``class='changepoint'`` and ``data-run``) and the table of its
runs; so does throughput always, the headline; the other metrics are named on one line
("no change point in N runs"). A level with a change point is shown open.

This run is not in the history yet when the page is written (the history keeps it after
the reports): it enters the series as ``this_run``, with the record the history will keep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from pytest_llmslo.document import Results
from pytest_llmslo.history.store import RunEntry
from pytest_llmslo.history.trend import HistoryRun, TrendSeries, series_of
from pytest_llmslo.regression.tolerances import DEFAULT_TOLERANCES
from pytest_llmslo.report.htmlcells import slug
from pytest_llmslo.report.trendchart import render_trend_svg, trend_table

__all__ = ["TREND_METRICS", "this_run", "trend_section"]

#: The metrics of the section, in the order of the default tolerances.
TREND_METRICS: tuple[str, ...] = tuple(part.split(":")[0] for part in DEFAULT_TOLERANCES.split(","))
#: The metric whose chart is shown whether or not it changed.
HEADLINE = "throughput"
#: A series of fewer runs than this (this run included) is not a trend.
MIN_RUNS = 3


def this_run(results: Results, record: Mapping[str, Any] | None) -> HistoryRun:
    """The run being reported, as a run of the history: ``record`` is the ``run`` record
    the history keeps for it (``history.provenance.run_record``); without one its id is
    ``this run`` and nothing is known of its commit."""
    record = dict(record or {})
    run_id = str(record.get("id") or "this run")
    entry = RunEntry(
        id=run_id,
        path=Path(),
        time=datetime.now(timezone.utc),
        record=record,
        complete=results.complete,
        points=len(results.points),
    )
    return HistoryRun(entry, results)


def _levels(results: Results) -> set[tuple[str, str, str]]:
    return {(p.test, p.engine, p.level.label) for p in results.points}


def _series(history: Sequence[HistoryRun], current: HistoryRun) -> list[TrendSeries]:
    """Every series of the trend metrics that ends with ``current`` and has ``MIN_RUNS``."""
    runs = [*history, current]
    wanted = _levels(current.results)
    out = []
    for metric in TREND_METRICS:
        for s in series_of(runs, metric):
            if (s.test, s.engine, s.level) not in wanted or len(s.values) < MIN_RUNS:
                continue
            if s.runs[-1] is current:
                out.append(s)
    return out


def _level_block(key: tuple[str, str, str], series: Sequence[TrendSeries]) -> str:
    test, engine, level = key
    changed = [s for s in series if s.changes]
    shown = [s for s in series if s.changes or s.metric == HEADLINE]
    quiet = [s.metric for s in series if s not in shown]
    found = sum(len(s.changes) for s in series)
    summary = (
        f"{engine} | {test} | {level}: {max(len(s.values) for s in series)} runs, "
        f"{found} change point{'s' if found != 1 else ''}"
    )
    if changed:
        summary += " (" + ", ".join(s.metric for s in changed) + ")"
    parts = [
        f'<details class="level trend" data-test="{escape(test)}" data-engine="{escape(engine)}"'
        f' data-level="{escape(level)}"{" open" if changed else ""}>'
        f"<summary>{escape(summary)}</summary>"
    ]
    for s in shown:
        parts.append(
            f'<figure class="cell" data-metric="{escape(s.metric)}" '
            f'id="trend-{slug(s.title)}">{render_trend_svg([s])}</figure>'
        )
        parts.append(trend_table(s))
    if quiet:
        parts.append(f'<p class="sub">no change point: {escape(", ".join(quiet))}</p>')
    parts.append("</details>")
    return "".join(parts)


def trend_section(
    results: Results, history: Sequence[HistoryRun], record: Mapping[str, Any] | None = None
) -> str:
    """The section of the page: ``results`` (whose history ``run`` record is ``record``)
    after the runs of ``history``, oldest first; empty when no level of ``results`` has
    ``MIN_RUNS`` runs."""
    if not history:
        return ""
    series = _series(history, this_run(results, record))
    if not series:
        return ""
    by_level: dict[tuple[str, str, str], list[TrendSeries]] = {}
    for s in series:
        by_level.setdefault((s.test, s.engine, s.level), []).append(s)
    runs = len({r.entry.id for s in series for r in s.runs})
    parts = [
        '<section class="trend" id="trend"><h2>Trend across the run history</h2>',
        f'<p class="sub">This run and the {runs - 1} runs of the history before it that '
        "measured the same levels: per metric, the runs where it shifted (change points, "
        "as <code>llmslo trend</code> finds them) and what changed between the runs. The "
        "charts show throughput and every metric with a change point.</p>",
    ]
    parts.extend(_level_block(key, group) for key, group in sorted(by_level.items()))
    parts.append("</section>")
    return "\n".join(parts)
