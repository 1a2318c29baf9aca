"""Stage 5 of a level (verdict): ``evaluate(run, objectives)`` judges a ``Run``.

Judging a run: each objective's gate (:func:`evaluate`), the failure gates
(:func:`failures_fail`), the engine signal that explains a failed objective, and whether
a run still in progress is already settled (:func:`settled`)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Literal

from pytest_llmslo import metrics
from pytest_llmslo.catalog import stat_name
from pytest_llmslo.records import Run
from pytest_llmslo.signals.attribution import explain
from pytest_llmslo.signals.levelsignals import LevelSignals
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .dsl import Objective, coerce_objectives
from .verdict import ObjectiveResult, Verdict, failures_decide, fmt_ms

__all__ = ["evaluate", "failures_fail", "settled"]


def _check_one(o: Objective, run: Run, strict: bool, confidence: float) -> ObjectiveResult:
    values, failed = metrics.gate_values(run, o.metric, o.upper)
    n = int(values.size)
    if o.stat == "mean":
        observed = float(values.mean()) if n else math.nan
        bound: float | None = None
        needed: int | None = None
        if failed:
            # An infinite sample makes the mean infinite and leaves no spread to bound.
            bound = observed
        elif n >= 2:
            # CLT one-sided bound; the n at which it would clear the threshold at the
            # observed mean and spread is the samples-needed figure.
            z = statistics.NormalDist().inv_cdf(confidence)
            sd = float(values.std(ddof=1))
            half = z * sd / math.sqrt(n)
            bound = observed + half if o.upper else observed - half
            margin = (o.threshold - observed) if o.upper else (observed - o.threshold)
            if sd == 0.0:
                needed = 2 if margin > 0 or (margin == 0 and o.op in ("<=", ">=")) else None
            elif margin > 0:
                needed = max(2, math.ceil((z * sd / margin) ** 2))
        method: Literal["order-statistic", "normal"] = "normal"
    else:
        q = float(o.stat)
        observed, bound = metrics.gate_statistic(values, q, confidence, o.upper)
        side: Literal["upper", "lower"] = "upper" if o.upper else "lower"
        needed = metrics.samples_needed(q, confidence, side)
        method = "order-statistic"
    passed = o.holds(bound) if strict else o.holds(observed)
    return ObjectiveResult(
        objective=o,
        observed=observed,
        bound=bound,
        count=n,
        samples_needed=needed,
        passed=passed,
        gated_on="bound" if strict else "estimate",
        bound_method=method,
        failed=failed,
    )


def evaluate(
    run: Run,
    objectives: Iterable[Objective | str] | str,
    *,
    strict: bool = False,
    confidence: float = DEFAULT_CONFIDENCE,
    min_attainment: float | None = None,
    min_goodput_tok_s: float | None = None,
    max_error_rate: float | None = None,
    allow_no_objectives: bool = False,
) -> Verdict:
    """Check ``objectives`` (Objective objects or text for :func:`parse_objectives`)
    against ``run`` and return a :class:`Verdict`; raises nothing on failure.

    Each objective's aggregate gate compares the point estimate (or, with ``strict``, the
    confidence bound at ``confidence``) with its threshold, over every request, failed
    ones counted as the worst value (see :mod:`pytest_llmslo.slo`). Goodput and attainment
    are computed from the per-request thresholds of all objectives together;
    ``min_attainment`` (0..1), ``min_goodput_tok_s`` and ``max_error_rate`` (0..1) add
    gates when given. An invalid run fails; so does a run where every request failed or
    none was measured. Without objectives the verdict fails unless
    ``allow_no_objectives`` (then only the error gates judge the run)."""
    if not isinstance(run, Run):
        raise TypeError(f"evaluate() needs a Run, got {type(run).__name__}")
    objs = coerce_objectives((objectives,) if isinstance(objectives, str) else objectives)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    for name, v in (("min_attainment", min_attainment), ("max_error_rate", max_error_rate)):
        if v is not None and not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} is a fraction in [0, 1], got {v!r}")
    results = tuple(_check_one(o, run, strict, confidence) for o in objs)
    gp = metrics.goodput(run, objs)
    requests = len(run.records)
    completed = run.ok_count
    error_rate = (requests - completed) / requests if requests else 0.0
    problems: list[str] = []
    if not objs and not allow_no_objectives:
        problems.append("no objectives given")
    timeout = run.meta.level_timeout
    problems += _measured_problems(requests, completed, timeout)
    problems += _gate_problems(
        gp, completed, error_rate, min_attainment, min_goodput_tok_s, max_error_rate
    )
    notes = _notes(run, requests, completed, timeout)
    passed = run.health.valid and not problems and all(r.passed for r in results)
    return Verdict(
        results=results,
        passed=passed,
        goodput_tok_s=gp.tok_s if objs else None,
        goodput_req_s=gp.req_s if objs else None,
        attainment=gp.attainment if objs else None,
        min_attainment=min_attainment,
        min_goodput_tok_s=min_goodput_tok_s,
        strict=strict,
        run_valid=run.health.valid,
        confidence=confidence,
        invalid_reasons=tuple(run.health.reasons),
        requests=requests,
        completed=completed,
        good=gp.good if objs else None,
        failures=metrics.failure_counts(run),
        error_rate=error_rate,
        max_error_rate=max_error_rate,
        level=run.level.label,
        problems=tuple(problems),
        errors=metrics.failure_messages(run),
        notes=tuple(notes),
        attribution=_attribute(run, results),
    )


def _measured_problems(requests: int, completed: int, timeout: object) -> list[str]:
    """A run without a measured request, or without a completed one, fails."""
    if requests == 0:
        why = "no request was measured"
        if isinstance(timeout, Mapping):
            why += (
                f": the level's time bound ({timeout.get('bound_s')} s, --level-timeout) "
                f"passed during {timeout.get('phase')}"
            )
        return [why]
    if completed == 0:
        return [f"every request failed ({requests} of {requests})"]
    return []


def _gate_problems(
    gp: metrics.Goodput,
    completed: int,
    error_rate: float,
    min_attainment: float | None,
    min_goodput_tok_s: float | None,
    max_error_rate: float | None,
) -> list[str]:
    """The attainment, goodput and error-rate gates that were set and missed."""
    problems: list[str] = []
    if min_attainment is not None and (gp.attainment is None or gp.attainment < min_attainment):
        att = "n/a" if gp.attainment is None else f"{gp.attainment:.1%}"
        problems.append(f"attainment {att} < required {min_attainment:.1%}")
    if min_goodput_tok_s is not None and gp.tok_s < min_goodput_tok_s:
        problems.append(f"goodput {gp.tok_s:.1f} tok/s < required {min_goodput_tok_s:g} tok/s")
    if max_error_rate is not None and completed and error_rate > max_error_rate:
        problems.append(f"error rate {error_rate:.1%} > allowed {max_error_rate:.1%}")
    return problems


def _notes(run: Run, requests: int, completed: int, timeout: object) -> list[str]:
    """What the verdict should say about the run beside the gates: a time bound that cut
    it, outputs shorter than pinned, usage that disagrees with the stream."""
    notes: list[str] = []
    if isinstance(timeout, Mapping) and requests:
        notes.append(
            f"the level's time bound ({timeout.get('bound_s')} s, --level-timeout) cut it "
            f"during {timeout.get('phase')}; requests in flight then count as failed"
        )
    short = metrics.short_outputs(run)
    if short:
        notes.append(
            f"{short} of {completed} completed requests returned fewer tokens than the pinned "
            "output length (the server ignores ignore_eos/min_tokens?): this run measured "
            "another workload"
        )
    mismatched, claimed, streamed = metrics.usage_mismatches(run)
    if mismatched:
        notes.append(
            f"{mismatched} of {completed} completed requests reported a usage that disagrees "
            f"with the stream ({claimed} tokens claimed, {streamed} streamed): the streamed "
            "tokens are counted, ITL and TPOT come from the chunks that arrived"
        )
    return notes


def failures_fail(run: Run, max_error_rate: float | None) -> bool:
    """Whether the failure gates alone fail ``run``: every request failed, or more than
    ``max_error_rate`` (0..1, None: no limit) of them did. They are judged before the
    client's health: a failed request is the engine's answer (an HTTP error, a reset, a
    stall until a deadline), which no busy client turns into a pass, so such a level is an
    SLO failure with the error texts, never inconclusive."""
    completed = run.ok_count
    return failures_decide(len(run.records), completed, max_error_rate)


def _attribute(run: Run, results: tuple[ObjectiveResult, ...]) -> tuple[str, ...]:
    """Each failed latency objective with the engine signal that explains it (or why none
    does); none when the run has no signals section (signals were off)."""
    raw = run.meta.signals
    if raw is None:
        return ()
    sig = LevelSignals.from_dict(raw)
    out = []
    for r in results:
        o = r.objective
        if r.passed:
            continue
        if not math.isfinite(r.observed):
            continue
        stat = stat_name(o.stat)
        why = explain(o.metric, stat, r.observed, sig)
        out.append(
            f"{o.metric.upper()} {stat.upper() if stat.startswith('p') else stat} "
            f"{r.observed:.0f} ms (objective {o.op} {o.threshold:g} ms) at {run.level.label}: "
            f"{why.text}"
        )
    return tuple(out)


def settled(
    run: Run,
    objectives: Iterable[Objective | str] | str,
    *,
    strict: bool = False,
    confidence: float = DEFAULT_CONFIDENCE,
    max_error_rate: float | None = None,
    planned: int | None = None,
    min_completed: int = 100,
) -> str | None:
    """Why the verdict of ``run`` (in progress) is already settled, or None (see
    :mod:`pytest_llmslo.slo`). Percentile objectives only: a mean has no distribution-free
    bound, so with one among them a pass is never settled early. ``planned`` is the level's
    request count (None: bounded by time) for the error-rate rule; ``min_completed``
    completed requests are needed before anything is settled."""
    objs = coerce_objectives((objectives,) if isinstance(objectives, str) else objectives)
    n = len(run.records)
    completed = run.ok_count
    failed = n - completed
    if planned and max_error_rate is not None and failed > max_error_rate * planned:
        return (
            f"{failed} failed requests already exceed {max_error_rate:.1%} of the {planned} "
            "planned: the error gate cannot pass"
        )
    if completed < min_completed or not objs:
        return None
    c = f"{confidence:.0%}"
    every_holds = True
    for o in objs:
        if o.stat == "mean":
            every_holds = False
            continue
        values, _ = metrics.gate_values(run, o.metric, o.upper)
        q = float(o.stat)
        _, far = metrics.gate_statistic(values, q, confidence, upper=not o.upper)
        if far is not None and not o.holds(far):
            side = "lower" if o.upper else "upper"
            return (
                f"{o.label} is violated at {c} confidence: its {side} bound is "
                f"{fmt_ms(far)} after {n} requests"
            )
        _, near = metrics.gate_statistic(values, q, confidence, upper=o.upper)
        if near is None or not o.holds(near):
            every_holds = False
    if strict and every_holds:
        return f"every objective holds at {c} confidence (strict bounds) after {n} requests"
    return None
