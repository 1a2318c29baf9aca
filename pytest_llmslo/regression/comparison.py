"""One point (engine, test, load level), or one capacity search, against its baseline.

Two points are compared only when their runs are: the same load level, the same
objectives (goodput would mean different things), both client runs valid and neither
interrupted; otherwise the ``Comparison`` says why and compares nothing. Each gated
metric is a row (``rows``: the rule is ``rows.RULE``), judged as ``Judging`` says: the
tolerances, the confidence and the bootstrap's resamples and seed, and the names of the
two sides.

A test that searched its capacity (``capacity.CapacitySearch``) is compared by that
capacity (``compare_capacity``): the ``capacity`` metric, better higher, with the tolerance
``DEFAULT_CAPACITY_TOLERANCE`` unless one is given; and, when both searches ended at the
same level, the metrics of the two points there.

``Comparison.regressed`` is true when a row regressed; ``Comparison.format()`` is the
old-vs-new table for an assertion message and JUnit; ``assert_no_regression`` raises
``errors.RegressionError`` with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document.lookup import level_key, same_level
from pytest_llmslo.errors import RegressionError
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.regression.answerdrift import ANSWER_METRICS, answer_rows
from pytest_llmslo.regression.noise import NoiseJudgement
from pytest_llmslo.regression.rows import (
    ROW_HEADERS,
    ComparisonRow,
    change,
    fmt_delta,
    fmt_pct,
    fmt_value,
    judge_row,
    noise_text,
    row_cells,
    table,
    wrap_rule,
)
from pytest_llmslo.regression.tolerances import (
    DEFAULT_CAPACITY_TOLERANCE,
    Tolerance,
    parse_tolerances,
    resolve_tolerances,
)
from pytest_llmslo.stats import DEFAULT_CONFIDENCE
from pytest_llmslo.sweep import SweepPoint

__all__ = [
    "Comparison",
    "Judging",
    "assert_no_regression",
    "compare_capacity",
    "compare_points",
]


@dataclass(frozen=True, slots=True)
class Judging:
    """How a comparison judges: the ``tolerances`` it gates on (``DEFAULT_TOLERANCES``
    when none are given), the ``confidence`` of its noise tests, the ``resamples`` and
    ``seed`` of the bootstrap, and the ``labels`` of the two sides."""

    tolerances: Mapping[str, Tolerance] = field(default_factory=lambda: resolve_tolerances(None))
    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = 2000
    seed: int = 0
    labels: tuple[str, str] = ("baseline", "new")

    @classmethod
    def of(
        cls,
        tolerances: Mapping[str, Tolerance] | str | None = None,
        *,
        confidence: float = DEFAULT_CONFIDENCE,
        resamples: int = 2000,
        seed: int = 0,
        labels: tuple[str, str] = ("baseline", "new"),
    ) -> Judging:
        """A judging with ``tolerances`` given as parsed, as text, or None (the defaults)."""
        return cls(resolve_tolerances(tolerances), confidence, resamples, seed, labels)


@dataclass(frozen=True, slots=True)
class Comparison:
    """One point (engine, test, load level) against its baseline. ``problems`` lists why
    the two cannot be compared (then ``rows`` is empty and nothing regressed;
    ``constants_differ`` when the reason is a pinned constant); ``labels`` name the two
    sides (``("baseline", "new")``), ``versions`` the engine versions when known;
    ``notes`` say what was left out of a comparison that did run (a capacity comparison
    whose searches ended at different levels compares the capacity alone)."""

    engine: str
    test: str
    level: LoadLevel | None
    rows: tuple[ComparisonRow, ...] = ()
    problems: tuple[str, ...] = ()
    labels: tuple[str, str] = ("baseline", "new")
    versions: tuple[str | None, str | None] = (None, None)
    constants_differ: bool = False
    notes: tuple[str, ...] = ()

    @property
    def comparable(self) -> bool:
        return not self.problems

    @property
    def regressed(self) -> bool:
        return any(r.status == "regressed" for r in self.rows)

    @property
    def improved(self) -> bool:
        return any(r.status == "improved" for r in self.rows)

    @property
    def regressions(self) -> tuple[ComparisonRow, ...]:
        return tuple(r for r in self.rows if r.status == "regressed")

    @property
    def status(self) -> str:
        """``regressed``, ``improved``, ``unchanged`` (nothing beyond tolerance and noise)
        or ``not comparable``."""
        if not self.comparable:
            return "not comparable"
        if self.regressed:
            return "regressed"
        return "improved" if self.improved else "unchanged"

    @property
    def title(self) -> str:
        label = "-" if self.level is None else self.level.label
        return f"{self.engine} | {self.test} | {label}"

    def _versions_text(self) -> str:
        old, new = self.versions
        if old is None and new is None:
            return ""
        if old == new:
            return f" (engine {old})"
        return f" (engine {old or '?'} -> {new or '?'})"

    def format(self, *, rule: bool = True) -> str:
        """The comparison as text: a heading with the outcome, the old-vs-new table, a line
        per noise judgement and per regression, and (``rule``) the rule."""
        head = f"{self.title}: {self.status.upper()} vs {self.labels[0]}{self._versions_text()}"
        lines = [head]
        if not self.comparable:
            lines.append("  not compared, the runs differ:")
            lines.extend(f"    {p}" for p in self.problems)
            return "\n".join(lines)
        headers = list(ROW_HEADERS)
        headers[1], headers[2] = self.labels
        lines.extend(table(headers, [row_cells(r) for r in self.rows]))
        for r in self.rows:
            text = noise_text(r)
            if r.status == "regressed":
                worse = "lower" if r.higher_is_better else "higher"
                lines.append(
                    f"  {r.metric}: {fmt_value(r.metric, r.new)} is {worse} than "
                    f"{fmt_value(r.metric, r.old)} by {fmt_delta(r.metric, r.delta)[1:]}"
                    f" ({fmt_pct(r.delta_pct)}), beyond the tolerance {r.tolerance.label}"
                    + (f"; {text}" if text else "")
                )
            elif r.status == "noise":
                lines.append(
                    f"  {r.metric}: {fmt_pct(r.delta_pct)} is beyond {r.tolerance.label} but "
                    f"within noise: {text}"
                )
            elif r.status == "n/a":
                lines.append(f"  {r.metric}: no value on one side, not compared")
        lines.extend(f"  {note}" for note in self.notes)
        if rule:
            lines.extend(wrap_rule("  "))
        return "\n".join(lines)

    def properties(self) -> list[tuple[str, str]]:
        """Flat JUnit properties ``llmslo.compare.*``: the status, the problems, and per
        metric ``.old``, ``.new`` and ``.status``. An undefined value (a metric with no
        value on one side) is left out rather than written empty, as ``report.junit``
        does."""
        props = [("llmslo.compare.status", self.status)]
        if self.problems:
            props.append(("llmslo.compare.problems", "; ".join(self.problems)))
        for r in self.rows:
            key = f"llmslo.compare.{r.metric}"
            if r.old is not None:
                props.append((f"{key}.old", f"{r.old:.6g}"))
            if r.new is not None:
                props.append((f"{key}.new", f"{r.new:.6g}"))
            props.append((f"{key}.status", r.status))
        return props

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "test": self.test,
            "level": None if self.level is None else self.level.to_dict(),
            "status": self.status,
            "rows": [r.to_dict() for r in self.rows],
            "problems": list(self.problems),
            "labels": list(self.labels),
            "versions": list(self.versions),
            "notes": list(self.notes),
        }


def _objective_labels(point: SweepPoint) -> tuple[str, ...] | None:
    verdict = point.verdict
    if verdict:
        labels = []
        for r in verdict.results:
            obj = r.objective
            labels.append(str(obj.label or json.dumps(obj.to_dict(), sort_keys=True)))
        return tuple(sorted(labels))
    objectives = point.summary.objectives
    return tuple(sorted(map(str, objectives))) if objectives else None


def _invalid_reason(point: SweepPoint) -> str | None:
    summary = point.summary
    run_valid = point.verdict.run_valid if point.verdict is not None else True
    if summary.valid and run_valid:
        return None
    return ", ".join(map(str, summary.invalid_reasons)) or "marked invalid"


def _problems(old_point: SweepPoint, new_point: SweepPoint, labels: tuple[str, str]) -> list[str]:
    """Why two points cannot be compared (none: they can)."""
    problems: list[str] = []
    old_level, level = old_point.level, new_point.level
    if not same_level(level_key(old_level), level_key(level)):
        problems.append(
            f"load level: {old_level.label} ({labels[0]}) != {level.label} ({labels[1]})"
        )
    old_obj, new_obj = _objective_labels(old_point), _objective_labels(new_point)
    if old_obj is not None and new_obj is not None and old_obj != new_obj:
        problems.append(
            f"slo: {', '.join(old_obj) or '(none)'} ({labels[0]}) != "
            f"{', '.join(new_obj) or '(none)'} ({labels[1]})"
        )
    for point, side in ((old_point, labels[0]), (new_point, labels[1])):
        reason = _invalid_reason(point)
        if reason is not None:
            problems.append(
                f"the {side} run is invalid (the load generator was the bottleneck: {reason})"
            )
        if point.interrupted:
            problems.append(f"the {side} run was interrupted before its load finished")
    return problems


def compare_points(
    old_point: SweepPoint,
    new_point: SweepPoint,
    tolerances: Mapping[str, Tolerance] | str | None = None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = 2000,
    seed: int = 0,
    labels: tuple[str, str] = ("baseline", "new"),
    versions: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """Compare one point with its baseline.

    ``tolerances``: the gates, from ``parse_tolerances`` (or its text); None uses
    ``DEFAULT_TOLERANCES``. One row per gated metric, in the order given. The points are
    not compared (``problems`` says why) when their load levels differ, when they evaluated
    different objectives (goodput would mean different things), or when either client run
    was invalid (its numbers are the load generator's). ``seed`` seeds the bootstrap.
    """
    judging = Judging.of(
        tolerances, confidence=confidence, resamples=resamples, seed=seed, labels=labels
    )
    return judge_points(old_point, new_point, judging, versions)


def judge_points(
    old_point: SweepPoint,
    new_point: SweepPoint,
    judging: Judging,
    versions: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """``compare_points`` as ``judging`` says."""
    labels = judging.labels
    engine, test, level = new_point.engine, new_point.test, new_point.level
    problems = _problems(old_point, new_point, labels)
    if problems:
        return Comparison(engine, test, level, (), tuple(problems), labels, versions)
    # A capacity is a property of a search, not of one point: compare_capacity gates it.
    rows = tuple(
        judge_row(
            t,
            old_point,
            new_point,
            confidence=judging.confidence,
            resamples=judging.resamples,
            seed=judging.seed,
        )
        for t in judging.tolerances.values()
        if t.spec.kind != "level" and t.metric not in ANSWER_METRICS
    )
    answers, notes = answer_rows(old_point, new_point, judging.tolerances, judging.confidence)
    return Comparison(engine, test, level, rows + answers, (), labels, versions, notes=notes)


def _capacity_row(old: CapacityResult, new: CapacityResult, tol: Tolerance) -> ComparisonRow:
    # No level passed: nothing was served within the SLO, a capacity of 0.
    old_value, new_value = old.value, new.value
    delta, delta_pct, status = change(tol, old_value, new_value)
    noise = NoiseJudgement("none", None, note="one number per search: the tolerance alone")
    return ComparisonRow("capacity", old_value, new_value, delta, delta_pct, status, tol, noise)


def compare_capacity(
    old_capacity: CapacityResult,
    new_capacity: CapacityResult,
    old_point: SweepPoint | None = None,
    new_point: SweepPoint | None = None,
    *,
    engine: str = "?",
    test: str = "?",
    judging: Judging | None = None,
    versions: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """Compare two capacity searches of one test: the ``capacity`` row (the capacity's load
    value, 0 when no level passed; better higher; the ``capacity`` tolerance of
    ``judging``, else ``DEFAULT_CAPACITY_TOLERANCE``), then, when both searches were judged
    at the same level and both points are given, the rows of ``compare_points`` for those
    two points. Searches in different load modes are not compared."""
    judging = judging or Judging()
    labels = judging.labels
    tols = judging.tolerances
    cap_tol = tols.get("capacity") or parse_tolerances(DEFAULT_CAPACITY_TOLERANCE)["capacity"]
    if old_capacity.mode != new_capacity.mode:
        problem = (
            f"capacity search mode: {old_capacity.mode} ({labels[0]}) != "
            f"{new_capacity.mode} ({labels[1]})"
        )
        return Comparison(engine, test, new_capacity.capacity, (), (problem,), labels, versions)
    rows: list[ComparisonRow] = [_capacity_row(old_capacity, new_capacity, cap_tol)]
    notes: list[str] = []
    old_at = None if old_point is None else old_point.level
    new_at = None if new_point is None else new_point.level
    if old_point is None and new_point is None:
        pass  # the capacity alone was asked for
    elif old_point is None or new_point is None or old_at is None or new_at is None:
        notes.append("the points at the capacity are not compared: one side has none")
    elif not same_level(level_key(old_at), level_key(new_at)):
        notes.append(
            f"capacity {old_at.label} ({labels[0]}) vs {new_at.label} ({labels[1]}): the "
            "points at different loads are not compared, the capacity is"
        )
    else:
        at = judge_points(old_point, new_point, judging, versions)
        rows.extend(at.rows)
        notes.extend(f"the points at {new_at.label} are not compared: {p}" for p in at.problems)
    level: LoadLevel | None = new_at if new_at is not None else new_capacity.capacity
    return Comparison(engine, test, level, tuple(rows), (), labels, versions, False, tuple(notes))


def assert_no_regression(comparison: Comparison) -> None:
    """Raise ``errors.RegressionError`` (an ``AssertionError``) with the comparison's table
    when it regressed; the error's ``verdict`` attribute carries the comparison."""
    __tracebackhide__ = True
    if comparison.regressed:
        raise RegressionError(comparison.format(), comparison)
