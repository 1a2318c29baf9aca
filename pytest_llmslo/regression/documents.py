"""Two results compared test by test: ``compare_test`` pairs one test's new points with the
baseline's (same test, engine and load level) and its capacity search with the
baseline's, and compares each pair; the session runs it after each test
(``--slo-compare``), and ``compare_documents`` runs it for every test of a document
(``llmslo compare``).

Two runs are compared only when their pinned constants match (``constants.PINNED_CONSTANTS``:
model, precision, hardware, dataset/workload with ISL/OSL, SLO; ``constants_mismatch``);
otherwise the comparison says which constant differs and compares nothing. Model,
precision and hardware are an engine's (``constants.ENGINE_CONSTANTS``, kept per engine in
``constants["per_engine"]``): a run of one engine pairs with that engine's points in a
baseline of several.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableSet, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document.constants import (
    ENGINE_CONSTANTS,
    constants_for_test,
    constants_mismatch,
)
from pytest_llmslo.document.lookup import capacity_point, find_capacity, find_point_index
from pytest_llmslo.document.results import Results
from pytest_llmslo.regression.comparison import (
    Comparison,
    Judging,
    compare_capacity,
    judge_points,
)
from pytest_llmslo.regression.rows import wrap_rule
from pytest_llmslo.regression.tolerances import Tolerance
from pytest_llmslo.stats import DEFAULT_CONFIDENCE
from pytest_llmslo.sweep import SweepPoint, group_sweeps

__all__ = [
    "DocumentComparison",
    "Pairing",
    "TestComparison",
    "compare_documents",
    "compare_test",
]


@dataclass(frozen=True, slots=True)
class Pairing:
    """The baseline and the new results, how changes are judged, and which engines pair
    (``engines`` maps a baseline engine to its new name; unnamed engines pair by name)."""

    baseline: Results
    new: Results
    judging: Judging = field(default_factory=Judging)
    engines: Mapping[str, str] = field(default_factory=dict)

    def old_engine(self, engine: str) -> str | None:
        """The baseline engine that ``engine`` of the new results pairs with, or None (a
        baseline engine of its name is paired with another)."""
        for old, new in reversed(list(self.engines.items())):
            if new == engine:
                return old
        return None if engine in self.engines else engine

    def versions(self, engine: str) -> tuple[str | None, str | None]:
        old = self.old_engine(engine) or engine
        return (self.baseline.engine_version(old), self.new.engine_version(engine))


@dataclass(frozen=True, slots=True)
class TestComparison:
    """One test of one engine against the baseline: each new point with its comparison
    (None: the baseline has no point of the test at its level), and the comparison of its
    capacity search (None: no search on one side). A comparison of runs whose pinned
    constants differ compares nothing and says why (``constants_differ``)."""

    __test__ = False  # not a test class, despite the name

    engine: str
    test: str
    points: tuple[tuple[SweepPoint, Comparison | None], ...] = ()
    capacity: Comparison | None = None


def compare_test(
    pairing: Pairing,
    engine: str,
    test: str,
    points: Sequence[SweepPoint],
    *,
    capacity: CapacityResult | None = None,
    at_capacity: SweepPoint | None = None,
    used: MutableSet[int] | None = None,
) -> TestComparison:
    """Compare ``test`` on ``engine`` with the baseline: each of ``points`` with the
    baseline's point of the same test, engine and level (a level measured twice pairs with
    its last point not in ``used``, which gets the indices paired), and ``capacity`` with
    the baseline's search of the same load mode, by the capacity alone or, given the new
    point ``at_capacity``, also by the two points where the searches ended."""
    old_engine = pairing.old_engine(engine)
    versions = pairing.versions(engine)
    labels = pairing.judging.labels
    diff = tuple(
        constants_mismatch(
            constants_for_test(pairing.baseline.constants, test, old_engine or engine),
            constants_for_test(pairing.new.constants, test, engine),
            labels=labels,
        )
    )
    used = set() if used is None else used
    pairs: list[tuple[SweepPoint, Comparison | None]] = []
    for p in points:
        found = None
        if old_engine is not None:
            found = find_point_index(pairing.baseline, test, old_engine, p.level, skip=used)
        if found is None:
            pairs.append((p, None))
            continue
        used.add(found)
        if diff:
            pairs.append((p, Comparison(engine, test, p.level, (), diff, labels, versions, True)))
            continue
        old = pairing.baseline.points[found]
        pairs.append((p, judge_points(old, p, pairing.judging, versions)))
    compared = None
    if capacity is not None and old_engine is not None:
        compared = _compare_capacity(pairing, engine, test, capacity, at_capacity, diff)
    return TestComparison(engine, test, tuple(pairs), compared)


def _compare_capacity(
    pairing: Pairing,
    engine: str,
    test: str,
    capacity: CapacityResult,
    at_capacity: SweepPoint | None,
    diff: tuple[str, ...],
) -> Comparison | None:
    old_engine = pairing.old_engine(engine) or engine
    old = find_capacity(pairing.baseline, test, old_engine, capacity.mode)
    if old is None:
        return None
    labels, versions = pairing.judging.labels, pairing.versions(engine)
    if diff:
        return Comparison(engine, test, capacity.capacity, (), diff, labels, versions, True)
    old_at = None
    if at_capacity is not None:
        level = capacity_point(old)
        index = (
            None if level is None else find_point_index(pairing.baseline, test, old_engine, level)
        )
        old_at = None if index is None else pairing.baseline.points[index]
    return compare_capacity(
        old,
        capacity,
        old_at,
        at_capacity,
        engine=engine,
        test=test,
        judging=pairing.judging,
        versions=versions,
    )


@dataclass(frozen=True, slots=True)
class DocumentComparison:
    """Two run documents compared point by point. ``mismatch`` lists differing pinned
    constants (then nothing is compared); ``only_old`` / ``only_new`` name the points
    (``engine | test | level``) found on one side; ``notes`` say how engines were paired."""

    comparisons: tuple[Comparison, ...] = ()
    mismatch: tuple[str, ...] = ()
    only_old: tuple[str, ...] = ()
    only_new: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    labels: tuple[str, str] = ("baseline", "new")
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)

    @property
    def comparable(self) -> bool:
        return not self.mismatch

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.comparisons)

    @property
    def constants_differ(self) -> bool:
        """The documents, or some of their points, differ in a pinned constant."""
        return bool(self.mismatch) or any(c.constants_differ for c in self.comparisons)

    @property
    def status(self) -> str:
        if not self.comparable:
            return "not comparable"
        if self.regressed:
            return "regressed"
        if any(c.improved for c in self.comparisons):
            return "improved"
        return "unchanged"

    def format(self) -> str:
        lines = [
            f"llmslo compare: {self.labels[0]} -> {self.labels[1]}: {self.status.upper()}",
        ]
        if self.mismatch:
            lines.append("not compared: the pinned constants differ:")
            lines.extend(f"  {m}" for m in self.mismatch)
            return "\n".join(lines)
        if self.tolerances:
            lines.append(
                "tolerances: " + ", ".join(f"{k} {t.label}" for k, t in self.tolerances.items())
            )
        lines.extend(self.notes)
        for c in self.comparisons:
            lines.append("")
            lines.append(c.format(rule=False))
        if self.only_old:
            lines.append("")
            lines.append(f"only in {self.labels[0]} (not compared): {', '.join(self.only_old)}")
        if self.only_new:
            lines.append("")
            lines.append(f"only in {self.labels[1]} (not compared): {', '.join(self.only_new)}")
        if not self.comparisons:
            lines.append("no point (engine, test, load level) is in both documents")
        counts = {
            s: sum(1 for c in self.comparisons if c.status == s)
            for s in ("regressed", "improved", "unchanged", "not comparable")
        }
        lines.append("")
        lines.append(
            f"{len(self.comparisons)} point{'s' if len(self.comparisons) != 1 else ''} compared: "
            + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        )
        if self.comparisons:
            lines.extend(wrap_rule(""))
        return "\n".join(lines).rstrip()

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "labels": list(self.labels),
            "mismatch": list(self.mismatch),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "only_old": list(self.only_old),
            "only_new": list(self.only_new),
            "notes": list(self.notes),
            "tolerances": {k: t.to_dict() for k, t in self.tolerances.items()},
        }


def _point_name(p: SweepPoint) -> str:
    return f"{p.engine} | {p.test} | {p.level.label}"


def _shared_mismatch(old: Results, new: Results, labels: tuple[str, str]) -> list[str]:
    """Without per-test settings the documents' constants decide for every point at once
    (an engine's own constants are checked per point, with its engine)."""
    old_constants, new_constants = old.constants, new.constants
    if old_constants.get("tests") or new_constants.get("tests"):
        return []
    shared_old = constants_for_test(old_constants, "")
    shared_new = constants_for_test(new_constants, "")
    if "per_engine" in old_constants or "per_engine" in new_constants:
        for key in ENGINE_CONSTANTS:
            shared_old.pop(key, None)
            shared_new.pop(key, None)
    return constants_mismatch(shared_old, shared_new, labels=labels)


def _engine_pairs(
    old: Results, new: Results, engines: Mapping[str, str] | None, labels: tuple[str, str]
) -> tuple[dict[str, str], list[str]]:
    """How engines pair (baseline name -> new name) and the note that says so: as given;
    else by name, or, with one engine a side under different names, with each other."""
    if engines is not None:
        return dict(engines), []
    old_engines = list(dict.fromkeys(p.engine for p in old.points))
    new_engines = list(dict.fromkeys(p.engine for p in new.points))
    if len(old_engines) == 1 and len(new_engines) == 1 and old_engines != new_engines:
        note = (
            f"engines paired by position: {old_engines[0]} ({labels[0]}) with "
            f"{new_engines[0]} ({labels[1]})"
        )
        return {old_engines[0]: new_engines[0]}, [note]
    return {}, []


def compare_documents(
    old: Results,
    new: Results,
    tolerances: Mapping[str, Tolerance] | str | None = None,
    *,
    engines: Mapping[str, str] | None = None,
    labels: tuple[str, str] = ("baseline", "new"),
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = 2000,
    seed: int = 0,
) -> DocumentComparison:
    """Compare every point of ``new`` with the point of the same test, engine and load
    level in ``old`` (``compare_test``, test by test). ``engines`` maps baseline engine
    names to new ones; without it, engines pair by name, and two results of one engine
    each under different names pair with each other (a note says so). A sweep that ran a
    capacity search on both sides is also compared by its capacity (the capacity row
    alone). The results of an interrupted session are compared as far as they go, with a
    note."""
    judging = Judging.of(
        tolerances, confidence=confidence, resamples=resamples, seed=seed, labels=labels
    )
    tols = dict(judging.tolerances)
    mismatch = _shared_mismatch(old, new, labels)
    if mismatch:
        return DocumentComparison(mismatch=tuple(mismatch), labels=labels, tolerances=tols)
    notes = [
        f"warning: {label} is incomplete (its session was interrupted): points it lacks "
        "are not compared"
        for results, label in ((old, labels[0]), (new, labels[1]))
        if not results.complete
    ]
    mapping, paired = _engine_pairs(old, new, engines, labels)
    notes.extend(paired)
    pairing = Pairing(old, new, judging, mapping)
    used: set[int] = set()
    order = {id(p): i for i, p in enumerate(new.points)}
    pairs: list[tuple[SweepPoint, Comparison | None]] = []
    capacities: list[Comparison] = []
    for (engine, test), pts in group_sweeps(new.points).items():
        capacity = new.capacities.get((engine, test))
        if capacity is not None and all(p.level.mode != capacity.mode for p in pts):
            capacity = None  # a search of no sweep of the test (the document has none)
        tc = compare_test(pairing, engine, test, pts, capacity=capacity, used=used)
        pairs.extend(tc.points)
        # A capacity of other constants is not compared: its points already say so.
        if tc.capacity is not None and not tc.capacity.constants_differ:
            capacities.append(tc.capacity)
    pairs.sort(key=lambda pair: order[id(pair[0])])
    comparisons = [c for _, c in pairs if c is not None] + capacities
    if comparisons and all(c.constants_differ for c in comparisons):
        lines = dict.fromkeys(p for c in comparisons for p in c.problems)
        return DocumentComparison(mismatch=tuple(lines), labels=labels, tolerances=tols)
    return DocumentComparison(
        comparisons=tuple(comparisons),
        only_old=tuple(_point_name(q) for i, q in enumerate(old.points) if i not in used),
        only_new=tuple(_point_name(p) for p, c in pairs if c is None),
        notes=tuple(notes),
        labels=labels,
        tolerances=tols,
    )
