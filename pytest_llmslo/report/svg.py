"""A dependency-free SVG chart of sweeps and the Pareto frontier (a pure renderer).

The chart is headed by its title and the testbed (model, precision and hardware, from the
run's constants and the engines' metadata: ``report.testbed``). Then, for every test (and
load mode, when a test was swept in both), one row of three panels:

- **throughput vs TTFT P99**: output tok/s (x) against TTFT P99 (y), one line per engine
  through its load levels in load order, the knee ringed and labelled, and the Pareto
  frontier (throughput up, TTFT P99 down) over the test's valid points that met their SLO
  as a dashed step line: a failed or inconclusive point is never on it;
- **load vs goodput**: the load level (x) against goodput tok/s (y), the knee ringed;
- **load vs ITL**: the load level against ITL P50 (or the inter-token statistic the SLO
  bounds: TPOT, another percentile), the knee ringed.

The x axis is named for the kind of level: ``concurrency``, ``request rate (req/s)`` or,
for a trace replay, ``trace speed-up (x)``. Where the SLO has an objective on a panel's
metric and statistic (TTFT P99, ITL P50, ...), its threshold is a red dashed line with its
label; a threshold far above the points is named at the top instead of squashing them.
A test measured at one load level gets a small table, not three one-point charts.

No two labels overlap: every label's box is computed (its text's length by the font size,
``chartkit.text_width``) and a knee label that would cover another label or a marker is moved to
the next free place around its ring (right, left, then stacked above and below), with a
thin leader line when it had to move away.

With ``baseline`` results (``llmslo compare``) each engine's baseline sweep is drawn in
the same colour, dashed and lighter, so old and new can be seen together. Points of an
inconclusive (client-limited) run are hollow. Axes have "nice" ticks (1, 2, 5 x 10^k) and
labels; a legend heads each row (the drawing pieces are ``report.chartkit``'s). The output
is one standalone SVG document (valid XML, all text escaped) with no scripts and no
external references.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from pytest_llmslo.document.results import Results
from pytest_llmslo.judged import (
    fmt_judged,
    judged_cell,
    judged_stat,
    level_outcome,
    plotted_stat,
    stat_count,
    thin,
)
from pytest_llmslo.report import chartkit as kit
from pytest_llmslo.report.chartkit import nice_ticks, text_box, text_width
from pytest_llmslo.report.paths import relative_paths
from pytest_llmslo.report.signaltext import signal_bits
from pytest_llmslo.report.terminal import fmt_tok
from pytest_llmslo.report.testbed import describe
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    find_knee,
    finite_or_none,
    frontier_points,
    group_sweeps,
    lookup_knee,
    point_goodput,
)

__all__ = [
    "PALETTE",
    "Threshold",
    "frontier_points",
    "load_axis",
    "nice_ticks",
    "render_svg",
    "text_width",
    "thresholds",
]

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

SLO_COLOR = "#C62828"
_PANELS = 3
_HEAD_H = 58
_ROW_H = 20  # a table's row

Series = list[tuple[float, float, bool, SweepPoint]]  # x, y, valid, point


# --------------------------------------------------------------------------- what is drawn


def load_axis(points: Sequence[SweepPoint]) -> tuple[str, str]:
    """The name of the load of ``points`` (one load mode) and its axis label with unit:
    ``("concurrency", "concurrency")``, ``("request rate", "request rate (req/s)")`` or,
    for a trace replay, ``("trace speed-up", "trace speed-up (x)")``."""
    if points and all(p.level.mode == "concurrency" for p in points):
        return "concurrency", "concurrency"
    if points and all(p.level.arrival == "trace" for p in points):
        return "trace speed-up", "trace speed-up (x)"
    return "request rate", "request rate (req/s)"


@dataclass(frozen=True, slots=True)
class Threshold:
    """An objective's threshold as a chart draws it: on the axis of ``metric`` at ``stat``
    (a percentile or ``"mean"``)."""

    metric: str
    stat: float | str
    value: float
    label: str


def _stat(value: Any) -> float | str:
    if isinstance(value, str) and not value.replace(".", "", 1).isdigit():
        return value.lower().removeprefix("p") if value.lower() != "mean" else "mean"
    return float(value)


def thresholds(points: Sequence[SweepPoint], slo: Sequence[Any] | None = None) -> list[Threshold]:
    """The SLO thresholds of a test: from its points' verdicts (what was judged), else from
    its constants' ``slo`` (objective dicts ``{"metric", "stat", "threshold", "label"}``)."""
    out: dict[str, Threshold] = {}
    for p in points:
        for r in p.verdict.results if p.verdict is not None else ():
            o = r.objective
            t = Threshold(o.metric, _stat(o.stat), float(o.threshold), o.label)
            out.setdefault(t.label, t)
    if not out:
        for o in slo or ():
            if isinstance(o, Mapping) and {"metric", "stat", "threshold"} <= set(o):
                try:
                    t = Threshold(
                        str(o["metric"]), _stat(o["stat"]), float(o["threshold"]),
                        str(o.get("label") or f"{o['metric']}_{o['stat']}"),
                    )  # fmt: skip
                except (TypeError, ValueError):
                    continue
                out.setdefault(t.label, t)
    return list(out.values())


def _stat_name(stat: float | str) -> str:
    return "mean" if stat == "mean" else f"P{float(stat):g}"


def _gap_metric(limits: Sequence[Threshold]) -> tuple[str, float | str]:
    """The inter-token statistic to plot: the one the SLO bounds, else ITL P50."""
    for t in limits:
        if t.metric in ("itl", "tpot"):
            return t.metric, t.stat
    return "itl", 50.0


def _on_axis(limits: Sequence[Threshold], metric: str, stat: float | str) -> list[Threshold]:
    return [t for t in limits if t.metric == metric and t.stat == stat]


# --------------------------------------------------------------------------- drawing


def _marker(x: float, y: float, color: str, *, valid: bool, opacity: float, title: str) -> str:
    fill = color if valid else "white"
    return (
        f"<circle cx='{x:.1f}' cy='{y:.1f}' r='4' fill='{fill}' fill-opacity='{opacity}' "
        f"stroke='{color}' stroke-opacity='{opacity}' stroke-width='1.5'>"
        f"<title>{escape(relative_paths(title))}</title></circle>"
    )


_RING = 9


def _knee_label(x: float, y: float, color: str, label: str, labels: kit.Labels) -> list[str]:
    """A knee's label, placed by ``labels``; a leader line when it moved off its ring."""
    lx, ly, anchor = labels.place(x, y, label, 11, _RING)
    out = []
    if abs(ly - y) > 2 * _RING + 11:
        box = text_box(lx, ly, label, 11, anchor)
        ex = box[0] if anchor == "start" else box[2]
        ey = min(max(y, box[1]), box[3])
        out.append(
            f"<line x1='{x:.1f}' y1='{y:.1f}' x2='{ex:.1f}' y2='{ey:.1f}' stroke='{color}' "
            "stroke-width='0.8' stroke-opacity='0.7' class='leader'/>"
        )
    out.append(
        kit.text(lx, ly, label, size=11, anchor=anchor, fill=color, class_="knee-label", **kit.HALO)
    )
    return out


def _series(
    points: Sequence[SweepPoint], xy: Callable[[SweepPoint], tuple[float | None, float | None]]
) -> Series:
    out: Series = []
    for p in sorted(points, key=lambda p: p.level.value):
        x, y = xy(p)
        if x is not None and y is not None:
            out.append((x, y, bool(p.summary.valid), p))
    return out


def _latency_xy(p: SweepPoint) -> tuple[float | None, float | None]:
    return finite_or_none(p.summary.output_tok_s), plotted_stat(p, "ttft", 99)


def _goodput_xy(p: SweepPoint) -> tuple[float | None, float | None]:
    return float(p.level.value), point_goodput(p)


def _point_title(engine: str, p: SweepPoint, tag: str, knee: Knee | None = None) -> str:
    ttft = judged_stat(p, "ttft", 99)
    itl = judged_stat(p, "itl", 50)
    good = point_goodput(p)
    parts = [f"{engine}{tag} {p.level.label}", f"{p.summary.output_tok_s:.0f} output tok/s"]
    if ttft is not None:
        n = stat_count(p, "ttft", 99)
        few = ", fewer than a P99 needs" if thin(p, "ttft", 99) else ""
        parts.append(f"TTFT P99 {judged_cell(p, 'ttft', 99)} ms ({n} samples{few})")
    if itl is not None:
        parts.append(f"ITL P50 {fmt_judged(itl)} ms")
    if good is not None:
        parts.append(f"goodput {good:.0f} tok/s")
    outcome = level_outcome(p, knee)
    parts.append(f"{outcome.word}: {outcome.reason}")
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
    coords = []
    for p in frontier_points(pts):
        x, y = _latency_xy(p)
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


#: One engine's line in a panel: name, colour, points, knee, whether it is the baseline's.
Line = tuple[str, str, Series, Knee | None, bool]


@dataclass(frozen=True, slots=True)
class _Panel:
    """What one panel draws."""

    kind: str
    title: str
    xlabel: str
    ylabel: str
    lines: Sequence[Line]
    frontier: Sequence[tuple[float, float]] = ()
    limits: Sequence[Threshold] = field(default_factory=tuple)


#: A threshold further above the highest point than this factor is named, not drawn.
_THRESHOLD_REACH = 3.0


def _threshold_line(ax: kit.Axes, t: Threshold) -> str:
    py = ax.y(t.value)
    return (
        f"<line x1='{ax.left:.1f}' y1='{py:.1f}' x2='{ax.right:.1f}' y2='{py:.1f}' "
        f"stroke='{SLO_COLOR}' stroke-width='1.5' stroke-dasharray='5 3' class='slo'/>"
    )


def _threshold_label(ax: kit.Axes, labels: kit.Labels, t: Threshold, shown: bool) -> str:
    """A threshold's label: at an end of its line, above or below it, where it covers no
    marker; named at the top when the line is off the chart."""
    text = f"SLO {t.label}"
    if shown:
        py = ax.y(t.value)
        spots = [(ax.right - 6, py - 4, "end"), (ax.right - 6, py + 13, "end"),
                 (ax.left + 6, py - 4, "start"), (ax.left + 6, py + 13, "start"),
                 ((ax.left + ax.right) / 2, py - 4, "middle"),
                 ((ax.left + ax.right) / 2, py + 13, "middle")]  # fmt: skip
    else:
        text += " (above the chart)"
        spots = [(ax.right - 6, ax.top + 14 + k * 14, "end") for k in range(6)]
    x, y, anchor = labels.place_at(text, 11, spots)
    return kit.text(
        x, y, text, size=11, anchor=anchor, fill=SLO_COLOR, class_="slo-label", **kit.HALO,
        data_threshold=f"{t.value:g}",
    )  # fmt: skip


def _panel(x0: float, y0: float, spec: _Panel) -> list[str]:
    xs = [x for *_, s, _k, _b in spec.lines for x, *_ in s] + [x for x, _ in spec.frontier]
    ys = [y for *_, s, _k, _b in spec.lines for _, y, *_ in s] + [y for _, y in spec.frontier]
    top = max(ys) if ys else 0.0
    shown = {t.label: bool(ys) and t.value <= _THRESHOLD_REACH * top for t in spec.limits}
    ax = kit.Axes(x0, y0, xs, ys + [t.value for t in spec.limits if shown[t.label]])
    out = [
        f"<g class='panel {spec.kind}'>",
        *kit.axes(ax, spec.xlabel, spec.ylabel, spec.title),
    ]
    if not xs:
        mid = ((ax.left + ax.right) / 2, (ax.top + ax.bottom) / 2)
        out.append(kit.text(*mid, "no data", anchor="middle", fill="#888"))
        out.append("</g>")
        return out
    labels = kit.Labels(ax)
    out.extend(_threshold_line(ax, t) for t in spec.limits if shown[t.label])
    if spec.frontier:
        stair = [(ax.x(x), ax.y(y)) for x, y in _step(spec.frontier)]
        out.append(
            "<g class='pareto'>"
            + kit.polyline(stair, "#555", dashed=True, width=1.5)
            + "".join(
                f"<rect x='{ax.x(x) - 4:.1f}' y='{ax.y(y) - 4:.1f}' width='8' height='8' "
                "fill='none' stroke='#555'/>"
                for x, y in spec.frontier
            )
            + "</g>"
        )
    knees: list[tuple[float, float, str, str]] = []
    for engine, color, s, knee, is_baseline in spec.lines:
        if not s:
            continue
        opacity = 0.45 if is_baseline else 1.0
        tag = " (baseline)" if is_baseline else ""
        cls = "series baseline" if is_baseline else "series"
        out.append(f"<g class={quoteattr(cls)} data-engine={quoteattr(engine)}>")
        out.append(
            kit.polyline(
                [(ax.x(x), ax.y(y)) for x, y, *_ in s], color, dashed=is_baseline, opacity=opacity
            )
        )
        for x, y, valid, p in s:
            labels.marker(ax.x(x), ax.y(y), 4)
            out.append(
                _marker(
                    ax.x(x),
                    ax.y(y),
                    color,
                    valid=valid,
                    opacity=opacity,
                    title=_point_title(engine, p, tag, knee),
                )
            )
        if knee is not None and knee.level is not None and not is_baseline:
            at = [(x, y) for x, y, _v, p in s if p.level == knee.level]
            if at:
                kx, ky = ax.x(at[-1][0]), ax.y(at[-1][1])
                labels.marker(kx, ky, _RING)
                out.append(
                    f"<circle cx='{kx:.1f}' cy='{ky:.1f}' r='{_RING}' fill='none' "
                    f"stroke='{color}' stroke-width='2' class='knee'/>"
                )
                knees.append((kx, ky, color, f"knee {knee.level.label}"))
        out.append("</g>")
    # Labels last, once every marker is known: the thresholds', then the knees', the
    # highest knee first, so a stack of labels reads top to bottom as the points do.
    out.extend(_threshold_label(ax, labels, t, shown[t.label]) for t in spec.limits)
    out.append("<g class='knee-labels'>")
    for kx, ky, color, label in sorted(knees, key=lambda k: (k[1], k[0])):
        out.extend(_knee_label(kx, ky, color, label, labels))
    out.append("</g>")
    out.append("</g>")
    return out


_TABLE_HEAD = ("engine", "load", "out tok/s", "TTFT P50 (ms)", "TTFT P99 (ms)",
               "ITL P50 (ms)", "good tok/s", "outcome")  # fmt: skip


def _table_cells(p: SweepPoint) -> list[str]:
    s = p.summary
    return [
        p.level.label,
        fmt_tok(finite_or_none(s.output_tok_s)),
        judged_cell(p, "ttft", 50),
        judged_cell(p, "ttft", 99),
        judged_cell(p, "itl", 50),
        fmt_tok(point_goodput(p)),
        level_outcome(p).word,
    ]


def _table(
    x0: float, y0: float, rows: Sequence[tuple[str, str, SweepPoint]]
) -> tuple[list[str], float]:
    """A test measured at one level: a row per engine (name in its colour) with its
    figures, in place of charts of one point; returns the elements and the height."""
    body = [[name, *_table_cells(p)] for name, _c, p in rows]
    widths = [
        max(text_width(str(c), 12) for c in col) + 18
        for col in zip(_TABLE_HEAD, *body, strict=True)
    ]
    lefts = [x0 + sum(widths[:i]) for i in range(len(widths))]
    out = ["<g class='point-table'>"]
    y = y0 + _ROW_H - 6
    for i, head in enumerate(_TABLE_HEAD):
        x, anchor = (lefts[i], "start") if i in (0, 7) else (lefts[i] + widths[i] - 18, "end")
        out.append(kit.text(x, y, head, anchor=anchor, font_weight="bold"))
    total = sum(widths)
    out.append(
        f"<line x1='{x0:.1f}' y1='{y + 6:.1f}' x2='{x0 + total:.1f}' y2='{y + 6:.1f}' "
        "stroke='#888'/>"
    )
    for (name, color, p), cells in zip(rows, body, strict=True):
        y += _ROW_H
        out.append(f"<g class='row' data-engine={quoteattr(name)}>")
        for i, cell in enumerate(cells):
            x, anchor = (lefts[i], "start") if i in (0, 7) else (lefts[i] + widths[i] - 18, "end")
            attrs: dict[str, Any] = {"fill": color} if i == 0 else {}
            if i == 7 and level_outcome(p).red:
                attrs = {"fill": SLO_COLOR, "font_weight": "bold"}
            out.append(kit.text(x, y, str(cell), anchor=anchor, **attrs))
        out.append("</g>")
    out.append("</g>")
    return out, y - y0 + 10


def _row(
    y: float,
    mine: Sequence[SweepPoint],
    theirs: Sequence[SweepPoint],
    ctx: Mapping[str, Any],
) -> tuple[list[str], float]:
    """One test's row at ``y``: its legend and three panels, or its table; returns the
    elements and the row's height."""
    colors, knees, limits = ctx["colors"], ctx["knees"], ctx["limits"]
    width = _PANELS * kit.PANEL_W
    engines = list(dict.fromkeys([p.engine for p in mine] + [p.engine for p in theirs]))
    body: list[str] = []
    if len({p.level.label for p in [*mine, *theirs]}) <= 1:
        rows = [(p.engine, colors[p.engine], p) for p in mine]
        rows += [(f"{p.engine} (baseline)", colors[p.engine], p) for p in theirs]
        table, h = _table(12, y, rows)
        return table, h + 8
    entries = [(e, colors[e], "line") for e in engines if any(p.engine == e for p in mine)]
    entries += [
        (f"{e} (baseline)", colors[e], "baseline")
        for e in engines
        if any(p.engine == e for p in theirs)
    ]
    entries += [("knee", "#333", "knee"), ("Pareto frontier", "#555", "pareto")]
    if limits:
        entries.append(("SLO threshold", SLO_COLOR, "slo"))
    legend, h = kit.legend(12, y, entries, width - 24)
    body.extend(legend)
    y0 = y + h + 4
    gap_metric, gap_stat = _gap_metric(limits)
    gap_name = f"{gap_metric.upper()} {_stat_name(gap_stat)}"

    def gap_xy(p: SweepPoint) -> tuple[float | None, float | None]:
        return float(p.level.value), plotted_stat(p, gap_metric, gap_stat)

    lat: list[Line] = []
    good: list[Line] = []
    gap: list[Line] = []
    for sweep, knee, baseline in [
        *((s, None, True) for s in group_sweeps(theirs).values()),
        *((s, knees(s), False) for s in group_sweeps(mine).values()),
    ]:
        engine = sweep[0].engine
        color = colors[engine]
        lat.append((engine, color, _series(sweep, _latency_xy), knee, baseline))
        good.append((engine, color, _series(sweep, _goodput_xy), knee, baseline))
        gap.append((engine, color, _series(sweep, gap_xy), knee, baseline))
    load, load_label = load_axis([*mine, *theirs])
    panels = [
        _Panel("latency", "throughput vs TTFT P99", "output throughput (tok/s)",
               "TTFT P99 (ms)", lat, _frontier(mine), _on_axis(limits, "ttft", 99.0)),
        _Panel("goodput", f"{load} vs goodput", load_label, "goodput (tok/s)", good),
        _Panel("itl", f"{load} vs {gap_name}", load_label, f"{gap_name} (ms)", gap, (),
               _on_axis(limits, gap_metric, gap_stat)),
    ]  # fmt: skip
    for i, spec in enumerate(panels):
        body.extend(_panel(i * kit.PANEL_W, y0, spec))
    return body, y0 - y + kit.PANEL_H + 8


def render_svg(
    results: Results, *, baseline: Results | None = None, title: str | None = None
) -> str:
    """The chart of ``results`` as an SVG document (a string); the knees are the stored
    ones or computed. The points of ``baseline`` are drawn dashed under the new ones,
    paired by engine and test. The heading is ``title`` (else the harness's name) over
    the model and hardware of the run."""
    pts = list(results.points)
    stored = results.test_knees()
    base = list(baseline.points) if baseline is not None else []
    engines = list(dict.fromkeys([p.engine for p in pts] + [p.engine for p in base]))
    colors = {e: PALETTE[i % len(PALETTE)] for i, e in enumerate(engines)}
    # One row per test and load mode: a concurrency and a rate share no x axis.
    rows = list(dict.fromkeys([(p.test, p.level.mode) for p in pts + base]))
    modes_of: dict[str, int] = {}
    for test, _ in rows:
        modes_of[test] = modes_of.get(test, 0) + 1
    tests = results.constants.get("tests") or {}
    width = _PANELS * kit.PANEL_W
    heading = title or "pytest-llmslo sweeps"
    body = [kit.text(width / 2, 24, heading, size=16, anchor="middle", font_weight="bold")]
    setup = describe(results)
    if setup:
        body.append(kit.text(width / 2, 44, setup, size=13, anchor="middle", fill="#444",
                          class_="testbed"))  # fmt: skip
    y: float = _HEAD_H if setup else _HEAD_H - 20
    if not rows:
        body.append(
            kit.text(width / 2, y + 40, "no load level was measured", anchor="middle", fill="#888")
        )
        y += 80
    for test, mode in rows:
        mine = [p for p in pts if p.test == test and p.level.mode == mode]
        theirs = [p for p in base if p.test == test and p.level.mode == mode]
        name = f"{test} ({mode})" if modes_of[test] > 1 else test
        body.append(kit.text(12, y + 16, name, size=14, font_weight="bold", class_="test-title"))
        test_slo = (tests.get(test) or {}).get("slo") if isinstance(tests, Mapping) else None
        single = modes_of[test] == 1

        def knee_of(sweep: Sequence[SweepPoint], single: bool = single) -> Knee | None:
            # A stored knee belongs to the test's only mode; with two, compute per mode.
            return _knee_for(stored if single else None, sweep[0].engine, sweep[0].test, sweep)

        ctx = {"colors": colors, "knees": knee_of, "limits": thresholds(mine, test_slo)}
        elements, h = _row(y + 24, mine, theirs, ctx)
        body.extend(elements)
        y += 24 + h
    height = math.ceil(y)
    head = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}' role='img'>"
    )
    label = f"{heading}: {setup}" if setup else heading
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
