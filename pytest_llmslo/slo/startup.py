"""Objectives on an engine's cold start: ``assert_startup(ready_s < 60, first_token_s < 90)``.

Each phase of a start (``engines.coldstart.PHASES``: ``ready_s``, ``model_listed_s``,
``first_token_s``, ``port_open_s``, ...) is a :class:`StartupSymbol`; comparing it with a
number of seconds builds a :class:`StartupObjective`. ``assert_startup`` judges them on the
cold start of the current test's engine (the session binds it in the test's judging while
its body runs: ``judging.Judging.bind_engine``), or on the one given first: an engine
handle (``slo_engine``), a ``ColdStart`` or its dict. It raises ``SloViolation`` naming
each objective with the measured seconds, and returns the :class:`StartupVerdict` when
every one holds. A phase the engine's runtime does not have, or that was not seen, fails
its objective (``n/a``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmslo.engines.coldstart import PHASES, ColdStart
from pytest_llmslo.errors import LoadError, SloViolation

from .dsl import OPS, Op
from .judging import current_judging

__all__ = [
    "StartupObjective",
    "StartupResult",
    "StartupSymbol",
    "StartupVerdict",
    "assert_startup",
    "startup_symbols",
]

_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True, slots=True)
class StartupObjective:
    """``phase`` ``op`` ``threshold`` seconds, e.g. first_token_s < 90 s."""

    phase: str
    op: Op
    threshold: float

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"unknown start phase {self.phase!r}; phases: {', '.join(PHASES)}")
        if self.op not in OPS:
            raise ValueError(f"unknown comparison {self.op!r}; valid: {' '.join(OPS)}")
        if math.isnan(float(self.threshold)):
            raise ValueError("a start objective's threshold cannot be NaN")

    @property
    def label(self) -> str:
        return f"{self.phase} {self.op} {self.threshold:g} s"

    def holds(self, seconds: float | None) -> bool:
        return seconds is not None and bool(_COMPARE[self.op](seconds, self.threshold))

    def __bool__(self) -> bool:
        raise TypeError(
            f"the start objective `{self.label}` has no truth value: use "
            f"assert_startup({self.phase} {self.op} {self.threshold:g})"
        )

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True, slots=True)
class StartupSymbol:
    """A phase of a start (``ready_s``); comparing it with seconds builds an objective."""

    phase: str

    def _objective(self, op: Op, other: object) -> StartupObjective:
        if isinstance(other, bool) or not isinstance(other, int | float):
            raise TypeError(f"{self.phase} can only be compared with a number of seconds")
        return StartupObjective(self.phase, op, float(other))

    def __lt__(self, other: object) -> StartupObjective:
        return self._objective("<", other)

    def __le__(self, other: object) -> StartupObjective:
        return self._objective("<=", other)

    def __gt__(self, other: object) -> StartupObjective:
        return self._objective(">", other)

    def __ge__(self, other: object) -> StartupObjective:
        return self._objective(">=", other)

    def __repr__(self) -> str:
        return self.phase


def startup_symbols() -> dict[str, StartupSymbol]:
    """Every phase's symbol by its name (``ready_s``, ``first_token_s``, ...)."""
    return {p: StartupSymbol(p) for p in PHASES}


@dataclass(frozen=True, slots=True)
class StartupResult:
    objective: StartupObjective
    observed_s: float | None
    passed: bool

    def line(self) -> str:
        seen = "n/a (phase not measured)" if self.observed_s is None else f"{self.observed_s:.3f} s"
        return f"{self.objective.label}: measured {seen} -> {'pass' if self.passed else 'FAIL'}"


@dataclass(frozen=True, slots=True)
class StartupVerdict:
    """The start objectives judged on one engine's cold start."""

    engine: str | None
    cold_start: ColdStart
    results: tuple[StartupResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def summary_line(self) -> str:
        failed = [r for r in self.results if not r.passed]
        who = f"engine {self.engine}" if self.engine else "the engine"
        if not failed:
            return f"start objectives met by {who} ({len(self.results)} of {len(self.results)})"
        return f"start objectives missed by {who}: " + "; ".join(r.line() for r in failed)

    def format(self) -> str:
        lines = [f"  {r.line()}" for r in self.results]
        lines.append(f"  cold start ({self.cold_start.runtime}): {self.cold_start.text()}")
        return "\n".join(lines)


def _cold_start_of(value: Any) -> tuple[str | None, ColdStart | None]:
    if isinstance(value, ColdStart):
        return None, value
    if isinstance(value, Mapping):
        return None, ColdStart.from_dict(value)
    meta = getattr(value, "metadata", None)
    if callable(meta):
        data = meta()
        return data.get("name"), ColdStart.from_dict(data.get("cold_start"))
    raise TypeError(
        "assert_startup() takes an engine (slo_engine), a ColdStart or its dict first, "
        f"then start objectives such as ready_s < 60; got {type(value).__name__}"
    )


def assert_startup(*args: Any) -> StartupVerdict:
    """``assert_startup(ready_s < 60, first_token_s < 90)`` on the cold start of the
    current test's engine, or ``assert_startup(slo_engine, ...)`` on a given one (see the
    module docstring). Raises ``SloViolation`` with every objective and its measured
    seconds; returns the ``StartupVerdict``."""
    __tracebackhide__ = True
    objectives = [a for a in args if isinstance(a, StartupObjective)]
    others = [a for a in args if not isinstance(a, StartupObjective)]
    if len(others) > 1 or (others and args[0] is not others[0]):
        raise TypeError("assert_startup(): give the engine first, then the start objectives")
    if not objectives:
        raise TypeError("assert_startup() needs start objectives, e.g. first_token_s < 90")
    if others:
        engine, cold = _cold_start_of(others[0])
    elif (judging := current_judging()) is not None and judging.engine is not None:
        # The current test's engine, as the session bound it in the test's judging.
        engine, found = judging.engine, judging.cold_start
        cold = None if found is None else _cold_start_of(found)[1]
    else:
        raise LoadError(
            "assert_startup() found no current engine: call it in an SLO test, or pass "
            "the engine first: assert_startup(slo_engine, first_token_s < 90)"
        )
    if cold is None:
        who = f"engine {engine!r}" if engine else "the engine"
        raise LoadError(
            f"assert_startup(): {who} has no cold start: it was not started by "
            "pytest-llmslo (an external engine is already running)"
        )
    results = tuple(
        StartupResult(o, cold.get(o.phase), o.holds(cold.get(o.phase))) for o in objectives
    )
    verdict = StartupVerdict(engine, cold, results)
    if not verdict.passed:
        raise SloViolation(verdict.summary_line() + "\n" + verdict.format(), verdict)
    return verdict
