"""What a session says of its tests: the plan of each test before it runs
(``tests_overview``), a test's own lines (``summary_lines_of_test``) and the closing report
of the session (``summary_report``)."""

from __future__ import annotations

from pytest_llmslo import settings as S
from pytest_llmslo.catalog import METRICS
from pytest_llmslo.document import EngineEntry, Results
from pytest_llmslo.redact import redact

from .engines import engines_text
from .state import Session, TestContext
from .writers import json_path

__all__ = ["summary_lines_of_test", "summary_report", "tests_overview"]


def summary_lines_of_test(state: Session, ctx: TestContext) -> list[str]:
    """The lines of test ``ctx``'s own report section: each level it measured with its
    numbers, notes and verdict, then its notes and its comparison with the baseline."""
    from pytest_llmslo.report import terminal

    lines: list[str] = []
    for idx in ctx.point_keys:
        p = state.points[idx]
        s = p.summary
        lines.append(
            f"{ctx.engine} {ctx.test} {p.level.label}: {s.completed}/{s.requests} completed, "
            f"{s.failed} failed, {s.output_tok_s:.1f} out tok/s, "
            f"goodput {_fmt(s.goodput_tok_s)} tok/s, attainment {_fmt_pct(s.attainment)}"
        )
        for name in METRICS:
            d = s.distributions.get(name)
            if d is None or not d.count:
                continue
            lines.append(
                f"  {name}: p50 {_fmt(d.p(50))} ms, p99 {_fmt(d.p(99))} ms "
                f"(upper bound {_fmt(d.ub(99))} ms at {d.confidence:.0%}), n={d.count}"
            )
        for e in s.errors:
            lines.append(f"  error {e}")
        if not s.valid:
            lines.append("  INVALID (client-limited): " + "; ".join(s.invalid_reasons))
        lines.extend(f"  note: {n}" for n in p.notes)
        if p.verdict is not None:
            lines.extend("  " + ln for ln in terminal.render_verdict(p.verdict))
    lines.extend(ctx.notes)
    if ctx.comparison is not None:
        lines.extend(str(ctx.comparison.format()).splitlines())
    return [redact(line) for line in lines]


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _fmt_pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def tests_overview(state: Session, limit: int = 20) -> list[str]:
    """One line per SLO test: the engines and levels it will really run (its marker's,
    with the command line's overrides) and its workload."""
    tests: dict[str, tuple[list[str], list[str], S.TestSettings]] = {}
    for ctx in state.contexts.values():
        engines, levels, _ = tests.setdefault(ctx.test, ([], [], ctx.settings))
        if ctx.engine is not None and ctx.engine not in engines:
            engines.append(ctx.engine)
        label = "capacity search" if ctx.capacity else ctx.level.label
        if label not in levels:
            levels.append(label)
    lines = [
        f"llmslo: {test}: {engines_text(state, engines) or 'no engine'} x {','.join(levels)}; "
        + S.describe_workload(ts)
        for test, (engines, levels, ts) in tests.items()
    ]
    if len(lines) > limit:
        lines = [*lines[:limit], f"llmslo: ... and {len(lines) - limit} more SLO tests"]
    return lines


#: The closing line of a session that measured levels but judged none against an SLO: its
#: tests passed on the error gate alone, which is easy to mistake for meeting an SLO.
NO_SLO_NOTE = (
    "no SLO was asserted: the levels were measured and judged by their error rate alone. "
    "Add objectives with --slo 'ttft_p99<500,itl_p50<30' (or the ini key llmslo_slo, or "
    "assert_goodput(ttft_p99 < 500, itl_p50 < 30) in the test)."
)


def _asserted_no_slo(state: Session) -> bool:
    """Whether the session measured levels, judged some, and none against an objective,
    none being configured either (an inconclusive level was judged by nothing at all)."""
    judged = [p for p in state.points if p.outcome != "inconclusive"]
    return (
        bool(judged)
        and not any(p.verdict and p.verdict.results for p in state.points)
        and not any(ctx.settings.objectives for ctx in state.contexts.values())
    )


def summary_report(state: Session, width: int, *, detail: bool = True) -> list[tuple[str, str]]:
    """The session's closing report as ``(kind, text)``: kind ``=`` or ``-`` is a section
    heading, ``line`` a line, ``error`` a line to show in red (a lost result). The verdicts,
    the Pareto summaries and the sweep tables with their knees (``detail``: with the lines
    under each level, ``terminal.render_summary``), the comparison with the baseline, the
    notes, and where the results went."""
    from pytest_llmslo.report import terminal

    if not (state.points or state.notes or state.mismatches or state.write_errors):
        return []
    out: list[tuple[str, str]] = [("=", "llmslo: SLO sweeps")]
    if state.points:
        try:
            engines = {n: EngineEntry.of(m) for n, m in state.roster.meta.items()}
            results = Results(
                tuple(state.points), capacities=state.book.capacities, engines=engines
            )
            lines = terminal.render_summary(results, width=width, detail=detail)
        except Exception as exc:  # a renderer bug must not hide the test results
            lines = [f"(could not render the sweep tables: {exc!r})"]
        out.extend(("line", ln) for ln in lines)
    if state.comparisons or state.mismatches:
        out.append(("-", f"llmslo: comparison with baseline {state.baseline_source}"))
        for key, comp in state.comparisons:
            status = "REGRESSED" if comp.regressed else "improved" if comp.improved else "ok"
            out.append(("line", f"{key}: {status}"))
            out.extend(("line", "  " + ln) for ln in str(comp.format()).splitlines())
        out.extend(("line", ln) for ln in state.mismatches)
    out.extend(("line", f"llmslo: {note}") for note in state.notes)
    if _asserted_no_slo(state):
        out.append(("line", f"llmslo: {NO_SLO_NOTE}"))
    out.extend(("error", f"llmslo: {err}") for err in state.write_errors)
    path = json_path(state)
    if path is not None and path.exists() and not state.write_errors:
        out.append(("line", f"llmslo: results written to {path}"))
    return [(kind, redact(text)) for kind, text in out]
