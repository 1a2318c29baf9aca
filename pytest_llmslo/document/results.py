"""``Results``: what a session measured, typed, as every report takes it.

A session builds its ``Results`` from its own objects (``Results.of``: its points with their
verdicts, the capacity searches, the run's constants, the engines); ``llmslo report`` and
``llmslo compare`` build theirs from a results document (``Results.from_document``: the
points, the knees and capacities stored on its sweeps). Either way it is built once, and
the results document (``build.build_document``), the terminal summary and every report
format (Markdown, SVG, CSV) are made from it: nothing goes from objects to JSON and back
to reach a renderer.

The comparisons with a baseline are not part of it: they are the regression check's, a
floor above (``regression``), and their renderers take them as they are.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_llmslo._version import __version__
from pytest_llmslo.capacity import CapacityResult
from pytest_llmslo.document.jsonable import jsonable
from pytest_llmslo.document.schema import HARNESS
from pytest_llmslo.redact import redact_obj
from pytest_llmslo.sweep import Knee, SweepPoint, find_knee, knee_of

__all__ = ["EngineEntry", "Results", "Sweep"]

#: ``(engine, test)``: the key of a test's sweeps, its capacity and (one load mode) its knee.
TestKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class EngineEntry:
    """What the results say about one engine: its version, its metadata (kind, model,
    command, GPUs, for the sim engine the setup it simulates), and its cold start (the
    phases of its start, ``engines.coldstart.ColdStart.to_dict``; None for an engine the
    harness did not start), as JSON data."""

    version: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    cold_start: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, value: Any) -> EngineEntry:
        """The entry of an ``EngineHandle`` (``metadata()``/``version()``) or of a mapping of
        its metadata (``version`` inside). A handle that cannot answer (its engine already
        stopped) costs the entry its metadata, never the results."""
        meta_fn = getattr(value, "metadata", None)
        if callable(meta_fn):
            try:
                metadata = dict(meta_fn())
            except Exception as exc:
                metadata = {"error": f"metadata unavailable: {exc!r}"}
            version_fn = getattr(value, "version", None)
            try:
                version = version_fn() if callable(version_fn) else metadata.get("version")
            except Exception:
                version = metadata.get("version")
        else:
            metadata = dict(value or {})
            version = metadata.get("version")
        cold = metadata.pop("cold_start", None)
        return cls(
            None if version is None else str(version),
            jsonable(metadata),
            jsonable(dict(cold)) if isinstance(cold, Mapping) else None,
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> EngineEntry:
        d = d or {}
        version = d.get("version")
        cold = d.get("cold_start")
        return cls(
            None if version is None else str(version),
            dict(d.get("metadata") or {}),
            dict(cold) if isinstance(cold, Mapping) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"version": self.version, "metadata": dict(self.metadata)}
        if self.cold_start is not None:
            out["cold_start"] = dict(self.cold_start)
        return out


@dataclass(frozen=True, slots=True)
class Sweep:
    """One sweep: one test on one engine at one load mode, its points in the order they
    were measured with their ``indices`` in ``Results.points``, and its knee
    (``knee.index`` is a position in ``points``)."""

    engine: str
    test: str
    mode: str
    points: tuple[SweepPoint, ...]
    indices: tuple[int, ...]
    knee: Knee

    def knee_point(self) -> int | None:
        """The index in ``Results.points`` of the (last) point at the knee, if any."""
        if self.knee.level is None:
            return None
        at = [
            i for i, p in zip(self.indices, self.points, strict=True) if p.level == self.knee.level
        ]
        return at[-1] if at else None


def _now_utc() -> str:
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    return now.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Results:
    """The results of a session (see the module docstring).

    ``points`` are every measured level in order; ``capacities`` the capacity search of
    each test that ran one, by ``(engine, test)``; ``knees`` the knees a document stored,
    by ``(engine, test, mode)`` (a session's are computed from its points: ``sweeps()``);
    ``constants`` the run's constants and ``engines`` each engine's entry, both JSON data;
    ``complete`` False for the partial results of an interrupted session; ``source`` the
    file the results were read from, when they were."""

    points: tuple[SweepPoint, ...] = ()
    constants: Mapping[str, Any] = field(default_factory=dict)
    engines: Mapping[str, EngineEntry] = field(default_factory=dict)
    capacities: Mapping[TestKey, CapacityResult] = field(default_factory=dict)
    knees: Mapping[tuple[str, str, str], Knee] = field(default_factory=dict)
    complete: bool = True
    created_utc: str = ""
    harness: Mapping[str, str] = field(
        default_factory=lambda: {"name": HARNESS, "version": __version__}
    )
    source: str | None = None

    @classmethod
    def of(
        cls,
        points: Iterable[SweepPoint],
        *,
        constants: Mapping[str, Any] | None = None,
        engines: Mapping[str, Any] | None = None,
        capacities: Mapping[TestKey, CapacityResult] | None = None,
        complete: bool = True,
        created_utc: str | None = None,
    ) -> Results:
        """A session's results, made now: ``engines`` maps each engine's name to its
        ``EngineHandle``, its metadata mapping or its ``EngineEntry``; an engine with points
        but no entry gets an empty one in the document."""
        return cls(
            points=tuple(points),
            constants=jsonable(dict(constants or {})),
            engines={
                str(name): value if isinstance(value, EngineEntry) else EngineEntry.of(value)
                for name, value in (engines or {}).items()
            },
            capacities=dict(capacities or {}),
            complete=bool(complete),
            created_utc=created_utc or _now_utc(),
        )

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], *, source: str | None = None) -> Results:
        """The results a (valid, current) results document holds. A point that cannot be
        read raises (``KeyError``, ``TypeError`` or ``ValueError``); a stored knee or
        capacity that cannot is left out (a knee is then computed again)."""
        points = tuple(SweepPoint.from_dict(p) for p in doc.get("points", ()))
        knees: dict[tuple[str, str, str], Knee] = {}
        capacities: dict[TestKey, CapacityResult] = {}
        for s in doc.get("sweeps", ()):
            if not isinstance(s, Mapping):
                continue
            key = (str(s.get("engine")), str(s.get("test")))
            try:
                knees[(*key, str(s["mode"]))] = Knee.from_dict(s["knee"])
            except (KeyError, TypeError, ValueError):
                pass
            cap = s.get("capacity")
            if isinstance(cap, Mapping):
                try:
                    capacities[key] = CapacityResult.from_dict(cap)
                except (KeyError, TypeError, ValueError):
                    pass
        harness = doc.get("harness") or {}
        return cls(
            points=points,
            constants=dict(doc.get("constants") or {}),
            engines={
                str(n): EngineEntry.from_dict(e) for n, e in (doc.get("engines") or {}).items()
            },
            capacities=capacities,
            knees=knees,
            complete=bool(doc.get("complete", True)),
            created_utc=str(doc.get("created_utc") or ""),
            harness={str(k): str(v) for k, v in harness.items()},
            source=source,
        )

    def redacted(self) -> Results:
        """These results with every secret masked in the constants and the engines'
        metadata (``redact.redact_obj``), as the document that is written has them."""
        return replace(
            self,
            constants=redact_obj(dict(self.constants)),
            engines={
                n: EngineEntry(e.version, redact_obj(dict(e.metadata)), e.cold_start)
                for n, e in self.engines.items()
            },
        )

    def sweeps(self) -> list[Sweep]:
        """Every sweep of the points, in the order of ``sweep.split_sweeps``, with its
        knee: the stored one when it is for that sweep, else ``find_knee``."""
        groups: dict[TestKey, dict[str, list[int]]] = {}
        for i, p in enumerate(self.points):
            groups.setdefault((p.engine, p.test), {}).setdefault(p.level.mode, []).append(i)
        out = []
        for (engine, test), modes in groups.items():
            for mode, indices in modes.items():
                pts = [self.points[i] for i in indices]
                stored = self.knees.get((engine, test, mode))
                knee = find_knee(pts) if stored is None else knee_of(pts, stored)
                out.append(Sweep(engine, test, mode, tuple(pts), tuple(indices), knee))
        return out

    def test_knees(self) -> dict[TestKey, Knee]:
        """The stored knees of the tests that have one (a test swept in one load mode),
        keyed by ``(engine, test)`` as the renderers take them; the others' knees are
        computed per load mode where they are shown."""
        found: dict[TestKey, list[Knee]] = {}
        for (engine, test, _mode), knee in self.knees.items():
            found.setdefault((engine, test), []).append(knee)
        return {k: v[0] for k, v in found.items() if len(v) == 1}

    def engine_version(self, engine: str) -> str | None:
        entry = self.engines.get(engine)
        return None if entry is None else entry.version
