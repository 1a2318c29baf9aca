"""Objectives on a level's faults: ``assert_recovery(max_recovery_s=5, max_failed=10)``.

``assert_recovery`` judges the faults of the current run (the level the test body sees,
``slo_run``; or the ``Run`` given first) as recorded by the ``fault`` setting
(``run.meta["faults"]``, ``faults.faultcost``): each fault must have been done, and
recovered (``recovery_s`` measured: goodput, no error and the objectives back for the
fault's window) within ``max_recovery_s`` seconds, with at most ``max_failed`` requests
failed from the fault to its recovery. ``fault=`` picks one fault by its number (0 is the
first). It raises ``SloViolation`` naming each fault with its measured numbers against the
bounds, and returns the :class:`RecoveryVerdict` when every one holds. A test body that
calls it has asserted something: the configured SLO, which the fault's own failures would
fail over the whole level, is not checked after it (as after ``assert_goodput``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_llmslo.errors import LoadError, SloViolation
from pytest_llmslo.records import Run

from .assertions import current_run
from .judging import current_judging

__all__ = ["RecoveryResult", "RecoveryVerdict", "assert_recovery"]


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """One fault judged: its label, measured recovery and failures, and what failed."""

    label: str
    recovery_s: float | None
    failed: int | None
    problems: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.problems

    def line(self, max_recovery_s: float | None, max_failed: int | None) -> str:
        rec = (
            "not recovered" if self.recovery_s is None else f"recovered in {self.recovery_s:.3f} s"
        )
        if max_recovery_s is not None:
            rec += f" (max {max_recovery_s:g} s)"
        failed = "n/a" if self.failed is None else str(self.failed)
        text = f"{self.label}: {rec}; {failed} request(s) failed"
        if max_failed is not None:
            text += f" (max {max_failed})"
        verdict = "pass" if self.passed else "FAIL: " + "; ".join(self.problems)
        return f"{text} -> {verdict}"


@dataclass(frozen=True, slots=True)
class RecoveryVerdict:
    """The recovery objectives judged on a level's faults."""

    max_recovery_s: float | None
    max_failed: int | None
    results: tuple[RecoveryResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def summary_line(self) -> str:
        failed = [r for r in self.results if not r.passed]
        if not failed:
            return f"recovery objectives met ({len(self.results)} fault(s))"
        return "recovery objectives missed: " + "; ".join(
            f"{r.label}: {', '.join(r.problems)}" for r in failed
        )

    def format(self) -> str:
        return "\n".join(f"  {r.line(self.max_recovery_s, self.max_failed)}" for r in self.results)


def _judge(
    record: Mapping[str, Any], max_recovery_s: float | None, max_failed: int | None
) -> RecoveryResult:
    label = str(record.get("label") or (record.get("asked") or {}).get("kind", "fault"))
    recovery = record.get("recovery_s")
    failed = record.get("failed")
    problems: list[str] = []
    if record.get("asked_s") is None:
        problems.append(f"not done: {record.get('why') or 'its point was not reached'}")
    elif record.get("error"):
        problems.append(f"not done: {record['error']}")
    else:
        if max_recovery_s is not None:
            if recovery is None:
                problems.append(f"not recovered ({record.get('why') or 'n/a'})")
            elif recovery > max_recovery_s:
                problems.append(f"recovered in {recovery:.3f} s, more than {max_recovery_s:g} s")
        if max_failed is not None and isinstance(failed, int) and failed > max_failed:
            problems.append(f"{failed} requests failed, more than {max_failed}")
    return RecoveryResult(
        label,
        None if recovery is None else float(recovery),
        failed if isinstance(failed, int) else None,
        tuple(problems),
    )


def assert_recovery(
    run: Run | None = None,
    *,
    max_recovery_s: float | None = None,
    max_failed: int | None = None,
    fault: int | None = None,
) -> RecoveryVerdict:
    """Check the recovery of the run's faults (see the module docstring)."""
    __tracebackhide__ = True
    if max_recovery_s is None and max_failed is None:
        raise TypeError("assert_recovery() needs max_recovery_s=..., max_failed=... or both")
    if max_recovery_s is not None and not (
        isinstance(max_recovery_s, (int, float)) and math.isfinite(max_recovery_s)
    ):
        raise TypeError(f"max_recovery_s is a number of seconds, got {max_recovery_s!r}")
    if max_failed is not None and (isinstance(max_failed, bool) or not isinstance(max_failed, int)):
        raise TypeError(f"max_failed is a number of requests, got {max_failed!r}")
    run = run if run is not None else current_run()
    if run is None:
        raise LoadError(
            "assert_recovery() found no current run: call it in a test that uses the load "
            "fixture, or pass the run first: assert_recovery(run, max_recovery_s=5)"
        )
    records: Sequence[Any] = run.meta.faults or ()
    if not records:
        raise LoadError(
            "assert_recovery(): this level had no fault: ask for one with the fault "
            "setting, e.g. @pytest.mark.slo(fault='kill at=40%')"
        )
    if fault is not None:
        if not 0 <= fault < len(records):
            raise LoadError(f"assert_recovery(fault={fault}): the level had {len(records)}")
        records = [records[fault]]
    verdict = RecoveryVerdict(
        max_recovery_s,
        max_failed,
        tuple(_judge(r, max_recovery_s, max_failed) for r in records if isinstance(r, Mapping)),
    )
    # Left in the test's judging: a body that judged its level's faults asserted something,
    # and the configured SLO over the whole level, fault included, is not checked after it.
    found = current_judging()
    if found is not None:
        found.record_other(verdict)
    if not verdict.passed:
        raise SloViolation(verdict.summary_line() + "\n" + verdict.format(), verdict)
    return verdict
