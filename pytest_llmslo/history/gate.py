"""``--slo-compare=history``: a new point judged against the last stable segment of its
history, not one baseline.

For each gated metric, the runs of the history that measured the same test, engine and
level under the same pinned constants form a series; its last change point
(``changepoint``) starts the last stable segment, and the new value is compared with the
segment's mean by the metric's tolerance. A change beyond the tolerance that a t-test of
the segment against the new value cannot tell from the segment's own run-to-run spread
(``p >= alpha``, with two runs or more in the segment) is noise and does not fail, for
throughput and goodput as for latencies. The comparison names the run that started each
segment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from pytest_llmslo.document.constants import constants_for_test, constants_mismatch
from pytest_llmslo.document.lookup import metric_value
from pytest_llmslo.regression import Comparison, ComparisonRow, Judging
from pytest_llmslo.regression.detectable import POWER, z_of
from pytest_llmslo.regression.rows import change
from pytest_llmslo.sweep import SweepPoint

from .changepoint import change_points, t_test
from .trend import HistoryRun, measured_validly

__all__ = ["HISTORY", "NOISE_ALPHA", "comparable_runs", "judge_against_history"]

#: The ``--slo-compare`` value that gates against the history.
HISTORY = "history"
#: A change the segment's spread explains with ``p >= NOISE_ALPHA`` is noise.
NOISE_ALPHA = 0.05


def comparable_runs(
    runs: Sequence[HistoryRun], constants: Mapping[str, Any], test: str, engine: str
) -> list[HistoryRun]:
    """The runs whose pinned constants for ``test`` on ``engine`` are ``constants``'."""
    mine = constants_for_test(constants, test, engine)
    return [
        r
        for r in runs
        if not constants_mismatch(constants_for_test(r.results.constants, test, engine), mine)
    ]


def _series(runs: Sequence[HistoryRun], point: SweepPoint, metric: str) -> list[tuple[str, float]]:
    out = []
    for run in runs:
        value = None
        for p in run.results.points:
            same = (p.test, p.engine, p.level.label) == (
                point.test,
                point.engine,
                point.level.label,
            )
            if same and measured_validly(p):
                value = metric_value(p, metric)
        if value is not None:
            out.append((run.entry.id, value))
    return out


def judge_against_history(
    runs: Sequence[HistoryRun], point: SweepPoint, judging: Judging
) -> Comparison | None:
    """``point`` against the last stable segment of each gated metric in ``runs`` (oldest
    first, already filtered by ``comparable_runs``); None when no run measured it."""
    rows: list[ComparisonRow] = []
    notes: list[str] = []
    measured = False
    for metric, tol in judging.tolerances.items():
        if metric == "capacity":
            continue
        series = _series(runs, point, metric)
        new = metric_value(point, metric)
        if not series or new is None:
            rows.append(ComparisonRow(metric, None, new, None, None, "n/a", tol))
            continue
        measured = True
        values = [v for _, v in series]
        cps = change_points(values)
        start = cps[-1].index if cps else 0
        segment = np.asarray(values[start:], dtype=float)
        mean = float(segment.mean())
        delta, delta_pct, status = change(tol, mean, new)
        why = ""
        mde = None
        if len(segment) >= 2:
            # A new run against the segment: its values' spread, for one more run.
            spread = float(segment.std(ddof=1)) * math.sqrt(1.0 + 1.0 / len(segment))
            mde = (z_of(1.0 - NOISE_ALPHA) + NormalDist().inv_cdf(POWER)) * spread
        if status != "within tolerance" and len(segment) >= 2:
            p = t_test(segment, np.asarray([new]))
            if p >= NOISE_ALPHA:
                status = "noise"
            why = f", t-test p={p:.2g}"
        rows.append(ComparisonRow(metric, mean, new, delta, delta_pct, status, tol, None, mde))
        notes.append(
            f"{metric}: segment of {len(segment)} run{'s' if len(segment) != 1 else ''} "
            f"started by run {series[start][0]}{why}"
        )
    if not measured:
        return None
    return Comparison(
        point.engine,
        point.test,
        point.level,
        tuple(rows),
        labels=("history", "new"),
        notes=tuple(notes),
    )
