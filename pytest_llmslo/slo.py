"""The SLO DSL: metric symbols, objectives, verdicts and the assertion helpers.

    from pytest_llmslo import assert_goodput, ttft_p99, itl_p50

    def test_chat(load):
        assert_goodput(ttft_p99 < 500, itl_p50 < 30)      # the run the load fixture bound

A comparison of a metric statistic with a number builds an :class:`Objective`; nothing is
evaluated until :func:`evaluate` (or ``assert_goodput``/``assert_slo``) gets a run. An
objective refuses to be truth-tested, so a bare ``assert ttft_p99 < 500`` raises a
TypeError instead of passing by accident.

What an objective ``P_q(m) < x`` means, twice over:

- the *aggregate gate*: the run's q-th percentile of m is below x (for ``itl`` over all
  token gaps of the run, for the other metrics over completed requests);
- the *per-request threshold*: a request is good when its own m is below x. For ``itl``
  "its own m" is the request's own q-th percentile (or mean) over its own token gaps;
  TTFT, TTFOT, TPOT and e2e have one value per request, so q does not change it.
  Goodput counts the completed requests that meet every threshold together (DistServe,
  vLLM ``--goodput``); attainment = good / all requests.

Failures are never green. Every gate is computed over *all* requests: a failed request
(HTTP error, in-stream error, timeout, reset, a stream without output, a request cut by the
run's end) counts as +∞ for an upper-bound objective (−∞ for a lower one), once per request
(``itl``: once per token gap it was asked for), so a P99 is never taken over the survivors
only. A run whose error rate is above ``max_error_rate`` fails (``assert_goodput`` and
``assert_slo`` default to 1 %, ``DEFAULT_MAX_ERROR_RATE``; pass ``max_error_rate=None`` to
lift it), and a run where every request failed, or none was measured, fails whatever the
gates say.

Gates compare the point estimate by default. ``strict=True`` compares the one-sided
confidence bound instead: for ``<``/``<=`` the distribution-free upper bound of the
percentile, for ``>``/``>=`` the lower bound (so strict always errs against passing);
with too few samples for the bound the gate fails and says how many are needed. A
``mean`` has no distribution-free bound; strict mode uses the normal (CLT) bound
mean ± z_c·s/√n and says so.

``assert_goodput`` checks every aggregate gate *and* attainment ≥ ``min_attainment``,
0.9 by default (the 90 % SLO attainment target of the DistServe evaluation; pass
``min_attainment=None`` to only report goodput). ``assert_slo`` checks the aggregate gates
only, plus ``min_attainment``/``min_goodput_tok_s``/``max_error_rate`` when given. A run the
load generator flagged invalid (it, not the engine, was the bottleneck) is neither a pass
nor a failure: the helpers raise ``Inconclusive`` with the reason, since its numbers
would be the client's latency, not the engine's. The failure gates are judged first,
though: a run where every request failed, or more than ``max_error_rate`` did, is an SLO
failure whatever the client's health (``failures_fail``), since failed requests are the
engine's answers, not the client's numbers.

``settled`` is the early-stop question: is the verdict of a run still in progress already
known at the confidence? A violation is, when an objective's confidence bound on the far
side of its threshold is past it (a P99 whose *lower* bound is above a ``<`` threshold), or
when the failures alone already exceed the error rate of the planned requests; in strict
mode a pass is, when every objective's gate bound holds.
"""

from __future__ import annotations

import math
import operator
import re
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from . import metrics
from .catalog import DSL_STATS, METRICS, Stat, parse_stat, stat_name
from .errors import ConfigError, Inconclusive, LoadError, SloViolation
from .metrics import ErrorMessage
from .records import Run
from .signals.attribution import explain
from .signals.level import LevelSignals

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_MIN_ATTAINMENT",
    "STATS",
    "MetricSymbol",
    "Objective",
    "ObjectiveResult",
    "StatSymbol",
    "Verdict",
    "assert_goodput",
    "assert_slo",
    "bind_run",
    "current_run",
    "e2e",
    "e2e_mean",
    "e2e_p50",
    "e2e_p90",
    "e2e_p95",
    "e2e_p99",
    "e2e_p999",
    "evaluate",
    "failures_fail",
    "itl",
    "itl_mean",
    "itl_p50",
    "itl_p90",
    "itl_p95",
    "itl_p99",
    "itl_p999",
    "parse_objectives",
    "settled",
    "tpot",
    "tpot_mean",
    "tpot_p50",
    "tpot_p90",
    "tpot_p95",
    "tpot_p99",
    "tpot_p999",
    "ttfot",
    "ttfot_mean",
    "ttfot_p50",
    "ttfot_p90",
    "ttfot_p95",
    "ttfot_p99",
    "ttfot_p999",
    "ttft",
    "ttft_mean",
    "ttft_p50",
    "ttft_p90",
    "ttft_p95",
    "ttft_p99",
    "ttft_p999",
    "unbind_run",
]

Op = Literal["<", "<=", ">", ">="]
OPS: tuple[Op, ...] = ("<", "<=", ">", ">=")
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
STATS: tuple[str, ...] = DSL_STATS
DEFAULT_MIN_ATTAINMENT = 0.9
#: The error rate above which a run fails even when every gate holds.
DEFAULT_MAX_ERROR_RATE = 0.01

_HELP = "use assert_goodput(...) or assert_slo(...) to check objectives against a run"


# --------------------------------------------------------------------------- objectives


@dataclass(frozen=True, slots=True)
class Objective:
    """``metric`` ``stat`` ``op`` ``threshold`` (ms), e.g. ttft P99 < 500 ms."""

    metric: str
    stat: Stat
    op: Op
    threshold: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"unknown metric {self.metric!r}; valid: {', '.join(METRICS)}")
        if self.op not in OPS:
            raise ValueError(f"unknown comparison {self.op!r}; valid: {' '.join(OPS)}")
        object.__setattr__(self, "stat", parse_stat(self.stat))
        t = float(self.threshold)
        if math.isnan(t):
            raise ValueError("an objective's threshold cannot be NaN")
        object.__setattr__(self, "threshold", t)

    @property
    def name(self) -> str:
        """Flat name of the statistic: ``ttft_p99``."""
        return f"{self.metric}_{stat_name(self.stat)}"

    @property
    def label(self) -> str:
        """``ttft_p99 < 500 ms``."""
        return f"{self.name} {self.op} {self.threshold:g} ms"

    @property
    def upper(self) -> bool:
        """True for ``<``/``<=``: the objective bounds the metric from above."""
        return self.op in ("<", "<=")

    def holds(self, value: float | None) -> bool:
        """Whether ``value`` satisfies the comparison (False for None/NaN)."""
        if value is None or math.isnan(value):
            return False
        return bool(_COMPARE[self.op](value, self.threshold))

    def __bool__(self) -> bool:
        raise TypeError(
            f"the objective `{self.label}` has no truth value: a bare "
            f"`assert {self.name} {self.op} {self.threshold:g}` cannot be evaluated without "
            f"a run; {_HELP}, e.g. assert_goodput({self.name} {self.op} {self.threshold:g})"
        )

    def __str__(self) -> str:
        return self.label

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "stat": self.stat,
            "op": self.op,
            "threshold": self.threshold,
            "label": self.label,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Objective:
        return cls(d["metric"], d["stat"], d["op"], float(d["threshold"]))


def _threshold(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} can only be compared with a number of milliseconds, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class StatSymbol:
    """A statistic of a metric, such as ``ttft.p99`` (alias ``ttft_p99``); comparing it
    with a number of milliseconds builds an :class:`Objective`."""

    metric: str
    stat: Stat

    @property
    def name(self) -> str:
        return f"{self.metric}_{stat_name(self.stat)}"

    def _objective(self, op: Op, other: object) -> Objective:
        return Objective(self.metric, self.stat, op, _threshold(other, self.name))

    def __lt__(self, other: object) -> Objective:
        return self._objective("<", other)

    def __le__(self, other: object) -> Objective:
        return self._objective("<=", other)

    def __gt__(self, other: object) -> Objective:
        return self._objective(">", other)

    def __ge__(self, other: object) -> Objective:
        return self._objective(">=", other)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class MetricSymbol:
    """A metric (``ttft``, ``ttfot``, ``itl``, ``tpot``, ``e2e``); pick a statistic with
    ``.p50 .p90 .p95 .p99 .p999 .mean`` or ``.p(99.5)``."""

    metric: str

    def p(self, q: float) -> StatSymbol:
        """Any percentile in (0, 100)."""
        return StatSymbol(self.metric, parse_stat(q))

    @property
    def p50(self) -> StatSymbol:
        return StatSymbol(self.metric, 50.0)

    @property
    def p90(self) -> StatSymbol:
        return StatSymbol(self.metric, 90.0)

    @property
    def p95(self) -> StatSymbol:
        return StatSymbol(self.metric, 95.0)

    @property
    def p99(self) -> StatSymbol:
        return StatSymbol(self.metric, 99.0)

    @property
    def p999(self) -> StatSymbol:
        return StatSymbol(self.metric, 99.9)

    @property
    def mean(self) -> StatSymbol:
        return StatSymbol(self.metric, "mean")

    def _no_stat(self, op: str, other: object) -> Objective:
        raise TypeError(
            f"`{self.metric} {op} {other!r}` needs a statistic: write "
            f"`{self.metric}.p99 {op} {other!r}` (or {self.metric}_p99); "
            f"statistics: {', '.join(STATS)}"
        )

    def __lt__(self, other: object) -> Objective:
        return self._no_stat("<", other)

    def __le__(self, other: object) -> Objective:
        return self._no_stat("<=", other)

    def __gt__(self, other: object) -> Objective:
        return self._no_stat(">", other)

    def __ge__(self, other: object) -> Objective:
        return self._no_stat(">=", other)

    def __repr__(self) -> str:
        return self.metric


ttft = MetricSymbol("ttft")
ttfot = MetricSymbol("ttfot")
itl = MetricSymbol("itl")
tpot = MetricSymbol("tpot")
e2e = MetricSymbol("e2e")

ttft_p50, ttft_p90, ttft_p95 = ttft.p50, ttft.p90, ttft.p95
ttft_p99, ttft_p999, ttft_mean = ttft.p99, ttft.p999, ttft.mean
ttfot_p50, ttfot_p90, ttfot_p95 = ttfot.p50, ttfot.p90, ttfot.p95
ttfot_p99, ttfot_p999, ttfot_mean = ttfot.p99, ttfot.p999, ttfot.mean
itl_p50, itl_p90, itl_p95 = itl.p50, itl.p90, itl.p95
itl_p99, itl_p999, itl_mean = itl.p99, itl.p999, itl.mean
tpot_p50, tpot_p90, tpot_p95 = tpot.p50, tpot.p90, tpot.p95
tpot_p99, tpot_p999, tpot_mean = tpot.p99, tpot.p999, tpot.mean
e2e_p50, e2e_p90, e2e_p95 = e2e.p50, e2e.p90, e2e.p95
e2e_p99, e2e_p999, e2e_mean = e2e.p99, e2e.p999, e2e.mean


# --------------------------------------------------------------------------- parsing

_UNITS = {"": 1.0, "ms": 1.0, "s": 1000.0, "us": 1e-3, "µs": 1e-3}
_OBJ_RE = re.compile(
    r"""^\s*(?P<metric>[a-z0-9]+)\s*(?:[._]\s*(?P<stat>[a-z]+[0-9.]*|[0-9.]+))?\s*
        (?P<op><=|>=|<|>)\s*
        (?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?)\s*
        (?P<unit>ms|s|us|µs)?\s*$""",
    re.IGNORECASE | re.VERBOSE,
)


def _valid_names() -> str:
    return (
        f"valid metrics: {', '.join(METRICS)}; valid statistics: {', '.join(STATS)} "
        "(or pNN such as p99.5); units: ms (default), s, us; "
        "e.g. 'ttft_p99<500,itl_p50<30' or 'ttft.p99 < 0.5s'"
    )


def parse_objectives(text: str | Iterable[str], *, source: str = "") -> tuple[Objective, ...]:
    """Objectives from text such as ``"ttft_p99<500,itl_p50<30"`` or
    ``"ttft.p99 < 500ms; itl.p50 < 30"`` (separators: comma, semicolon, newline; units ms,
    s, us). An iterable of such strings is joined. ConfigError names the bad part, the
    ``source`` (e.g. ``"--slo"``, ``"ini llmslo_slo"``) and the valid names."""
    parts_in = [text] if isinstance(text, str) else list(text)
    where = f" (from {source})" if source else ""
    out: list[Objective] = []
    for chunk in parts_in:
        if not isinstance(chunk, str):
            raise ConfigError(f"SLO objectives{where} must be text, got {chunk!r}")
        for part in re.split(r"[,;\n]", chunk):
            if not part.strip():
                continue
            m = _OBJ_RE.match(part)
            if m is None:
                raise ConfigError(
                    f"cannot parse SLO objective {part.strip()!r}{where}: expected "
                    f"METRIC_STAT OP NUMBER[UNIT]; {_valid_names()}"
                )
            metric = m["metric"].lower()
            if metric not in METRICS:
                raise ConfigError(
                    f"unknown metric {m['metric']!r} in SLO objective {part.strip()!r}"
                    f"{where}; {_valid_names()}"
                )
            stat_text = m["stat"]
            if stat_text is None:
                raise ConfigError(
                    f"SLO objective {part.strip()!r}{where} needs a statistic "
                    f"(e.g. {metric}_p99); {_valid_names()}"
                )
            try:
                stat = parse_stat(stat_text)
            except ValueError:
                raise ConfigError(
                    f"unknown statistic {stat_text!r} in SLO objective {part.strip()!r}"
                    f"{where}; {_valid_names()}"
                ) from None
            value = float(m["num"]) * _UNITS[(m["unit"] or "").lower()]
            out.append(Objective(metric, stat, m["op"], value))  # type: ignore[arg-type]
    return tuple(out)


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True, slots=True)
class ObjectiveResult:
    """One objective checked on one run. ``observed`` is the point estimate, ``bound`` the
    one-sided confidence bound (upper for ``<``, lower for ``>``; None with too few
    samples), ``count`` the samples (requests, or token gaps for itl) and
    ``samples_needed`` the count that makes the bound exist (None for a mean that cannot
    be shown from the data seen). ``gated_on`` says what ``passed`` compared. ``failed``
    of the ``count`` samples stand for failed requests (±∞, see the module docstring)."""

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
        return _failures_fail(self.requests, self.completed, self.max_error_rate)

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
        rows = [("objective", "observed", f"bound({c})", "samples", "needed", "result")]
        for r in self.results:
            bound = _fmt_ms(r.bound) if r.bound is not None else "n/a"
            if r.bound_method == "normal" and r.bound is not None:
                bound += "*"
            needed = "-" if r.samples_needed is None else str(r.samples_needed)
            rows.append(
                (
                    r.objective.label,
                    _fmt_ms(r.observed),
                    bound,
                    str(r.count),
                    needed,
                    "pass" if r.passed else "FAIL",
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            cells = [row[0].ljust(widths[0])] + [
                row[i].rjust(widths[i]) for i in range(1, len(row))
            ]
            lines.append("  " + "  ".join(cells).rstrip())
        if any(r.bound_method == "normal" for r in self.results):
            lines.append("  * normal-approximation bound of a mean (not distribution-free)")
        for r in self.results:
            if r.failed:
                inf = "+∞" if r.objective.upper else "−∞"
                lines.append(
                    f"  {r.objective.name}: {r.failed} of its {r.count} samples are failed "
                    f"requests, counted as {inf}"
                )
            missing = self.completed - (r.count - r.failed)
            if r.objective.metric in ("ttft", "ttfot") and r.count > r.failed and missing > 0:
                # Completed, yet nothing was streamed: easy to miss behind an attainment.
                what = "output" if r.objective.metric == "ttft" else "content"
                lines.append(
                    f"  {r.objective.name}: {missing} completed request(s) streamed no "
                    f"{what} chunk; {r.objective.metric} is undefined for them and they are "
                    "not good"
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
        lines.append("  " + self._goodput_line())
        lines.append("  " + self._requests_line())
        for e in self.errors:
            lines.append(f"    {e}")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.extend(f"  why: {a}" for a in self.attribution)
        if not self.results:
            lines.append("  no objectives given: only the failures were checked")
        if not self.run_valid:
            why = "; ".join(self.invalid_reasons) or "no reason given"
            if self.failures_decide:
                lines.append(
                    "  the client was flagged too, but the failed requests decide the "
                    f"verdict (the failure gates are judged first): {why}"
                )
            else:
                lines.append(
                    "  INVALID RUN: the load generator was the bottleneck, so these numbers "
                    f"are the client's, not the engine's: {why}"
                )
        return "\n".join(lines)

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
                bits.append(f"{r.objective.label} ({what} {_fmt_ms(shown)})")
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


def _fmt_ms(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞ (failures)" if x > 0 else "−∞ (failures)"
    if abs(x) >= 100:
        return f"{x:.1f} ms"
    if abs(x) >= 1:
        return f"{x:.2f} ms"
    return f"{x:.3f} ms"


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


def _objectives(items: Iterable[Any]) -> tuple[Objective, ...]:
    out: list[Objective] = []
    for item in items:
        if isinstance(item, Objective):
            out.append(item)
        elif isinstance(item, str):
            out.extend(parse_objectives(item))
        elif isinstance(item, StatSymbol | MetricSymbol):
            raise TypeError(
                f"{item!r} is a metric statistic, not an objective: compare it with a "
                f"threshold, e.g. {item!r} < 500"
            )
        elif isinstance(item, Iterable):
            out.extend(_objectives(item))
        else:
            raise TypeError(f"expected an objective such as ttft_p99 < 500, got {item!r}")
    return tuple(out)


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
    ones counted as the worst value (see the module docstring). Goodput and attainment are
    computed from the per-request thresholds of all objectives together;
    ``min_attainment`` (0..1), ``min_goodput_tok_s`` and ``max_error_rate`` (0..1) add
    gates when given. An invalid run fails; so does a run where every request failed or
    none was measured. Without objectives the verdict fails unless
    ``allow_no_objectives`` (then only the error gates judge the run)."""
    if not isinstance(run, Run):
        raise TypeError(f"evaluate() needs a Run, got {type(run).__name__}")
    objs = _objectives((objectives,) if isinstance(objectives, str) else objectives)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    for name, v in (("min_attainment", min_attainment), ("max_error_rate", max_error_rate)):
        if v is not None and not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} is a fraction in [0, 1], got {v!r}")
    results = tuple(_check_one(o, run, strict, confidence) for o in objs)
    gp = metrics.goodput(run, objs)
    requests = len(run.records)
    completed = sum(1 for r in run.records if r.ok)
    error_rate = (requests - completed) / requests if requests else 0.0
    problems: list[str] = []
    if not objs and not allow_no_objectives:
        problems.append("no objectives given")
    timeout = run.meta.get("level_timeout") if isinstance(run.meta, Mapping) else None
    if requests == 0:
        why = "no request was measured"
        if isinstance(timeout, Mapping):
            why += (
                f": the level's time bound ({timeout.get('bound_s')} s, --level-timeout) "
                f"passed during {timeout.get('phase')}"
            )
        problems.append(why)
    elif completed == 0:
        problems.append(f"every request failed ({requests} of {requests})")
    if min_attainment is not None and (gp.attainment is None or gp.attainment < min_attainment):
        att = "n/a" if gp.attainment is None else f"{gp.attainment:.1%}"
        problems.append(f"attainment {att} < required {min_attainment:.1%}")
    if min_goodput_tok_s is not None and gp.tok_s < min_goodput_tok_s:
        problems.append(f"goodput {gp.tok_s:.1f} tok/s < required {min_goodput_tok_s:g} tok/s")
    if max_error_rate is not None and completed and error_rate > max_error_rate:
        problems.append(f"error rate {error_rate:.1%} > allowed {max_error_rate:.1%}")
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


def _failures_fail(requests: int, completed: int, max_error_rate: float | None) -> bool:
    if requests and not completed:
        return True
    if max_error_rate is None or not requests or not completed:
        return False
    return (requests - completed) / requests > max_error_rate


def failures_fail(run: Run, max_error_rate: float | None) -> bool:
    """Whether the failure gates alone fail ``run``: every request failed, or more than
    ``max_error_rate`` (0..1, None: no limit) of them did. They are judged before the
    client's health: a failed request is the engine's answer (an HTTP error, a reset, a
    stall until a deadline), which no busy client turns into a pass, so such a level is an
    SLO failure with the error texts, never inconclusive."""
    completed = sum(1 for r in run.records if r.ok)
    return _failures_fail(len(run.records), completed, max_error_rate)


def _attribute(run: Run, results: tuple[ObjectiveResult, ...]) -> tuple[str, ...]:
    """Each failed latency objective with the engine signal that explains it (or why none
    does); none when the run has no signals section (signals were off)."""
    raw = run.meta.get("signals") if isinstance(run.meta, Mapping) else None
    if not isinstance(raw, Mapping):
        return ()
    sig = LevelSignals.from_dict(raw)
    out = []
    for r in results:
        o = r.objective
        if r.passed or o.metric not in ("ttft", "ttfot", "e2e", "itl", "tpot"):
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
    """Why the verdict of ``run`` (in progress) is already settled, or None (see the module
    docstring). Percentile objectives only: a mean has no distribution-free bound, so with
    one among them a pass is never settled early. ``planned`` is the level's request count
    (None: bounded by time) for the error-rate rule; ``min_completed`` completed requests
    are needed before anything is settled."""
    objs = _objectives((objectives,) if isinstance(objectives, str) else objectives)
    n = len(run.records)
    completed = sum(1 for r in run.records if r.ok)
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
                f"{_fmt_ms(far)} after {n} requests"
            )
        _, near = metrics.gate_statistic(values, q, confidence, upper=o.upper)
        if near is None or not o.holds(near):
            every_holds = False
    if strict and every_holds:
        return f"every objective holds at {c} confidence (strict bounds) after {n} requests"
    return None


# --------------------------------------------------------------------------- current run

VerdictListener = Callable[[Run, Verdict], None]
#: The current run and the callback told each verdict of it (one pytest process runs one
#: test at a time).
_current: Run | None = None
_on_verdict: VerdictListener | None = None


def bind_run(run: Run | None, *, on_verdict: VerdictListener | None = None) -> Run | None:
    """Make ``run`` the current run for ``assert_goodput(...)`` without an explicit run
    (the plugin's load fixture does this); returns the previously bound run.

    ``on_verdict(run, verdict)`` is called after every evaluation that ``assert_goodput``
    or ``assert_slo`` makes while this binding holds, passed or failed, before a failure
    is raised: the verdict travels with the run it judges (the plugin records it on the
    run's sweep point). A plain module-level slot, not a ContextVar: fixtures and tests
    may run in different asyncio contexts, and one pytest process runs one test at a
    time."""
    global _current, _on_verdict
    if run is not None and not isinstance(run, Run):
        raise TypeError(f"bind_run() needs a Run, got {type(run).__name__}")
    previous, _current = _current, run
    _on_verdict = on_verdict if run is not None else None
    return previous


def current_run() -> Run | None:
    """The run bound by :func:`bind_run`, or None."""
    return _current


def unbind_run() -> None:
    """Forget the current run and its callback (the load fixture does this at teardown)."""
    global _current, _on_verdict
    _current = None
    _on_verdict = None


def _split_run(args: tuple[Any, ...], helper: str) -> tuple[Run, tuple[Any, ...]]:
    if args and isinstance(args[0], Run):
        return args[0], args[1:]
    if args and args[0] is None:
        args = args[1:]
    run = current_run()
    if run is None:
        raise LoadError(
            f"{helper}() found no current run: call it in a test that uses the load fixture, "
            f"or pass the run first: {helper}(run, ttft_p99 < 500, ...)"
        )
    return run, args


def _check(run: Run, objs: tuple[Any, ...], **kwargs: Any) -> Verdict:
    __tracebackhide__ = True
    verdict = evaluate(run, objs, **kwargs)
    if _on_verdict is not None:
        _on_verdict(run, verdict)
    # The failure gates come first: a run whose requests failed is the engine's failure,
    # whatever the client's health says.
    if not verdict.run_valid and not verdict.failures_decide:
        raise Inconclusive(
            "inconclusive: the load generator, not the engine, was the bottleneck ("
            + "; ".join(verdict.invalid_reasons)
            + "): these numbers are the client's, so the SLO was neither met nor missed\n"
            + verdict.format(),
            verdict,
        )
    if not verdict.passed:
        raise SloViolation(verdict.summary_line() + "\n" + verdict.format(), verdict)
    return verdict


def assert_goodput(
    *args: Any,
    strict: bool = False,
    confidence: float = DEFAULT_CONFIDENCE,
    min_attainment: float | None = DEFAULT_MIN_ATTAINMENT,
    min_goodput_tok_s: float | None = None,
    max_error_rate: float | None = DEFAULT_MAX_ERROR_RATE,
) -> Verdict:
    """``assert_goodput(ttft_p99 < 500, itl_p50 < 30)`` on the current run, or
    ``assert_goodput(run, ...)`` on an explicit one.

    Passes when every aggregate gate holds (failed requests counted as the worst value),
    attainment (good requests / all requests) is at least ``min_attainment`` (0.9 by
    default; None only reports it), goodput is at least ``min_goodput_tok_s`` when given,
    the error rate is at most ``max_error_rate`` (1 % by default; None lifts it), and the
    run is valid. Raises
    :class:`~pytest_llmslo.errors.SloViolation` (an AssertionError) listing every
    objective; returns the Verdict when it passes."""
    __tracebackhide__ = True
    run, objs = _split_run(args, "assert_goodput")
    return _check(
        run,
        objs,
        strict=strict,
        confidence=confidence,
        min_attainment=min_attainment,
        min_goodput_tok_s=min_goodput_tok_s,
        max_error_rate=max_error_rate,
    )


def assert_slo(
    *args: Any,
    strict: bool = False,
    confidence: float = DEFAULT_CONFIDENCE,
    min_attainment: float | None = None,
    min_goodput_tok_s: float | None = None,
    max_error_rate: float | None = DEFAULT_MAX_ERROR_RATE,
) -> Verdict:
    """Like :func:`assert_goodput` but gates on the aggregate objectives only (goodput and
    attainment are reported), plus the error rate (at most ``max_error_rate``, 1 % by
    default); ``min_attainment`` and ``min_goodput_tok_s`` add gates when given."""
    __tracebackhide__ = True
    run, objs = _split_run(args, "assert_slo")
    return _check(
        run,
        objs,
        strict=strict,
        confidence=confidence,
        min_attainment=min_attainment,
        min_goodput_tok_s=min_goodput_tok_s,
        max_error_rate=max_error_rate,
    )
