"""A level as judged, once, for every renderer: its outcome with the reason, and each
figure as the gate counted it.

Every output (terminal, Markdown, HTML table and charts, CSV, SVG, JUnit, JSON) prints what
this module returns for a level and never computes a latency of its own, so no two outputs
can disagree on one figure:

- ``judged_stat``: a statistic of a metric as the gate compares it: the verdict's observed
  value for an objective on it; else the statistic over every request, a failed one as
  +∞ (``RunSummary.with_failures``); else the distribution's. ``∞`` when failures decide
  it, never the survivors' figure beside a gate that failed on them.
- ``stat_count`` and ``too_few``: the samples behind the figure, and whether a tail
  percentile rests on fewer samples than it needs (P99 from fewer than 100), with
  ``weight_note`` saying how the gate judged it.
- ``level_outcome``: the level's outcome in the one vocabulary below, with its reason.

The outcomes (``OUTCOMES``) are the vocabulary of every report. A new reason for an
existing outcome (short outputs, a quality objective) belongs in ``level_outcome``'s
reason text; a new outcome is one more entry in ``OUTCOMES`` and ``OUTCOME_WORDS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pytest_llmslo.answered import asked_reason, quality_outcome, quality_text
from pytest_llmslo.catalog import parse_stat, stat_name
from pytest_llmslo.sweep import (
    Knee,
    SweepPoint,
    point_status,
    summary_stat,
)

if TYPE_CHECKING:
    from pytest_llmslo.slo import ObjectiveResult

__all__ = [
    "FIGURES",
    "OUTCOMES",
    "OUTCOME_WORDS",
    "RED_OUTCOMES",
    "THIN_LEGEND",
    "THIN_MARK",
    "LevelOutcome",
    "Outcome",
    "fmt_judged",
    "judged_cell",
    "judged_entry",
    "judged_result",
    "judged_stat",
    "knee_miss_text",
    "level_outcome",
    "plotted_stat",
    "samples_needed_for",
    "stat_count",
    "sweep_outcomes",
    "thin",
    "too_few",
    "weight_note",
    "weight_notes",
]

#: ``pass``: every objective held on a run the harness trusts. ``fail``: the engine missed
#: its SLO (the only outcome that blames it). ``expected_miss``: a level above the sweep's
#: knee that missed, as a sweep past its capacity must. ``inconclusive``: the client was the
#: bottleneck, nothing was shown about the engine. ``cut``: the harness's own time bound
#: ended the level (inconclusive, with the option to change). ``interrupted``: Ctrl-C or
#: SIGTERM stopped the level. ``no_slo``: no objective was judged.
Outcome = Literal["pass", "fail", "expected_miss", "inconclusive", "cut", "interrupted", "no_slo"]
OUTCOMES: tuple[Outcome, ...] = (
    "pass",
    "fail",
    "expected_miss",
    "inconclusive",
    "cut",
    "interrupted",
    "no_slo",
)
#: How the reports write each outcome.
OUTCOME_WORDS: dict[Outcome, str] = {
    "pass": "pass",
    "fail": "FAIL",
    "expected_miss": "expected miss",
    "inconclusive": "inconclusive",
    "cut": "cut",
    "interrupted": "interrupted",
    "no_slo": "no SLO",
}
#: The outcomes shown as a failure (red): the engine missed where it was asked to hold.
RED_OUTCOMES: frozenset[Outcome] = frozenset({"fail"})


@dataclass(frozen=True, slots=True)
class LevelOutcome:
    """What a level came to (``outcome``) and why, in one sentence (``reason``)."""

    outcome: Outcome
    reason: str

    @property
    def word(self) -> str:
        return OUTCOME_WORDS[self.outcome]

    @property
    def red(self) -> bool:
        return self.outcome in RED_OUTCOMES


def judged_result(point: SweepPoint, metric: str, stat: float | str) -> ObjectiveResult | None:
    """The verdict's result for the objective on ``metric``'s ``stat``, if one was judged."""
    if point.verdict is None:
        return None
    for r in point.verdict.results:
        if r.objective.metric == metric and _same(r.objective.stat, stat):
            return r
    return None


def judged_stat(point: SweepPoint, metric: str, stat: float | str) -> float | None:
    """``metric``'s ``stat`` (ms) at ``point`` as the gate counts it (see the module
    docstring); may be ±∞ (failed requests decide it); None when undefined."""
    r = judged_result(point, metric, stat)
    if r is not None and not math.isnan(r.observed):
        return float(r.observed)
    s = point.summary
    if stat != "mean":
        gated = (s.with_failures or {}).get(metric)
        if gated is not None and float(stat) in gated:
            v = float(gated[float(stat)])
            return None if math.isnan(v) else v
    return summary_stat(s, metric, stat)


def plotted_stat(point: SweepPoint, metric: str, stat: float | str) -> float | None:
    """``judged_stat`` where a chart can draw it: None when failures make it ∞ (a chart
    never draws such a level at the survivors' figure, inside a bound it missed)."""
    v = judged_stat(point, metric, stat)
    return None if v is None or math.isinf(v) else v


def stat_count(point: SweepPoint, metric: str, stat: float | str = "mean") -> int:
    """The samples behind ``judged_stat`` (requests, or token gaps for itl; failed
    requests counted as the gate counts them)."""
    r = judged_result(point, metric, stat)
    if r is not None:
        return r.count
    dist = point.summary.distributions.get(metric)
    count = 0 if dist is None else int(dist.count)
    if point.summary.with_failures and metric in point.summary.with_failures:
        count += point.summary.failed
    return count


def samples_needed_for(stat: float | str) -> int:
    """The fewest samples that put a ``stat`` percentile above the largest sample (P99:
    100, P90: 10); 1 for a mean."""
    if stat == "mean" or float(stat) <= 50.0:
        return 1
    return math.ceil(100.0 / (100.0 - float(stat)) - 1e-9)


def too_few(count: int, stat: float | str) -> bool:
    """Whether ``count`` samples are fewer than the ``stat`` percentile needs: a P99 from
    24 requests is the largest of them, not a P99."""
    return count < samples_needed_for(stat)


#: The mark a table puts on a tail percentile from fewer samples than it needs, and the
#: legend under a table that shows one.
THIN_MARK = "†"
THIN_LEGEND = (
    f"{THIN_MARK} from fewer samples than the percentile needs (a P99 needs 100, a P90 10): "
    "the largest sample, not a percentile; the note under the level says how the gate "
    "judged it"
)


def thin(point: SweepPoint, metric: str, stat: float | str) -> bool:
    """Whether ``metric``'s ``stat`` at ``point`` rests on fewer samples than it needs
    (and on at least one): the figure a table marks with ``THIN_MARK``."""
    count = stat_count(point, metric, stat)
    return bool(count) and too_few(count, stat)


def judged_cell(point: SweepPoint, metric: str, stat: float | str, digits: int = 1) -> str:
    """``judged_stat`` as a table cell (``fmt_judged``), with ``THIN_MARK`` when it rests
    on fewer samples than its percentile needs."""
    text = fmt_judged(judged_stat(point, metric, stat), digits)
    return text + THIN_MARK if text != "-" and thin(point, metric, stat) else text


def weight_note(point: SweepPoint, metric: str, stat: float | str) -> str | None:
    """A sentence when the figure rests on too few samples for its percentile, with how the
    gate judged it; None when it does not."""
    count = stat_count(point, metric, stat)
    if not count or not too_few(count, stat):
        return None
    short = stat_name(parse_stat(stat))
    need = samples_needed_for(stat)
    text = f"{metric}_{short} from {count} samples (a {short.upper()} needs {need})"
    r = judged_result(point, metric, stat)
    if r is None:
        return text + ": not judged"
    if r.gated_on == "bound":
        how = "judged on its confidence bound" if r.bound is not None else "no bound: failed"
    else:
        how = "judged on the point estimate, which is the largest sample here"
    return f"{text}: {how}"


def weight_notes(point: SweepPoint) -> list[str]:
    """``weight_note`` of each objective the level was judged on and of the tables' TTFT
    P99, once each: the figures that rest on fewer samples than their percentile needs."""
    seen: list[tuple[str, float | str]] = [("ttft", 99.0)]
    if point.verdict is not None:
        seen = [(r.objective.metric, r.objective.stat) for r in point.verdict.results] + seen
    out: list[str] = []
    for metric, stat in seen:
        note = weight_note(point, metric, stat)
        if note and note not in out:
            out.append(note)
    return out


def fmt_judged(value: float | None, digits: int = 1) -> str:
    """A judged figure as text: ``-`` undefined, ``∞`` (``-∞``) when failures decide it."""
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:.{digits}f}"


def level_outcome(point: SweepPoint, knee: Knee | None = None) -> LevelOutcome:
    """What ``point`` came to, with why. A failed level above ``knee`` (its sweep's knee,
    the highest level that met every objective) is an expected miss."""
    status = point_status(point)
    if point.interrupted:
        return LevelOutcome(
            "interrupted", "stopped by an interrupt; the requests measured are kept"
        )
    cut = point.summary.level_timeout
    if cut and status != "pass" and not _engine_failures(point):
        return LevelOutcome(
            "cut",
            f"the level's time bound cut it during {cut}: nothing shown about the engine "
            "(raise --level-timeout, or lower --duration or --warmup)",
        )
    if status == "invalid":
        return LevelOutcome("inconclusive", _inconclusive_reason(point))
    if status == "unchecked":
        return LevelOutcome("no_slo", "no objective was judged")
    if status == "pass":
        return LevelOutcome("pass", "every objective held")
    missed = _missed(point)
    if knee is not None and knee.level is not None and _above(point, knee):
        return LevelOutcome(
            "expected_miss", f"above the knee ({knee.level.label}): missed {missed}"
        )
    return LevelOutcome("fail", f"missed {missed}")


def knee_miss_text(knee: Knee) -> str:
    """What missed beside the knee, in a few words: a level below it that missed (the knee is
    the highest level that met every objective, not the last before a miss), or the
    levels above it that missed, as a sweep past its capacity must."""
    first = knee.first_failure
    if first is None or knee.level is None:
        return ""
    if knee.passed_above_failure:
        return f"{first.label} missed below it"
    return f"{first.label} missed above it, as expected past the knee"


#: The figures every report shows of a level: (JSON key, metric, statistic).
FIGURES: tuple[tuple[str, str, float | str], ...] = (
    ("ttft_p50_ms", "ttft", 50.0),
    ("ttft_p99_ms", "ttft", 99.0),
    ("itl_p50_ms", "itl", 50.0),
    ("tpot_p50_ms", "tpot", 50.0),
    ("e2e_p99_ms", "e2e", 99.0),
)


def judged_entry(point: SweepPoint, knee: Knee | None) -> dict[str, Any]:
    """The level as judged, for the results document: its outcome and reason, and each of
    ``FIGURES`` with its sample count (``figures``: null where undefined or ∞; ``infinite``
    names those that failed requests made ∞; ``too_few``: the tail percentiles from fewer
    samples than they need, each with how the gate judged it)."""
    out = level_outcome(point, knee)
    figures: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    infinite: list[str] = []
    thin: dict[str, str] = {}
    for key, metric, stat in FIGURES:
        v = judged_stat(point, metric, stat)
        if v is not None and math.isinf(v):
            infinite.append(key)
            v = None
        figures[key] = v
        counts[key] = stat_count(point, metric, stat)
        note = weight_note(point, metric, stat)
        if note:
            thin[key] = note
    return {
        "outcome": out.outcome,
        "reason": out.reason,
        "figures": figures,
        "counts": counts,
        "infinite": infinite,
        "too_few": thin,
    }


def sweep_outcomes(sweep: Sequence[SweepPoint], knee: Knee | None) -> list[LevelOutcome]:
    """``level_outcome`` of each point of one sweep, in the order given."""
    return [level_outcome(p, knee) for p in sweep]


def _inconclusive_reason(point: SweepPoint) -> str:
    """Why an ``invalid`` level showed nothing: another workload than asked, too few eval
    items for its quality objectives, or the client as the bottleneck."""
    asked = asked_reason(point)
    if asked is not None:
        return asked
    if quality_outcome(point) == "inconclusive" and point.summary.valid:
        return "too few eval items to show " + quality_text(point, "inconclusive")
    reasons = point.summary.invalid_reasons or (
        point.verdict.invalid_reasons if point.verdict is not None else ()
    )
    why = "; ".join(reasons) or "the client was the bottleneck"
    return f"the load generator, not the engine, was the bottleneck: {why}"


def _engine_failures(point: SweepPoint) -> bool:
    """Whether requests failed for another reason than the harness's cut."""
    failures = dict(point.summary.failures or {})
    failures.pop("cancelled", None)
    return any(v for v in failures.values())


def _above(point: SweepPoint, knee: Knee) -> bool:
    level = knee.level
    if level is None or point.level.mode != level.mode:
        return False
    return float(point.level.value) > float(level.value)


def _missed(point: SweepPoint) -> str:
    v = point.verdict
    if v is None:
        return quality_text(point, "fail") if quality_outcome(point) == "fail" else "its SLO"
    names = [
        f"{r.objective.name} ({fmt_judged(r.observed)} ms, {r.count} samples)"
        for r in v.results
        if not r.passed
    ]
    names += list(v.problems)
    if quality_outcome(point) == "fail":
        names.append(quality_text(point, "fail"))
    return ", ".join(names) or "its SLO"


def _same(a: float | str, b: float | str) -> bool:
    if a == "mean" or b == "mean":
        return a == b
    return math.isclose(float(a), float(b))
