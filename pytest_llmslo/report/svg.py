"""A dependency-free SVG chart of sweeps and the Pareto frontier (a pure renderer).

For every test (and load mode, when a test was swept in both), one row of two panels:

- **throughput vs latency**: output tok/s (x) against TTFT P99 (y), one line per engine
  through its load levels in load order, the knee ringed and labelled, and the Pareto
  frontier over every valid point of the test (throughput up, TTFT P99 down) as a dashed
  step line;
- **load vs goodput**: the load level (concurrency or rate, x) against goodput tok/s
  (y), one line per engine, the knee ringed.

With ``baseline`` results (``llmslo compare``) each engine's baseline sweep is drawn in
the same colour, dashed and lighter, so old and new can be seen together. Points of an
inconclusive (client-limited) run are hollow; they are not on the frontier. Axes have "nice" ticks
(1, 2, 5 x 10^k) and labels; a legend heads each row. The output is one standalone SVG
document (valid XML, all text escaped) with no scripts and no external references.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from pytest_llmslo.document.results import Results
from pytest_llmslo.report.terminal import signal_bits
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    find_knee,
    finite_or_none,
    group_sweeps,
    lookup_knee,
    pareto_front,
    point_goodput,
    summary_stat,
)

__all__ = ["PALETTE", "nice_ticks", "render_svg"]

#: Engine colours, in order of first appearance (colour-blind friendly, Okabe-Ito).
PALETTE: tuple[str, ...] = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#F0E442",
)

_PANEL_W = 480
_PANEL_H = 330
_MARGIN = {"left": 70, "right": 20, "top": 36, "bottom": 52}
_TITLE_H = 34
_LEGEND_ROW_H = 20
_FONT = "font-family='sans-serif'"

Series = list[tuple[float, float, bool, SweepPoint]]  # x, y, valid, point


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 x
    10^k); the first tick is <= lo and the last >= hi."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"ticks need finite bounds, got {lo!r}, {hi!r}")
    if hi < lo:
        lo, hi = hi, lo
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    raw = (hi - lo) / max(count, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1.0, 2.0, 5.0, 10.0) if m * mag >= raw)
    start = math.floor(lo / step + 1e-9) * step
    ticks = []
    value = start
    while value < hi - 1e-9 * step:
        ticks.append(value)
        value = start + len(ticks) * step
    ticks.append(value)
    # Round away float noise such as 0.30000000000000004.
    digits = max(0, -math.floor(math.log10(step))) + 1
    return [round(t, digits) for t in ticks]


def _fmt_tick(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


class _Axes:
    """Maps data to pixels inside one panel."""

    def __init__(self, x0: float, y0: float, xs: Sequence[float], ys: Sequence[float]) -> None:
        self.left = x0 + _MARGIN["left"]
        self.right = x0 + _PANEL_W - _MARGIN["right"]
        self.top = y0 + _MARGIN["top"]
        self.bottom = y0 + _PANEL_H - _MARGIN["bottom"]
        lo_x, hi_x = (min(xs), max(xs)) if xs else (0.0, 1.0)
        lo_y, hi_y = (min(ys), max(ys)) if ys else (0.0, 1.0)
        # A little room past the largest value, so its marker and label are not on the frame.
        hi_x += 0.04 * (hi_x - lo_x)
        hi_y += 0.06 * (hi_y - lo_y)
        # Start at zero when the data is not far from it: a chart of 0.9x..1.1x exaggerates.
        if lo_x >= 0 and lo_x < 0.5 * hi_x:
            lo_x = 0.0
        if lo_y >= 0 and lo_y < 0.5 * hi_y:
            lo_y = 0.0
        self.xticks = nice_ticks(lo_x, hi_x)
        self.yticks = nice_ticks(lo_y, hi_y)

    def x(self, v: float) -> float:
        lo, hi = self.xticks[0], self.xticks[-1]
        return self.left + (v - lo) / (hi - lo) * (self.right - self.left)

    def y(self, v: float) -> float:
        lo, hi = self.yticks[0], self.yticks[-1]
        return self.bottom - (v - lo) / (hi - lo) * (self.bottom - self.top)


def _text(
    x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", **attrs: Any
) -> str:
    # class_ -> class (a keyword), font_weight -> font-weight
    extra = "".join(
        f" {k.rstrip('_').replace('_', '-')}={quoteattr(str(v))}" for k, v in attrs.items()
    )
    return (
        f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' text-anchor='{anchor}' {_FONT}"
        f"{extra}>{escape(text)}</text>"
    )


def _axes_svg(ax: _Axes, xlabel: str, ylabel: str, title: str) -> list[str]:
    out = [
        f"<rect x='{ax.left:.1f}' y='{ax.top:.1f}' width='{ax.right - ax.left:.1f}' "
        f"height='{ax.bottom - ax.top:.1f}' fill='white' stroke='#888'/>"
    ]
    for t in ax.xticks:
        px = ax.x(t)
        out.append(
            f"<line x1='{px:.1f}' y1='{ax.top:.1f}' x2='{px:.1f}' y2='{ax.bottom:.1f}' "
            "stroke='#eee'/>"
        )
        out.append(
            f"<line x1='{px:.1f}' y1='{ax.bottom:.1f}' x2='{px:.1f}' y2='{ax.bottom + 5:.1f}' "
            "stroke='#888'/>"
        )
        out.append(_text(px, ax.bottom + 18, _fmt_tick(t), size=11, anchor="middle"))
    for t in ax.yticks:
        py = ax.y(t)
        out.append(
            f"<line x1='{ax.left:.1f}' y1='{py:.1f}' x2='{ax.right:.1f}' y2='{py:.1f}' "
            "stroke='#eee'/>"
        )
        out.append(
            f"<line x1='{ax.left - 5:.1f}' y1='{py:.1f}' x2='{ax.left:.1f}' y2='{py:.1f}' "
            "stroke='#888'/>"
        )
        out.append(_text(ax.left - 8, py + 4, _fmt_tick(t), size=11, anchor="end"))
    mid_x = (ax.left + ax.right) / 2
    mid_y = (ax.top + ax.bottom) / 2
    out.append(_text(mid_x, ax.bottom + 40, xlabel, anchor="middle", class_="xlabel"))
    out.append(
        _text(
            ax.left - 52,
            mid_y,
            ylabel,
            anchor="middle",
            transform=f"rotate(-90 {ax.left - 52:.1f} {mid_y:.1f})",
            class_="ylabel",
        )
    )
    out.append(_text(mid_x, ax.top - 12, title, size=13, anchor="middle", font_weight="bold"))
    return out


def _polyline(
    points: Sequence[tuple[float, float]],
    color: str,
    *,
    dashed: bool = False,
    opacity: float = 1.0,
    width: float = 2.0,
) -> str:
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    dash = " stroke-dasharray='6 4'" if dashed else ""
    return (
        f"<polyline points='{coords}' fill='none' stroke='{color}' stroke-width='{width}'"
        f" stroke-opacity='{opacity}'{dash}/>"
    )


def _marker(x: float, y: float, color: str, *, valid: bool, opacity: float, title: str) -> str:
    fill = color if valid else "white"
    return (
        f"<circle cx='{x:.1f}' cy='{y:.1f}' r='4' fill='{fill}' fill-opacity='{opacity}' "
        f"stroke='{color}' stroke-opacity='{opacity}' stroke-width='1.5'>"
        f"<title>{escape(title)}</title></circle>"
    )


def _knee_mark(x: float, y: float, color: str, label: str, right: float) -> list[str]:
    # Label to the right of the ring, or to its left when it would leave the plot area.
    fits = x + 11 + 6.5 * len(label) <= right
    return [
        f"<circle cx='{x:.1f}' cy='{y:.1f}' r='9' fill='none' stroke='{color}' "
        "stroke-width='2' class='knee'/>",
        _text(
            x + 11 if fits else x - 11,
            y - 9,
            label,
            size=11,
            anchor="start" if fits else "end",
            fill=color,
            class_="knee-label",
        ),
    ]


def _latency_series(points: Sequence[SweepPoint]) -> Series:
    out: Series = []
    for p in sorted(points, key=lambda p: p.level.value):
        x, y = finite_or_none(p.summary.output_tok_s), summary_stat(p.summary, "ttft", 99)
        if x is not None and y is not None:
            out.append((x, y, bool(p.summary.valid), p))
    return out


def _goodput_series(points: Sequence[SweepPoint]) -> Series:
    out: Series = []
    for p in sorted(points, key=lambda p: p.level.value):
        y = point_goodput(p)
        if y is not None:
            out.append((float(p.level.value), y, bool(p.summary.valid), p))
    return out


def _point_title(engine: str, p: SweepPoint, tag: str) -> str:
    ttft = summary_stat(p.summary, "ttft", 99)
    good = point_goodput(p)
    parts = [f"{engine}{tag} {p.level.label}", f"{p.summary.output_tok_s:.0f} output tok/s"]
    if ttft is not None:
        parts.append(f"TTFT P99 {ttft:.1f} ms")
    if good is not None:
        parts.append(f"goodput {good:.0f} tok/s")
    if not p.summary.valid:
        parts.append("inconclusive (client-limited)")
    sig = p.summary.signals
    if sig and sig.get("engines"):
        # The engine's own view of the point, shown on hover (as under the sweep's row).
        bits = signal_bits(sig)
        if bits:
            parts.append("engine: " + ", ".join(bits))
    if p.verdict is not None and p.verdict.attribution:
        parts.append("why: " + p.verdict.attribution[0].rsplit(": ", 1)[-1])
    return ", ".join(parts)


def _knee_for(
    knees: Mapping[Any, Knee] | None, engine: str, test: str, pts: Sequence[SweepPoint]
) -> Knee | None:
    knee = lookup_knee(knees, (engine, test))
    if knee is None:
        try:
            knee = find_knee(pts)
        except ValueError:  # mixed load modes: no single knee to mark
            return None
    return knee


def _frontier(pts: Sequence[SweepPoint]) -> list[tuple[float, float]]:
    front = pareto_front(pts)
    coords = []
    for p, on in zip(pts, front, strict=True):
        if on:
            x, y = finite_or_none(p.summary.output_tok_s), summary_stat(p.summary, "ttft", 99)
            if x is not None and y is not None:
                coords.append((x, y))
    return sorted(coords)


def _step(coords: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    # Frontier points sorted by throughput have rising latency: a staircase joins them.
    out: list[tuple[float, float]] = []
    for i, (x, y) in enumerate(coords):
        if i:
            out.append((x, coords[i - 1][1]))
        out.append((x, y))
    return out


def _panel(
    x0: float,
    y0: float,
    series: Sequence[tuple[str, str, Series, Knee | None, bool]],
    *,
    kind: str,
    frontier: Sequence[tuple[float, float]],
    xlabel: str,
    ylabel: str,
    title: str,
) -> list[str]:
    xs = [x for *_, s, _k, _b in series for x, *_ in s] + [x for x, _ in frontier]
    ys = [y for *_, s, _k, _b in series for _, y, *_ in s] + [y for _, y in frontier]
    ax = _Axes(x0, y0, xs, ys)
    out = [f"<g class='panel {kind}'>", *_axes_svg(ax, xlabel, ylabel, title)]
    if not xs:
        out.append(
            _text(
                (ax.left + ax.right) / 2,
                (ax.top + ax.bottom) / 2,
                "no data",
                anchor="middle",
                fill="#888",
            )
        )
        out.append("</g>")
        return out
    if len(frontier) > 0:
        stair = [(ax.x(x), ax.y(y)) for x, y in _step(frontier)]
        out.append(
            "<g class='pareto'>"
            + _polyline(stair, "#555", dashed=True, width=1.5)
            + "".join(
                f"<rect x='{ax.x(x) - 4:.1f}' y='{ax.y(y) - 4:.1f}' width='8' height='8' "
                "fill='none' stroke='#555'/>"
                for x, y in frontier
            )
            + "</g>"
        )
    for engine, color, s, knee, is_baseline in series:
        if not s:
            continue
        opacity = 0.45 if is_baseline else 1.0
        tag = " (baseline)" if is_baseline else ""
        cls = "series baseline" if is_baseline else "series"
        out.append(f"<g class={quoteattr(cls)} data-engine={quoteattr(engine)}>")
        out.append(
            _polyline(
                [(ax.x(x), ax.y(y)) for x, y, *_ in s], color, dashed=is_baseline, opacity=opacity
            )
        )
        for x, y, valid, p in s:
            out.append(
                _marker(
                    ax.x(x),
                    ax.y(y),
                    color,
                    valid=valid,
                    opacity=opacity,
                    title=_point_title(engine, p, tag),
                )
            )
        if knee is not None and knee.level is not None and not is_baseline:
            at = [(x, y) for x, y, _v, p in s if p.level == knee.level]
            if at:
                out.extend(
                    _knee_mark(
                        ax.x(at[-1][0]),
                        ax.y(at[-1][1]),
                        color,
                        f"knee {knee.level.label}",
                        ax.right,
                    )
                )
        out.append("</g>")
    out.append("</g>")
    return out


def _legend(
    x0: float, y0: float, entries: Sequence[tuple[str, str, str]], width: float
) -> tuple[list[str], float]:
    """Legend items laid out left to right, wrapping; returns the elements and the height."""
    out = ["<g class='legend'>"]
    x, y = x0, y0
    for label, color, style in entries:
        w = 44 + 7 * len(label)
        if x + w > x0 + width and x > x0:
            x, y = x0, y + _LEGEND_ROW_H
        cy = y + _LEGEND_ROW_H / 2
        if style == "knee":
            out.append(
                f"<circle cx='{x + 12:.1f}' cy='{cy:.1f}' r='6' fill='none' "
                f"stroke='{color}' stroke-width='2'/>"
            )
        elif style == "pareto":
            out.append(_polyline([(x, cy), (x + 24, cy)], color, dashed=True, width=1.5))
        else:
            out.append(
                _polyline(
                    [(x, cy), (x + 24, cy)],
                    color,
                    dashed=style == "baseline",
                    opacity=0.45 if style == "baseline" else 1.0,
                )
            )
            out.append(f"<circle cx='{x + 12:.1f}' cy='{cy:.1f}' r='3.5' fill='{color}'/>")
        out.append(_text(x + 30, cy + 4, label, size=12))
        x += w
    out.append("</g>")
    return out, y + _LEGEND_ROW_H - y0


def render_svg(
    results: Results, *, baseline: Results | None = None, title: str | None = None
) -> str:
    """The chart of ``results`` as an SVG document (a string); the knees are the stored
    ones or computed. The points of ``baseline`` are drawn dashed under the new ones,
    paired by engine and test."""
    pts = list(results.points)
    knees = results.test_knees()
    base = list(baseline.points) if baseline is not None else []
    engines = list(dict.fromkeys([p.engine for p in pts] + [p.engine for p in base]))
    colors = {e: PALETTE[i % len(PALETTE)] for i, e in enumerate(engines)}
    # One row per test and load mode: a concurrency and a rate share no x axis.
    rows = list(dict.fromkeys([(p.test, p.level.mode) for p in pts + base]))
    modes_of: dict[str, int] = {}
    for test, _ in rows:
        modes_of[test] = modes_of.get(test, 0) + 1
    width = 2 * _PANEL_W
    body: list[str] = []
    y = _TITLE_H if title else 8
    if title:
        body.append(_text(width / 2, 22, title, size=16, anchor="middle", font_weight="bold"))
    if not rows:
        body.append(
            _text(width / 2, y + 40, "no load level was measured", anchor="middle", fill="#888")
        )
        y += 80
    for test, mode in rows:
        mine = [p for p in pts if p.test == test and p.level.mode == mode]
        theirs = [p for p in base if p.test == test and p.level.mode == mode]
        row_engines = list(dict.fromkeys([p.engine for p in mine] + [p.engine for p in theirs]))
        entries = [(e, colors[e], "line") for e in row_engines if any(p.engine == e for p in mine)]
        if theirs:
            entries += [
                (f"{e} (baseline)", colors[e], "baseline")
                for e in row_engines
                if any(p.engine == e for p in theirs)
            ]
        entries += [("knee", "#333", "knee"), ("Pareto frontier", "#555", "pareto")]
        heading = f"{test} ({mode})" if modes_of[test] > 1 else test
        body.append(_text(12, y + 16, heading, size=14, font_weight="bold", class_="test-title"))
        legend, h = _legend(12, y + 24, entries, width - 24)
        body.extend(legend)
        y += 24 + h + 4
        lat: list[tuple[str, str, Series, Knee | None, bool]] = []
        good: list[tuple[str, str, Series, Knee | None, bool]] = []
        for (engine, _), sweep in group_sweeps(theirs).items():
            lat.append((engine, colors[engine], _latency_series(sweep), None, True))
            good.append((engine, colors[engine], _goodput_series(sweep), None, True))
        for (engine, _), sweep in group_sweeps(mine).items():
            # A stored knee belongs to the test's only mode; with two, compute per mode.
            knee = _knee_for(knees if modes_of[test] == 1 else None, engine, test, sweep)
            lat.append((engine, colors[engine], _latency_series(sweep), knee, False))
            good.append((engine, colors[engine], _goodput_series(sweep), knee, False))
        load = "concurrency" if mode == "concurrency" else "rate (req/s)"
        body.extend(
            _panel(
                0,
                y,
                lat,
                kind="latency",
                frontier=_frontier(mine),
                xlabel="output throughput (tok/s)",
                ylabel="TTFT P99 (ms)",
                title="throughput vs TTFT P99",
            )
        )
        body.extend(
            _panel(
                _PANEL_W,
                y,
                good,
                kind="goodput",
                frontier=(),
                xlabel=load,
                ylabel="goodput (tok/s)",
                title=f"{load} vs goodput",
            )
        )
        y += _PANEL_H + 8
    height = math.ceil(y)
    head = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img'>"
    )
    label = title or "pytest-llmslo sweeps"
    return "\n".join(
        [
            "<?xml version='1.0' encoding='UTF-8'?>",
            head,
            f"<title>{escape(label)}</title>",
            f"<rect width='{width}' height='{height}' fill='white'/>",
            *body,
            "</svg>",
            "",
        ]
    )
