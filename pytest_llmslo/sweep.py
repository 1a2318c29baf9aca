"""Stage 6 of a level (point): ``SweepPoint``, a level as its sweep and reports keep it.

Sweeps over load levels: the points they produce, the knee, the Pareto frontier and how
far to extend a sweep (the search for the maximum load that meets the SLO is
``capacity.py``'s).

A *sweep* is the set of ``SweepPoint``s of one test on one engine, one per load level. From
it come:

- the **knee** (``find_knee``): the highest load level at which every objective holds, the
  defensible capacity, and the **saturation level**, after which throughput grows by less
  than 10 % while latency still rises;
- the **Pareto frontier** (``pareto_front``): across engines and configs, throughput up and
  TTFT P99 down; use it on the knee points (``knee_points``) or on every point;
- the **extension** (``sweepextend``): the next concurrency or rate past the last level,
  until goodput falls below half of its best.

Everything here is pure and depends only on the fields of ``RunSummary`` and ``Verdict``
that the contract names, so it can be fed synthetic summaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pytest_llmslo.answered import asked_reason, quality_outcome
from pytest_llmslo.records import LoadLevel

if TYPE_CHECKING:
    from pytest_llmslo.metrics import RunSummary
    from pytest_llmslo.slo import Verdict

__all__ = [
    "SATURATION_GAIN",
    "Knee",
    "KneeStatus",
    "PointStatus",
    "SweepPoint",
    "find_knee",
    "finite_or_none",
    "frontier_points",
    "group_sweeps",
    "knee_of",
    "knee_points",
    "level_order",
    "lookup_knee",
    "pareto_front",
    "point_at",
    "point_attainment",
    "point_goodput",
    "point_status",
    "run_status",
    "split_sweeps",
    "summary_stat",
    "sweep_knees",
    "unjudged",
]

#: Throughput growth below which a step counts as saturated (DESIGN "Knee and Pareto").
SATURATION_GAIN = 0.10

#: ``pass``: valid run, every objective held. ``fail``: valid run, an objective failed.
#: ``invalid``: the load generator was the bottleneck, the numbers are not the engine's.
#: ``unchecked``: valid run with no verdict (the test asserted no SLO).
PointStatus = Literal["pass", "fail", "invalid", "unchecked"]

KneeStatus = Literal["found", "all_passed", "none_passed", "unchecked", "empty"]

#: The point statuses as the reports name them (an invalid run is an inconclusive level).
OUTCOMES: dict[str, str] = {
    "pass": "pass",
    "fail": "fail",
    "invalid": "inconclusive",
    "unchecked": "unchecked",
}


# --------------------------------------------------------------------------- points


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One load level of one test on one engine: its summary and, when the test asserted an
    SLO, its verdict. ``samples`` optionally holds compact per-request values
    (``{"ttft_ms": [...], ...}``, see ``document.compact_samples``) so a later
    comparison can run rank tests; it is carried into the JSON document as is.
    ``interrupted``: the load was stopped (Ctrl-C, SIGTERM) before it finished; the point
    holds the requests measured until then. ``comparable`` is False when the run measured
    something else than asked (a server that ignored the pinned output length): a
    regression check skips it; ``notes`` say why, and anything else worth knowing.
    ``cache``: whether the engine's prefix cache was emptied before the level
    (``{"mode", "reset", "how", "why"}``, ``--reset-cache``) and what its hit rate was
    against the share the workload was built to have. ``scale_up``: the capacity added in
    the middle of the level (the ``scale_up`` setting) and how long it took to show in
    goodput (``metrics.timetocapacity``). ``faults``: the faults done in the level (the
    ``fault`` setting), each with what it cost (``faults.faultcost``); ``series``: the
    level's per-second series, kept for a level with faults. ``quality``: the level's eval
    answers (``evals.AnswerBook.to_dict``) and, once judged, the quality ``verdict``."""

    engine: str
    test: str
    level: LoadLevel
    summary: RunSummary
    verdict: Verdict | None = None
    samples: Mapping[str, Sequence[float | None]] | None = None
    interrupted: bool = False
    comparable: bool = True
    notes: tuple[str, ...] = ()
    cache: Mapping[str, Any] | None = None
    scale_up: Mapping[str, Any] | None = None
    faults: Sequence[Mapping[str, Any]] | None = None
    series: Mapping[str, Any] | None = None
    quality: Mapping[str, Any] | None = None

    @property
    def status(self) -> PointStatus:
        return point_status(self)

    @property
    def outcome(self) -> str:
        """What the level came to, in the reports' words: ``pass``, ``fail`` (the engine
        missed its SLO), ``inconclusive`` (the client was the bottleneck: no verdict) or
        ``unchecked`` (no SLO was asserted)."""
        return OUTCOMES[point_status(self)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "test": self.test,
            "level": self.level.to_dict(),
            "summary": self.summary.to_dict(),
            "verdict": None if self.verdict is None else self.verdict.to_dict(),
            "samples": None
            if self.samples is None
            else {k: list(v) for k, v in self.samples.items()},
            "interrupted": self.interrupted,
            "outcome": self.outcome,
            "comparable": self.comparable,
            "notes": list(self.notes),
            "cache": None if self.cache is None else dict(self.cache),
            **({} if self.scale_up is None else {"scale_up": dict(self.scale_up)}),
            **({} if self.faults is None else {"faults": [dict(f) for f in self.faults]}),
            **({} if self.series is None else {"series": dict(self.series)}),
            **({} if self.quality is None else {"quality": dict(self.quality)}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepPoint:
        # Imported here: sweep.py is importable (and its pure functions usable) without numpy.
        from pytest_llmslo.metrics import RunSummary
        from pytest_llmslo.slo import Verdict

        verdict = d.get("verdict")
        samples = d.get("samples")
        return cls(
            engine=str(d["engine"]),
            test=str(d["test"]),
            level=LoadLevel.from_dict(d["level"]),
            summary=RunSummary.from_dict(d["summary"]),
            verdict=None if verdict is None else Verdict.from_dict(verdict),
            samples=None if samples is None else {k: tuple(v) for k, v in samples.items()},
            interrupted=bool(d.get("interrupted", False)),
            comparable=bool(d.get("comparable", True)),
            notes=tuple(str(n) for n in d.get("notes") or ()),
            cache=dict(d["cache"]) if isinstance(d.get("cache"), Mapping) else None,
            scale_up=dict(d["scale_up"]) if isinstance(d.get("scale_up"), Mapping) else None,
            faults=[dict(f) for f in d["faults"]] if isinstance(d.get("faults"), list) else None,
            series=dict(d["series"]) if isinstance(d.get("series"), Mapping) else None,
            quality=dict(d["quality"]) if isinstance(d.get("quality"), Mapping) else None,
        )


def point_status(point: SweepPoint) -> PointStatus:
    """Classify a point (see ``run_status``), with what its answers showed: a level that
    answered another workload than asked (``answered.asked_reason``) is ``invalid`` unless
    failed requests decide it; its quality verdict (``answered.quality_outcome``) fails a
    level, and makes ``invalid`` one whose latency held but whose eval items were too few."""
    status = run_status(point.summary, point.verdict)
    if point.verdict is not None and point.verdict.failures_decide:
        return status
    if asked_reason(point) is not None:
        return "invalid"
    quality = quality_outcome(point)
    if status == "invalid" or quality is None:
        return status
    if quality == "fail" or status == "fail":
        return "fail"
    return "invalid" if quality == "inconclusive" else "pass"


def run_status(summary: RunSummary, verdict: Verdict | None) -> PointStatus:
    """Classify a run. A run whose client was the bottleneck is ``invalid`` whatever its
    verdict says (its latencies are the client's, not the engine's), unless the verdict's
    failure gates alone failed it (``Verdict.failures_decide``): failed requests are the
    engine's, so that run is a ``fail``."""
    if summary.level_timeout and not (verdict is not None and verdict.passed):
        # The harness's own time bound ended the level: its cut requests are not the
        # engine's failures, so the level shows nothing either way, unless others failed.
        if not any(n for kind, n in (summary.failures or {}).items() if kind != "cancelled"):
            return "invalid"
    if verdict is not None and verdict.failures_decide:
        return "fail"
    if not summary.valid or (verdict is not None and not verdict.run_valid):
        return "invalid"
    if verdict is None:
        return "unchecked"
    return "pass" if verdict.passed else "fail"


def unjudged(points: Sequence[SweepPoint]) -> list[str]:
    """The levels of a sweep that neither passed nor failed, with why (``c8 interrupted``,
    ``c16 inconclusive``, ``c32 no verdict``: the level errored), in level order: a knee
    whose judged levels all passed says it of them, not of every level."""
    out = []
    for i in level_order(points):
        p = points[i]
        status = point_status(p)
        if p.interrupted:
            out.append(f"{p.level.label} interrupted")
        elif status == "invalid":
            out.append(f"{p.level.label} inconclusive")
        elif status == "unchecked":
            out.append(f"{p.level.label} no verdict")
    return out


def summary_stat(summary: RunSummary, metric: str, stat: float | str) -> float | None:
    """``summary``'s ``stat`` (a percentile such as 99, or ``"mean"``) of ``metric`` in ms;
    None when the metric has no samples (every request failed) or the value is not finite."""
    dist = summary.distributions.get(metric)
    if dist is None or not dist.count:
        return None
    try:
        value = dist.mean if stat == "mean" else dist.p(float(stat))
    except (KeyError, ValueError):
        return None
    return finite_or_none(value)


def point_goodput(point: SweepPoint) -> float | None:
    """Goodput (tok/s) of a point: the verdict's when the test evaluated one (it is computed
    from the objectives the test asserted), else the summary's."""
    value = None if point.verdict is None else point.verdict.goodput_tok_s
    if value is None:
        value = point.summary.goodput_tok_s
    return finite_or_none(value)


def point_attainment(point: SweepPoint) -> float | None:
    """Attainment (good / all requests, 0..1) of a point, the verdict's first as for
    ``point_goodput``."""
    value = None if point.verdict is None else point.verdict.attainment
    if value is None:
        value = point.summary.attainment
    return finite_or_none(value)


def group_sweeps(points: Iterable[SweepPoint]) -> dict[tuple[str, str], list[SweepPoint]]:
    """Points grouped by ``(engine, test)``, in order of first appearance."""
    groups: dict[tuple[str, str], list[SweepPoint]] = {}
    for p in points:
        groups.setdefault((p.engine, p.test), []).append(p)
    return groups


def split_sweeps(points: Iterable[SweepPoint]) -> list[tuple[tuple[str, str], list[SweepPoint]]]:
    """One entry per sweep: ``group_sweeps`` further split by load mode, since a test run at
    both concurrency and rate levels has two sweeps (and two knees)."""
    out: list[tuple[tuple[str, str], list[SweepPoint]]] = []
    for key, pts in group_sweeps(points).items():
        modes: dict[str, list[SweepPoint]] = {}
        for p in pts:
            modes.setdefault(p.level.mode, []).append(p)
        out.extend((key, m) for m in modes.values())
    return out


def knee_of(sweep: Sequence[SweepPoint], knee: Knee | None = None) -> Knee:
    """``knee`` when it was given for this sweep (same load mode), else ``find_knee``."""
    if knee is not None and sweep:
        if knee.level is None or knee.level.mode == sweep[0].level.mode:
            return knee
    return find_knee(sweep)


def finite_or_none(value: Any) -> float | None:
    """``value`` as a finite float, else None (missing, not a number, NaN or infinite).
    A boolean is not a number here: in a JSON document ``true`` is never a measurement."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def level_order(points: Sequence[SweepPoint]) -> list[int]:
    """Indices of ``points`` sorted by load; a level measured twice keeps its last point."""
    modes = {p.level.mode for p in points}
    if len(modes) > 1:
        raise ValueError(
            f"a sweep mixes load modes {sorted(modes)}: split it with split_sweeps() first"
        )
    last: dict[float, int] = {}
    for i, p in enumerate(points):
        last[p.level.value] = i
    return [last[v] for v in sorted(last)]


# --------------------------------------------------------------------------- knee


@dataclass(frozen=True, slots=True)
class Knee:
    """The capacity of one sweep.

    ``level`` is the capacity: the highest level that met every objective (points with an
    invalid client run, a level the harness cut, or no verdict are skipped). ``index`` is its
    position in the sequence given to ``find_knee``. ``first_failure`` is the lowest level
    that missed; ``passed_above_failure`` lists the levels that passed above it (a noisy or
    non-monotone sweep: the miss is below the knee, and the reports say so).

    ``saturation_level`` is the lowest level after which throughput never grows by 10 % or
    more while TTFT P99 or e2e P99 still rises at the next level (valid runs only, with or
    without a verdict). ``status``: ``found``; ``all_passed`` (every checked level passed, so
    capacity may lie beyond the sweep); ``none_passed``; ``unchecked`` (no point had a
    verdict on a valid run); ``empty``. ``note`` says the same in one sentence.
    """

    level: LoadLevel | None
    index: int | None
    goodput_tok_s: float | None
    saturation_level: LoadLevel | None
    saturation_index: int | None = None
    status: KneeStatus = "found"
    first_failure: LoadLevel | None = None
    passed_above_failure: tuple[LoadLevel, ...] = ()
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        def lv(level: LoadLevel | None) -> dict[str, Any] | None:
            return None if level is None else level.to_dict()

        return {
            "level": lv(self.level),
            "index": self.index,
            "goodput_tok_s": self.goodput_tok_s,
            "saturation_level": lv(self.saturation_level),
            "saturation_index": self.saturation_index,
            "status": self.status,
            "first_failure": lv(self.first_failure),
            "passed_above_failure": [x.to_dict() for x in self.passed_above_failure],
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Knee:
        def lv(x: Mapping[str, Any] | None) -> LoadLevel | None:
            return None if x is None else LoadLevel.from_dict(x)

        return cls(
            level=lv(d.get("level")),
            index=d.get("index"),
            goodput_tok_s=d.get("goodput_tok_s"),
            saturation_level=lv(d.get("saturation_level")),
            saturation_index=d.get("saturation_index"),
            status=d.get("status", "found"),
            first_failure=lv(d.get("first_failure")),
            passed_above_failure=tuple(
                LoadLevel.from_dict(x) for x in d.get("passed_above_failure", ())
            ),
            note=str(d.get("note", "")),
        )


def find_knee(points: Sequence[SweepPoint], *, min_gain: float = SATURATION_GAIN) -> Knee:
    """The knee of one sweep (one engine, one test, one load mode); see ``Knee``.

    Raises ValueError when ``points`` mix engines, tests or load modes: a knee across them
    means nothing (split them with ``split_sweeps`` first).
    """
    points = list(points)
    if not points:
        return Knee(None, None, None, None, status="empty", note="no load level was measured")
    sweeps = {(p.engine, p.test) for p in points}
    if len(sweeps) > 1:
        raise ValueError(
            f"find_knee takes one sweep, got {len(sweeps)} (engine, test) pairs: "
            "split the points with split_sweeps() first"
        )
    order = level_order(points)
    sat_index = _saturation_index(points, order, min_gain)
    sat_level = None if sat_index is None else points[sat_index].level

    knee_i: int | None = None
    first_fail: int | None = None
    above: list[LoadLevel] = []
    checked = 0
    for i in order:
        status = point_status(points[i])
        if status in ("invalid", "unchecked") or points[i].interrupted:
            continue  # an interrupted level shows nothing about the whole load
        checked += 1
        if status == "pass":
            knee_i = i
            if first_fail is not None:
                above.append(points[i].level)
        elif first_fail is None:
            first_fail = i

    invalid = [points[i].level.label for i in order if point_status(points[i]) == "invalid"]
    skipped = f"; skipped inconclusive levels: {', '.join(invalid)}" if invalid else ""
    if checked == 0:
        status_: KneeStatus = "unchecked"
        note = "no level was checked against an SLO on a valid run: no knee" + skipped
    elif knee_i is None:
        status_ = "none_passed"
        lowest = (
            "" if first_fail is None else f" (lowest checked: {points[first_fail].level.label})"
        )
        note = f"no level met every objective{lowest}" + skipped
    elif first_fail is None:
        status_ = "all_passed"
        note = (
            f"every checked level passed up to {points[knee_i].level.label}: "
            "capacity may be higher (extend the sweep)" + skipped
        )
    else:
        status_ = "found"
        failed = points[first_fail].level.label
        note = f"highest level meeting every objective: {points[knee_i].level.label}"
        note += f" ({failed} missed below it)" if above else f" ({failed} failed)"
        note += skipped
    return Knee(
        level=None if knee_i is None else points[knee_i].level,
        index=knee_i,
        goodput_tok_s=None if knee_i is None else point_goodput(points[knee_i]),
        saturation_level=sat_level,
        saturation_index=sat_index,
        status=status_,
        first_failure=None if first_fail is None else points[first_fail].level,
        passed_above_failure=tuple(above),
        note=note,
    )


def _saturation_index(
    points: Sequence[SweepPoint], order: Sequence[int], min_gain: float
) -> int | None:
    # Only valid runs: an invalid run's throughput is the client's ceiling, not the engine's.
    idx = [
        i
        for i in order
        if points[i].summary.valid and finite_or_none(points[i].summary.output_tok_s) is not None
    ]
    thr = [float(points[i].summary.output_tok_s) for i in idx]
    for k in range(len(idx) - 1):
        # Every higher level, not only the next: one noisy dip must not look like saturation.
        best_after = max(thr[k + 1 :])
        if thr[k] <= 0 or best_after >= thr[k] * (1.0 + min_gain):
            continue
        if _latency_rises(points[idx[k]].summary, points[idx[k + 1]].summary):
            return idx[k]
    return None


def _latency_rises(a: RunSummary, b: RunSummary) -> bool:
    for metric in ("ttft", "e2e"):
        la, lb = summary_stat(a, metric, 99), summary_stat(b, metric, 99)
        if la is not None and lb is not None and lb > la:
            return True
    return False


def sweep_knees(
    points: Iterable[SweepPoint], knees: Mapping[Any, Knee] | None = None
) -> list[tuple[tuple[str, str], list[SweepPoint], Knee]]:
    """Every sweep in ``points`` (``split_sweeps``) with its knee: the one given in
    ``knees`` (keyed by ``(engine, test)`` or engine name) when it is for that sweep, else
    computed with ``find_knee``."""
    return [
        (key, sweep, knee_of(sweep, lookup_knee(knees, key))) for key, sweep in split_sweeps(points)
    ]


def point_at(sweep: Sequence[SweepPoint], level: LoadLevel | None) -> SweepPoint | None:
    """The (last) point of ``sweep`` measured at ``level``."""
    hits = [p for p in sweep if level is not None and p.level == level]
    return hits[-1] if hits else None


def knee_points(
    points: Iterable[SweepPoint],
    knees: Mapping[Any, Knee] | None = None,
) -> list[SweepPoint]:
    """The point at the knee of every sweep in ``points`` that has one (in order of first
    appearance). ``knees`` as for ``sweep_knees``."""
    at = (point_at(sweep, knee.level) for _, sweep, knee in sweep_knees(points, knees))
    return [p for p in at if p is not None]


def lookup_knee(knees: Mapping[Any, Knee] | None, key: tuple[str, str]) -> Knee | None:
    """The knee for ``(engine, test)`` in a mapping keyed by that pair or by engine name."""
    if not knees:
        return None
    knee = knees.get(key)
    if knee is None:
        knee = knees.get(key[0])
    return knee


# --------------------------------------------------------------------------- Pareto


def pareto_front(points: Sequence[SweepPoint], *, throughput: str = "output_tok_s") -> list[bool]:
    """For each point, whether it is on the Pareto frontier of (throughput up, TTFT P99 down).

    A point is on it when no other point has at least its throughput and at most its TTFT
    P99 with one of them strictly better; equal points are both on it. Points of an invalid
    client run, or without a throughput or a TTFT P99 (every request failed), are never on it
    and dominate nothing. ``throughput`` names the summary field (``output_tok_s``,
    ``goodput_tok_s``, ``total_tok_s``, ``req_s``). Compare points of the same workload: the
    caller groups by test.
    """
    coords: list[tuple[float, float] | None] = []
    for p in points:
        thr = finite_or_none(getattr(p.summary, throughput))
        lat = summary_stat(p.summary, "ttft", 99)
        if p.summary.valid and thr is not None and lat is not None:
            coords.append((thr, lat))
        else:
            coords.append(None)
    front: list[bool] = []
    for i, c in enumerate(coords):
        if c is None:
            front.append(False)
            continue
        dominated = any(
            o is not None and o[0] >= c[0] and o[1] <= c[1] and (o[0] > c[0] or o[1] < c[1])
            for j, o in enumerate(coords)
            if j != i
        )
        front.append(not dominated)
    return front


def frontier_points(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    """The points on the Pareto frontier (output tok/s up, TTFT P99 down) of those that may
    be on it: valid runs that met their SLO (or asserted none). A failed point, however
    fast, is no operating point; an inconclusive one measured the client. Every report's
    Pareto table and chart marks these."""
    eligible = [p for p in points if point_status(p) in ("pass", "unchecked")]
    return [p for p, on in zip(eligible, pareto_front(eligible), strict=True) if on]
