"""The charts of the HTML report: small inline SVG drawn here, in Python.

The report is one file that must open offline, so its charts are SVG elements written into
the page: exact (every mark is a measured value, nothing is resampled by a script), small
(a sweep chart is a few kilobytes; a charting library inlined would be hundreds), and with
no script to vendor and keep up to date. The ticks and the engines' colours are the SVG
report's (``svg.nice_ticks``, ``svg.PALETTE``: Okabe-Ito, colour-blind safe); strokes and
text use ``currentColor`` and the page's CSS classes, so a chart follows the page into dark
mode.

- ``xy_chart``: one line per series through its points, each marked by its outcome
  (filled: passed, a cross: failed, hollow: inconclusive), a knee ringed, SLO thresholds
  drawn as dashed lines with their text, and optionally a frontier (a step line);
- ``histogram``: the distribution of a level's per-request values, its SLO bound marked;
- ``sequence_chart``: a level's per-request values in the order the requests were sent.

Every text is escaped; a chart carries ``class="chart"`` and a ``data-chart`` name, which
the tests look for.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from pytest_llmslo.report.chartkit import fmt_tick
from pytest_llmslo.report.svg import PALETTE, nice_ticks

__all__ = [
    "PALETTE",
    "Mark",
    "Series",
    "Threshold",
    "fmt_tick",
    "histogram",
    "sequence_chart",
    "xy_chart",
]

_W, _H = 440, 280
_LEFT, _RIGHT, _TOP, _BOTTOM = 62, 16, 30, 46


@dataclass(frozen=True, slots=True)
class Mark:
    """One point of a series: ``status`` is the level's (``pass``, ``fail``, ``invalid``,
    ``unchecked``), ``tip`` its hover text."""

    x: float
    y: float
    status: str = "pass"
    tip: str = ""


@dataclass(frozen=True, slots=True)
class Series:
    """One line: its ``marks`` in load order, ``knee`` the mark ringed (an index)."""

    label: str
    colour: str
    marks: tuple[Mark, ...]
    knee: int | None = None
    dashed: bool = False


@dataclass(frozen=True, slots=True)
class Threshold:
    """An SLO bound drawn across the chart: on the y axis (``axis="y"``) or the x axis."""

    value: float
    label: str
    axis: str = "y"


@dataclass
class _Frame:
    """Maps data to pixels inside the plot area."""

    xs: Sequence[float]
    ys: Sequence[float]
    zero_x: bool = True
    y_max: float | None = None
    xticks: list[float] = field(default_factory=list)
    yticks: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.xticks = _ticks(self.xs, self.zero_x)
        if self.y_max is not None and all(y <= self.y_max for y in self.ys):
            self.yticks = nice_ticks(0.0, self.y_max)
        else:
            self.yticks = _ticks(self.ys, True)

    def x(self, v: float) -> float:
        lo, hi = self.xticks[0], self.xticks[-1]
        return _LEFT + (v - lo) / (hi - lo) * (_W - _LEFT - _RIGHT)

    def y(self, v: float) -> float:
        lo, hi = self.yticks[0], self.yticks[-1]
        return _H - _BOTTOM - (v - lo) / (hi - lo) * (_H - _TOP - _BOTTOM)


def _ticks(values: Sequence[float], zero: bool) -> list[float]:
    vals = [v for v in values if math.isfinite(v)]
    lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
    hi += 0.05 * (hi - lo)
    if zero and 0 <= lo < 0.5 * hi:
        lo = 0.0
    return nice_ticks(lo, hi)


def _text(x: float, y: float, text: str, *, anchor: str = "start", cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}>{escape(text)}</text>'


def _open(name: str, title: str, xlabel: str, ylabel: str) -> list[str]:
    return [
        f'<svg class="chart" data-chart="{escape(name)}" viewBox="0 0 {_W} {_H}" '
        f'width="{_W}" height="{_H}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        _text(_W / 2, 18, title, anchor="middle", cls="ct"),
        _text((_LEFT + _W - _RIGHT) / 2, _H - 8, xlabel, anchor="middle", cls="al"),
        f'<text transform="translate(14 {(_TOP + _H - _BOTTOM) / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle" class="al">{escape(ylabel)}</text>',
    ]


def _axes(fr: _Frame) -> list[str]:
    out = []
    top, bottom, left, right = _TOP, _H - _BOTTOM, _LEFT, _W - _RIGHT
    for t in fr.xticks:
        px = fr.x(t)
        out.append(f'<line class="grid" x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}"/>')
        out.append(_text(px, bottom + 15, fmt_tick(t), anchor="middle", cls="tk"))
    for t in fr.yticks:
        py = fr.y(t)
        out.append(f'<line class="grid" x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}"/>')
        out.append(_text(left - 5, py + 4, fmt_tick(t), anchor="end", cls="tk"))
    out.append(
        f'<rect class="frame" x="{left}" y="{top}" width="{right - left}" height="{bottom - top}"/>'
    )
    return out


def _threshold(fr: _Frame, t: Threshold) -> list[str]:
    if t.axis == "y":
        py = fr.y(t.value)
        return [
            f'<line class="slo" x1="{_LEFT}" y1="{py:.1f}" x2="{_W - _RIGHT}" y2="{py:.1f}"/>',
            _text(_LEFT + 4, py - 4, t.label, cls="slot"),
        ]
    px = fr.x(t.value)
    return [
        f'<line class="slo" x1="{px:.1f}" y1="{_TOP}" x2="{px:.1f}" y2="{_H - _BOTTOM}"/>',
        _text(px + 4, _TOP + 12, t.label, cls="slot"),
    ]


def _marker(px: float, py: float, colour: str, m: Mark) -> str:
    tip = f"<title>{escape(m.tip)}</title>" if m.tip else ""
    cls = f"pt {escape(m.status)}"
    if m.status == "fail":
        d = 4.5
        return (
            f'<path class="{cls}" d="M{px - d:.1f},{py - d:.1f}L{px + d:.1f},{py + d:.1f}'
            f'M{px - d:.1f},{py + d:.1f}L{px + d:.1f},{py - d:.1f}" stroke="{colour}" '
            f'stroke-width="2.2">{tip}</path>'
        )
    fill = "none" if m.status == "invalid" else colour
    return (
        f'<circle class="{cls}" cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{fill}" '
        f'stroke="{colour}" stroke-width="1.6">{tip}</circle>'
    )


def _empty(name: str, title: str, why: str) -> str:
    out = _open(name, title, "", "")
    out.append(_text(_W / 2, _H / 2, why, anchor="middle", cls="al"))
    return "\n".join([*out, "</svg>"])


def xy_chart(
    name: str,
    title: str,
    xlabel: str,
    ylabel: str,
    series: Sequence[Series],
    *,
    thresholds: Sequence[Threshold] = (),
    frontier: Sequence[tuple[float, float]] = (),
    y_max: float | None = None,
) -> str:
    """A line chart of ``series`` (see the module docstring). ``frontier``: the points of
    a Pareto frontier (x up, y down), drawn as a dashed step line through them; ``y_max``:
    the top of the y axis when no value is above it (100 for a percentage)."""
    marks = [m for s in series for m in s.marks]
    if not marks:
        return _empty(name, title, "no values to draw")
    xs = [m.x for m in marks] + [t.value for t in thresholds if t.axis == "x"]
    ys = [m.y for m in marks] + [t.value for t in thresholds if t.axis == "y"]
    fr = _Frame(xs, ys, y_max=y_max)
    out = [*_open(name, title, xlabel, ylabel), *_axes(fr)]
    for t in thresholds:
        out.extend(_threshold(fr, t))
    if len(frontier) > 1:
        pts = sorted(frontier)
        path = f"M{fr.x(pts[0][0]):.1f},{fr.y(pts[0][1]):.1f}"
        for (_x0, y0), (x1, y1) in itertools.pairwise(pts):
            path += f"L{fr.x(x1):.1f},{fr.y(y0):.1f}L{fr.x(x1):.1f},{fr.y(y1):.1f}"
        out.append(f'<path class="front" d="{path}"/>')
    for s in series:
        if len(s.marks) > 1:
            pts_text = " ".join(f"{fr.x(m.x):.1f},{fr.y(m.y):.1f}" for m in s.marks)
            dash = ' stroke-dasharray="6 4" opacity="0.7"' if s.dashed else ""
            out.append(
                f'<polyline class="ln" points="{pts_text}" stroke="{s.colour}"{dash}>'
                f"<title>{escape(s.label)}</title></polyline>"
            )
        for m in s.marks:
            out.append(_marker(fr.x(m.x), fr.y(m.y), s.colour, m))
        if s.knee is not None and 0 <= s.knee < len(s.marks):
            k = s.marks[s.knee]
            out.append(
                f'<circle class="knee" cx="{fr.x(k.x):.1f}" cy="{fr.y(k.y):.1f}" r="9" '
                f'stroke="{s.colour}"><title>{escape(s.label)}: knee</title></circle>'
            )
    out.append("</svg>")
    return "\n".join(out)


def histogram(
    name: str,
    title: str,
    xlabel: str,
    values: Sequence[float],
    *,
    thresholds: Sequence[Threshold] = (),
    bins: int = 30,
) -> str:
    """The distribution of ``values`` in ``bins`` equal bins (``thresholds`` on x)."""
    vals = sorted(v for v in values if math.isfinite(v))
    if not vals:
        return _empty(name, title, "no samples")
    lo, hi = vals[0], vals[-1]
    if hi == lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in vals:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    xs = [lo, hi, *(t.value for t in thresholds if t.axis == "x")]
    fr = _Frame(xs, [0.0, float(max(counts))], zero_x=False)
    out = [*_open(name, title, xlabel, "requests"), *_axes(fr)]
    base = fr.y(0.0)
    for i, c in enumerate(counts):
        if not c:
            continue
        x0, x1 = fr.x(lo + i * width), fr.x(lo + (i + 1) * width)
        top = fr.y(c)
        out.append(
            f'<rect class="bar" x="{x0:.1f}" y="{top:.1f}" width="{max(x1 - x0 - 0.5, 0.5):.1f}" '
            f'height="{base - top:.1f}"><title>{lo + i * width:.4g}–{lo + (i + 1) * width:.4g}: '
            f"{c}</title></rect>"
        )
    for t in thresholds:
        out.extend(_threshold(fr, t))
    out.append("</svg>")
    return "\n".join(out)


def sequence_chart(
    name: str,
    title: str,
    ylabel: str,
    values: Sequence[float | None],
    *,
    thresholds: Sequence[Threshold] = (),
) -> str:
    """``values`` against their position (request 1, 2, ...); a None (a failed request) is
    a gap in the line, marked by a tick at the bottom."""
    pts = [(i + 1.0, v) for i, v in enumerate(values) if v is not None and math.isfinite(v)]
    if not pts:
        return _empty(name, title, "no samples")
    fr = _Frame([1.0, float(len(values))], [v for _, v in pts] + [t.value for t in thresholds])
    out = [*_open(name, title, "request, in the order sent", ylabel), *_axes(fr)]
    for t in thresholds:
        out.extend(_threshold(fr, t))
    segment: list[str] = []
    runs: list[list[str]] = []
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v):
            if segment:
                runs.append(segment)
            segment = []
            px = fr.x(i + 1.0)
            out.append(
                f'<line class="gap" x1="{px:.1f}" y1="{_H - _BOTTOM}" x2="{px:.1f}" '
                f'y2="{_H - _BOTTOM - 8}"><title>request {i + 1}: failed</title></line>'
            )
            continue
        segment.append(f"{fr.x(i + 1.0):.1f},{fr.y(v):.1f}")
    if segment:
        runs.append(segment)
    for run in runs:
        out.append(f'<polyline class="seq" points="{" ".join(run)}"/>')
    out.append("</svg>")
    return "\n".join(out)
