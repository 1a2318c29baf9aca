"""The SLO DSL: metric symbols, objectives, verdicts and the assertion helpers.

``dsl`` holds the symbols and objectives (generated from the metric catalogue: one per
metric and statistic), ``verdict`` the verdicts, ``evaluate`` the judging of a run, and
``assertions`` the helpers and the run they judge by default, ``judging`` where their
verdicts wait for the session to read them back.

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

from pytest_llmslo.catalog import SYMBOLS as _SYMBOLS
from pytest_llmslo.engines.coldstart import PHASES as _PHASES

from .assertions import (
    DEFAULT_MAX_ERROR_RATE,
    DEFAULT_MIN_ATTAINMENT,
    assert_goodput,
    assert_slo,
    bind_run,
    current_run,
    unbind_run,
)
from .dsl import OPS as OPS
from .dsl import (
    STATS,
    MetricSymbol,
    Objective,
    StatSymbol,
    parse_objectives,
    symbol,
    symbols,
)
from .dsl import Op as Op
from .evaluate import evaluate, failures_fail, settled
from .quality import (
    QualityObjective,
    QualityResult,
    QualityVerdict,
    accuracy,
    assert_quality,
    judge_quality,
    parse_quality,
    wilson_interval,
)
from .recovery import RecoveryResult, RecoveryVerdict, assert_recovery
from .startup import (
    StartupObjective,
    StartupSymbol,
    StartupVerdict,
    assert_startup,
    startup_symbols,
)
from .verdict import ObjectiveResult, Verdict

# The flat names of the DSL (ttft, ttft_p99, ..., e2e_mean), one per catalogue metric and
# statistic: generated here, and found by __getattr__ for a metric registered later.
globals().update(symbols())
# The phases of an engine's start (ready_s, first_token_s, ...): assert_startup's names.
globals().update(startup_symbols())

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
    "evaluate",
    "failures_fail",
    "parse_objectives",
    "settled",
    "unbind_run",
    *_SYMBOLS,  # the flat names of the DSL
    # start objectives (startup.py): assert_startup(ready_s < 60, first_token_s < 90)
    "StartupObjective",
    "StartupSymbol",
    "StartupVerdict",
    "assert_startup",
    *_PHASES,
    # recovery objectives on a level's faults (recovery.py)
    "RecoveryResult",
    "RecoveryVerdict",
    "assert_recovery",
    # quality objectives on a level's eval answers (quality.py)
    "QualityObjective",
    "QualityResult",
    "QualityVerdict",
    "accuracy",
    "assert_quality",
    "judge_quality",
    "parse_quality",
    "wilson_interval",
]


def __getattr__(name: str) -> MetricSymbol | StatSymbol:
    found = symbol(name)
    if found is None:
        raise AttributeError(f"module 'pytest_llmslo.slo' has no attribute {name!r}")
    return found
