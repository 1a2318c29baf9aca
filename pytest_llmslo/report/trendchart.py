"""Trend charts of the run history (``llmslo trend --svg/--html``): per test, engine and
level, a metric across the runs, each stable segment's mean drawn under the values and
each change point marked between the runs it separates, with what changed in its tooltip.

The SVG is a grid of panels (two per row); the HTML page puts each panel beside the table
of its runs, with the page frame of the HTML report (``htmlpage``). The change point's
line carries ``class='changepoint'`` and ``data-run`` (the id of the first run of the new
segment), for tools that read the chart.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.history.changepoint import segments
from pytest_llmslo.history.trend import TrendSeries
from pytest_llmslo.regression.rows import fmt_value
from pytest_llmslo.report import chartkit as kit
from pytest_llmslo.report.htmlpage import PAGE_END, page_head

__all__ = ["render_trend_html", "render_trend_svg", "trend_table"]

VALUE_COLOR = "#1565C0"
CHANGE_COLOR = "#C62828"
SEGMENT_COLOR = "#5b636e"
_COLUMNS = 2


def _panel(x0: float, y0: float, s: TrendSeries) -> list[str]:
    xs = [float(i + 1) for i in range(len(s.values))]
    ys = list(s.values)
    ax = kit.Axes(x0, y0, [0.5, *xs, len(xs) + 0.5], ys)
    unit = METRIC_SPECS[s.metric].unit
    out = kit.axes(ax, "run (oldest first)", f"{s.metric} ({unit})", s.title)
    for lo, hi in segments(len(ys), s.changes):
        mean = sum(ys[lo:hi]) / (hi - lo)
        out.append(
            kit.polyline(
                [(ax.x(lo + 0.6), ax.y(mean)), (ax.x(hi + 0.4), ax.y(mean))],
                SEGMENT_COLOR,
                dashed=True,
                width=1.5,
            )
        )
    out.append(kit.polyline([(ax.x(x), ax.y(y)) for x, y in zip(xs, ys, strict=True)], VALUE_COLOR))
    for run, x, y in zip(s.runs, xs, ys, strict=True):
        tip = f"{run.entry.id}: {fmt_value(s.metric, y)}"
        out.append(
            f"<circle cx='{ax.x(x):.1f}' cy='{ax.y(y):.1f}' r='4' fill='{VALUE_COLOR}'>"
            f"<title>{escape(tip)}</title></circle>"
        )
    for cp in s.changes:
        px = ax.x(cp.index + 0.5)
        why = "; ".join(s.notes.get(cp.index, ())) or "nothing recorded changed"
        run_id = s.runs[cp.index].entry.id
        tip = f"change {cp.change:+.1%} at run {run_id} (p={cp.p:.2g}): {why}"
        out.append(
            f"<line class='changepoint' data-run='{escape(run_id)}' x1='{px:.1f}' "
            f"y1='{ax.top:.1f}' x2='{px:.1f}' y2='{ax.bottom:.1f}' stroke='{CHANGE_COLOR}' "
            f"stroke-width='2' stroke-dasharray='4 3'><title>{escape(tip)}</title></line>"
        )
        out.append(kit.text(px + 4, ax.top + 14, f"{cp.change:+.1%}", size=11, fill=CHANGE_COLOR))
    return out


def render_trend_svg(series: Sequence[TrendSeries]) -> str:
    """The panels of ``series``, two per row, as one SVG document."""
    rows = max(1, -(-len(series) // _COLUMNS))
    width = kit.PANEL_W * min(_COLUMNS, max(len(series), 1))
    height = kit.PANEL_H * rows
    body: list[str] = []
    for i, s in enumerate(series):
        body.extend(_panel(kit.PANEL_W * (i % _COLUMNS), kit.PANEL_H * (i // _COLUMNS), s))
    if not series:
        body.append(kit.text(20, 30, "no run of the history has this metric"))
    return (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}'><rect width='100%' height='100%' fill='white'/>"
        + "".join(body)
        + "</svg>\n"
    )


def trend_table(s: TrendSeries) -> str:
    """The table of a series' runs, the run that starts a segment in red."""
    starts = {c.index: c for c in s.changes}
    rows = []
    for i, (run, value) in enumerate(zip(s.runs, s.values, strict=True)):
        cp = starts.get(i)
        mark = ""
        if cp is not None:
            why = "; ".join(s.notes.get(i, ())) or "nothing recorded changed"
            mark = f"change {cp.change:+.1%} (p={cp.p:.2g}): {why}"
        cls = " class='fail'" if cp is not None else ""
        rows.append(
            f"<tr{cls}><td>{escape(run.entry.id)}</td>"
            f"<td>{escape((run.entry.commit or '-')[:10])}</td>"
            f"<td>{escape(fmt_value(s.metric, value))}</td><td>{escape(mark)}</td></tr>"
        )
    return (
        "<table><thead><tr><th>run</th><th>commit</th><th>value</th><th>change</th></tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table>"
    )


def render_trend_html(series: Sequence[TrendSeries], title: str = "llmslo trend") -> str:
    """A self-contained HTML page: per series, its chart and the table of its runs."""
    parts = [page_head(title), f"<h1>{escape(title)}</h1>"]
    if not series:
        parts.append("<p>No run of the history has this metric.</p>")
    for s in series:
        found = len(s.changes)
        parts.append(f"<h2>{escape(s.title)}</h2>")
        parts.append(
            f"<p class='sub'>{len(s.values)} runs, {found} change point"
            f"{'s' if found != 1 else ''}</p>"
        )
        parts.append(render_trend_svg([s]))
        parts.append(trend_table(s))
    parts.append(PAGE_END)
    return "".join(parts)
