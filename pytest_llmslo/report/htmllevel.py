"""One level of the HTML report, folded under its row (``<details>``): its objectives with
what was observed and the bound at the confidence asked, why an objective was missed (the
attribution by the engine's own signals), the problems, the engine's signals, failures,
notes and traffic, and the distributions of TTFT and ITL from the per-request samples the
results hold, with the level's per-second series over its measured window
(``metrics.timeseries``): TTFT P50 and P99 by the second the first token arrived, ITL P50,
output tokens/s, completions and errors, requests in flight. A level with faults (the
``fault`` setting) lists each with what it cost (``report.faulttext``) and marks on every
per-second chart when it was done and when the level recovered, with the goodput the
recovery is judged on (``faults.faultcost``) beside the output tokens/s.

Results written before the samples held each request's times have no per-second series:
their level shows the values per request in the order sent instead, and says why. A level
without samples says that instead of its charts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from pytest_llmslo.judged import LevelOutcome
from pytest_llmslo.metrics.timeseries import SecondSeries, per_second
from pytest_llmslo.report.faulttext import fault_lines
from pytest_llmslo.report.htmlcells import badge, bounds, cell, lines, point_value
from pytest_llmslo.report.htmlcharts import (
    PALETTE,
    Mark,
    Series,
    Threshold,
    histogram,
    sequence_chart,
    xy_chart,
)
from pytest_llmslo.report.signaltext import signal_bits
from pytest_llmslo.report.terminal import failure_lines, traffic_lines
from pytest_llmslo.sweep import SweepPoint, finite_or_none

__all__ = ["level_details"]


def _verdict_table(p: SweepPoint) -> str:
    if p.verdict is None or not p.verdict.results:
        return '<p class="sub">No objective was asserted at this level.</p>'
    rows = []
    for r in p.verdict.results:
        observed = finite_or_none(r.observed)
        bound = finite_or_none(r.bound)
        rows.append(
            f"<tr><td>{escape(r.objective.label)}</td>{cell(observed, 2)}{cell(bound, 2)}"
            f"<td>{r.count}</td><td>{badge('pass' if r.passed else 'fail')}</td></tr>"
        )
    return (
        '<table class="objectives"><tr><th>objective</th><th>observed</th>'
        f"<th>bound (confidence)</th><th>samples</th><th>outcome</th></tr>{''.join(rows)}</table>"
    )


def _signals(p: SweepPoint) -> str:
    s = p.summary.signals
    if not s:
        return '<p class="sub">No engine signals were read at this level.</p>'
    kinds = s.get("engines")
    head = "Engine signals"
    if isinstance(kinds, Mapping | list | tuple) and kinds:
        head += " (" + ", ".join(str(k) for k in kinds) + " /metrics)"
    bits = signal_bits(s)
    note = s.get("note")
    out = f"<h4>{escape(head)}</h4>" + lines([*bits, *([str(note)] if note else [])], "signals")
    if s.get("client_minus_engine_ttft_p99_ms") is not None:
        out += (
            '<p class="sub">“client ±N ms”: the client’s TTFT P99 minus the engine’s own: '
            "the network, the client and the API server in front of the engine.</p>"
        )
    return out


def _near(slo: Sequence[Threshold], values: Sequence[float]) -> list[Threshold]:
    """The bounds worth drawing on a level's chart: those within twice its largest value
    (a bound far above squeezes the distribution into a corner; it is named instead)."""
    top = max(values, default=0.0)
    return [t for t in slo if t.value <= 2.0 * top]


def _line(
    label: str, values: Sequence[float | None], colour: str, unit: str, *, dashed: bool = False
) -> Series:
    marks = tuple(
        Mark(float(t), float(v), tip=f"{label}, second {t}: {v:,.4g}{unit}")
        for t, v in enumerate(values)
        if v is not None
    )
    return Series(label, colour, marks, dashed=dashed)


def _fault_marks(faults: Sequence[Mapping[str, Any]] | None) -> list[Threshold]:
    """Each fault done (its second in the window) and the second its level recovered, as
    lines across the per-second charts."""
    out: list[Threshold] = []
    for f in faults or ():
        if not isinstance(f, Mapping) or not isinstance(f.get("asked_s"), int | float):
            continue
        name = str(f.get("label") or (f.get("asked") or {}).get("kind", "fault")).split(" ")[0]
        out.append(Threshold(float(f["asked_s"]), name, "x"))
        if isinstance(f.get("recovered_at_s"), int | float):
            out.append(Threshold(float(f["recovered_at_s"]), "recovered", "x"))
    return out


def _goodput(series: Mapping[str, Any] | None) -> list[float | None] | None:
    values = (series or {}).get("goodput_tok_s")
    if not isinstance(values, list | tuple):
        return None
    return [float(v) if isinstance(v, int | float) else None for v in values]


def _time_charts(
    ts: SecondSeries, objectives: Sequence[Any], lid: str, p: SweepPoint | None = None
) -> list[str]:
    """The level's per-second series: one chart each, with its faults marked."""
    x = "second of the measured window"
    ttft = [t for q in (99.0, 50.0) for t in bounds(objectives, "ttft", q)]
    marks = _fault_marks(p.faults if p is not None else None)
    tokens = [_line("output tok/s", ts.output_tok_s, PALETTE[2], " tok/s")]
    good = _goodput(p.series if p is not None else None)
    if good is not None:
        tokens.append(_line("goodput", good, PALETTE[2], " tok/s", dashed=True))
    charts = [
        xy_chart(
            f"{lid}-ttft-time",
            "TTFT P50 (solid) and P99 (dashed), by the second the first token came",
            x,
            "TTFT (ms)",
            [
                _line("TTFT P50", ts.ttft_p50_ms, PALETTE[0], " ms"),
                _line("TTFT P99", ts.ttft_p99_ms, PALETTE[0], " ms", dashed=True),
            ],
            thresholds=[*_near(ttft, [v for v in ts.ttft_p99_ms if v is not None]), *marks],
        ),
        xy_chart(
            f"{lid}-itl-time",
            "ITL P50 of the requests that ended in each second",
            x,
            "ITL (ms)",
            [_line("ITL P50", ts.itl_p50_ms, PALETTE[1], " ms")],
            thresholds=[
                *_near(
                    bounds(objectives, "itl", 50.0), [v for v in ts.itl_p50_ms if v is not None]
                ),
                *marks,
            ],
        ),
        xy_chart(
            f"{lid}-tokens-time",
            "Output tokens/s" + (" (solid) and goodput (dashed)" if good is not None else ""),
            x,
            "tokens/s",
            tokens,
            thresholds=marks,
        ),
        xy_chart(
            f"{lid}-done-time",
            "Completed (solid) and failed (dashed) requests per second",
            x,
            "requests",
            [
                _line("completed", ts.completed, PALETTE[3], ""),
                _line("failed", ts.errors, PALETTE[5], "", dashed=True),
            ],
            thresholds=marks,
        ),
        xy_chart(
            f"{lid}-flight-time",
            "Requests in flight (averaged over each second)",
            x,
            "requests",
            [_line("in flight", ts.in_flight, PALETTE[4], "")],
            thresholds=marks,
        ),
    ]
    return charts


def _level_charts(p: SweepPoint, objectives: Sequence[Any], lid: str) -> str:
    samples = p.samples or {}
    ts = per_second(samples)
    charts: list[str] = []
    far: list[str] = []
    for metric, label in (("ttft", "TTFT"), ("itl", "ITL")):
        values = samples.get(f"{metric}_ms")
        if values is None:
            continue
        finite = [v for v in values if v is not None]
        slo = [t for q in (99.0, 90.0, 50.0) for t in bounds(objectives, metric, q)]
        near = _near(slo, finite)
        far.extend(t.label for t in slo if t not in near)
        what = "mean token gap per request" if metric == "itl" else "per request"
        charts.append(
            histogram(
                f"{lid}-{metric}-hist",
                f"{label} distribution ({what})",
                f"{label} (ms)",
                finite,
                thresholds=[Threshold(t.value, t.label, "x") for t in near],
            )
        )
        if ts is None:
            charts.append(
                sequence_chart(
                    f"{lid}-{metric}-seq",
                    f"{label} per request, in the order sent",
                    f"{label} (ms)",
                    list(values),
                    thresholds=near,
                )
            )
    if not charts:
        return (
            '<p class="sub">The results hold no per-request samples of this level: no '
            "distribution can be drawn.</p>"
        )
    notes = []
    if ts is None:
        notes.append(
            "The results hold each request’s values but not when it was sent or answered: "
            "the series are per request in the order sent, and no per-second series "
            "(tokens/s, errors, requests in flight) can be drawn."
        )
    else:
        charts.extend(_time_charts(ts, objectives, lid, p))
    if far:
        notes.append("Far above every value, so not drawn: " + ", ".join(dict.fromkeys(far)) + ".")
    return (
        '<div class="charts small">'
        + "".join(f'<figure class="cell">{c}</figure>' for c in charts)
        + "</div>"
        + "".join(f'<p class="sub">{escape(n)}</p>' for n in notes)
    )


def level_details(
    p: SweepPoint,
    i: int,
    objectives: Sequence[Any],
    compared: str = "",
    outcome: LevelOutcome | None = None,
) -> str:
    """Level ``p`` (index ``i`` in the results) folded; ``compared``: its comparisons with
    other runs, as HTML; ``outcome``: the level as judged, whose reason heads its problems
    when it did not pass."""
    lid = f"p{i}"
    figures = []
    for label, key, digits in (("out tok/s", "output_tok_s", 1), ("TTFT P99", "ttft:99", 1)):
        v = point_value(p, key)
        if v is not None:
            shown = "∞" if v == float("inf") else f"{v:,.{digits}f}"
            figures.append(f"{label} {shown}")
    reasons = [*p.summary.invalid_reasons]
    if outcome is not None and outcome.outcome not in ("pass", "no_slo"):
        reasons.insert(0, f"{outcome.word}: {outcome.reason}")
    if p.verdict is not None:
        reasons.extend(p.verdict.problems)
    body = [
        _verdict_table(p),
        lines((f"why: {a}" for a in (p.verdict.attribution if p.verdict else ())), "why"),
        lines(reasons, "problems"),
        lines(fault_lines(p.faults), "faults"),
        _signals(p),
        lines([*(x for x in failure_lines(p) if ": why: " not in x), *traffic_lines(p)], "notes"),
        _level_charts(p, objectives, lid),
        compared,
    ]
    word = outcome.outcome if outcome else p.status
    return (
        f'<details class="level" id="{lid}" data-point="{i}"><summary>'
        f"<b>{escape(p.engine)}</b> {escape(p.level.label)} {badge(word)} "
        f'<span class="sub">{escape(" · ".join(figures))}</span></summary>'
        + "".join(body)
        + "</details>"
    )
