"""Stage 6 of a level (point), kept: ``PointBook``, every point a session measured, the run
each was measured from, the capacity searches, and whether the results document is behind.

A point is added once its level is recorded (``add``: ``level.record``) and replaced, a new
frozen ``SweepPoint``, when its verdict arrives (``set_verdict``) or a gate adds what it
found (``update``). Nothing else changes the points: the session's other parts read them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document.samples import with_good
from pytest_llmslo.records import Run

if TYPE_CHECKING:
    from pytest_llmslo.metrics import RunSummary
    from pytest_llmslo.slo import Verdict
    from pytest_llmslo.sweep import SweepPoint

__all__ = ["PointBook", "judged_summary"]


class PointBook:
    """The points of a session, by index in the order they were measured."""

    def __init__(self) -> None:
        self.points: list[SweepPoint] = []
        #: The run each point was measured from, by the point's index.
        self.runs: dict[int, Run] = {}
        #: The point of each run, by the run's identity (the runs are kept above).
        self._by_run: dict[int, int] = {}
        #: The capacity searches, by (engine, test).
        self.capacities: dict[tuple[str, str], CapacityResult] = {}
        #: The points already told to ``hooks.level_result``.
        self.reported: set[int] = set()
        #: Whether a point changed since the results document was last written.
        self.dirty = False

    def add(self, run: Run, point: SweepPoint) -> int:
        """Keep ``point``, measured from ``run``; returns its index."""
        idx = len(self.points)
        self.points.append(point)
        self.runs[idx] = run
        self._by_run[id(run)] = idx
        self.dirty = True
        return idx

    def index_of(self, run: Run) -> int | None:
        """The index of the point ``run`` was recorded as (None: not a level of this
        session; the latest when it was recorded twice)."""
        idx = self._by_run.get(id(run))
        return idx if idx is not None and self.runs.get(idx) is run else None

    def update(self, idx: int, **fields: Any) -> SweepPoint:
        """Point ``idx`` with ``fields`` changed (``notes``, ``quality``, ...), kept."""
        point = dataclasses.replace(self.points[idx], **fields)
        self.points[idx] = point
        self.dirty = True
        return point

    def set_verdict(self, idx: int, verdict: Verdict, confidence: float) -> None:
        """Point ``idx`` judged by ``verdict``: its summary judged (``judged_summary``),
        its samples' good flags under the verdict's objectives. A failed verdict is what
        the point is remembered by; among passing ones, the latest."""
        point = self.points[idx]
        old = point.verdict
        if old is not None and not old.passed and verdict.passed:
            return
        run = self.runs[idx]
        summary = judged_summary(point.summary, run, verdict, confidence)
        # The good flags under the verdict's objectives: goodput's per-window noise bound.
        samples = with_good(point.samples, run, [r.objective for r in verdict.results])
        self.update(idx, summary=summary, verdict=verdict, samples=samples)

    def add_capacity(self, engine: str, test: str, result: CapacityResult) -> None:
        self.capacities[(engine, test)] = result
        self.dirty = True


def judged_summary(
    summary: RunSummary, run: Run, verdict: Verdict, confidence: float
) -> RunSummary:
    """The summary of a judged level: its goodput is the verdict's (over the verdict's
    objectives), its distributions' bounds at ``confidence``. The level was summarised
    once when it was recorded; only a verdict judged at another confidence than that
    summary's makes it summarised again."""
    if summary.confidence != confidence:
        from pytest_llmslo import metrics

        objectives = [r.objective for r in verdict.results]
        return metrics.summarize(run, objectives, confidence=confidence)
    return dataclasses.replace(
        summary,
        goodput_tok_s=verdict.goodput_tok_s,
        goodput_req_s=verdict.goodput_req_s,
        attainment=verdict.attainment,
        good=verdict.good,
        objectives=tuple(r.objective.label for r in verdict.results),
    )
