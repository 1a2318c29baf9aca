"""The configured SLO of a level with an injected fault: its latency objectives judged over
the level's steady part, the requests sent outside the fault's impact window
(``faults.steady``), its impact window by the recovery (``assert_recovery``, and a fault
that never recovered fails it). Both are reported on the level's verdict, whose outcome is
the worse of the two, with how many requests each judged."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pytest_llmslo.errors import Inconclusive, SloViolation
from pytest_llmslo.faults.steady import steady_run, steady_split
from pytest_llmslo.records import Run

from .state import Session, TestContext

if TYPE_CHECKING:
    from pytest_llmslo.slo import Verdict

__all__ = ["fault_gate"]


def fault_gate(
    state: Session, ctx: TestContext, idx: int, run: Run, *, judge: bool = True
) -> Verdict | None:
    """Judge the configured objectives of a fault level (module docstring) when the body
    asserted none of its own; None when the level had no fault that was done, or nothing
    is configured. Raises ``SloViolation`` (``Inconclusive``: the client was the
    bottleneck) unless ``judge`` is False (after a body that raised: the verdict is
    recorded, the body's error stands)."""
    from pytest_llmslo import slo

    __tracebackhide__ = True
    ts = ctx.settings
    faults = run.meta.faults or state.points[idx].faults or ()
    if ctx.verdicts or not ts.objectives or not faults:
        return None
    split = steady_split(run, faults)
    if not split.windows:
        return None
    steady = slo.evaluate(steady_run(run, split), ts.objectives, **ts.gate_kwargs())
    recovery = [f"recovery: {u}" for u in split.unrecovered]
    recovery += [f"recovery: {r.summary_line()}" for r in ctx.recoveries if not r.passed]
    held = [f"recovery: {r.summary_line()}" for r in ctx.recoveries if r.passed]
    verdict = dataclasses.replace(
        steady,
        passed=steady.passed and not recovery,
        problems=(*steady.problems, *recovery),
        notes=(*steady.notes, split.describe(), *held),
    )
    ctx.verdicts.append(verdict)
    state.book.set_verdict(idx, verdict, ts.confidence)
    # Under the level in every report: how many requests each verdict judged.
    point = state.points[idx]
    told = (split.describe(), *held, *recovery)
    state.book.update(idx, notes=(*point.notes, *told))
    if not judge:
        return verdict
    if not verdict.run_valid and not verdict.failures_decide:
        raise Inconclusive(
            "inconclusive: the load generator, not the engine, was the bottleneck ("
            + "; ".join(verdict.invalid_reasons)
            + ")\n"
            + verdict.format(),
            verdict,
        )
    if not verdict.passed:
        raise SloViolation(verdict.summary_line() + "\n" + verdict.format(), verdict)
    return verdict
