"""Regression checks: a later run against a saved baseline, per test, engine and load level.

The judgement only: baselines are stored by ``baselines.py``, the constants that must
match are ``constants.py``'s, the tolerances ``tolerances.py``'s, the metric names the
catalogue's (``catalog.py``).

A comparison pairs two points (one test, one engine, one load level) only when their
runs are comparable: the documents' pinned constants (``constants.PINNED_CONSTANTS``: model,
precision, hardware, dataset/workload with ISL/OSL, SLO) match (``constants_mismatch``),
both points evaluated the same objectives, and both client runs are valid. Otherwise the
comparison says which constant differs and compares nothing. Model, precision and
hardware are an engine's (``constants.ENGINE_CONSTANTS``, kept per engine in
``constants["per_engine"]``, see ``constants.engine_constants``): a run of one engine pairs with
that engine's points in a baseline of several.

A test that searched its capacity (``capacity.CapacitySearch``) is compared by that capacity
(``compare_capacity``): the ``capacity`` metric, better higher, with the tolerance
``DEFAULT_CAPACITY_TOLERANCE`` unless one is given; and, when both searches ended at the
same level, the metrics of the two points there.

Tolerances (``tolerances.parse_tolerances("goodput:5%,ttft_p99:10%,itl_p50:2ms")``) give,
per metric, how much worse a value may get: relative (``%`` of the baseline value) or
absolute (``ms`` for latencies, ``tok/s`` / ``req/s`` for throughputs, ``pp`` percentage points for
attainment and error rate). Each metric knows its direction: goodput, throughput and
attainment are better higher; latencies and the error rate are better lower.

The rule (``RULE``), per metric, for the change from baseline to new:

1. worse by more than the tolerance -> ``regressed``; better by more -> ``improved``;
   otherwise ``within tolerance``;
2. a ``regressed`` or ``improved`` change that the per-request samples cannot tell from
   run-to-run noise is shown as ``noise`` instead and does not fail. For a latency
   percentile (``ttft_p99``, ...) each side's samples give a distribution-free interval
   of that percentile (binomial order statistics, each at sqrt(95 %) so that both hold
   together at 95 %); when the intervals overlap, the change is noise. This is valid for
   any number of samples, and a tail percentile of few requests has no upper bound, so
   its rise is always noise: a P99 of 200 requests cannot show one. For a mean, a seeded
   bootstrap interval (95 %) of the change, noise when it contains 0; with fewer than
   ``MIN_NOISE_SAMPLES`` a side, the Mann-Whitney rank test instead (p >= 0.05 -> noise).
   The rank test's p-value is reported with every latency judgement. For attainment a
   two-proportion test (p >= 0.05 -> noise). Throughput and goodput are one number per
   run, with no per-request noise test: the tolerance alone decides; so does it for a
   document without per-request samples;
3. a metric without a value on one side (goodput of a run that asserted no SLO) is
   ``n/a`` and never fails.

``Comparison.regressed`` is true when a row regressed; ``Comparison.format()`` is the
old-vs-new table for an assertion message and JUnit; ``assert_no_regression`` raises
``errors.RegressionError`` with it.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_llmslo.catalog import METRIC_SPECS, MetricSpec, qkey
from pytest_llmslo.document.constants import (
    ENGINE_CONSTANTS,
    constants_for_test,
    constants_mismatch,
)
from pytest_llmslo.errors import RegressionError
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.stats import DEFAULT_CONFIDENCE
from pytest_llmslo.sweep import finite_or_none
from pytest_llmslo.tolerances import (
    DEFAULT_CAPACITY_TOLERANCE,
    Tolerance,
    _tolerances,
    parse_tolerances,
)

__all__ = [
    "MIN_NOISE_SAMPLES",
    "ROW_HEADERS",
    "RULE",
    "Comparison",
    "ComparisonRow",
    "DocumentComparison",
    "NoiseJudgement",
    "RowStatus",
    "assert_no_regression",
    "compare_capacity",
    "compare_documents",
    "compare_points",
    "find_capacity",
    "find_point",
    "metric_value",
    "row_cells",
    "status_text",
]


#: Fewer samples than this on a side: the noise of a mean is judged by the rank test, not by
#: a bootstrap (which is too narrow on a handful of values).
MIN_NOISE_SAMPLES = 20

RULE = (
    "rule: worse than the baseline by more than the tolerance is a regression, unless the "
    "per-request samples cannot tell the change from run-to-run noise (percentiles: their 95 % "
    "distribution-free intervals overlap; means: bootstrap or rank test; attainment: "
    "proportion test), which is shown as noise and does not fail; throughput and goodput: "
    "the tolerance alone"
)

RowStatus = Literal["regressed", "improved", "within tolerance", "noise", "n/a"]


# --------------------------------------------------------------------------- metrics


# --------------------------------------------------------------------------- tolerances


# --------------------------------------------------------------------------- baselines


# --------------------------------------------------------------------------- constants


# --------------------------------------------------------------------------- points


def _level_key(level: Any) -> tuple[str, float, str]:
    if isinstance(level, LoadLevel):
        return (level.mode, float(level.value), level.arrival)
    if isinstance(level, Mapping):
        lv = LoadLevel.from_dict(level)
        return (lv.mode, float(lv.value), lv.arrival)
    if isinstance(level, str):
        text = level.strip()
        try:
            if text[:1] == "c":
                return ("concurrency", float(text[1:]), "closed")
            if text[:1] == "r":
                return ("rate", float(text[1:]), "*")
        except ValueError:
            pass
        raise ValueError(f"not a load level label: {level!r} (expected e.g. c32 or r2.5)")
    raise TypeError(f"a load level is a LoadLevel, its dict or its label, got {level!r}")


def _same_level(a: tuple[str, float, str], b: tuple[str, float, str]) -> bool:
    # A label such as "r2.5" names no arrival process: it matches any.
    return a[0] == b[0] and a[1] == b[1] and (a[2] == b[2] or "*" in (a[2], b[2]))


def find_point(
    doc: Mapping[str, Any], test: str, engine: str, level: LoadLevel | Mapping[str, Any] | str
) -> dict[str, Any] | None:
    """The point of ``test`` on ``engine`` at ``level`` (a ``LoadLevel``, its dict or its
    label ``c32``) in a run document, or None. A level measured twice gives its last
    point."""
    want = _level_key(level)
    found = None
    for p in doc.get("points", ()):
        if p.get("test") != test or p.get("engine") != engine:
            continue
        try:
            key = _level_key(p.get("level"))
        except (KeyError, TypeError, ValueError):
            continue
        if _same_level(key, want):
            found = p
    return None if found is None else dict(found)


def metric_value(point: Mapping[str, Any], metric: str) -> float | None:
    """The value of a comparison metric in a point dict: latencies in ms from the summary's
    distributions, rates and fractions from the summary (goodput and attainment from the
    verdict when the test evaluated one, as the reports do). None when undefined."""
    spec = METRIC_SPECS[metric]
    summary = point.get("summary") or {}
    if spec.kind == "latency":
        dist = (summary.get("distributions") or {}).get(spec.field) or {}
        if not dist.get("count"):
            return None
        if spec.stat == "mean":
            return finite_or_none(dist.get("mean"))
        pct = dist.get("percentiles") or {}
        q = float(spec.stat)  # type: ignore[arg-type]
        value = pct.get(qkey(q))
        if value is None:
            # Keys written by another formatter ("99.0"): match numerically.
            for k, v in pct.items():
                try:
                    if float(k) == q:
                        value = v
                except ValueError:
                    continue
        return finite_or_none(value)
    verdict = point.get("verdict") or {}
    if spec.field in ("goodput_tok_s", "goodput_req_s", "attainment"):
        value = finite_or_none(verdict.get(spec.field))
        if value is not None:
            return value
    return finite_or_none(summary.get(spec.field))


def _objective_labels(point: Mapping[str, Any]) -> tuple[str, ...] | None:
    verdict = point.get("verdict")
    if verdict:
        labels = []
        for r in verdict.get("results", ()):
            obj = r.get("objective") or {}
            labels.append(str(obj.get("label") or json.dumps(obj, sort_keys=True)))
        return tuple(sorted(labels))
    objectives = (point.get("summary") or {}).get("objectives")
    return tuple(sorted(map(str, objectives))) if objectives else None


def _counts(point: Mapping[str, Any]) -> tuple[int, int] | None:
    for src in (point.get("verdict") or {}, point.get("summary") or {}):
        good, requests = src.get("good"), src.get("requests")
        if isinstance(good, int) and isinstance(requests, int) and requests > 0:
            return good, requests
    return None


def _samples(point: Mapping[str, Any], metric: str) -> list[Any] | None:
    samples = point.get("samples") or {}
    values = samples.get(f"{metric}_ms")
    return list(values) if isinstance(values, list | tuple) else None


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True, slots=True)
class NoiseJudgement:
    """Whether a change is within run-to-run noise. ``noise`` True: it is; False: it is
    significant; None: not judged (no samples, too few, a run-level metric). ``low`` and
    ``high`` bound the change (new - old) in the metric's unit, when a bootstrap was run;
    ``p_value`` is the rank test's (latencies) or the proportion test's (attainment)."""

    method: str
    noise: bool | None
    p_value: float | None = None
    low: float | None = None
    high: float | None = None
    confidence: float = DEFAULT_CONFIDENCE
    n_old: int = 0
    n_new: int = 0
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "noise": self.noise,
            "p_value": self.p_value,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "n_old": self.n_old,
            "n_new": self.n_new,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One metric of a comparison: baseline and new value, the change (``delta`` in the
    metric's unit, ``delta_pct`` relative to the baseline), the tolerance, the noise
    judgement and the status (see the module docstring for the rule)."""

    metric: str
    old: float | None
    new: float | None
    delta: float | None
    delta_pct: float | None
    status: RowStatus
    tolerance: Tolerance
    noise: NoiseJudgement | None = None

    @property
    def higher_is_better(self) -> bool:
        return METRIC_SPECS[self.metric].higher_is_better

    @property
    def unit(self) -> str:
        return METRIC_SPECS[self.metric].unit

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "old": self.old,
            "new": self.new,
            "delta": self.delta,
            "delta_pct": self.delta_pct,
            "status": self.status,
            "tolerance": self.tolerance.to_dict(),
            "tolerance_label": self.tolerance.label,
            "higher_is_better": self.higher_is_better,
            "noise": None if self.noise is None else self.noise.to_dict(),
        }


def _judge_noise(
    spec: MetricSpec,
    old_point: Mapping[str, Any],
    new_point: Mapping[str, Any],
    *,
    confidence: float,
    resamples: int,
    seed: int,
) -> NoiseJudgement:
    from pytest_llmslo import stats

    alpha = 1.0 - confidence
    if spec.kind == "latency":
        xs, ys = _samples(old_point, spec.field), _samples(new_point, spec.field)
        if xs is None or ys is None:
            return NoiseJudgement("none", None, note="no per-request samples stored")
        a, b = stats.finite_samples(xs), stats.finite_samples(ys)
        if a.size == 0 or b.size == 0:
            return NoiseJudgement(
                "none", None, n_old=int(a.size), n_new=int(b.size), note="no completed request"
            )
        rank = stats.mann_whitney_u(a, b)
        note = "per-request mean ITL samples" if spec.field == "itl" else ""
        if spec.stat == "mean" and min(a.size, b.size) < MIN_NOISE_SAMPLES:
            # A bootstrap of a handful of values is too narrow: the rank test decides.
            return NoiseJudgement(
                "rank-test",
                not rank.significant(alpha),
                p_value=rank.p_value,
                confidence=confidence,
                n_old=int(a.size),
                n_new=int(b.size),
                note=note,
            )
        if spec.stat == "mean":
            ci = stats.bootstrap_diff(
                a, b, "mean", confidence=confidence, resamples=resamples, seed=seed
            )
            return NoiseJudgement(
                "bootstrap",
                ci.contains_zero,
                p_value=rank.p_value,
                low=ci.low,
                high=ci.high,
                confidence=confidence,
                n_old=int(a.size),
                n_new=int(b.size),
                note=note,
            )
        shift = stats.quantile_shift(a, b, float(spec.stat), confidence)  # type: ignore[arg-type]
        # The change lies in [new.low - old.high, new.high - old.low]; an unbounded side
        # (too few samples for that tail) leaves that end open.
        low = (
            None
            if shift.new.low is None or shift.old.high is None
            else shift.new.low - shift.old.high
        )
        high = (
            None
            if shift.new.high is None or shift.old.low is None
            else shift.new.high - shift.old.low
        )
        if low is None or high is None:
            from pytest_llmslo.metrics import samples_needed

            each = (1.0 + shift.old.confidence) / 2.0
            need = max(
                samples_needed(float(spec.stat), each, "upper"),  # type: ignore[arg-type]
                samples_needed(float(spec.stat), each, "lower"),  # type: ignore[arg-type]
            )
            bounded = f"bounding {spec.name.split('_')[1].upper()} takes {need} samples a side"
            note = f"{note}; {bounded}" if note else bounded
        return NoiseJudgement(
            "order-statistic",
            not shift.significant,
            p_value=rank.p_value,
            low=low,
            high=high,
            confidence=confidence,
            n_old=int(a.size),
            n_new=int(b.size),
            note=note,
        )
    if spec.field == "attainment":
        ca, cb = _counts(old_point), _counts(new_point)
        if ca is None or cb is None:
            return NoiseJudgement("none", None, note="no good/request counts stored")
        test = stats.two_proportion_test(ca[0], ca[1], cb[0], cb[1])
        return NoiseJudgement(
            "two-proportion",
            not test.significant(alpha),
            p_value=test.p_value,
            confidence=confidence,
            n_old=ca[1],
            n_new=cb[1],
        )
    return NoiseJudgement("none", None, note="one number per run: judged by the tolerance alone")


def _change(tol: Tolerance, old: float, new: float) -> tuple[float, float | None, RowStatus]:
    """The change from ``old`` to ``new``, relative change in %, and its status by the
    tolerance alone (rule 1)."""
    delta = new - old
    delta_pct = None if old == 0 else 100.0 * delta / abs(old)
    worse = -delta if tol.higher_is_better else delta
    allowed = tol.allowed(old)
    # A tiny epsilon: a change of exactly the tolerance is within it despite float noise.
    eps = 1e-9 * max(abs(old), abs(new), 1.0)
    if worse > allowed + eps:
        return delta, delta_pct, "regressed"
    if -worse > allowed + eps:
        return delta, delta_pct, "improved"
    return delta, delta_pct, "within tolerance"


def _row(
    tol: Tolerance,
    old_point: Mapping[str, Any],
    new_point: Mapping[str, Any],
    *,
    confidence: float,
    resamples: int,
    seed: int,
) -> ComparisonRow:
    spec = tol.spec
    old, new = metric_value(old_point, tol.metric), metric_value(new_point, tol.metric)
    if old is None or new is None:
        return ComparisonRow(tol.metric, old, new, None, None, "n/a", tol)
    delta, delta_pct, status = _change(tol, old, new)
    noise = None
    if status != "within tolerance":
        noise = _judge_noise(
            spec, old_point, new_point, confidence=confidence, resamples=resamples, seed=seed
        )
        if noise.noise:
            status = "noise"
    return ComparisonRow(tol.metric, old, new, delta, delta_pct, status, tol, noise)


# --------------------------------------------------------------------------- formatting


def _fmt_value(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    spec = METRIC_SPECS[metric]
    if spec.kind == "latency":
        return f"{value:.1f} ms"
    if spec.kind == "fraction":
        return f"{100.0 * value:.1f}%"
    if spec.kind == "level":
        return f"{value:g}"
    return f"{value:.0f} {spec.unit}" if abs(value) >= 100 else f"{value:.2f} {spec.unit}"


def _fmt_delta(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    spec = METRIC_SPECS[metric]
    if spec.kind == "latency":
        return f"{value:+.1f} ms"
    if spec.kind == "fraction":
        return f"{100.0 * value:+.1f} pp"
    if spec.kind == "level":
        return f"{value:+g}"
    return f"{value:+.0f} {spec.unit}" if abs(value) >= 100 else f"{value:+.2f} {spec.unit}"


def _fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _noise_text(row: ComparisonRow) -> str:
    n = row.noise
    if n is None or n.noise is None:
        return ""
    conf = f"{100 * n.confidence:g}%"
    if n.method == "rank-test":
        text = f"rank test p={n.p_value:.3g}, n={n.n_old}/{n.n_new}"
        return text + (f" ({n.note})" if n.note else "")
    if n.method in ("bootstrap", "order-statistic"):
        low = "-inf" if n.low is None else f"{n.low:+.1f}"
        high = "+inf" if n.high is None else f"{n.high:+.1f}"
        kind = "bootstrap" if n.method == "bootstrap" else "distribution-free"
        text = (
            f"{conf} {kind} interval of the change [{low}, {high}] ms "
            f"{'contains' if n.noise else 'excludes'} 0; rank test p={n.p_value:.3g}, "
            f"n={n.n_old}/{n.n_new}"
        )
        return text + (f" ({n.note})" if n.note else "")
    if n.method == "two-proportion":
        return f"two-proportion test p={n.p_value:.3g}, n={n.n_old}/{n.n_new}"
    return n.note


def status_text(row: ComparisonRow) -> str:
    """The status as shown: regressions in capitals so they stand out."""
    return "REGRESSED" if row.status == "regressed" else row.status


ROW_HEADERS = ("metric", "baseline", "new", "delta", "delta %", "tolerance", "status")


def row_cells(row: ComparisonRow) -> list[str]:
    """A row as display strings, in the order of ``ROW_HEADERS``."""
    return [
        row.metric,
        _fmt_value(row.metric, row.old),
        _fmt_value(row.metric, row.new),
        _fmt_delta(row.metric, row.delta),
        _fmt_pct(row.delta_pct),
        row.tolerance.label,
        status_text(row),
    ]


def _wrap_rule(indent: str) -> list[str]:
    return textwrap.wrap(RULE, width=100, initial_indent=indent, subsequent_indent=indent + "  ")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    last = len(headers) - 1

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i in (0, last) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return (indent + "  ".join(parts)).rstrip()

    return [line(headers), *(line(r) for r in rows)]


# --------------------------------------------------------------------------- comparison


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
        lines.extend(_table(headers, [row_cells(r) for r in self.rows]))
        for r in self.rows:
            text = _noise_text(r)
            if r.status == "regressed":
                worse = "lower" if r.higher_is_better else "higher"
                lines.append(
                    f"  {r.metric}: {_fmt_value(r.metric, r.new)} is {worse} than "
                    f"{_fmt_value(r.metric, r.old)} by {_fmt_delta(r.metric, r.delta)[1:]}"
                    f" ({_fmt_pct(r.delta_pct)}), beyond the tolerance {r.tolerance.label}"
                    + (f"; {text}" if text else "")
                )
            elif r.status == "noise":
                lines.append(
                    f"  {r.metric}: {_fmt_pct(r.delta_pct)} is beyond {r.tolerance.label} but "
                    f"within noise: {text}"
                )
            elif r.status == "n/a":
                lines.append(f"  {r.metric}: no value on one side, not compared")
        lines.extend(f"  {note}" for note in self.notes)
        if rule:
            lines.extend(_wrap_rule("  "))
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


def _point_level(point: Mapping[str, Any]) -> LoadLevel | None:
    try:
        return LoadLevel.from_dict(point["level"])
    except (KeyError, TypeError, ValueError):
        return None


def _invalid_reason(point: Mapping[str, Any]) -> str | None:
    summary = point.get("summary") or {}
    if summary.get("valid", True) and (point.get("verdict") or {}).get("run_valid", True):
        return None
    reasons = summary.get("invalid_reasons") or []
    return ", ".join(map(str, reasons)) or "marked invalid"


def compare_points(
    old_point: Mapping[str, Any],
    new_point: Mapping[str, Any],
    tolerances: Mapping[str, Tolerance] | str | None = None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = 2000,
    seed: int = 0,
    labels: tuple[str, str] = ("baseline", "new"),
    versions: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """Compare one point of a run document (``SweepPoint.to_dict()``) with its baseline.

    ``tolerances``: the gates, from ``parse_tolerances`` (or its text); None uses
    ``DEFAULT_TOLERANCES``. One row per gated metric, in the order given. The points are
    not compared (``problems`` says why) when their load levels differ, when they evaluated
    different objectives (goodput would mean different things), or when either client run
    was invalid (its numbers are the load generator's). ``seed`` seeds the bootstrap.
    """
    tols = _tolerances(tolerances)
    engine = str(new_point.get("engine", old_point.get("engine", "?")))
    test = str(new_point.get("test", old_point.get("test", "?")))
    level = _point_level(new_point)
    problems: list[str] = []
    old_level = _point_level(old_point)
    if old_level is None or level is None:
        problems.append("load level: missing or malformed on one side")
    elif not _same_level(_level_key(old_level), _level_key(level)):
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
        if point.get("interrupted"):
            problems.append(f"the {side} run was interrupted before its load finished")
    if problems:
        return Comparison(engine, test, level, (), tuple(problems), labels, versions)
    # A capacity is a property of a search, not of one point: compare_capacity gates it.
    rows = tuple(
        _row(t, old_point, new_point, confidence=confidence, resamples=resamples, seed=seed)
        for t in tols.values()
        if t.spec.kind != "level"
    )
    return Comparison(engine, test, level, rows, (), labels, versions)


def find_capacity(
    doc: Mapping[str, Any], test: str, engine: str, mode: str | None = None
) -> dict[str, Any] | None:
    """The capacity search result (``CapacityResult.to_dict()``) of ``test`` on ``engine``
    stored on a sweep of a run document (of load ``mode`` when given), or None."""
    found = None
    for s in doc.get("sweeps", ()):
        cap = s.get("capacity")
        if s.get("test") != test or s.get("engine") != engine or not isinstance(cap, Mapping):
            continue
        if mode is None or cap.get("mode") == mode:
            found = cap
    return None if found is None else dict(found)


def capacity_point(doc: Mapping[str, Any], capacity: Mapping[str, Any]) -> LoadLevel | None:
    """The level a capacity search judged its test by: the capacity, or the last probe
    when no level passed."""
    level = capacity.get("capacity")
    if level is None:
        history = capacity.get("history") or ()
        level = history[-1].get("level") if history else None
    try:
        return None if level is None else LoadLevel.from_dict(level)
    except (KeyError, TypeError, ValueError):
        return None


def _capacity_value(capacity: Mapping[str, Any]) -> float | None:
    level = capacity.get("capacity")
    if level is None:
        return 0.0  # no level passed: nothing was served within the SLO
    return finite_or_none(level.get("value")) if isinstance(level, Mapping) else None


def compare_capacity(
    old_capacity: Mapping[str, Any],
    new_capacity: Mapping[str, Any],
    old_point: Mapping[str, Any] | None = None,
    new_point: Mapping[str, Any] | None = None,
    tolerances: Mapping[str, Tolerance] | str | None = None,
    *,
    engine: str = "?",
    test: str = "?",
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = 2000,
    seed: int = 0,
    labels: tuple[str, str] = ("baseline", "new"),
    versions: tuple[str | None, str | None] = (None, None),
) -> Comparison:
    """Compare two capacity searches of one test (``CapacityResult.to_dict()`` each): the
    ``capacity`` row (the capacity's load value, 0 when no level passed; better higher;
    the ``capacity`` tolerance of ``tolerances``, else ``DEFAULT_CAPACITY_TOLERANCE``),
    then, when both searches were judged at the same level and both points are given, the
    rows of ``compare_points`` for those two points. Searches in different load modes are
    not compared."""
    tols = _tolerances(tolerances)
    cap_tol = tols.get("capacity") or parse_tolerances(DEFAULT_CAPACITY_TOLERANCE)["capacity"]
    new_level = None
    with_level = new_capacity.get("capacity")
    if isinstance(with_level, Mapping):
        new_level = LoadLevel.from_dict(with_level)
    if old_capacity.get("mode") != new_capacity.get("mode"):
        problem = (
            f"capacity search mode: {old_capacity.get('mode')} ({labels[0]}) != "
            f"{new_capacity.get('mode')} ({labels[1]})"
        )
        return Comparison(engine, test, new_level, (), (problem,), labels, versions)
    old, new = _capacity_value(old_capacity), _capacity_value(new_capacity)
    if old is None or new is None:
        row = ComparisonRow("capacity", old, new, None, None, "n/a", cap_tol)
    else:
        delta, delta_pct, status = _change(cap_tol, old, new)
        noise = NoiseJudgement("none", None, note="one number per search: the tolerance alone")
        row = ComparisonRow("capacity", old, new, delta, delta_pct, status, cap_tol, noise)
    rows: list[ComparisonRow] = [row]
    notes: list[str] = []
    old_at = _point_level(old_point) if old_point is not None else None
    new_at = _point_level(new_point) if new_point is not None else None
    if old_point is None and new_point is None:
        pass  # the capacity alone was asked for
    elif old_at is None or new_at is None:
        notes.append("the points at the capacity are not compared: one side has none")
    elif not _same_level(_level_key(old_at), _level_key(new_at)):
        notes.append(
            f"capacity {old_at.label} ({labels[0]}) vs {new_at.label} ({labels[1]}): the "
            "points at different loads are not compared, the capacity is"
        )
    else:
        at = compare_points(
            old_point,
            new_point,
            tols,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
            labels=labels,
            versions=versions,
        )
        rows.extend(at.rows)
        notes.extend(f"the points at {new_at.label} are not compared: {p}" for p in at.problems)
    level = new_at if new_at is not None else new_level
    return Comparison(engine, test, level, tuple(rows), (), labels, versions, False, tuple(notes))


def assert_no_regression(comparison: Comparison) -> None:
    """Raise ``errors.RegressionError`` (an ``AssertionError``) with the comparison's table
    when it regressed; the error's ``verdict`` attribute carries the comparison."""
    __tracebackhide__ = True
    if comparison.regressed:
        raise RegressionError(comparison.format(), comparison)


# --------------------------------------------------------------------------- documents


@dataclass(frozen=True, slots=True)
class DocumentComparison:
    """Two run documents compared point by point. ``mismatch`` lists differing pinned
    constants (then nothing is compared); ``only_old`` / ``only_new`` name the points
    (``engine | test | level``) found on one side; ``notes`` say how engines were paired."""

    comparisons: tuple[Comparison, ...] = ()
    mismatch: tuple[str, ...] = ()
    only_old: tuple[str, ...] = ()
    only_new: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    labels: tuple[str, str] = ("baseline", "new")
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)

    @property
    def comparable(self) -> bool:
        return not self.mismatch

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.comparisons)

    @property
    def constants_differ(self) -> bool:
        """The documents, or some of their points, differ in a pinned constant."""
        return bool(self.mismatch) or any(c.constants_differ for c in self.comparisons)

    @property
    def status(self) -> str:
        if not self.comparable:
            return "not comparable"
        if self.regressed:
            return "regressed"
        if any(c.improved for c in self.comparisons):
            return "improved"
        return "unchanged"

    def format(self) -> str:
        lines = [
            f"llmslo compare: {self.labels[0]} -> {self.labels[1]}: {self.status.upper()}",
        ]
        if self.mismatch:
            lines.append("not compared: the pinned constants differ:")
            lines.extend(f"  {m}" for m in self.mismatch)
            return "\n".join(lines)
        if self.tolerances:
            lines.append(
                "tolerances: " + ", ".join(f"{k} {t.label}" for k, t in self.tolerances.items())
            )
        lines.extend(self.notes)
        for c in self.comparisons:
            lines.append("")
            lines.append(c.format(rule=False))
        if self.only_old:
            lines.append("")
            lines.append(f"only in {self.labels[0]} (not compared): {', '.join(self.only_old)}")
        if self.only_new:
            lines.append("")
            lines.append(f"only in {self.labels[1]} (not compared): {', '.join(self.only_new)}")
        if not self.comparisons:
            lines.append("no point (engine, test, load level) is in both documents")
        counts = {
            s: sum(1 for c in self.comparisons if c.status == s)
            for s in ("regressed", "improved", "unchanged", "not comparable")
        }
        lines.append("")
        lines.append(
            f"{len(self.comparisons)} point{'s' if len(self.comparisons) != 1 else ''} compared: "
            + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        )
        if self.comparisons:
            lines.extend(_wrap_rule(""))
        return "\n".join(lines).rstrip()

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "labels": list(self.labels),
            "mismatch": list(self.mismatch),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "only_old": list(self.only_old),
            "only_new": list(self.only_new),
            "notes": list(self.notes),
            "tolerances": {k: t.to_dict() for k, t in self.tolerances.items()},
        }


def _point_name(p: Mapping[str, Any]) -> str:
    level = _point_level(p)
    return f"{p.get('engine')} | {p.get('test')} | {'-' if level is None else level.label}"


def _engine_version(doc: Mapping[str, Any], engine: str) -> str | None:
    entry = (doc.get("engines") or {}).get(engine) or {}
    version = entry.get("version")
    return None if version is None else str(version)


def compare_documents(
    old_doc: Mapping[str, Any],
    new_doc: Mapping[str, Any],
    tolerances: Mapping[str, Tolerance] | str | None = None,
    *,
    engines: Mapping[str, str] | None = None,
    labels: tuple[str, str] = ("baseline", "new"),
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = 2000,
    seed: int = 0,
) -> DocumentComparison:
    """Compare every point of ``new_doc`` with the point of the same test, engine and load
    level in ``old_doc``. ``engines`` maps baseline engine names to new ones; without it,
    engines pair by name, and two documents of one engine each under different names pair
    with each other (a note says so). A sweep that ran a capacity search on both sides
    is also compared by its capacity (``compare_capacity``, the capacity row alone). A
    document of an interrupted session is compared as far as it goes, with a note."""
    tols = _tolerances(tolerances)
    old_constants = old_doc.get("constants") or {}
    new_constants = new_doc.get("constants") or {}
    # Without per-test settings the document's constants decide for every point at once
    # (an engine's own constants are checked per point, with its engine).
    if not old_constants.get("tests") and not new_constants.get("tests"):
        shared_old = constants_for_test(old_constants, "")
        shared_new = constants_for_test(new_constants, "")
        if "per_engine" in old_constants or "per_engine" in new_constants:
            for key in ENGINE_CONSTANTS:
                shared_old.pop(key, None)
                shared_new.pop(key, None)
        mismatch = constants_mismatch(shared_old, shared_new, labels=labels)
        if mismatch:
            return DocumentComparison(mismatch=tuple(mismatch), labels=labels, tolerances=tols)
    old_points = list(old_doc.get("points", ()))
    new_points = list(new_doc.get("points", ()))
    old_engines = list(dict.fromkeys(str(p.get("engine")) for p in old_points))
    new_engines = list(dict.fromkeys(str(p.get("engine")) for p in new_points))
    notes: list[str] = []
    for doc, label in ((old_doc, labels[0]), (new_doc, labels[1])):
        if doc.get("complete") is False:
            notes.append(
                f"warning: {label} is incomplete (its session was interrupted): points it "
                "lacks are not compared"
            )
    if engines is not None:
        mapping = dict(engines)
    elif len(old_engines) == 1 and len(new_engines) == 1 and old_engines != new_engines:
        mapping = {old_engines[0]: new_engines[0]}
        notes.append(
            f"engines paired by position: {old_engines[0]} ({labels[0]}) with "
            f"{new_engines[0]} ({labels[1]})"
        )
    else:
        mapping = {}
    reverse = {v: k for k, v in mapping.items()}
    used: set[int] = set()
    comparisons: list[Comparison] = []
    only_new: list[str] = []
    for p in new_points:
        engine = str(p.get("engine"))
        old_engine = reverse.get(engine, engine if engine not in mapping else None)
        old = None
        level = _point_level(p)
        if old_engine is not None and level is not None:
            for i, q in enumerate(old_points):
                if (
                    i not in used
                    and q.get("engine") == old_engine
                    and q.get("test") == p.get("test")
                    and (ql := _point_level(q)) is not None
                    and _same_level(_level_key(ql), _level_key(level))
                ):
                    old = i  # keep looking: a level measured twice compares its last point
            if old is not None:
                used.add(old)
        if old is None:
            only_new.append(_point_name(p))
            continue
        versions = (
            _engine_version(old_doc, old_engine or engine),
            _engine_version(new_doc, engine),
        )
        test = str(p.get("test"))
        diff = constants_mismatch(
            constants_for_test(old_constants, test, old_engine or engine),
            constants_for_test(new_constants, test, engine),
            labels=labels,
        )
        if diff:
            level = _point_level(p)
            comparisons.append(
                Comparison(engine, test, level, (), tuple(diff), labels, versions, True)
            )
            continue
        comparisons.append(
            compare_points(
                old_points[old],
                p,
                tols,
                confidence=confidence,
                resamples=resamples,
                seed=seed,
                labels=labels,
                versions=versions,
            )
        )
    only_old = [_point_name(q) for i, q in enumerate(old_points) if i not in used]
    for s in new_doc.get("sweeps", ()):
        new_cap = s.get("capacity")
        if not isinstance(new_cap, Mapping):
            continue
        engine, test = str(s.get("engine")), str(s.get("test"))
        old_engine = reverse.get(engine, engine if engine not in mapping else None)
        old_cap = (
            None
            if old_engine is None
            else find_capacity(old_doc, test, old_engine, new_cap.get("mode"))
        )
        if old_cap is None:
            continue
        versions = (
            _engine_version(old_doc, old_engine or engine),
            _engine_version(new_doc, engine),
        )
        diff = constants_mismatch(
            constants_for_test(old_constants, test, old_engine),
            constants_for_test(new_constants, test, engine),
            labels=labels,
        )
        if diff:
            continue  # its points already say so
        # The points at the capacity are compared above, level by level.
        comparisons.append(
            compare_capacity(
                old_cap,
                new_cap,
                tolerances=tols,
                engine=engine,
                test=test,
                labels=labels,
                versions=versions,
            )
        )
    if comparisons and all(c.constants_differ for c in comparisons):
        lines = dict.fromkeys(p for c in comparisons for p in c.problems)
        return DocumentComparison(mismatch=tuple(lines), labels=labels, tolerances=tols)
    return DocumentComparison(
        comparisons=tuple(comparisons),
        mismatch=(),
        only_old=tuple(only_old),
        only_new=tuple(only_new),
        notes=tuple(notes),
        labels=labels,
        tolerances=tols,
    )
