"""The steady part of a level with a fault: the requests its latency objectives judge.

A level with an injected fault has two parts. Its **impact window** runs from the fault's
injection (``asked_s``) to its measured recovery (``recovered_at_s``, ``recovery``): the
recovery objectives (``assert_recovery``) judge it, and the requests sent in it or still
running when the fault came. The rest of the level, the requests that ran wholly outside
every impact window, is its **steady part**: the latency objectives judge
it as they would a level without a fault. A fault that never recovered has an impact
window to the end of the level: its steady part is the requests sent before it, and the
level fails its recovery. A fault that could not be done (``error`` in its record) has no
impact window.

``steady_split`` returns the split; ``steady_run`` the run of the steady requests alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pytest_llmslo.metrics.timeseries import request_times
from pytest_llmslo.records import Run

__all__ = ["SteadySplit", "steady_run", "steady_split"]


@dataclasses.dataclass(frozen=True, slots=True)
class SteadySplit:
    """A fault level split in two: ``keep`` (one bool per record: ran wholly outside every
    impact window), the impact ``windows`` (seconds into the level's window, ``end`` None
    to the end of the level), the counts of each part, and ``unrecovered``: why, for each
    fault that never recovered."""

    keep: np.ndarray
    windows: tuple[tuple[float, float | None], ...]
    steady: int
    impact: int
    unrecovered: tuple[str, ...]

    def describe(self) -> str:
        """One sentence: what each part holds and who judges it."""
        spans = ", ".join(
            f"{start:.1f} s to {'the end' if end is None else f'{end:.1f} s'}"
            for start, end in self.windows
        )
        return (
            f"a fault level: the latency objectives judged the {self.steady} requests that ran "
            f"outside the fault's impact window ({spans}); the {self.impact} sent in it or "
            "running when the fault came are the recovery's to judge"
        )


def _window(record: Mapping[str, Any]) -> tuple[float, float | None] | None:
    """The impact window of one fault record; None for a fault that was not done."""
    if record.get("error"):
        return None
    asked = record.get("asked_s")
    if not isinstance(asked, (int, float)) or not math.isfinite(asked):
        return None
    back = record.get("recovered_at_s")
    if isinstance(back, (int, float)) and math.isfinite(back):
        return float(asked), max(float(back), float(asked))
    return float(asked), None


def steady_split(run: Run, faults: Sequence[Any]) -> SteadySplit:
    """Split ``run`` by the impact windows of its ``faults`` (the level's fault records,
    ``faults.faultcost.fault_cost`` with ``asked_s``)."""
    windows: list[tuple[float, float | None]] = []
    unrecovered: list[str] = []
    for record in faults:
        if not isinstance(record, Mapping):
            continue
        w = _window(record)
        if w is None:
            continue
        windows.append(w)
        if w[1] is None:
            why = record.get("why") or "no recovery was measured"
            unrecovered.append(f"the fault at {w[0]:.1f} s never recovered: {why}")
    times = request_times(run) if run.records else {"sent_s": np.zeros(0), "end_s": np.zeros(0)}
    sent, ended = times["sent_s"], times["end_s"]
    inside = np.zeros(sent.shape, dtype=bool)
    for start, end in windows:
        # In the window: sent in it, or still running when the fault came (a request a
        # kill cut is the fault's doing).
        inside |= (sent < (math.inf if end is None else end)) & (ended >= start)
    keep = ~inside
    return SteadySplit(keep, tuple(windows), int(keep.sum()), int(inside.sum()), tuple(unrecovered))


def steady_run(run: Run, split: SteadySplit) -> Run:
    """``run`` with the records of its steady part alone."""
    records = tuple(r for r, k in zip(run.records, split.keep.tolist(), strict=True) if k)
    return dataclasses.replace(run, records=records)
