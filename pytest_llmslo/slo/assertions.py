"""The assertion helpers and the current run they judge by default.

``assert_goodput`` checks every aggregate gate *and* attainment ≥ ``min_attainment``,
0.9 by default (the 90 % SLO attainment target of the DistServe evaluation; pass
``min_attainment=None`` to only report goodput). ``assert_slo`` checks the aggregate gates
only, plus ``min_attainment``/``min_goodput_tok_s``/``max_error_rate`` when given. Both
default to ``max_error_rate`` 1 % (``DEFAULT_MAX_ERROR_RATE``). A run the load generator
flagged invalid raises ``Inconclusive``, unless its failures alone fail it
(``Verdict.failures_decide``). The plugin's load fixture binds the run a test measured
(:func:`bind_run`), so the helpers need no run argument; each verdict is returned or
raised to the caller and left in the judging open around the test (``judging.py``), where
the session reads it back.
"""

from __future__ import annotations

from typing import Any

from pytest_llmslo.errors import Inconclusive, LoadError, SloViolation
from pytest_llmslo.records import Run
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .evaluate import evaluate
from .judging import Judging, current_judging, open_judging
from .verdict import Verdict

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_MIN_ATTAINMENT",
    "assert_goodput",
    "assert_slo",
    "bind_run",
    "current_run",
    "enforce",
    "unbind_run",
]

DEFAULT_MIN_ATTAINMENT = 0.9
#: The error rate above which a run fails even when every gate holds.
DEFAULT_MAX_ERROR_RATE = 0.01


class _Standalone(Judging):
    """The judging ``bind_run`` opens outside any other (nobody reads it back)."""


def bind_run(run: Run | None) -> Run | None:
    """Make ``run`` the current run for ``assert_goodput(...)`` without an explicit run
    (the plugin's load fixture does this); returns the previously bound run.

    The run is bound in the judging open in this context (``judging.judging``: the
    session opens one around each test and reads back every verdict its assertions
    gave); outside one, a judging of its own is opened, whose verdicts nobody reads."""
    if run is not None and not isinstance(run, Run):
        raise TypeError(f"bind_run() needs a Run, got {type(run).__name__}")
    found = current_judging()
    if found is not None:
        return found.bind(run)
    if run is not None:
        open_judging(_Standalone(run))
    return None


def current_run() -> Run | None:
    """The run bound by :func:`bind_run`, or None."""
    found = current_judging()
    return None if found is None else found.run


def unbind_run() -> None:
    """Forget the current run (the load fixtures do this at teardown); a judging
    :func:`bind_run` opened itself is closed."""
    found = current_judging()
    if isinstance(found, _Standalone):
        open_judging(None)
    elif found is not None:
        found.bind(None)


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


def enforce(verdict: Verdict) -> Verdict:
    """``verdict`` when it passed; else ``SloViolation`` listing every objective, or
    ``Inconclusive`` when the run was invalid and its failures alone do not fail it."""
    __tracebackhide__ = True
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


def _check(run: Run, objs: tuple[Any, ...], **kwargs: Any) -> Verdict:
    """Judge ``run``, leave the verdict in the open judging (passed or failed, before a
    failure is raised), and hand it back or raise it (``enforce``)."""
    __tracebackhide__ = True
    verdict = evaluate(run, objs, **kwargs)
    found = current_judging()
    if found is not None:
        found.record(run, verdict)
    return enforce(verdict)


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
