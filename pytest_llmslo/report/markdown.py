"""Markdown summaries for pull requests and CI step summaries (GitHub
``$GITHUB_STEP_SUMMARY``): pure renderers that return one string.

- ``render_report(results)``: a session's ``document.Results``, sized for a pull request.
  Its first lines say what a reviewer needs: the heading with the testbed (model,
  precision, hardware), the overall verdict (how many levels met their SLO, and which
  failed), one table with every sweep's levels, knee and outcome, and, per test run on
  more than one engine, the Pareto table across engines. Everything else is folded in
  ``<details>`` blocks: per sweep, the table of the terminal summary with the knee row in
  bold and marked, what the test ran (workload, SLO, the warm-up each level really ran,
  requests), the knee sentence, the engine's signals and the capacity search with its
  probes; then the run's constants.
- ``render_comparison(result)``: a ``regression.DocumentComparison`` as a heading with the
  outcome, the differing constants when the runs are not comparable, otherwise one table
  per compared point (metric, baseline, new, delta, delta %, tolerance, status) with the
  regressions in bold and the noise judgements under it.

No absolute path is shown (``report.paths``): a path near the results file is shown
relative to its directory, any other by its file name. Numbers use the terminal report's
formatting (``report.terminal.fmt_*``); cell text is escaped so that a ``|`` in a test id
cannot break a table.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_llmslo.answered import quality_failed
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document.results import EngineEntry, Results, Sweep
from pytest_llmslo.judged import (
    OUTCOME_WORDS,
    OUTCOMES,
    RED_OUTCOMES,
    THIN_LEGEND,
    THIN_MARK,
    fmt_judged,
    judged_stat,
    knee_miss_text,
    level_outcome,
    weight_notes,
)
from pytest_llmslo.report.coldstarttext import cold_start_table
from pytest_llmslo.report.faulttext import fault_lines
from pytest_llmslo.report.mdcompare import render_comparison
from pytest_llmslo.report.mdtable import escape_cell, table
from pytest_llmslo.report.paths import relative_paths
from pytest_llmslo.report.scaleuptext import scale_up_text
from pytest_llmslo.report.signaltext import (
    SIGNAL_COLUMNS,
    has_signals,
    signal_cells,
    signal_lines,
)
from pytest_llmslo.report.svg import frontier_points
from pytest_llmslo.report.terminal import (
    fmt_pct,
    fmt_tok,
    sweep_row_cells,
    traffic_lines,
)
from pytest_llmslo.report.testbed import describe
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    find_knee,
    group_sweeps,
    knee_points,
    level_order,
    point_attainment,
    point_goodput,
    point_status,
    unjudged,
)

__all__ = [
    "escape_cell",
    "render_comparison",
    "render_constants",
    "render_pareto",
    "render_report",
    "render_sweeps",
    "render_verdict",
    "table",
    "warmup_text",
]

_SWEEP_HEADERS = (
    "",
    "load",
    "n",
    "TTFT p50 (ms)",
    "TTFT p99 (ms)",
    "ITL p50 (ms)",
    "TPOT p50 (ms)",
    "out tok/s",
    "good tok/s",
    "attainment",
    "verdict",
)
_RIGHT = {1, 2, 3, 4, 5, 6, 7, 8, 9}
KNEE_MARK = "◆"


def _constants_items(constants: Mapping[str, Any]) -> list[tuple[str, str]]:
    def show(v: Any) -> str:
        if isinstance(v, Mapping):
            return ", ".join(f"{k}={show(x)}" for k, x in v.items() if x not in (None, "", {}))
        if isinstance(v, (list, tuple)):
            return ", ".join(
                str(x.get("label", x)) if isinstance(x, Mapping) else str(x) for x in v
            )
        return str(v)

    keys: tuple[str, ...] = ("model", "precision", "hardware", "client", "workload", "isl", "osl")
    keys += ("slo",)
    keys += ("warmup",)
    keys += ("requests", "endpoint", "engine_versions")
    return [(k, show(constants[k])) for k in keys if constants.get(k) not in (None, "", [], {})]


#: Constants a test sets for itself: shown per sweep, not in the session's list.
_TEST_KEYS = ("workload", "isl", "osl", "slo", "warmup", "requests", "endpoint")


def render_constants(constants: Mapping[str, Any]) -> list[str]:
    """The pinned constants as a bullet list (without the per-test ones when the document
    has per-test constants: each sweep shows its own)."""
    items = _constants_items(constants)
    if constants.get("tests"):
        items = [(k, v) for k, v in items if k not in _TEST_KEYS]
    return [f"- **{k}**: {escape_cell(v)}" for k, v in items]


def _test_line(test: Mapping[str, Any] | None, points: Sequence[SweepPoint]) -> str | None:
    """One line of what a test ran: its workload, SLO, warm-up and requests per level
    (``test``: its constants; without them, what its points say)."""
    test = test or {}
    wl = test.get("workload") or {}
    parts = []
    if wl.get("path"):
        parts.append(f"workload {wl.get('kind')}: {wl.get('path')}")
    elif wl or test.get("isl") is not None:
        text = f"ISL {wl.get('isl', test.get('isl'))} / OSL {wl.get('osl', test.get('osl'))}"
        dist = wl.get("distribution")
        if dist and dist != "fixed":
            text += f" ({dist}, ±{wl.get('isl_stddev', 0):g} / ±{wl.get('osl_stddev', 0):g})"
        if wl.get("num_prefixes"):
            text += f", {wl['num_prefixes']} shared prefixes of {wl.get('prefix_len')} tokens"
        parts.append(f"workload {text}")
    slo = [str(o.get("label", o)) if isinstance(o, Mapping) else str(o)
           for o in test.get("slo") or ()]  # fmt: skip
    if not slo:
        for p in points:
            if p.verdict is not None and p.verdict.results:
                slo = [r.objective.label for r in p.verdict.results]
                break
    if slo:
        parts.append("SLO " + ", ".join(slo))
    warm = warmup_text(points, test.get("warmup"))
    if warm:
        parts.append(warm)
    if test.get("requests") is not None:
        parts.append(f"{test['requests']} requests per level")
    if test.get("duration_s"):
        parts.append(f"{test['duration_s']:g} s per level")
    return "_" + escape_cell("; ".join(parts)) + "_" if parts else None


def warmup_text(points: Sequence[SweepPoint], setting: Any = None) -> str | None:
    """The warm-up the levels of ``points`` really ran, from each point's summary:
    ``warm-up 4``, or with levels that differ (a closed loop warms up with one wave at
    least) their range and each level's: ``warm-up 16-48 (c16 16, c32 32, c48 48)``. A
    document that did not record it has it worked out from the ``setting`` as the session
    raises it (``settings.TestSettings.warmup_for``)."""
    try:
        ordered = [points[i] for i in level_order(points)]
    except ValueError:  # mixed load modes: as measured
        ordered = list(points)
    ran: dict[str, int] = {}
    for p in ordered:
        n = p.summary.warmup_requests
        if n is None and isinstance(setting, int) and not isinstance(setting, bool):
            closed = setting > 0 and p.level.mode == "concurrency"
            n = max(setting, math.ceil(p.level.value)) if closed else setting
        if n is not None:
            ran[p.level.label] = n
    counts = sorted(set(ran.values()))
    if not counts:
        return None
    if len(counts) == 1:
        return f"warm-up {counts[0]}"
    each = ", ".join(f"{label} {n}" for label, n in ran.items())
    return f"warm-up {counts[0]}-{counts[-1]} ({each})"


def _level_notes(p: SweepPoint) -> list[str]:
    """What a level's table row cannot say: why it was inconclusive, its notes, and why
    it missed its SLO (the verdict's attribution)."""
    label = p.level.label
    out = []
    if point_status(p) == "invalid":
        outcome = level_outcome(p)
        out.append(f"{label}: {outcome.word}: {outcome.reason}")
    out += [f"{label}: {note}" for note in weight_notes(p)]
    out += [f"{label}: {note}" for note in p.notes]
    scale = scale_up_text(p.scale_up)
    if scale:
        out.append(f"{label}: {scale}")
    out += [f"{label}: {line}" for line in fault_lines(p.faults)]
    out += [f"{label}: why: {why}" for why in (p.verdict.attribution if p.verdict else ())]
    return out


def _html(text: object) -> str:
    """Text for an HTML element (a ``<summary>``), where Markdown is not rendered."""
    return html.escape(str(text), quote=False)


def _verdict(p: SweepPoint, knee: Knee) -> str:
    out = level_outcome(p, knee)
    if out.outcome == "no_slo":
        return "-"
    if out.outcome in ("fail", "expected_miss"):
        failed = [r.objective.label for r in p.verdict.results if not r.passed] if p.verdict else []
        failed += quality_failed(p)
        word = "**FAIL**" if out.red else out.word
        return word + " " + ", ".join(failed) if failed else word
    return out.word


def _knee_sentence(knee: Knee, others: Sequence[str] = ()) -> str:
    """The knee in a sentence; ``others``: the sweep's levels that were not judged
    (``sweep.unjudged``)."""
    if knee.level is None:
        return f"Knee: none ({knee.note})" if knee.note else "Knee: none"
    text = f"{KNEE_MARK} Knee: **{knee.level.label}**, goodput {fmt_tok(knee.goodput_tok_s)} tok/s"
    if knee.status == "all_passed" and others:
        text += f" (every judged level passed; not judged: {', '.join(others)})"
    elif knee.status == "all_passed":
        text += " (every level passed: capacity may be higher)"
    elif knee.first_failure is not None:
        text += f" ({knee_miss_text(knee)})"
    if knee.saturation_level is not None:
        text += f"; saturation at {knee.saturation_level.label}"
    return text


def _capacity_sentence(capacity: CapacityResult) -> str:
    text = capacity.describe()
    head, _, rest = text.partition(":")
    text = f"{head.capitalize()}:{rest}"
    if capacity.capacity is not None:
        label = capacity.capacity.label
        text = text.replace(f": {label}", f": **{label}**", 1)
    if capacity.history:
        text += f". Probes: {capacity.probes_text()}"
    return escape_cell(text)


def render_sweeps(
    points: Sequence[SweepPoint],
    knees: Mapping[Any, Knee] | None = None,
    capacities: Mapping[tuple[str, str], CapacityResult] | None = None,
    tests: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[str]:
    """Per engine and test (and load mode), the sweep table with the knee row marked, and
    the capacity of a test that searched it (``capacities`` keyed by ``(engine, test)``).
    ``tests`` (the document's per-test constants) adds what each test ran."""
    lines: list[str] = []
    for (engine, test), sweep in group_sweeps(points).items():
        by_mode: dict[str, list[SweepPoint]] = {}
        for p in sweep:
            by_mode.setdefault(p.level.mode, []).append(p)
        for mode, pts in by_mode.items():
            knee = (knees or {}).get((engine, test)) if len(by_mode) == 1 else None
            knee = knee or find_knee(pts)
            rows = []
            signals = any(has_signals(p) for p in pts)
            for i in level_order(pts):  # a level measured twice shows its last point
                p = pts[i]
                at_knee = knee.level is not None and p.level == knee.level
                cells = sweep_row_cells(p) + (signal_cells(p) if signals else [])
                if at_knee:
                    cells = [f"**{c}**" for c in cells]
                mark = KNEE_MARK if at_knee else "!" if point_status(p) == "invalid" else ""
                rows.append([mark, *cells, _verdict(p, knee)])
            if lines:
                lines.append("")
            where = f"<b>{_html(engine)}</b> · <code>{_html(test)}</code> · {mode} sweep"
            knee_at = f"knee {knee.level.label}" if knee.level is not None else "no knee"
            lines.extend([f"<details><summary>{where} · {knee_at}</summary>", ""])
            ran = _test_line((tests or {}).get(test), pts)
            if ran:
                lines.extend([ran, ""])
            if signals:
                extra = tuple(
                    f"{h} (ms)" if h.startswith("queue") else h for h, _ in SIGNAL_COLUMNS
                )
                heads = (*_SWEEP_HEADERS[:-1], *extra, _SWEEP_HEADERS[-1])
                right = set(range(1, len(heads) - 1))
                lines.extend(table(heads, rows, right))
            else:
                lines.extend(table(_SWEEP_HEADERS, rows, _RIGHT))
            if any(THIN_MARK in c for r in rows for c in r):
                lines.extend(["", THIN_LEGEND])
            lines.append("")
            lines.append(_knee_sentence(knee, unjudged(pts)))
            traffic = [
                "- " + escape_cell(text.strip())
                for i in level_order(pts)
                for text in traffic_lines(pts[i]) + signal_lines(pts[i]) + _level_notes(pts[i])
            ]
            if traffic:
                lines.extend(["", *traffic])
            capacity = (capacities or {}).get((engine, test))
            if capacity is not None and capacity.mode == mode:
                lines.append("")
                lines.append(_capacity_sentence(capacity))
            if any(point_status(p) == "invalid" for p in pts):
                lines.append("")
                lines.append(
                    "! inconclusive: nothing shown about the engine, for the reason in the "
                    "level's note (excluded from knee and Pareto)"
                )
            lines.extend(["", "</details>"])
    return lines


def render_pareto(
    points: Sequence[SweepPoint],
    knees: Mapping[Any, Knee] | None = None,
    setups: Mapping[str, str] | None = None,
) -> list[str]:
    """Per test run on more than one engine, the engines at their knees with the Pareto
    frontier (output tok/s up, TTFT P99 down) marked, and how many of all points are on
    it: the columns of the published engine comparisons (throughput, TTFT P50/P99, ITL
    P50, goodput). Only a valid point that met its SLO can be on a frontier
    (``svg.frontier_points``). ``setups`` describes each engine in a column of its own (for
    the sim: what it simulates)."""
    by_test: dict[str, list[SweepPoint]] = {}
    for p in points:
        by_test.setdefault(p.test, []).append(p)
    lines: list[str] = []
    for test, pts in by_test.items():
        if len({p.engine for p in pts}) < 2:
            continue  # one engine is compared with nothing
        at_knee = knee_points(pts, knees)
        on_front = {id(p) for p in frontier_points(at_knee)}
        front = [id(p) in on_front for p in at_knee]
        rows = []
        order = sorted(range(len(at_knee)), key=lambda i: -(at_knee[i].summary.output_tok_s or 0))
        for i in order:
            p = at_knee[i]
            row = [p.engine]
            if setups:
                row.append(setups.get(p.engine, ""))
            row += [
                p.level.label,
                fmt_tok(p.summary.output_tok_s),
                fmt_judged(judged_stat(p, "ttft", 50)),
                fmt_judged(judged_stat(p, "ttft", 99)),
                fmt_judged(judged_stat(p, "itl", 50)),
                fmt_tok(point_goodput(p)),
                fmt_pct(point_attainment(p)),
                "yes" if front[i] else "",
            ]
            rows.append(row)
        if lines:
            lines.append("")
        lines.append(f"### Pareto · `{escape_cell(test)}`")
        lines.append("")
        if rows:
            head = ["engine", *(["setup"] if setups else []), "knee", "out tok/s",
                    "TTFT p50 (ms)", "TTFT p99 (ms)", "ITL p50 (ms)", "good tok/s",
                    "good requests", "frontier"]  # fmt: skip
            first = 3 if setups else 2
            lines.extend(table(head, rows, set(range(first, first + 6))))
        else:
            lines.append("No engine has a knee for this test.")
        frontier = frontier_points(pts)
        eligible = sum(1 for p in pts if point_status(p) in ("pass", "unchecked"))
        lines.append("")
        names = ", ".join(f"{p.engine} {p.level.label}" for p in frontier) or "none"
        lines.append(
            f"Over all points: {len(frontier)} of the {eligible} that met the SLO are on "
            f"the frontier: {names}"
        )
    return lines


def _setups(engines: Mapping[str, EngineEntry]) -> dict[str, str]:
    """A short description of each engine that has one: a sim engine's simulated setup
    (engine, deployment, and the hardware and precision when the engines' differ: the
    heading names them otherwise); empty when none has."""
    sims = {
        name: entry.metadata["simulated"]
        for name, entry in engines.items()
        if isinstance(entry.metadata.get("simulated"), Mapping)
        and entry.metadata["simulated"].get("hardware")
    }
    shared = len({(s.get("hardware"), s.get("precision")) for s in sims.values()}) == 1
    out: dict[str, str] = {}
    for name, sim in sims.items():
        words = [] if shared else [f"{sim.get('hardware')} {sim.get('precision', '')}".strip()]
        words += [f"{sim.get('engine', '')}-like", str(sim.get("deployment", ""))]
        out[name] = ", ".join(w for w in words if w and w != "-like")
    return out


def _outcomes(points: Sequence[SweepPoint], knee: Knee) -> dict[str, list[SweepPoint]]:
    """The levels of ``points`` by outcome (``judged.level_outcome``), each level once
    (its last point), in level order."""
    out: dict[str, list[SweepPoint]] = {}
    for i in level_order(points):
        out.setdefault(level_outcome(points[i], knee).outcome, []).append(points[i])
    return out


def _outcome_cell(points: Sequence[SweepPoint], knee: Knee) -> str:
    by = _outcomes(points, knee)
    parts = []
    for outcome in OUTCOMES:
        pts = by.get(outcome, [])
        if not pts:
            continue
        text = f"{len(pts)} {OUTCOME_WORDS[outcome]}"
        if outcome != "pass":
            text += " (" + ", ".join(p.level.label for p in pts) + ")"
        parts.append(f"**{text}**" if outcome in RED_OUTCOMES else text)
    return ", ".join(parts)


def _knee_cell(knee: Knee, points: Sequence[SweepPoint]) -> str:
    if knee.level is None:
        return {"none_passed": "none: no level passed", "unchecked": "- (no SLO)"}.get(
            knee.status, "none"
        )
    text = f"{KNEE_MARK} **{knee.level.label}**"
    if knee.status == "all_passed":
        text += " (every judged level passed)" if unjudged(points) else " (every level passed)"
    return text


def render_verdict(results: Results) -> list[str]:
    """The overall verdict in one line, then one row per sweep: its levels, its knee with
    the goodput there, and how its levels came out."""
    sweeps: list[Sweep] = results.sweeps()
    outs = [
        level_outcome(s.points[i], s.knee).outcome for s in sweeps for i in level_order(s.points)
    ]
    count: dict[str, int] = {o: outs.count(o) for o in OUTCOMES}
    judged = count["pass"] + count["fail"] + count["expected_miss"]
    if count["fail"]:
        icon = "❌"
    elif count["inconclusive"] or count["cut"] or count["interrupted"]:
        icon = "⚠️"
    elif judged:
        icon = "✅"
    else:
        icon = "➖"
    if judged:
        text = f"{count['pass']} of {judged} judged levels met their SLO"
    else:
        text = f"no level was judged against an SLO ({len(outs)} measured)"
    for outcome, words in (
        ("fail", "failed"),
        ("expected_miss", "missed above their sweep's knee, as expected"),
        ("cut", "cut by the level's time bound (inconclusive)"),
        ("inconclusive", "inconclusive (nothing shown about the engine)"),
        ("interrupted", "interrupted"),
    ):
        if count[outcome]:
            text += f", {count[outcome]} {words}"
    if count["no_slo"] and judged:
        text += f", {count['no_slo']} without an SLO"
    no_knee = [
        s
        for s in sweeps
        if s.knee.status == "none_passed"
        and not any(level_outcome(p, s.knee).outcome == "pass" for p in s.points)
    ]
    if no_knee:
        names = ", ".join(f"{s.engine} `{escape_cell(s.test)}`" for s in no_knee)
        text += f"; no level passed on {names}"
    lines = [f"**Verdict: {icon} {text}.**", ""]
    rows = []
    for s in sweeps:
        at = s.knee_point()
        good = None if at is None else point_goodput(results.points[at])
        ordered = [s.points[i].level.label for i in level_order(s.points)]
        rows.append([
            s.engine, f"`{s.test}`", s.mode, " ".join(ordered), _knee_cell(s.knee, s.points),
            fmt_tok(good) if good is not None else "-", _outcome_cell(s.points, s.knee),
        ])  # fmt: skip
    head = ("engine", "test", "load", "levels", "knee", "good tok/s at knee", "levels' outcome")
    lines.extend(table(head, rows, {5}))
    return lines


def _details(summary: str, body: Sequence[str]) -> list[str]:
    """``body`` folded under ``summary`` (HTML: Markdown is not rendered in a summary);
    the blank lines let GitHub render the Markdown inside."""
    return [f"<details><summary>{summary}</summary>", "", *body, "", "</details>"]


def render_report(results: Results, *, title: str | None = None) -> str:
    """A session's results as Markdown for a pull request: the heading and testbed, the
    verdict, every sweep's knee and the Pareto tables first; the sweep tables and the
    run's constants folded (see the module docstring)."""
    points = results.points
    knees = results.test_knees()
    constants = results.constants
    harness = results.harness
    lines = [f"## {escape_cell(title or 'pytest-llmslo sweep')}", ""]
    meta = f"{harness.get('name', 'pytest-llmslo')} {harness.get('version', '')}".strip()
    for extra in (results.created_utc, describe(results)):
        if extra:
            meta += f" · {extra}"
    lines.append(f"_{escape_cell(meta)}_")
    if not results.complete:
        lines.append("")
        lines.append("> **Partial results**: the session was interrupted.")
    lines.append("")
    if not points:
        lines.append("No load level was measured.")
    else:
        lines.extend(render_verdict(results))
        pareto = render_pareto(points, knees, _setups(results.engines))
        if pareto:
            lines.extend(["", *pareto])
        lines.append("")
        sweeps = render_sweeps(points, knees, results.capacities, constants.get("tests"))
        lines.extend(sweeps)
        cold = cold_start_table(results.engines)
        if cold:
            lines.extend(["", *cold])
    engines = results.engines
    versions = [f"{name} {entry.version}" for name, entry in engines.items() if entry.version]
    about = [f"Engines: {escape_cell(', '.join(versions))}", ""] if versions else []
    about += render_constants(constants)
    if about:
        lines.append("")
        lines.extend(_details("Run constants", about))
    text = "\n".join(lines).rstrip() + "\n"
    base = os.path.dirname(os.path.abspath(results.source)) if results.source else None
    return relative_paths(text, base)
