"""The rows of a comparison: one metric's baseline and new value, the change, the
tolerance and the status (``RULE``), and how rows are shown as text and tables.

Per metric, for the change from baseline to new:

1. worse by more than the tolerance -> ``regressed``; better by more -> ``improved``;
   otherwise ``within tolerance``;
2. a ``regressed`` or ``improved`` change that the per-request samples cannot tell from
   run-to-run noise (``noise.judge_noise``) is shown as ``noise`` instead and does not
   fail;
3. a metric without a value on one side (goodput of a run that asserted no SLO) is
   ``n/a`` and never fails.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.document.lookup import metric_value
from pytest_llmslo.regression.detectable import min_detectable
from pytest_llmslo.regression.noise import NoiseJudgement, judge_noise
from pytest_llmslo.regression.tolerances import Tolerance
from pytest_llmslo.sweep import SweepPoint

__all__ = [
    "ROW_HEADERS",
    "RULE",
    "ComparisonRow",
    "RowStatus",
    "change",
    "fmt_delta",
    "fmt_pct",
    "fmt_value",
    "judge_row",
    "noise_text",
    "row_cells",
    "status_text",
    "table",
    "wrap_rule",
]

RULE = (
    "rule: worse than the baseline by more than the tolerance is a regression, unless the "
    "per-request samples cannot tell the change from run-to-run noise (percentiles: their 95 % "
    "distribution-free intervals overlap; means: bootstrap or rank test; attainment: "
    "proportion test; throughput, req/s and goodput: z-test of their per-window rates), which "
    "is shown as noise and does not fail. 'detectable' is the smallest change these samples "
    "could show (95 %, power 80 %)"
)

RowStatus = Literal["regressed", "improved", "within tolerance", "noise", "n/a"]


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
    #: The smallest change these samples could have shown (``detectable``), in the
    #: metric's unit; None where it cannot be told.
    mde: float | None = None

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
            "mde": self.mde,
        }


def change(tol: Tolerance, old: float, new: float) -> tuple[float, float | None, RowStatus]:
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


def judge_row(
    tol: Tolerance,
    old_point: SweepPoint,
    new_point: SweepPoint,
    *,
    confidence: float,
    resamples: int,
    seed: int,
) -> ComparisonRow:
    """The row of ``tol``'s metric: the change by the tolerance (rule 1), then, beyond it,
    the noise judgement (rule 2); ``n/a`` without a value on one side (rule 3)."""
    spec = tol.spec
    old, new = metric_value(old_point, tol.metric), metric_value(new_point, tol.metric)
    if old is None or new is None:
        return ComparisonRow(tol.metric, old, new, None, None, "n/a", tol)
    delta, delta_pct, status = change(tol, old, new)
    mde = min_detectable(spec, old_point, new_point, confidence)
    noise = None
    if status != "within tolerance":
        noise = judge_noise(
            spec, old_point, new_point, confidence=confidence, resamples=resamples, seed=seed
        )
        if noise.noise:
            status = "noise"
    return ComparisonRow(tol.metric, old, new, delta, delta_pct, status, tol, noise, mde)


def fmt_value(metric: str, value: float | None) -> str:
    """A metric's value as shown (``212.4 ms``, ``97.5%``, ``1520 tok/s``)."""
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


def fmt_delta(metric: str, value: float | None) -> str:
    """A change of a metric as shown, signed (``+12.0 ms``, ``-2.5 pp``)."""
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


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def noise_text(row: ComparisonRow) -> str:
    """The noise judgement of a row in words, or "" when none was made."""
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
    if n.method == "windows":
        low, high = fmt_delta(row.metric, n.low), fmt_delta(row.metric, n.high)
        return (
            f"{conf} interval of the change [{low}, {high}] from {n.n_old}/{n.n_new} "
            f"per-window rates {'contains' if n.noise else 'excludes'} 0 (p={n.p_value:.3g}; "
            "within-run spread, --slo-compare=history adds the run-to-run spread)"
        )
    if n.method == "two-proportion":
        return f"two-proportion test p={n.p_value:.3g}, n={n.n_old}/{n.n_new}"
    return n.note


def status_text(row: ComparisonRow) -> str:
    """The status as shown: regressions in capitals so they stand out."""
    return "REGRESSED" if row.status == "regressed" else row.status


ROW_HEADERS = (
    "metric", "baseline", "new", "delta", "delta %", "tolerance", "detectable", "status",
)  # fmt: skip


def row_cells(row: ComparisonRow) -> list[str]:
    """A row as display strings, in the order of ``ROW_HEADERS``."""
    return [
        row.metric,
        fmt_value(row.metric, row.old),
        fmt_value(row.metric, row.new),
        fmt_delta(row.metric, row.delta),
        fmt_pct(row.delta_pct),
        row.tolerance.label,
        _fmt_mde(row),
        status_text(row),
    ]


def _fmt_mde(row: ComparisonRow) -> str:
    if row.mde is None:
        return "-"
    return fmt_delta(row.metric, row.mde).lstrip("+")


def wrap_rule(indent: str) -> list[str]:
    """``RULE`` wrapped at 100 columns under ``indent``."""
    return textwrap.wrap(RULE, width=100, initial_indent=indent, subsequent_indent=indent + "  ")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    """A text table: the first and last columns left-aligned, the others right-aligned."""
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
