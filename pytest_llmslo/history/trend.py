"""Trends: one metric of one test, engine and load level across the runs of the history,
its change points (``changepoint``) and what changed between the runs on either side of
each (engine version, image, commit, pinned constants)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_llmslo.catalog import METRIC_SPECS
from pytest_llmslo.document import DocumentError, Results
from pytest_llmslo.document.lookup import metric_value
from pytest_llmslo.regression.rows import fmt_value
from pytest_llmslo.sweep import SweepPoint

from .changepoint import DEFAULT_ALPHA, DEFAULT_MIN_CHANGE, ChangePoint, change_points
from .store import RunEntry, list_runs, printable, read_run

__all__ = [
    "HistoryRun",
    "TrendSeries",
    "format_trends",
    "measured_validly",
    "read_runs",
    "series_of",
    "what_changed",
]


def measured_validly(point: SweepPoint) -> bool:
    """Whether a point's numbers are the engine's: its client was not the bottleneck and
    its load ran to the end (a trend or a segment leaves the others out)."""
    run_valid = point.verdict.run_valid if point.verdict is not None else True
    return bool(point.summary.valid and run_valid and not point.interrupted)


@dataclass(frozen=True, slots=True)
class HistoryRun:
    """A run of the history with its results read back."""

    entry: RunEntry
    results: Results


@dataclass(frozen=True, slots=True)
class TrendSeries:
    """``metric`` of ``test`` on ``engine`` at ``level`` in each run that measured it
    (``runs``, oldest first, and ``values``), with the change points of the values and,
    per change point, what changed between its run and the one before."""

    test: str
    engine: str
    level: str
    metric: str
    runs: tuple[HistoryRun, ...]
    values: tuple[float, ...]
    changes: tuple[ChangePoint, ...] = ()
    notes: Mapping[int, tuple[str, ...]] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"{self.engine} | {self.test} | {self.level} | {self.metric}"


def _engine_info(run: HistoryRun, engine: str) -> Mapping[str, Any]:
    """The engine's version and image as recorded, each made safe to print."""
    engines = run.entry.record.get("engines")
    info = engines.get(engine) if isinstance(engines, Mapping) else None
    if not isinstance(info, Mapping):
        entry = run.results.engines.get(engine)
        info = {"version": entry.version if entry is not None else None}
    return {"version": printable(info.get("version")), "image": printable(info.get("image"))}


def _constants(run: HistoryRun, engine: str) -> dict[str, Any]:
    consts = dict(run.results.constants)
    per_engine = consts.pop("per_engine", None)
    consts.pop("tests", None)
    if isinstance(per_engine, Mapping) and isinstance(per_engine.get(engine), Mapping):
        consts.update(per_engine[engine])
    return consts


def read_runs(root: str | os.PathLike[str], last: int) -> tuple[list[HistoryRun], list[str]]:
    """The newest ``last`` runs under ``root`` read back, oldest first, and one line per
    run that could not be (it is left out)."""
    entries, problems = list_runs(root)
    runs = []
    for entry in entries[-last:] if last > 0 else ():
        try:
            runs.append(HistoryRun(entry, Results.from_document(read_run(entry.path))))
        except (DocumentError, KeyError, TypeError, ValueError) as exc:
            problems.append(f"{entry.path}: left out: {exc}")
    return runs, problems


def what_changed(before: HistoryRun, after: HistoryRun, engine: str) -> list[str]:
    """What differs between two runs for ``engine``: its version and image, the commit,
    the pinned constants (by name); empty when nothing recorded differs."""
    out = []
    a, b = _engine_info(before, engine), _engine_info(after, engine)
    for key in ("version", "image"):
        if a.get(key) != b.get(key):
            out.append(f"engine {key} {a.get(key) or '?'} -> {b.get(key) or '?'}")
    ca, cb = before.entry.commit, after.entry.commit
    if ca != cb:
        out.append(f"commit {(ca or '?')[:10]} -> {(cb or '?')[:10]}")
    consts_a, consts_b = _constants(before, engine), _constants(after, engine)
    differ = sorted(k for k in set(consts_a) | set(consts_b) if consts_a.get(k) != consts_b.get(k))
    if differ:
        out.append(f"constants {', '.join(differ)}")
    return out


def series_of(
    runs: Sequence[HistoryRun],
    metric: str,
    *,
    test: str | None = None,
    engine: str | None = None,
    level: str | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_change: float = DEFAULT_MIN_CHANGE,
) -> list[TrendSeries]:
    """Every series of ``metric`` in ``runs`` (oldest first), one per test, engine and
    level (those given filter), with their change points; a run without the point or
    the value, or whose point was not measured validly, is left out of that series."""
    if metric not in METRIC_SPECS:
        raise ValueError(f"unknown metric {metric!r}; valid: {', '.join(sorted(METRIC_SPECS))}")
    found: dict[tuple[str, str, str], list[tuple[HistoryRun, float]]] = {}
    for run in runs:
        seen: dict[tuple[str, str, str], float] = {}
        for point in run.results.points:
            key = (point.test, point.engine, point.level.label)
            if (test and key[0] != test) or (engine and key[1] != engine):
                continue
            if (level and key[2] != level) or not measured_validly(point):
                continue
            value = metric_value(point, metric)
            if value is not None:
                seen[key] = value  # a level measured twice: its last point
        for key, value in seen.items():
            found.setdefault(key, []).append((run, value))
    out = []
    for (t, e, lv), pairs in sorted(found.items()):
        values = tuple(v for _, v in pairs)
        members = tuple(r for r, _ in pairs)
        cps = tuple(change_points(values, alpha=alpha, min_change=min_change))
        notes = {
            c.index: tuple(what_changed(members[c.index - 1], members[c.index], e)) for c in cps
        }
        out.append(TrendSeries(t, e, lv, metric, members, values, cps, notes))
    return out


def format_trends(series: Sequence[TrendSeries]) -> list[str]:
    """The trend tables for a terminal: per series, one row per run with its value, the
    segment's mean, and a marker on the run where a change point starts a segment."""
    lines: list[str] = []
    for s in series:
        unit = METRIC_SPECS[s.metric].unit
        better = "higher" if METRIC_SPECS[s.metric].higher_is_better else "lower"
        lines.append(f"{s.title} ({unit}, {better} is better)")
        starts = {c.index: c for c in s.changes}
        rows = [["run", "commit", "engine", "value", "change"]]
        for i, (run, value) in enumerate(zip(s.runs, s.values, strict=True)):
            cp = starts.get(i)
            mark = ""
            if cp is not None:
                why = "; ".join(s.notes.get(i, ())) or "nothing recorded changed"
                mark = f"<- change {cp.change:+.1%} (p={cp.p:.2g}): {why}"
            version = _engine_info(run, s.engine).get("version") or "?"
            rows.append(
                [
                    run.entry.id,
                    (run.entry.commit or "?")[:10],
                    str(version),
                    fmt_value(s.metric, value),
                    mark,
                ]
            )
        widths = [max(len(r[c]) for r in rows) for c in range(4)]
        for r in rows:
            cells = [r[c].ljust(widths[c]) if c != 3 else r[c].rjust(widths[c]) for c in range(4)]
            lines.append(("  " + "  ".join(cells) + "  " + r[4]).rstrip())
        if not s.changes:
            lines.append(f"  no change point in {len(s.values)} runs")
        lines.append("")
    return lines
