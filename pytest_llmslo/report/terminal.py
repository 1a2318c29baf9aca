"""Terminal report: pure renderers that return lists of lines.

The plugin writes them with ``terminalreporter.write_line`` (titles with ``write_sep``);
nothing here prints. Layout, for 100 columns:

- ``render_sweep``: per engine and test, the sweep table (load, TTFT P50/P99, ITL P50, TPOT
  P50 over every request, a failed one as ∞ as the gates count it; output and goodput
  tok/s, attainment, verdict) with the knee row marked ``*`` and
  invalid client runs marked ``!``, then a line with the knee level and the goodput there,
  and, for a test that searched its capacity, the capacity with its bracket and probes;
- ``render_pareto``: across engines, per test run on more than one, the Pareto frontier
  of throughput vs TTFT P99 at each engine's knee and over all points (valid points that
  met their SLO, ``sweep.frontier_points``);
- ``render_verdicts``: one line per engine and test: what its levels came to, and its knee;
- ``render_verdict``: a verdict's table, for failure messages and ``system-out``;
- ``render_summary``: a session's verdicts, its Pareto tables, then its sweeps, from its
  ``document.Results``; the lines under each level (traffic, engine signals, failures and
  notes) only with ``detail``.

Numbers: milliseconds with 1 decimal, tok/s as integers, attainment as a percentage with 1
decimal, ``-`` where a value is undefined (no samples, no objectives).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_llmslo.answered import quality_failed
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document.results import Results
from pytest_llmslo.judged import (
    OUTCOME_WORDS,
    THIN_LEGEND,
    THIN_MARK,
    fmt_judged,
    judged_cell,
    judged_stat,
    knee_miss_text,
    level_outcome,
    stat_count,
)
from pytest_llmslo.report.coldstarttext import cold_start_line
from pytest_llmslo.report.levellines import (
    failure_lines,
    fmt_ms,
    level_lines,
    request_failure_lines,
    traffic_lines,
)
from pytest_llmslo.report.signaltext import (
    CLIENT_LEGEND,
    SIGNAL_COLUMNS,
    has_client_delta,
    has_signals,
    signal_cells,
)
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    frontier_points,
    knee_of,
    point_at,
    point_attainment,
    point_goodput,
    point_status,
    split_sweeps,
    sweep_knees,
    unjudged,
)

if TYPE_CHECKING:
    from pytest_llmslo.slo import Verdict

__all__ = [
    "DEFAULT_WIDTH",
    "failure_lines",
    "fmt_ms",
    "fmt_pct",
    "fmt_tok",
    "level_lines",
    "render_capacity",
    "render_pareto",
    "render_summary",
    "render_sweep",
    "render_verdict",
    "render_verdicts",
    "request_failure_lines",
    "sweep_row_cells",
    "traffic_lines",
]

DEFAULT_WIDTH = 100

KNEE_MARK = "*"
INVALID_MARK = "!"

# (header, width) of the table's columns, in the order of ``sweep_row_cells``; the verdict
# column takes what is left of the line.
_COLUMNS: tuple[tuple[str, int], ...] = (
    ("load", 8),
    ("n", 6),
    ("TTFT p50", 10),
    ("TTFT p99", 10),
    ("ITL p50", 9),
    ("TPOT p50", 10),
    ("out tok/s", 11),
    ("good tok/s", 12),
    ("attain", 8),
)
_LEAD = 2  # the marker column and a space
_GAP = 2  # before the verdict
_VERDICT_MIN = 14  # room for "inconclusive" and a short FAIL list
# On a narrower terminal the signal columns go first (their line under each level stays),
# then the columns lose a space each, then these go, in this order (the SLO figures, TTFT
# P99 and goodput, always stay; without ``n`` a figure from too few samples keeps its mark).
_DROP_ORDER = ("n", "TPOT p50", "TTFT p50", "ITL p50")


def fmt_tok(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def fmt_pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100.0 * fraction:.1f}%"


# --------------------------------------------------------------------------- sweep table


def render_sweep(
    engine: str,
    points: Sequence[SweepPoint],
    knee: Knee | Mapping[Any, Knee] | None = None,
    width: int = DEFAULT_WIDTH,
    capacities: Mapping[tuple[str, str], CapacityResult] | None = None,
    *,
    detail: bool = True,
) -> list[str]:
    """The sweep table(s) of one engine: one block per test among ``points``.

    ``knee`` is the knee of the (single) sweep, or a mapping keyed by ``(engine, test)``,
    test name or engine name, or None to compute it with ``find_knee``. Points of other
    engines are ignored. ``capacities`` maps ``(engine, test)`` to the result of the
    capacity search that test ran, shown under its sweep of the same load mode.
    ``detail``: the lines under each level (``level_lines``) follow the table.
    """
    mine = [p for p in points if p.engine == engine]
    if not mine:
        return [f"{engine}: no load level was measured"]
    sweeps = split_sweeps(mine)
    if isinstance(knee, Knee) and len({key for key, _ in sweeps}) > 1:
        raise ValueError(
            f"one Knee given for several tests of {engine!r}: pass a mapping keyed by test"
        )
    lines: list[str] = []
    for (_, test), sweep in sweeps:
        if isinstance(knee, Knee) or knee is None:
            given: Knee | None = knee
        else:
            given = knee.get((engine, test)) or knee.get(test) or knee.get(engine)
        if lines:
            lines.append("")
        lines.extend(_render_one(engine, test, sweep, knee_of(sweep, given), width, detail))
        capacity = (capacities or {}).get((engine, test))
        if capacity is not None and capacity.mode == sweep[0].level.mode:
            lines.extend(render_capacity(capacity, width))
    return lines


def render_capacity(capacity: CapacityResult, width: int = DEFAULT_WIDTH) -> list[str]:
    """A capacity search's result: the capacity, its bracket, the number of levels and why
    the search stopped; then the probes in order with their outcomes."""
    lines = _wrap(capacity.describe(), width)
    if capacity.history:
        lines.extend(_wrap(f"  probes: {capacity.probes_text()}", width))
    return lines


def _layout(width: int, signals: bool = False) -> list[tuple[int, str, int]]:
    """The columns that fit ``width``: (index into the row's cells, header, width); with
    ``signals`` the ``SIGNAL_COLUMNS`` follow the client's when there is room for them."""
    cols = [(i, h, w) for i, (h, w) in enumerate(_COLUMNS)]

    def fits(c: list[tuple[int, str, int]]) -> bool:
        return _LEAD + sum(w for *_, w in c) + _GAP + _VERDICT_MIN <= width

    if signals:
        wide = cols + [(len(_COLUMNS) + i, h, w) for i, (h, w) in enumerate(SIGNAL_COLUMNS)]
        if fits(wide):
            return wide
    if fits(cols):
        return cols
    cols = [(i, h, w - 1) for i, h, w in cols]
    for name in _DROP_ORDER:
        if fits(cols):
            break
        cols = [c for c in cols if c[1] != name]
    return cols


def _render_one(
    engine: str, test: str, sweep: Sequence[SweepPoint], knee: Knee, width: int, detail: bool
) -> list[str]:
    order = sorted(range(len(sweep)), key=lambda i: sweep[i].level.value)
    mode: str = sweep[0].level.mode
    if all(p.level.arrival == "trace" for p in sweep):
        mode = "trace replay"
    n = len({p.level.label for p in sweep})
    plural = "s" if n != 1 else ""
    lines = [_clip(f"{engine} | {test} | {mode} sweep, {n} level{plural}", width)]
    signals = any(has_signals(p) for p in sweep)
    cols = _layout(width, signals)
    verdict_w = max(width - _LEAD - sum(w for *_, w in cols) - _GAP, 7)
    head = " " * _LEAD + "".join(h.rjust(w) for _, h, w in cols) + " " * _GAP + "verdict"
    lines.append(_clip(head, width))
    knee_row = _knee_position(sweep, knee)
    for i in order:
        p = sweep[i]
        status = point_status(p)
        mark = KNEE_MARK if i == knee_row else INVALID_MARK if status == "invalid" else " "
        cells = sweep_row_cells(p) + (signal_cells(p) if signals else [])
        row = mark + " " + "".join(_cell(cells[j], w) for j, _, w in cols)
        lines.append(_clip(row + " " * _GAP + _verdict_cell(p, verdict_w, knee), width))
    if any(THIN_MARK in line for line in lines[2:]):
        lines.extend(_wrap(f"  {THIN_LEGEND}", width))
    lines.extend(_wrap(_knee_line(sweep, knee), width))
    invalid = [sweep[i] for i in order if point_status(sweep[i]) == "invalid"]
    if invalid:
        reasons = "; ".join(f"{p.level.label}: {_invalid_reason(p, knee)}" for p in invalid)
        text = f"{INVALID_MARK} inconclusive (no verdict; excluded from knee and Pareto): "
        lines.extend(_wrap(text + reasons, width))
    for i in order:
        for line in level_lines(sweep[i]) if detail else request_failure_lines(sweep[i]):
            lines.extend(_wrap(line, width))
    return lines


def _cell(text: str, width: int) -> str:
    # A figure too wide for its column pushes the row out rather than being cut: a cut
    # number would read as another number.
    return text.rjust(width) if len(text) < width else " " + text


def _knee_position(sweep: Sequence[SweepPoint], knee: Knee) -> int | None:
    # ``knee.index`` is into the sequence find_knee was given, which may not be this one.
    if knee.index is not None and 0 <= knee.index < len(sweep):
        if sweep[knee.index].level == knee.level:
            return knee.index
    p = point_at(sweep, knee.level)
    return None if p is None else next(i for i, q in enumerate(sweep) if q is p)


def _latency(p: SweepPoint, metric: str, q: float | str) -> str:
    """A latency cell: the judged figure (``judged.judged_cell``): the gate's observed value,
    else over every request, failed ones as +∞, so a P99 that failed on the failures reads
    ∞, not the survivors' figure; marked ``THIN_MARK`` when it rests on fewer samples than
    its percentile needs."""
    return judged_cell(p, metric, q)


def sweep_row_cells(p: SweepPoint) -> list[str]:
    """The sweep table's cells for one point (the Markdown report's table has the same):
    the level, ``n`` (the requests behind its latencies, a failed one counted as the gate
    counts it), then the latencies over every request, a failed one counted as +∞, as the
    gates take them."""
    s = p.summary
    tpot = _latency(p, "tpot", 50)
    if tpot == "-":
        tpot = _latency(p, "tpot", "mean")
    return [
        p.level.label,
        str(stat_count(p, "ttft", 99)),
        _latency(p, "ttft", 50),
        _latency(p, "ttft", 99),
        _latency(p, "itl", 50),
        tpot,
        fmt_tok(s.output_tok_s),
        fmt_tok(point_goodput(p)),
        fmt_pct(point_attainment(p)),
    ]


def _verdict_cell(p: SweepPoint, width: int, knee: Knee | None = None) -> str:
    out = level_outcome(p, knee)
    if out.outcome == "no_slo":
        return "-"
    if out.outcome in ("fail", "expected_miss"):
        names = _failed_names(p.verdict) if p.verdict is not None else []
        head = "FAIL " if out.outcome == "fail" else "exp. miss "
        return _clip(head + ", ".join(names + quality_failed(p)), width)
    return _clip(out.word, width)


def _failed_names(verdict: Verdict) -> list[str]:
    names = [_objective_name(r.objective) for r in verdict.results if not r.passed]
    # The aggregate gates are not objectives; name them when they are what failed.
    if verdict.min_attainment is not None and verdict.attainment is not None:
        if verdict.attainment < verdict.min_attainment:
            names.append("attainment")
    if verdict.min_goodput_tok_s is not None and verdict.goodput_tok_s is not None:
        if verdict.goodput_tok_s < verdict.min_goodput_tok_s:
            names.append("goodput")
    if verdict.max_error_rate is not None and verdict.error_rate > verdict.max_error_rate:
        names.append("errors")
    for problem in verdict.problems:
        if problem.startswith("every request failed"):
            names.append("all requests failed")
        elif problem.startswith("no request was measured"):
            names.append("nothing measured")
    if not names and not verdict.results:
        names.append("no objectives")
    return names


def _objective_name(objective: Any) -> str:
    name = getattr(objective, "name", None)
    return str(name) if name else f"{objective.metric}_{objective.stat}"


def _knee_line(sweep: Sequence[SweepPoint], knee: Knee) -> str:
    if knee.level is None:
        text = f"knee: none - {knee.note}" if knee.note else "knee: none"
    else:
        at = point_at(sweep, knee.level)
        att = "-" if at is None else fmt_pct(point_attainment(at))
        text = (
            f"{KNEE_MARK} knee: {knee.level.label}, goodput {fmt_tok(knee.goodput_tok_s)} tok/s,"
            f" attainment {att}"
        )
        others = unjudged(sweep)
        if knee.status == "all_passed" and others:
            text += (
                f" (every judged level passed; not judged: {', '.join(others)}: capacity may "
                "be higher, rerun those levels or extend the sweep)"
            )
        elif knee.status == "all_passed":
            text += " (every level passed: capacity may be higher, extend the sweep)"
        elif knee.first_failure is not None:
            text += f" ({knee_miss_text(knee)})"
    if knee.saturation_level is not None:
        text += (
            f"; saturation at {knee.saturation_level.label} "
            "(throughput grows < 10 % above it while latency rises)"
        )
    return text


def _invalid_reason(p: SweepPoint, knee: Knee | None = None) -> str:
    out = level_outcome(p, knee)
    return out.reason if out.outcome == "inconclusive" else f"{out.word}: {out.reason}"


# --------------------------------------------------------------------------- Pareto


def render_pareto(
    points_by_engine: Mapping[str, Sequence[SweepPoint]],
    knees: Mapping[Any, Knee] | None = None,
    width: int = DEFAULT_WIDTH,
) -> list[str]:
    """The Pareto summary across engines: per test run on more than one engine, output
    tok/s (up) vs TTFT P99 (down) at each engine's knee and over all points, frontier
    points (``sweep.frontier_points``: valid, and met their SLO) marked ``*``. ``knees``
    is keyed by ``(engine, test)`` or engine name; missing knees are computed. A test run
    on one engine has no table: its sweep says it all."""
    everything = [p for pts in points_by_engine.values() for p in pts]
    by_test: dict[str, list[SweepPoint]] = {}
    for p in everything:
        by_test.setdefault(p.test, []).append(p)
    lines: list[str] = []
    for test, pts in by_test.items():
        if len({p.engine for p in pts}) < 2:
            continue
        if lines:
            lines.append("")
        lines.append(
            _clip(
                f"Pareto | {test} | output tok/s up, TTFT P99 down; {KNEE_MARK} = on the frontier",
                width,
            )
        )
        at_knee: list[SweepPoint] = []
        no_knee: list[str] = []
        for (engine, _), sweep, knee in sweep_knees(pts, knees):
            at = point_at(sweep, knee.level)
            if at is not None:
                at_knee.append(at)
            else:
                no_knee.extend(_wrap(f"     {engine}: no knee ({knee.note})", width))
        lines.append("  at each engine's knee:")
        if at_knee:
            lines.extend(_pareto_rows(at_knee, _on(at_knee), width, only_front=False))
        lines.extend(no_knee)
        front = _on(pts)
        eligible = sum(1 for p in pts if point_status(p) in ("pass", "unchecked"))
        lines.append(
            f"  over all points ({sum(front)} of {eligible} that met their SLO on the frontier):"
        )
        lines.extend(_pareto_rows(pts, front, width, only_front=True))
    return lines


def _on(pts: Sequence[SweepPoint]) -> list[bool]:
    """For each of ``pts``, whether it is on their frontier (``frontier_points``)."""
    front = {id(p) for p in frontier_points(pts)}
    return [id(p) in front for p in pts]


_PARETO_HEAD = (
    f"  {'':2} {'engine':<24} {'load':>6} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9}"
    f" {'ITL p50':>8} {'good tok/s':>11} {'attain':>7}"
)


def _pareto_rows(
    pts: Sequence[SweepPoint], front: Sequence[bool], width: int, *, only_front: bool
) -> list[str]:
    rows = [_clip(_PARETO_HEAD, width)]
    order = sorted(range(len(pts)), key=lambda i: -(pts[i].summary.output_tok_s or 0.0))
    for i in order:
        if only_front and not front[i]:
            continue
        p = pts[i]
        mark = KNEE_MARK if front[i] else " "
        row = (
            f"  {mark:2} {_clip(p.engine, 24):<24} {_clip(p.level.label, 6):>6}"
            f" {fmt_tok(p.summary.output_tok_s):>10}"
            f" {fmt_judged(judged_stat(p, 'ttft', 50)):>9}"
            f" {fmt_judged(judged_stat(p, 'ttft', 99)):>9}"
            f" {fmt_judged(judged_stat(p, 'itl', 50)):>8}"
            f" {fmt_tok(point_goodput(p)):>11}"
            f" {fmt_pct(point_attainment(p)):>7}"
        )
        if not p.summary.valid:
            row += "  invalid client"
        rows.append(_clip(row, width))
    return rows


# --------------------------------------------------------------------------- verdict / all


def render_verdict(verdict: Verdict) -> list[str]:
    """A verdict as lines: its own ``format()`` table when it has one."""
    fmt = getattr(verdict, "format", None)
    if callable(fmt):
        return str(fmt()).splitlines()
    lines = [f"SLO {'passed' if verdict.passed else 'FAILED'}"]
    for r in verdict.results:
        mark = "ok  " if r.passed else "FAIL"
        lines.append(
            f"  {mark} {r.objective.label}: observed {fmt_ms(r.observed)} ms, "
            f"bound {fmt_ms(r.bound)} ms, n={r.count} (needs {r.samples_needed})"
        )
    return lines


def render_verdicts(
    points: Sequence[SweepPoint],
    knees: Mapping[Any, Knee] | None = None,
    width: int = DEFAULT_WIDTH,
) -> list[str]:
    """One line per engine and test: what its levels came to (``FAIL`` when a level failed,
    ``inconclusive`` when one measured the client, ``pass``, or ``-`` without an SLO), the
    levels that failed, and the knee with its goodput."""
    lines: list[str] = []
    for (engine, test), sweep, knee in sweep_knees(points, knees):
        order = sorted(sweep, key=lambda p: p.level.value)
        outs = [level_outcome(p, knee).outcome for p in order]
        lines.extend(_wrap(_verdicts_text(engine, test, order, outs, knee), width))
    return lines


def _verdicts_text(
    engine: str, test: str, order: Sequence[SweepPoint], outs: Sequence[str], knee: Knee
) -> str:
    """One test's line: its word (``FAIL`` only when a level failed where it was asked to
    hold), then the levels counted by outcome as pytest counts tests."""
    judged = [o for o in outs if o in ("pass", "fail", "expected_miss")]
    word = (
        "FAIL"
        if "fail" in outs
        else "inconclusive"
        if "inconclusive" in outs or "cut" in outs
        else "pass"
        if judged
        else "-"
    )
    text = f"{word:<5} {engine} | {test}: "
    if not judged:
        return text + f"{len(order)} level{'s' if len(order) != 1 else ''}, no SLO judged"
    counts = [f"{outs.count('pass')}/{len(order)} levels passed"]
    for outcome in ("fail", "expected_miss", "cut", "inconclusive", "interrupted"):
        named = [p.level.label for p, o in zip(order, outs, strict=True) if o == outcome]
        if named:
            counts.append(f"{', '.join(named)} {OUTCOME_WORDS[outcome]}")
    text += "; ".join(counts)
    if knee.level is not None:
        text += f"; knee {knee.level.label}, {fmt_tok(knee.goodput_tok_s)} good tok/s"
    return text


def render_summary(
    results: Results, width: int = DEFAULT_WIDTH, *, detail: bool = True
) -> list[str]:
    """Everything the terminal summary shows of ``results``, most telling first: a verdict
    line per engine and test, the Pareto tables of the tests run on more than one engine,
    then each engine's sweep tables (with the capacity of a test that searched it).
    ``detail``: the lines under each level follow its table (``level_lines``), and a line
    says what a signal line's "client +N ms" is when one shows it; without, a line says
    how many lines ``-v`` adds."""
    pts = list(results.points)
    knees = results.test_knees()
    capacities = results.capacities
    by_engine: dict[str, list[SweepPoint]] = {}
    for p in pts:
        by_engine.setdefault(p.engine, []).append(p)
    lines = render_verdicts(pts, knees, width)
    pareto = render_pareto(by_engine, knees, width)
    if pareto:
        lines.extend(["", *pareto])
    for engine, mine in by_engine.items():
        lines.append("")
        lines.extend(render_sweep(engine, mine, knees, width, capacities, detail=detail))
        entry = results.engines.get(engine)
        cold = cold_start_line(engine, entry.cold_start if entry is not None else None)
        if cold:
            lines.extend(_wrap(cold, width))
    if detail and any(has_client_delta(p) for p in pts):
        lines.extend(["", CLIENT_LEGEND])
    hidden = 0 if detail else sum(len(level_lines(p)) - len(request_failure_lines(p)) for p in pts)
    if hidden:
        plural = "s" if hidden != 1 else ""
        text = (
            f"({hidden} line{plural} of per-level detail: signals, traffic, notes; -v shows them)"
        )
        lines.extend(["", text])
    return lines


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 3, 0)] + "..."


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=width, subsequent_indent="    ") or [""]
