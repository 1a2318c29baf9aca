"""A level with a scale-up in it (the ``scale_up`` setting): capacity added at its point
(``engines.scaling.add_capacity`` on a thread, ``levelpoint.AtPoint``), then measured
as the time until it showed in goodput (``metrics.timetocapacity.time_to_capacity``). The result
goes into the run's meta (``scale_up``) and from there onto the level's point."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pytest_llmslo.engines.scaling import ScaleUp, add_capacity
from pytest_llmslo.levelpoint import AtPoint
from pytest_llmslo.records import Run

__all__ = ["SCALE_WAIT_S", "scale_trigger", "with_scale_up"]

#: How long the end of a level waits for a scale-up that has not returned yet.
SCALE_WAIT_S = 120.0


def scale_trigger(
    spec: ScaleUp | None,
    handle: Any,
    progress: Callable[[Any], None] | None,
    duration_s: float | None,
) -> AtPoint | None:
    """The level's progress callback that adds capacity at ``spec.at``; None without a
    scale-up."""
    if spec is None:
        return None
    return AtPoint(
        spec.at,
        lambda: add_capacity(handle, spec),
        inner=progress,
        duration_s=duration_s,
        name="llmslo-scale-up",
    )


def with_scale_up(
    run: Run, spec: ScaleUp, trigger: AtPoint, objectives: tuple[Any, ...] = ()
) -> Run:
    """``run`` with ``meta["scale_up"]``: what was asked and done, when (seconds from the
    start of its measured window), and when the new capacity showed in goodput."""
    from pytest_llmslo.metrics.timetocapacity import time_to_capacity

    record: dict[str, Any] = {"asked": spec.to_dict()}
    record.update(trigger.outcome(run.start_ns, SCALE_WAIT_S, "scale-up"))
    if "done" in record:
        asked_s = float(record["asked_s"])
        record.update(
            time_to_capacity(run, asked_s, objectives, window_s=spec.window_s, share=spec.share)
        )
    return dataclasses.replace(run, meta=run.meta.with_(scale_up=record))
