"""Regression tolerances: how much worse each metric may get against a baseline before a
comparison calls it a regression (``--slo-compare-fail``, ``llmslo compare --fail``).

``parse_tolerances("goodput:5%,ttft_p99:20ms,attainment:2pp")`` reads a spec: per metric
of the catalogue (``catalog.METRIC_SPECS``), a relative amount (``%``) or an absolute one
in the metric's unit (ms, s, us, tok/s, req/s; percentage points for fractions).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmslo.catalog import METRIC_SPECS, MetricSpec, canonical_metric, valid_metric_names
from pytest_llmslo.errors import ConfigError

__all__ = [
    "DEFAULT_CAPACITY_TOLERANCE",
    "DEFAULT_TOLERANCES",
    "Tolerance",
    "parse_tolerances",
    "resolve_tolerances",
]


#: Used when a comparison is asked for without tolerances.
DEFAULT_TOLERANCES = (
    "goodput:5%,throughput:5%,attainment:2pp,ttft_p50:10%,ttft_p99:10%,itl_p50:10%,"
    "tpot_p50:10%,e2e_p99:10%"
)


#: The tolerance of a capacity comparison when none is given (``capacity:15%``): more than
#: one step of a concurrency search at capacity 8 (c8 -> c7 is 12.5 %), so the search's
#: own resolution does not fail a test, while c8 -> c6 (25 %) does.
DEFAULT_CAPACITY_TOLERANCE = "capacity:15%"


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How much worse ``metric`` may get: ``amount`` percent of the baseline value
    (``relative``) or ``amount`` in the metric's unit (ms, tok/s, req/s; fractions in
    percentage points, stored as a fraction: 2 pp -> 0.02)."""

    metric: str
    amount: float
    relative: bool

    @property
    def spec(self) -> MetricSpec:
        return METRIC_SPECS[self.metric]

    @property
    def higher_is_better(self) -> bool:
        return self.spec.higher_is_better

    @property
    def label(self) -> str:
        if self.relative:
            return f"{self.amount:g}%"
        if self.spec.kind == "fraction":
            return f"{self.amount * 100:g} pp"
        return f"{self.amount:g} {self.spec.unit}"

    def allowed(self, old: float) -> float:
        """The absolute change allowed from a baseline value ``old``."""
        return abs(old) * self.amount / 100.0 if self.relative else self.amount

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "amount": self.amount, "relative": self.relative}


_TOL_RE = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z%/]*)\s*$", re.I)


def _parse_one(part: str) -> Tolerance:
    name, sep, value = part.partition(":")
    if not sep:
        name, sep, value = part.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise ConfigError(
            f"Could not parse tolerance {part!r}: expected METRIC:VALUE such as goodput:5% "
            f"or itl_p50:2ms. Valid metrics: {valid_metric_names()}."
        )
    metric = canonical_metric(name)
    if metric is None:
        raise ConfigError(
            f"Unknown metric {name.strip()!r} in tolerance {part!r}. Valid metrics: "
            f"{valid_metric_names()}."
        )
    spec = METRIC_SPECS[metric]
    m = _TOL_RE.match(value)
    units = ("%", *spec.units)
    if m is None:
        raise ConfigError(
            f"Could not parse the value {value.strip()!r} of tolerance {part!r}: expected a "
            f"number with a unit, one of {', '.join(units)}."
        )
    amount, unit = float(m.group(1)), m.group(2).lower()
    if not math.isfinite(amount) or amount < 0:
        raise ConfigError(f"Tolerance {part!r} must be a number >= 0, got {m.group(1)!r}.")
    if unit == "%":
        return Tolerance(metric, amount, True)
    if unit not in spec.units:
        hint = "a unit" if not unit else f"unit {unit!r}"
        raise ConfigError(
            f"Tolerance {part!r} has {hint} that does not fit {metric}: use one of "
            f"{', '.join(units)} (e.g. {metric}:5%)."
        )
    if unit == "s":
        amount *= 1000.0
    elif unit == "us":
        amount /= 1000.0
    elif unit == "pp":
        amount /= 100.0
    return Tolerance(metric, amount, False)


def parse_tolerances(text: str | Iterable[str] | None) -> dict[str, Tolerance]:
    """``"goodput:5%,ttft_p99:10%,itl_p50:2ms"`` -> ``{metric: Tolerance}``.

    Parts are separated by commas (or semicolons); ``METRIC=VALUE`` works too. Units: ``%``
    (relative to the baseline) for every metric; ``ms``, ``s``, ``us`` for latencies;
    ``tok/s`` or ``req/s`` for throughputs; ``pp`` (percentage points) for attainment and
    error_rate. An empty text (or None) gives ``{}``, which ``compare_points`` reads as
    ``DEFAULT_TOLERANCES``. Raises ``ConfigError`` naming the bad part and listing the
    valid metrics.
    """
    if text is None:
        return {}
    parts = (
        [p.strip() for p in text.replace(";", ",").split(",")]
        if isinstance(text, str)
        else [str(p).strip() for p in text]
    )
    out: dict[str, Tolerance] = {}
    for part in parts:
        if not part:
            continue
        tol = _parse_one(part)
        if tol.metric in out:
            raise ConfigError(f"Tolerance for {tol.metric} given twice (in {text!r}).")
        out[tol.metric] = tol
    return out


def resolve_tolerances(tolerances: Mapping[str, Tolerance] | str | None) -> dict[str, Tolerance]:
    """The tolerances a comparison gates on: ``tolerances`` parsed (text) or as given, and
    ``DEFAULT_TOLERANCES`` when that is none."""
    tols = (
        parse_tolerances(tolerances)
        if tolerances is None or isinstance(tolerances, str)
        else dict(tolerances)
    )
    return tols or _default_tolerances()


def _default_tolerances() -> dict[str, Tolerance]:
    return parse_tolerances(DEFAULT_TOLERANCES)
