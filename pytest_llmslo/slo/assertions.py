"""The assertion helpers and the current run they judge by default.

``assert_goodput`` checks every aggregate gate *and* attainment ≥ ``min_attainment``,
0.9 by default (the 90 % SLO attainment target of the DistServe evaluation; pass
``min_attainment=None`` to only report goodput). ``assert_slo`` checks the aggregate gates
only, plus ``min_attainment``/``min_goodput_tok_s``/``max_error_rate`` when given. Both
default to ``max_error_rate`` 1 % (``DEFAULT_MAX_ERROR_RATE``). A run the load generator
flagged invalid raises ``Inconclusive``, unless its failures alone fail it
(``Verdict.failures_decide``). The plugin's load fixture binds the run a test measured
(:func:`bind_run`), so the helpers need no run argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_llmslo.errors import Inconclusive, LoadError, SloViolation
from pytest_llmslo.records import Run
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .evaluate import evaluate
from .verdict import Verdict

__all__ = [
    "DEFAULT_MAX_ERROR_RATE",
    "DEFAULT_MIN_ATTAINMENT",
    "VerdictListener",
    "assert_goodput",
    "assert_slo",
    "bind_run",
    "current_run",
    "unbind_run",
]

DEFAULT_MIN_ATTAINMENT = 0.9
#: The error rate above which a run fails even when every gate holds.
DEFAULT_MAX_ERROR_RATE = 0.01


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
