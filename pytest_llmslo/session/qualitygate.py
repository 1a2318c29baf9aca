"""A test's quality objectives: the verdicts its body asserted (``assert_quality``) and,
when it asserted none, the configured ones (``--slo-quality``, ``quality=``), judged after
the body on the test's level and kept on its point (the JSON document, the reports)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_llmslo.errors import Inconclusive, SloViolation

from .state import Session, TestContext, primary

if TYPE_CHECKING:
    from pytest_llmslo.slo import QualityVerdict

__all__ = ["quality_gate", "record_quality"]


def record_quality(state: Session, ctx: TestContext, verdict: QualityVerdict) -> None:
    """Keep ``verdict`` on the test's point: in its ``quality`` (with the answers) and, as
    a line, in its notes, which every report shows."""
    idx = primary(ctx)
    if idx is None:
        return
    point = state.points[idx]
    quality = dict(point.quality or {})
    quality["verdict"] = verdict.to_dict()
    notes = (*point.notes, verdict.summary_line())
    state.book.update(idx, quality=quality, notes=notes)


def quality_gate(state: Session, ctx: TestContext) -> None:
    """After the body: the configured quality objectives, unless the body judged the level's
    answers itself. Raises ``SloViolation`` when one fails and ``Inconclusive`` when none
    fails and one cannot be shown (too few items): never a pass by luck."""
    from pytest_llmslo import slo

    __tracebackhide__ = True
    ts = ctx.settings
    idx = primary(ctx)
    if not ts.quality or idx is None:
        return
    point = state.points[idx]
    if point.quality is not None and "verdict" in point.quality:
        return
    verdict = slo.judge_quality(state.book.runs[idx], ts.quality, ts.confidence)
    record_quality(state, ctx, verdict)
    if verdict.outcome == "fail":
        raise SloViolation(verdict.summary_line() + "\n" + verdict.format(), verdict)
    if verdict.outcome == "inconclusive":
        raise Inconclusive(verdict.summary_line() + "\n" + verdict.format(), verdict)
