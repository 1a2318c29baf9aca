"""Whether a change is run-to-run noise: the per-request samples of the two points judge
it (rule 2 of ``regression``'s rule).

For a latency percentile (``ttft_p99``, ...) each side's samples give a distribution-free
interval of that percentile (binomial order statistics, each at sqrt(95 %) so that both
hold together at 95 %); when the intervals overlap, the change is noise. This is valid for
any number of samples, and a tail percentile of few requests has no upper bound, so its
rise is always noise: a P99 of 200 requests cannot show one. For a mean, a seeded
bootstrap interval (95 %) of the change, noise when it contains 0; with fewer than
``MIN_NOISE_SAMPLES`` a side, the Mann-Whitney rank test instead (p >= 0.05 -> noise). The
rank test's p-value is reported with every latency judgement. For attainment a
two-proportion test (p >= 0.05 -> noise). Throughput (output tok/s), req/s and goodput
(tok/s and req/s, over the requests the samples' ``good`` column flags): a z-test of the
change against the standard errors of both runs' per-window rates
(``detectable.window_rates``: the within-run spread; p >= 0.05 -> noise). Everything in a
document without per-request samples (or goodput without the ``good`` column, in a
document written before it) is judged by the tolerance alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_llmslo import stats
from pytest_llmslo.catalog import MetricSpec
from pytest_llmslo.document.lookup import metric_value
from pytest_llmslo.metrics import samples_needed
from pytest_llmslo.stats import DEFAULT_CONFIDENCE
from pytest_llmslo.sweep import SweepPoint

from .detectable import WINDOW_FIELDS, window_rates, window_se, z_of

__all__ = ["MIN_NOISE_SAMPLES", "NoiseJudgement", "judge_noise"]


#: Fewer samples than this on a side: the noise of a mean is judged by the rank test, not by
#: a bootstrap (which is too narrow on a handful of values).
MIN_NOISE_SAMPLES = 20


def _counts(point: SweepPoint) -> tuple[int, int] | None:
    """The good and all requests of a point: its verdict's, else its summary's."""
    for src in (point.verdict, point.summary):
        good, requests = getattr(src, "good", None), getattr(src, "requests", None)
        if isinstance(good, int) and isinstance(requests, int) and requests > 0:
            return good, requests
    return None


def _samples(point: SweepPoint, metric: str) -> list[Any] | None:
    values = (point.samples or {}).get(f"{metric}_ms")
    return list(values) if isinstance(values, list | tuple) else None


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


def judge_noise(
    spec: MetricSpec,
    old_point: SweepPoint,
    new_point: SweepPoint,
    *,
    confidence: float,
    resamples: int,
    seed: int,
) -> NoiseJudgement:
    """Whether the change of ``spec``'s metric from ``old_point`` to ``new_point`` is
    within run-to-run noise (the module docstring has the tests); ``seed`` seeds the
    bootstrap."""
    if spec.kind == "latency":
        return _latency_noise(spec, old_point, new_point, confidence, resamples, seed)
    if spec.field == "attainment":
        ca, cb = _counts(old_point), _counts(new_point)
        if ca is None or cb is None:
            return NoiseJudgement("none", None, note="no good/request counts stored")
        test = stats.two_proportion_test(ca[0], ca[1], cb[0], cb[1])
        return NoiseJudgement(
            "two-proportion",
            not test.significant(1.0 - confidence),
            p_value=test.p_value,
            confidence=confidence,
            n_old=ca[1],
            n_new=cb[1],
        )
    if spec.field in WINDOW_FIELDS:
        judged = _windows(spec, old_point, new_point, confidence)
        if judged is not None:
            return judged
    return NoiseJudgement("none", None, note="one number per run: judged by the tolerance alone")


def _latency_noise(
    spec: MetricSpec,
    old_point: SweepPoint,
    new_point: SweepPoint,
    confidence: float,
    resamples: int,
    seed: int,
) -> NoiseJudgement:
    """A latency's change from its per-request samples: a bootstrap of the mean (the rank
    test for a handful of samples), order statistics for a percentile."""
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
            not rank.significant(1.0 - confidence),
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
    return _percentile_noise(spec, a, b, confidence, rank.p_value, note)


def _percentile_noise(
    spec: MetricSpec,
    a: np.ndarray,
    b: np.ndarray,
    confidence: float,
    p_value: float | None,
    note: str,
) -> NoiseJudgement:
    """A percentile's change judged by the order statistics that bound it in each run."""
    shift = stats.quantile_shift(a, b, spec.quantile, confidence)
    # The change lies in [new.low - old.high, new.high - old.low]; an unbounded side
    # (too few samples for that tail) leaves that end open.
    low = (
        None if shift.new.low is None or shift.old.high is None else shift.new.low - shift.old.high
    )
    high = (
        None if shift.new.high is None or shift.old.low is None else shift.new.high - shift.old.low
    )
    if low is None or high is None:
        each = (1.0 + shift.old.confidence) / 2.0
        need = max(
            samples_needed(spec.quantile, each, "upper"),
            samples_needed(spec.quantile, each, "lower"),
        )
        bounded = f"bounding {spec.name.split('_')[1].upper()} takes {need} samples a side"
        note = f"{note}; {bounded}" if note else bounded
    return NoiseJudgement(
        "order-statistic",
        not shift.significant,
        p_value=p_value,
        low=low,
        high=high,
        confidence=confidence,
        n_old=int(a.size),
        n_new=int(b.size),
        note=note,
    )


def _windows(
    spec: MetricSpec, old_point: SweepPoint, new_point: SweepPoint, confidence: float
) -> NoiseJudgement | None:
    """A rate's change against both runs' per-window standard errors (a z-test)."""
    ra, rb = window_rates(old_point, spec.field), window_rates(new_point, spec.field)
    old, new = metric_value(old_point, spec.name), metric_value(new_point, spec.name)
    if ra is None or rb is None or old is None or new is None:
        return None
    se = float(np.hypot(window_se(ra), window_se(rb)))
    diff = new - old
    if se == 0.0:
        p = 0.0 if diff else 1.0
    else:
        p = 2.0 * stats.normal_sf(abs(diff) / se)
    z = z_of(confidence)
    return NoiseJudgement(
        "windows",
        p >= 1.0 - confidence,
        p_value=p,
        low=diff - z * se,
        high=diff + z * se,
        confidence=confidence,
        n_old=len(ra),
        n_new=len(rb),
        note="per-window rates: the runs' within-run spread",
    )
