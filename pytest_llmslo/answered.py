"""What a level's answers showed, beside its latencies: whether the engine answered the
workload asked, and how its quality objectives came out.

``session.asked`` and ``session.qualitygate`` keep these on the level's point (``comparable``
and its notes; ``quality["nondeterministic"]`` and ``quality["verdict"]``);
``sweep.point_status`` and ``judged.level_outcome`` read them here, so the test's exception
and every report show one outcome with one reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["Answered", "asked_reason", "quality_failed", "quality_outcome", "quality_text"]


class Answered(Protocol):
    """The parts of a level's point (``sweep.SweepPoint``) read here."""

    @property
    def comparable(self) -> bool: ...

    @property
    def notes(self) -> tuple[str, ...]: ...

    @property
    def quality(self) -> Mapping[str, Any] | None: ...


def asked_reason(point: Answered) -> str | None:
    """Why ``point`` gates nothing because its engine answered another workload than the one
    asked (``session.asked``): outputs shorter than pinned or usage that disagrees with the
    stream (the level is not comparable), or an engine not deterministic at temperature 0
    where the eval needs it; None when it answered the workload asked."""
    if not point.comparable:
        why = [n for n in point.notes if "not comparable" in n]
        return (
            "the engine answered another workload than the one asked, so its numbers gate "
            "nothing: " + "; ".join(why or ["the level was flagged not comparable"])
        )
    quality = point.quality or {}
    unstable = quality.get("nondeterministic")
    return unstable if isinstance(unstable, str) and unstable else None


def quality_outcome(point: Answered) -> str | None:
    """The outcome of the level's quality verdict (``QualityVerdict.to_dict``): pass, fail
    or inconclusive; None when no quality objective was judged."""
    verdict = (point.quality or {}).get("verdict")
    out = verdict.get("outcome") if isinstance(verdict, Mapping) else None
    return out if out in ("pass", "fail", "inconclusive") else None


def quality_text(point: Answered, outcome: str) -> str:
    """The level's quality objectives that came to ``outcome``, in a few words:
    ``accuracy>=0.95 (27/30 right, bound 0.740..0.970)``."""
    verdict = (point.quality or {}).get("verdict")
    rows = verdict.get("objectives") if isinstance(verdict, Mapping) else None
    parts = []
    for r in rows if isinstance(rows, list) else ():
        if not isinstance(r, Mapping) or r.get("outcome") != outcome:
            continue
        lo, hi = r.get("lower"), r.get("upper")
        bound = (
            f", bound {lo:.3f}..{hi:.3f}" if isinstance(lo, float) and isinstance(hi, float) else ""
        )
        parts.append(f"{r.get('objective')} ({r.get('right')}/{r.get('items')} right{bound})")
    return ", ".join(parts) or "its quality objectives"


def quality_failed(point: Answered) -> list[str]:
    """The labels of the level's quality objectives that failed (``accuracy>=0.95``)."""
    verdict = (point.quality or {}).get("verdict")
    rows = verdict.get("objectives") if isinstance(verdict, Mapping) else None
    return [
        str(r.get("objective"))
        for r in (rows if isinstance(rows, list) else ())
        if isinstance(r, Mapping) and r.get("outcome") == "fail"
    ]
