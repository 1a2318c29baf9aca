"""Objectives on what the engine answered: ``assert_quality(accuracy >= 0.95)``.

A level whose workload carries eval items (``evals``: the ``eval`` setting) keeps, in
``run.meta["quality"]``, how many items were asked and how many were answered right,
under the level's load. ``accuracy`` is the share answered right; a failed request is an
item answered wrong (failures are never green).

An accuracy from a few dozen items is not a figure: 29 right of 30 is 97 %, and an engine
whose true accuracy is 90 % does that one time in five. So the objective is judged with
the Wilson score interval at the confidence (0.95 by default, one-sided on each side):

- ``accuracy >= x`` **passes** when the interval's lower bound is at least x (the engine
  shows x at the confidence), **fails** when its upper bound is below x (it shows it
  misses), and is **inconclusive** otherwise: too few items to say, never a pass by luck.
  30 items right out of 30 give a lower bound of 0.917: inconclusive at 0.95, and about
  52 are needed at 100 % (``QualityResult.needed``);
- ``>`` reads the same with strict comparisons.

``assert_quality`` judges the current run (the level the test body sees) or the run given
first; it raises ``SloViolation`` when an objective fails, ``Inconclusive`` when none
fails and one cannot be shown, listing every objective with its items, accuracy and bounds,
and returns the :class:`QualityVerdict` when every one holds. ``judge_quality`` gives the
verdict without raising (the session judges the configured ``quality`` objectives with
it), and ``parse_quality`` reads an objective's text (``accuracy>=0.95``) from the
command line, a marker or a run file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

from pytest_llmslo.errors import ConfigError, Inconclusive, LoadError, SloViolation
from pytest_llmslo.records import Run
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .assertions import current_run
from .judging import current_judging

__all__ = [
    "QUALITY_METRICS",
    "QualityObjective",
    "QualityResult",
    "QualitySymbol",
    "QualityVerdict",
    "accuracy",
    "assert_quality",
    "judge_quality",
    "parse_quality",
    "wilson_interval",
]

QualityOp = Literal[">=", ">"]
Outcome = Literal["pass", "fail", "inconclusive"]
QUALITY_METRICS = ("accuracy",)


def wilson_interval(
    right: int, n: int, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """The Wilson score bounds of a proportion ``right``/``n``, each one-sided at
    ``confidence``; (0, 1) for no items."""
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"a confidence is in [0.5, 1), got {confidence!r}")
    if n <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(confidence)
    p = right / n
    z2n = z * z / n
    centre = p + z2n / 2
    spread = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n))
    return max(0.0, (centre - spread) / (1 + z2n)), min(1.0, (centre + spread) / (1 + z2n))


@dataclass(frozen=True, slots=True)
class QualityObjective:
    """``metric`` ``op`` ``threshold``, e.g. accuracy >= 0.95."""

    metric: str
    op: QualityOp
    threshold: float

    def __post_init__(self) -> None:
        if self.metric not in QUALITY_METRICS:
            raise ValueError(f"unknown quality metric {self.metric!r}; metrics: accuracy")
        if self.op not in (">=", ">"):
            raise ValueError(f"accuracy is a floor: use >= or >, not {self.op!r}")
        t = float(self.threshold)
        if not (0.0 <= t <= 1.0):
            raise ValueError(f"an accuracy objective's threshold is a share in [0, 1], got {t!r}")

    @property
    def label(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"

    def judge(self, right: int, n: int, confidence: float) -> tuple[Outcome, float, float]:
        lo, hi = wilson_interval(right, n, confidence)
        t = self.threshold
        holds = lo >= t if self.op == ">=" else lo > t
        misses = hi < t if self.op == ">=" else hi <= t
        return ("pass" if holds else "fail" if misses else "inconclusive"), lo, hi

    def __bool__(self) -> bool:
        raise TypeError(
            f"the quality objective `{self.label}` has no truth value: use "
            f"assert_quality({self.metric} {self.op} {self.threshold:g})"
        )

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True, slots=True)
class QualitySymbol:
    """``accuracy``: comparing it with a share builds a :class:`QualityObjective`."""

    metric: str

    def _objective(self, op: QualityOp, other: object) -> QualityObjective:
        if isinstance(other, bool) or not isinstance(other, int | float):
            raise TypeError(f"{self.metric} can only be compared with a share such as 0.95")
        return QualityObjective(self.metric, op, float(other))

    def __ge__(self, other: object) -> QualityObjective:
        return self._objective(">=", other)

    def __gt__(self, other: object) -> QualityObjective:
        return self._objective(">", other)

    def __repr__(self) -> str:
        return self.metric


accuracy = QualitySymbol("accuracy")

_OBJECTIVE_RE = re.compile(r"^\s*(accuracy)\s*(>=|>)\s*([0-9.]+)\s*(%?)\s*$")


def parse_quality(text: str) -> tuple[QualityObjective, ...]:
    """Objectives from text: ``accuracy>=0.95`` (or ``95%``), several joined by commas."""
    out = []
    for part in (p for p in str(text).split(",") if p.strip()):
        m = _OBJECTIVE_RE.match(part)
        if m is None:
            raise ConfigError(
                f"Could not parse quality objective {part.strip()!r}: write accuracy>=0.95 "
                "(or accuracy>=95%)"
            )
        value = float(m.group(3)) / (100.0 if m.group(4) else 1.0)
        try:
            out.append(QualityObjective(m.group(1), ">=" if m.group(2) == ">=" else ">", value))
        except ValueError as e:
            raise ConfigError(f"quality objective {part.strip()!r}: {e}") from None
    return tuple(out)


@dataclass(frozen=True, slots=True)
class QualityResult:
    objective: QualityObjective
    items: int
    right: int
    lower: float
    upper: float
    outcome: Outcome

    @property
    def accuracy(self) -> float | None:
        return self.right / self.items if self.items else None

    def needed(self) -> int | None:
        """Items needed, at this accuracy (all right when none was answered), for the lower
        bound to clear the threshold (None: this accuracy cannot show it)."""
        acc = self.right / self.items if self.items else 1.0
        t = self.objective.threshold

        def shows(n: int) -> bool:
            return wilson_interval(round(acc * n), n)[0] >= t

        if acc <= t:
            return None
        hi = max(self.items, 1)
        while not shows(hi):
            if hi > 10_000_000:
                return None
            hi *= 2
        lo = hi // 2
        while lo + 1 < hi:  # the smallest n that shows it, between lo and hi
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if shows(mid) else (mid, hi)
        return hi

    def line(self) -> str:
        o = self.objective
        if not self.items:
            return f"{o.label}: no eval item was answered -> inconclusive"
        text = (
            f"{o.label}: {self.right}/{self.items} right = {self.right / self.items:.1%} "
            f"(bounds {self.lower:.3f}..{self.upper:.3f}) -> {self.outcome}"
        )
        if self.outcome == "inconclusive":
            need = self.needed()
            text += f"; about {need} items needed at this accuracy" if need else ""
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective.label,
            "items": self.items,
            "right": self.right,
            "accuracy": self.accuracy,
            "lower": self.lower,
            "upper": self.upper,
            "outcome": self.outcome,
        }


@dataclass(frozen=True, slots=True)
class QualityVerdict:
    """Quality objectives judged on one level."""

    task: str | None
    confidence: float
    results: tuple[QualityResult, ...]

    @property
    def outcome(self) -> Outcome:
        outcomes = {r.outcome for r in self.results}
        return "fail" if "fail" in outcomes else "inconclusive" if outcomes - {"pass"} else "pass"

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def summary_line(self) -> str:
        head = {
            "pass": "quality objectives met",
            "fail": "quality objectives missed",
            "inconclusive": "quality inconclusive (too few eval items to show the objective)",
        }[self.outcome]
        task = f" on the {self.task} eval" if self.task else ""
        shown = [r for r in self.results if r.outcome == self.outcome] or list(self.results)
        return f"{head}{task}: " + "; ".join(r.line() for r in shown)

    def format(self) -> str:
        return "\n".join(f"  {r.line()}" for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "confidence": self.confidence,
            "outcome": self.outcome,
            "objectives": [r.to_dict() for r in self.results],
        }


def judge_quality(
    run: Run, objectives: tuple[QualityObjective, ...], confidence: float = DEFAULT_CONFIDENCE
) -> QualityVerdict:
    """The objectives judged on the run's eval answers (``run.meta["quality"]``); a run
    without eval items raises ``LoadError`` saying how to ask for them."""
    q = run.meta.quality
    if q is None:
        raise LoadError(
            "this level carried no eval item, so its answers cannot be judged: ask for an "
            "eval with the eval setting, e.g. @pytest.mark.slo(eval='arithmetic') or "
            "--slo-eval arithmetic"
        )
    n, right = int(q.get("items") or 0), int(q.get("correct") or 0)
    results = []
    for o in objectives:
        outcome, lo, hi = o.judge(right, n, confidence)
        results.append(QualityResult(o, n, right, lo, hi, outcome if n else "inconclusive"))
    task = q.get("task")
    return QualityVerdict(str(task) if task else None, confidence, tuple(results))


def assert_quality(*args: Any, confidence: float = DEFAULT_CONFIDENCE) -> QualityVerdict:
    """``assert_quality(accuracy >= 0.95)`` on the current run, or
    ``assert_quality(run, accuracy >= 0.95)`` (see the module docstring)."""
    __tracebackhide__ = True
    run: Run | None = None
    if args and isinstance(args[0], Run):
        run, args = args[0], args[1:]
    if not args or not all(isinstance(a, QualityObjective) for a in args):
        raise TypeError("assert_quality() takes quality objectives, e.g. accuracy >= 0.95")
    run = run if run is not None else current_run()
    if run is None:
        raise LoadError(
            "assert_quality() found no current run: call it in a test that uses the load "
            "fixture, or pass the run first: assert_quality(run, accuracy >= 0.95)"
        )
    verdict = judge_quality(run, tuple(args), confidence)
    found = current_judging()  # the session reads it back onto the level's point
    if found is not None:
        found.record_other(verdict)
    if verdict.outcome == "fail":
        raise SloViolation(verdict.summary_line() + "\n" + verdict.format(), verdict)
    if verdict.outcome == "inconclusive":
        raise Inconclusive(verdict.summary_line() + "\n" + verdict.format(), verdict)
    return verdict
