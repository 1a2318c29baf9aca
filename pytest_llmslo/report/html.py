"""The HTML report: one self-contained page of a session's results (``--slo-html``).

One file that opens offline: its styles and its few lines of script are inline, its charts
are SVG drawn in Python (``htmlcharts``), and it references nothing outside itself (no
fonts, no images, no stylesheets, no scripts). It holds:

- a header with the overall verdict (how many levels met their SLO, missed it or were
  inconclusive, and, with baselines, whether a level regressed) and a table of contents
  with each test's knees;
- the run's constants: harness and version, each engine's version, kind, model, precision
  and hardware (for the sim engine the setup it simulates), and what the document's
  ``constants`` hold (workload or dataset, lengths, SLO, warm-up, requests, client);
- per test and load mode: throughput against TTFT P99 with the Pareto frontier over the
  levels that met their SLO (or asserted none), load against goodput, against attainment,
  and against ITL P50 and TPOT P50, each with its SLO bound drawn and each engine's knee
  ringed; the frontier's table and the table of the sweep;
- per level, folded (``<details>``): its objectives, why a miss happened (the
  attribution), the engine's signals, failures, notes and traffic, and the TTFT and ITL
  distributions and per-request series from the samples the document holds;
- with baselines (``render_runs``): each level's figures in every run side by side and the
  comparison of each metric with its verdict (``htmlruns``).

Every text from the results is escaped (server messages end up there). Colours are
Okabe-Ito for the engines; an outcome is told by its mark's shape too (filled, cross,
hollow); the page follows the reader's light or dark mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from pytest_llmslo.document.results import Results, Sweep
from pytest_llmslo.history.trend import HistoryRun
from pytest_llmslo.judged import (
    OUTCOMES,
    LevelOutcome,
    fmt_judged,
    judged_stat,
    level_outcome,
    plotted_stat,
)
from pytest_llmslo.report import htmlruns
from pytest_llmslo.report.htmlcells import (
    OUTCOME,
    OUTCOME_CLASS,
    badge,
    bounds,
    cell,
    lines,
    point_cell,
    slug,
    thin_legend,
)
from pytest_llmslo.report.htmlcharts import (
    PALETTE,
    Mark,
    Series,
    Threshold,
    xy_chart,
)
from pytest_llmslo.report.htmllevel import level_details
from pytest_llmslo.report.htmlpage import PAGE_END, page_head
from pytest_llmslo.report.htmlsetup import run_constants, settings_of_test
from pytest_llmslo.report.htmltrend import trend_section
from pytest_llmslo.sweep import (
    SweepPoint,
    finite_or_none,
    pareto_front,
    point_attainment,
    point_goodput,
)

__all__ = ["render_html", "render_runs"]

#: The sweep table: (header, value of a point, digits shown).
_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("out tok/s", "output_tok_s", 1),
    ("goodput tok/s", "goodput", 1),
    ("attainment %", "attainment", 1),
    ("req/s", "req_s", 2),
    ("TTFT P50 ms", "ttft:50", 1),
    ("TTFT P99 ms", "ttft:99", 1),
    ("ITL P50 ms", "itl:50", 2),
    ("TPOT P50 ms", "tpot:50", 2),
    ("E2E P99 ms", "e2e:99", 1),
)


def _load_axis(p: SweepPoint) -> str:
    if p.level.arrival == "trace":
        return "trace speed-up (×)"
    if p.level.mode == "rate":
        return "rate (req/s)"
    return "concurrency (requests in flight)"


def _outcomes(results: Results) -> dict[int, LevelOutcome]:
    """Each point's outcome with its sweep's knee (``judged.level_outcome``), by ``id``."""
    return {id(p): level_outcome(p, s.knee) for s in results.sweeps() for p in s.points}


def _tip(p: SweepPoint, outcome: str) -> str:
    thr = finite_or_none(p.summary.output_tok_s)
    ttft = judged_stat(p, "ttft", 99)
    bits = [f"{p.engine} {p.level.label}: {OUTCOME[outcome]}"]
    if thr is not None:
        bits.append(f"{thr:.1f} tok/s")
    if ttft is not None:
        bits.append(f"TTFT P99 {fmt_judged(ttft)} ms")
    return ", ".join(bits)


# --------------------------------------------------------------------------- the whole page


def render_html(results: Results) -> str:
    """The page of ``results`` (see the module docstring)."""
    return render_runs(results, ())


def render_runs(
    results: Results,
    baselines: Sequence[Results],
    *,
    history: Sequence[HistoryRun] = (),
    record: Mapping[str, Any] | None = None,
) -> str:
    """The page of ``results`` with ``baselines`` (other runs: a saved baseline, the runs of
    other days) shown beside it, each level compared with theirs; with the run
    ``history`` (this run's ``record`` in it), its trend (``htmltrend``)."""
    runs = htmlruns.Runs.of(results, baselines)
    colours = _colours([results, *baselines])
    tests = list(dict.fromkeys(p.test for p in results.points))
    title = "pytest-llmslo report" + (f": {Path(results.source).name}" if results.source else "")
    parts = [
        page_head(title),
        _header(results, runs, title),
        _toc(results, tests),
        run_constants(results, runs),
    ]
    for i, test in enumerate(tests):
        parts.append(_test_section(results, runs, test, i, colours))
    parts.append(trend_section(results, history, record))
    parts.append(PAGE_END)
    return "\n".join(parts)


def _colours(all_results: Sequence[Results]) -> dict[str, str]:
    """Each engine's colour, in order of first appearance; the palette's black is the
    text's colour, so that it stays visible in dark mode."""
    names = dict.fromkeys(p.engine for r in all_results for p in r.points)
    out = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    return {n: "currentColor" if c.upper() == "#000000" else c for n, c in out.items()}


def _counts(points: Iterable[SweepPoint], outs: Mapping[int, LevelOutcome]) -> dict[str, int]:
    out: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
    for p in points:
        out[outs[id(p)].outcome] += 1
    return out


def _header(results: Results, runs: htmlruns.Runs, title: str) -> str:
    counts = _counts(results.points, _outcomes(results))
    total = sum(counts.values())
    unsure = counts["inconclusive"] + counts["cut"] + counts["interrupted"]
    if counts["fail"]:
        verdict, cls = f"{counts['fail']} of {total} levels missed their SLO", "fail"
    elif unsure:
        verdict, cls = f"{unsure} of {total} levels inconclusive", "invalid"
    elif counts["pass"]:
        verdict, cls = f"{counts['pass']} of {total} levels met their SLO", "pass"
        if counts["expected_miss"]:
            verdict += f"; {counts['expected_miss']} above the knee missed, as expected"
    else:
        verdict, cls = f"no SLO judged ({total} levels)", "unchecked"
    detail = ", ".join(f"{n} {OUTCOME[k]}" for k, n in counts.items() if n)
    harness = results.harness
    out = [
        '<header class="top">',
        f"<h1>{escape(title)}</h1>",
        f'<p class="verdict {cls}" data-verdict="{cls}">{escape(verdict)}</p>',
        f'<p class="sub">{escape(detail)}. A level above the knee is expected to miss: the '
        "knee is the highest load at which every objective held.</p>",
    ]
    if not results.complete:
        out.append('<p class="warn">Partial results: the session was interrupted.</p>')
    out.extend(runs.header_lines())
    made = " · ".join(
        x
        for x in (
            f"{harness.get('name', '')} {harness.get('version', '')}".strip(),
            results.created_utc,
        )
        if x
    )
    out.append(f'<p class="sub">{escape(made)}</p>')
    out.append(
        '<p class="tools"><button type="button" data-toggle="open" data-target="main">'
        'open every level</button> <button type="button" data-toggle="close" '
        'data-target="main">close every level</button></p>'
    )
    out.append("</header>")
    return "\n".join(out)


def _toc(results: Results, tests: Sequence[str]) -> str:
    items = []
    outs = _outcomes(results)
    for i, test in enumerate(tests):
        pts = [p for p in results.points if p.test == test]
        counts = _counts(pts, outs)
        knees = [
            f"{s.engine} {s.knee.level.label}" if s.knee.level else f"{s.engine} none"
            for s in results.sweeps()
            if s.test == test
        ]
        unsure = counts["inconclusive"] + counts["cut"] + counts["interrupted"]
        status = "fail" if counts["fail"] else "invalid" if unsure else "pass"
        shown = ", ".join(f"{n} {OUTCOME[k]}" for k, n in counts.items() if n)
        items.append(
            f'<li><a href="#{_test_id(test, i)}">{escape(test)}</a> {badge(status)} '
            f'<span class="sub">{escape(shown)} · knee: {escape(", ".join(knees))}</span></li>'
        )
    return '<nav class="toc"><h2>Tests</h2><ol>' + "".join(items) + "</ol></nav>"


def _test_id(test: str, i: int) -> str:
    return f"t{i}-{slug(test)}"


# --------------------------------------------------------------------------- one test


def _objectives(points: Sequence[SweepPoint]) -> list[Any]:
    """The objectives the test asserted (its first verdict's)."""
    for p in points:
        if p.verdict is not None and p.verdict.results:
            return [r.objective for r in p.verdict.results]
    return []


def _test_section(
    results: Results, runs: htmlruns.Runs, test: str, index: int, colours: Mapping[str, str]
) -> str:
    points = [p for p in results.points if p.test == test]
    sweeps = [s for s in results.sweeps() if s.test == test]
    objectives = _objectives(points)
    tid = _test_id(test, index)
    slo = ", ".join(o.label for o in objectives) or "none asserted"
    parts = [
        f'<section class="test" id="{tid}" data-test="{escape(test)}">',
        f"<h2>{escape(test)}</h2>",
        settings_of_test(results, test, slo),
    ]
    for mode in dict.fromkeys(s.mode for s in sweeps):
        mode_sweeps = [s for s in sweeps if s.mode == mode]
        base = runs.baseline_sweeps(test, mode)
        if any(len(s.points) > 1 for s in [*mode_sweeps, *(b for _, b in base)]):
            parts.append(_charts(mode_sweeps, base, objectives, colours, f"{tid}-{mode}"))
        else:
            # One point is no curve: a chart of it would be a dot in an empty frame.
            parts.append(
                f'<p class="sub" data-no-charts="{escape(mode)}">One load level per engine: no '
                "sweep to draw; its figures are in the table below.</p>"
            )
        parts.append(_knee_lines(mode_sweeps))
    searches = [
        f"{engine}: {c.describe()}; probes: {c.probes_text()}"
        for (engine, t), c in results.capacities.items()
        if t == test
    ]
    if searches:
        parts.append("<h3>Capacity search</h3>" + lines(searches, "capacity"))
    parts.append(_pareto_table(points))
    outs = _outcomes(results)
    parts.append(_sweep_table(points, results.points, outs))
    parts.append(runs.test_lines(test))
    parts.append("<h3>Levels</h3>")
    for p in points:
        i = results.points.index(p)
        parts.append(level_details(p, i, objectives, runs.level_lines(p), outs[id(p)]))
    parts.append("</section>")
    return "\n".join(parts)


def _series(
    sweeps: Sequence[Sweep],
    colours: Mapping[str, str],
    y: Any,
    x: Any,
    *,
    suffix: str = "",
    dashed: bool = False,
) -> list[Series]:
    out = []
    for s in sweeps:
        marks: list[Mark] = []
        knee = None
        for i, p in enumerate(s.points):
            xv, yv = x(p), y(p)
            if xv is None or yv is None:
                continue
            if s.knee.index == i:
                knee = len(marks)
            outcome = level_outcome(p, s.knee)
            marks.append(
                Mark(
                    xv,
                    yv,
                    OUTCOME_CLASS.get(outcome.outcome, outcome.outcome),
                    _tip(p, outcome.outcome),
                )
            )
        label = s.engine + suffix
        out.append(Series(label, colours.get(s.engine, "#777"), tuple(marks), knee, dashed))
    return out


def _level_x(p: SweepPoint) -> float:
    return p.level.value


def _frontier(sweeps: Sequence[Sweep]) -> list[tuple[float, float]]:
    """The Pareto frontier over the levels that met their SLO or asserted none."""
    good = [p for s in sweeps for p in s.points if p.status in ("pass", "unchecked")]
    on = pareto_front(good)
    out = []
    for p, front in zip(good, on, strict=True):
        thr, lat = finite_or_none(p.summary.output_tok_s), plotted_stat(p, "ttft", 99)
        if front and thr is not None and lat is not None:
            out.append((thr, lat))
    return out


def _charts(
    sweeps: Sequence[Sweep],
    base: Sequence[tuple[str, Sweep]],
    objectives: Sequence[Any],
    colours: Mapping[str, str],
    cid: str,
) -> str:
    axis = _load_axis(sweeps[0].points[0])

    def both(y: Any, x: Any = _level_x) -> list[Series]:
        out = _series(sweeps, colours, y, x)
        for label, s in base:
            out.extend(_series([s], colours, y, x, suffix=f" ({label})", dashed=True))
        return out

    def thr(p: SweepPoint) -> float | None:
        return finite_or_none(p.summary.output_tok_s)

    def ttft99(p: SweepPoint) -> float | None:
        return plotted_stat(p, "ttft", 99)

    def att(p: SweepPoint) -> float | None:
        a = point_attainment(p)
        return None if a is None else 100.0 * a

    min_att = [
        Threshold(100.0 * v, f"SLO attainment ≥ {100.0 * v:g} %")
        for v in {
            p.verdict.min_attainment
            for s in sweeps
            for p in s.points
            if p.verdict is not None and p.verdict.min_attainment is not None
        }
    ]
    itl = both(lambda p: plotted_stat(p, "itl", 50))
    tpot = [
        Series(f"{s.label} TPOT", s.colour, s.marks, s.knee, True)
        for s in both(lambda p: plotted_stat(p, "tpot", 50))
    ]
    charts = [
        xy_chart(
            f"{cid}-pareto",
            "Throughput against TTFT P99",
            "output tokens/s",
            "TTFT P99 (ms)",
            both(ttft99, thr),
            thresholds=bounds(objectives, "ttft", 99.0),
            frontier=_frontier(sweeps),
        ),
        xy_chart(
            f"{cid}-goodput", "Goodput per level", axis, "goodput (tokens/s)", both(point_goodput)
        ),
        xy_chart(
            f"{cid}-attainment",
            "Attainment per level",
            axis,
            "requests within SLO (%)",
            both(att),
            thresholds=min_att,
            y_max=100.0,
        ),
        xy_chart(
            f"{cid}-itl",
            "ITL P50 (solid) and TPOT P50 (dashed)",
            axis,
            "ms",
            itl + tpot,
            thresholds=bounds(objectives, "itl", 50.0) + bounds(objectives, "tpot", 50.0),
        ),
    ]
    legend = _legend(sweeps, base, colours)
    grid = "".join(f'<figure class="cell">{c}</figure>' for c in charts)
    return f'<div class="charts" data-mode="{escape(sweeps[0].mode)}">{legend}{grid}</div>'


def _legend(
    sweeps: Sequence[Sweep], base: Sequence[tuple[str, Sweep]], colours: Mapping[str, str]
) -> str:
    items = []
    for s in sweeps:
        items.append(
            f'<span class="key"><i style="background:{colours.get(s.engine, "#777")}"></i>'
            f"{escape(s.engine)}</span>"
        )
    for label in dict.fromkeys(label for label, _ in base):
        items.append(f'<span class="key"><i class="dash"></i>{escape(label)} (dashed)</span>')
    items.append(
        '<span class="key">● passed ✕ missed ○ inconclusive ◯ knee · '
        "dashed grey: Pareto frontier · dashed red: SLO bound</span>"
    )
    return '<p class="legend">' + " ".join(items) + "</p>"


def _knee_lines(sweeps: Sequence[Sweep]) -> str:
    items = []
    for s in sweeps:
        k = s.knee
        text = f"{s.engine}: knee {k.level.label}" if k.level else f"{s.engine}: no knee"
        if k.goodput_tok_s is not None:
            text += f" ({k.goodput_tok_s:,.1f} goodput tok/s)"
        if k.saturation_level is not None:
            text += f"; saturates at {k.saturation_level.label}"
        if k.note:
            text += f"; {k.note}"
        items.append(f"<li>{escape(text)}</li>")
    return '<ul class="knees">' + "".join(items) + "</ul>"


def _pareto_table(points: Sequence[SweepPoint]) -> str:
    if len({p.engine for p in points}) < 2:
        return ""
    good = [p for p in points if p.status in ("pass", "unchecked")]
    front = [p for p, on in zip(good, pareto_front(good), strict=True) if on]
    if not front:
        return '<p class="sub">Pareto frontier: no level met its SLO.</p>'
    front.sort(key=lambda p: -(p.summary.output_tok_s or 0.0))
    rows = "".join(
        f"<tr><td>{escape(p.engine)}</td><td>{escape(p.level.label)}</td>"
        f"{cell(finite_or_none(p.summary.output_tok_s), 1)}"
        f"{cell(judged_stat(p, 'ttft', 99), 1)}</tr>"
        for p in front
    )
    return (
        '<h3>Pareto frontier</h3><p class="sub">Levels that met their SLO and that no '
        "other such level beats on both throughput and TTFT P99.</p>"
        '<table class="pareto"><tr><th>engine</th><th>level</th><th>out tok/s</th>'
        f"<th>TTFT P99 ms</th></tr>{rows}</table>"
    )


def _sweep_table(
    points: Sequence[SweepPoint], every: Sequence[SweepPoint], outs: Mapping[int, LevelOutcome]
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h, _k, _d in _COLUMNS)
    rows = []
    for p in points:
        i = every.index(p)
        cells = "".join(point_cell(p, key, d) for _h, key, d in _COLUMNS)
        rows.append(
            f'<tr data-point="{i}"><td>{escape(p.engine)}</td>'
            f'<td><a href="#p{i}">{escape(p.level.label)}</a></td>'
            f"<td>{badge(outs[id(p)].outcome)}</td>"
            f'<td class="n" data-v="{p.summary.requests}">{p.summary.requests}</td>'
            f'<td class="n" data-v="{p.summary.failed}">{p.summary.failed}</td>{cells}</tr>'
        )
    return (
        '<h3>Sweep</h3><div class="scroll"><table class="sweep"><tr><th>engine</th>'
        f"<th>level</th><th>outcome</th><th>requests</th><th>failed</th>{head}</tr>"
        + "".join(rows)
        + "</table></div>"
        + thin_legend("".join(rows))
    )
