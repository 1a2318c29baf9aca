"""Stage 5 of a level (verdict): the ``Verdict`` a run was judged with.

Verdicts: one objective checked on one run (``ObjectiveResult``) and the outcome of all
of them together (``Verdict``), with the table and the line an SLO failure shows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_llmslo.catalog import CATALOGUE
from pytest_llmslo.metrics import ErrorMessage
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .dsl import Objective

__all__ = ["ObjectiveResult", "Verdict", "failures_decide", "fmt_ms"]


@dataclass(frozen=True, slots=True)
class ObjectiveResult:
    """One objective checked on one run. ``observed`` is the point estimate, ``bound`` the
    one-sided confidence bound (upper for ``<``, lower for ``>``; None with too few
    samples), ``count`` the samples (requests, or token gaps for itl) and
    ``samples_needed`` the count that makes the bound exist (None for a mean that cannot
    be shown from the data seen). ``gated_on`` says what ``passed`` compared. ``failed``
    of the ``count`` samples stand for failed requests (±∞, see :mod:`pytest_llmslo.slo`)."""

    objective: Objective
    observed: float
    bound: float | None
    count: int
    samples_needed: int | None
    passed: bool
    gated_on: Literal["estimate", "bound"] = "estimate"
    bound_method: Literal["order-statistic", "normal"] = "order-statistic"
    failed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective.to_dict(),
            "observed": _num(self.observed),
            "bound": _num(self.bound),
            "count": self.count,
            "samples_needed": self.samples_needed,
            "passed": self.passed,
            "gated_on": self.gated_on,
            "bound_method": self.bound_method,
            "failed": self.failed,
            "observed_infinite": _inf_sign(self.observed),
            "bound_infinite": _inf_sign(self.bound),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ObjectiveResult:
        # JSON has no infinity: an infinite value travels as null plus its sign.
        obs = d.get("observed")
        observed = math.nan if obs is None else float(obs)
        if obs is None and d.get("observed_infinite"):
            observed = math.inf * int(d["observed_infinite"])
        bound = None if d.get("bound") is None else float(d["bound"])
        if bound is None and d.get("bound_infinite"):
            bound = math.inf * int(d["bound_infinite"])
        return cls(
            objective=Objective.from_dict(d["objective"]),
            observed=observed,
            bound=bound,
            count=int(d.get("count", 0)),
            samples_needed=None if d.get("samples_needed") is None else int(d["samples_needed"]),
            passed=bool(d["passed"]),
            gated_on=d.get("gated_on", "estimate"),
            bound_method=d.get("bound_method", "order-statistic"),
            failed=int(d.get("failed", 0)),
        )


def _num(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return float(x)


def _inf_sign(x: float | None) -> int:
    """+1 / -1 for ±∞, 0 otherwise (JSON keeps infinities as null plus this sign)."""
    if x is None or not math.isinf(x):
        return 0
    return 1 if x > 0 else -1


def _opt(d: Mapping[str, Any], key: str) -> float | None:
    v = d.get(key)
    return None if v is None else float(v)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of checking objectives against a run. ``passed`` needs every result
    to pass, the run to be valid, and the goodput gates that were set to hold."""

    results: tuple[ObjectiveResult, ...]
    passed: bool
    goodput_tok_s: float | None
    goodput_req_s: float | None
    attainment: float | None
    min_attainment: float | None
    min_goodput_tok_s: float | None
    strict: bool
    run_valid: bool
    confidence: float = DEFAULT_CONFIDENCE
    invalid_reasons: tuple[str, ...] = ()
    requests: int = 0
    completed: int = 0
    good: int | None = None
    failures: Mapping[str, int] | None = None
    error_rate: float = 0.0
    max_error_rate: float | None = None
    level: str = ""
    problems: tuple[str, ...] = ()
    errors: tuple[ErrorMessage, ...] = ()
    notes: tuple[str, ...] = ()
    #: Why each failed objective failed, by the engine's own signals (``signals/
    #: attribution.py``): ``"ttft_p99 < 500 ms: engine queue time P99 ...: KV-cache bound"``.
    attribution: tuple[str, ...] = ()

    @property
    def failed_results(self) -> tuple[ObjectiveResult, ...]:
        return tuple(r for r in self.results if not r.passed)

    @property
    def failures_decide(self) -> bool:
        """The requests' failures alone fail this verdict: every request failed, or more
        than ``max_error_rate`` did (:func:`failures_fail`). Such a verdict is an SLO
        failure whatever the client's health: the failures are what the engine answered."""
        return failures_decide(self.requests, self.completed, self.max_error_rate)

    def format(self) -> str:
        """A multi-line table: every objective with threshold, observed value, bound,
        samples and samples needed, pass/fail; then goodput, attainment, failures and
        the run's validity."""
        c = f"{self.confidence * 100:g}%"
        head = "PASSED" if self.passed else "FAILED"
        at = f" at {self.level}" if self.level else ""
        mode = (
            f"strict: gates on the {c} confidence bound"
            if self.strict
            else f"gates on the point estimate; {c} bound shown"
        )
        lines = [f"SLO {head}{at} ({mode})"]
        lines += self._objective_rows(c)
        lines += self._sample_notes(c)
        lines.append("  " + self._goodput_line())
        lines.append("  " + self._requests_line())
        for e in self.errors:
            lines.append(f"    {e}")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.extend(f"  why: {a}" for a in self.attribution)
        if not self.results:
            lines.append("  no objectives given: only the failures were checked")
        if not self.run_valid:
            lines.append(self._invalid_line())
        return "\n".join(lines)

    def _objective_rows(self, c: str) -> list[str]:
        """The table of objectives, one aligned row each, under its header."""
        rows = [("objective", "observed", f"bound({c})", "samples", "needed", "result")]
        for r in self.results:
            bound = fmt_ms(r.bound) if r.bound is not None else "n/a"
            if r.bound_method == "normal" and r.bound is not None:
                bound += "*"
            needed = "-" if r.samples_needed is None else str(r.samples_needed)
            rows.append(
                (
                    r.objective.label,
                    fmt_ms(r.observed),
                    bound,
                    str(r.count),
                    needed,
                    "pass" if r.passed else "FAIL",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = []
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [
                row[i].rjust(widths[i]) for i in range(1, len(row))
            ]
            lines.append("  " + "  ".join(cells).rstrip())
        if any(r.bound_method == "normal" for r in self.results):
            lines.append("  * normal-approximation bound of a mean (not distribution-free)")
        return lines

    def _sample_notes(self, c: str) -> list[str]:
        """What each objective's samples lack: failed requests counted as infinite,
        completed requests without the metric's event, too few samples for a bound."""
        lines = []
        for r in self.results:
            if r.failed:
                inf = "+∞" if r.objective.upper else "−∞"
                lines.append(
                    f"  {r.objective.name}: {r.failed} of its {r.count} samples are failed "
                    f"requests, counted as {inf}"
                )
            missing = self.completed - (r.count - r.failed)
            entry = CATALOGUE.get(r.objective.metric)
            lacked = entry.undefined if entry is not None else ""
            if lacked and r.count > r.failed and missing > 0:
                # Completed, yet its event never came (no output chunk streamed): easy to
                # miss behind an attainment.
                lines.append(
                    f"  {r.objective.name}: {missing} completed request(s) {lacked}; "
                    f"{r.objective.metric} is undefined for them and they are not good"
                )
            if r.count == 0:
                lines.append(f"  {r.objective.name}: no samples (no completed request had it)")
            elif r.bound is None:
                # Shown in both modes: a percentile without a bound is not evidence.
                need = r.samples_needed
                extra = f"; {need} needed" if need is not None else ""
                lines.append(
                    f"  {r.objective.name}: {r.count} samples are too few for a {c} bound{extra}"
                )
        return lines

    def _invalid_line(self) -> str:
        """Why the run is not valid, and whether that decides the verdict."""
        why = "; ".join(self.invalid_reasons) or "no reason given"
        if self.failures_decide:
            return (
                "  the client was flagged too, but the failed requests decide the "
                f"verdict (the failure gates are judged first): {why}"
            )
        return (
            "  INVALID RUN: the load generator was the bottleneck, so these numbers "
            f"are the client's, not the engine's: {why}"
        )

    def _goodput_line(self) -> str:
        if self.attainment is None:
            att = "attainment n/a (no requests)"
        else:
            att = f"attainment {self.attainment:.1%}"
            if self.good is not None:
                att += f" ({self.good}/{self.requests} good)"
        if self.min_attainment is not None:
            ok = self.attainment is not None and self.attainment >= self.min_attainment
            att += f", required >= {self.min_attainment:.1%}: {'pass' if ok else 'FAIL'}"
        tok = "n/a" if self.goodput_tok_s is None else f"{self.goodput_tok_s:.1f}"
        req = "n/a" if self.goodput_req_s is None else f"{self.goodput_req_s:.2f}"
        line = f"goodput {tok} tok/s, {req} req/s"
        if self.min_goodput_tok_s is not None:
            ok = self.goodput_tok_s is not None and self.goodput_tok_s >= self.min_goodput_tok_s
            line += f" (required >= {self.min_goodput_tok_s:g} tok/s: {'pass' if ok else 'FAIL'})"
        return f"{line}; {att}"

    def _requests_line(self) -> str:
        failed = self.requests - self.completed
        line = f"requests: {self.requests}, completed {self.completed}, failed {failed}"
        if self.failures:
            line += " (" + ", ".join(f"{k}: {v}" for k, v in self.failures.items()) + ")"
        line += f", error rate {self.error_rate:.1%}"
        if self.max_error_rate is not None:
            ok = self.error_rate <= self.max_error_rate
            line += f" (allowed <= {self.max_error_rate:.1%}: {'pass' if ok else 'FAIL'})"
        return line

    def summary_line(self) -> str:
        """One line naming what failed (the first line of an SloViolation)."""
        if self.passed:
            return "SLO met"
        bits = []
        if not self.run_valid and not self.failures_decide:
            bits.append("run invalid (client bottleneck)")
        for r in self.failed_results:
            shown = r.bound if (self.strict and r.bound is not None) else r.observed
            what = "bound" if self.strict else "observed"
            if self.strict and r.bound is None:
                bits.append(f"{r.objective.label} (too few samples: {r.count})")
            else:
                bits.append(f"{r.objective.label} ({what} {fmt_ms(shown)})")
        bits.extend(self.problems)
        return "SLO not met: " + "; ".join(bits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "passed": self.passed,
            "goodput_tok_s": self.goodput_tok_s,
            "goodput_req_s": self.goodput_req_s,
            "attainment": self.attainment,
            "min_attainment": self.min_attainment,
            "min_goodput_tok_s": self.min_goodput_tok_s,
            "strict": self.strict,
            "run_valid": self.run_valid,
            "confidence": self.confidence,
            "invalid_reasons": list(self.invalid_reasons),
            "requests": self.requests,
            "completed": self.completed,
            "good": self.good,
            "failures": None if self.failures is None else dict(self.failures),
            "error_rate": self.error_rate,
            "max_error_rate": self.max_error_rate,
            "level": self.level,
            "problems": list(self.problems),
            "errors": [e.to_dict() for e in self.errors],
            "notes": list(self.notes),
            "attribution": list(self.attribution),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Verdict:
        failures = d.get("failures")
        return cls(
            results=tuple(ObjectiveResult.from_dict(r) for r in d.get("results", ())),
            passed=bool(d["passed"]),
            goodput_tok_s=_opt(d, "goodput_tok_s"),
            goodput_req_s=_opt(d, "goodput_req_s"),
            attainment=_opt(d, "attainment"),
            min_attainment=_opt(d, "min_attainment"),
            min_goodput_tok_s=_opt(d, "min_goodput_tok_s"),
            strict=bool(d.get("strict", False)),
            run_valid=bool(d.get("run_valid", True)),
            confidence=float(d.get("confidence", DEFAULT_CONFIDENCE)),
            invalid_reasons=tuple(d.get("invalid_reasons", ())),
            requests=int(d.get("requests", 0)),
            completed=int(d.get("completed", 0)),
            good=None if d.get("good") is None else int(d["good"]),
            failures=None if failures is None else {str(k): int(v) for k, v in failures.items()},
            error_rate=float(d.get("error_rate", 0.0)),
            max_error_rate=_opt(d, "max_error_rate"),
            level=str(d.get("level", "")),
            problems=tuple(d.get("problems", ())),
            errors=tuple(ErrorMessage.from_dict(e) for e in d.get("errors") or ()),
            notes=tuple(d.get("notes") or ()),
            attribution=tuple(d.get("attribution") or ()),
        )


def fmt_ms(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞ (failures)" if x > 0 else "−∞ (failures)"
    if abs(x) >= 100:
        return f"{x:.1f} ms"
    if abs(x) >= 1:
        return f"{x:.2f} ms"
    return f"{x:.3f} ms"


def failures_decide(requests: int, completed: int, max_error_rate: float | None) -> bool:
    """Whether the failures alone fail a run of ``requests``, ``completed`` of them:
    every request failed, or more than ``max_error_rate`` (None: no limit) did."""
    if requests and not completed:
        return True
    if max_error_rate is None or not requests or not completed:
        return False
    return (requests - completed) / requests > max_error_rate
