"""Stage 3 of a level (records), its context: ``RunMeta``, what a run was and what
happened around it, one typed field a fact.

The load generator sets its fields (``load.runner``: the workload, the client, the
calibration, the traffic it sent, an early stop, the level's time bound cutting it, remote
workers), the session its own (``session.level``: the engine and test, the engine's prefix
cache and signals, faults and a scale-up done during the level). Each field is typed;
the values that are reports of their own (a calibration, a fault's record) are JSON
objects. Every stage reads the field it needs (``run.meta.level_timeout``), and a stage
that adds one returns a new ``RunMeta`` (``dataclasses.replace``): nothing is keyed by
string in the code.

A ``RunMeta`` is also a read-only mapping, the JSON object users and hooks read
(``slo_run.meta["faults"]``): its keys are the fields that are set, in the order they
were first set, plus the keys the code does not know (``other``: a ``LoadJob``'s own
``meta`` keys), as given. ``to_dict``/``from_dict`` round-trip it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

__all__ = ["RunMeta"]

Json = Mapping[str, Any]

#: The field's kind: how a JSON value is checked and converted for it.
_STR, _INT, _FLOAT, _BOOL, _OBJ, _OBJS = "str", "int", "float", "bool", "obj", "objs"


@dataclass(frozen=True, eq=False)
class RunMeta(Mapping[str, Any]):
    """The context of a run (module docstring). ``None`` is a field not set; ``nulls``
    names the fields that were given as JSON null (kept as null keys)."""

    # -- the load generator's: what it was asked (``load.runner``)
    harness: str | None = None
    harness_version: str | None = None
    workload: Json | None = None
    client: Json | None = None
    level: Json | None = None
    requests: int | None = None
    warmup: int | None = None
    duration_s: float | None = None
    grace_s: float | None = None
    level_timeout_s: float | None = None
    early_stop: Json | None = None  # {"reason"}: stopped early, its verdict settled
    health_thresholds: Json | None = None
    # -- the session's: whose level it is (``session.level``)
    engine: str | None = None
    test: str | None = None
    engine_version: str | None = None
    extended: bool | None = None  # a level of ``--slo-extend``
    cache: Json | None = None  # the engine's prefix cache before the level
    # -- the load generator's: what happened
    calibration: Json | None = None
    processes: int | None = None
    traffic: Json | None = None
    level_timeout: Json | None = None  # {"phase", "bound_s"}: the level's bound cut it
    interrupted: bool | None = None
    cancelled: int | None = None
    warmup_completed: int | None = None
    cooldown_sent: int | None = None
    quality: Json | None = None  # the eval answers' book (``evals``)
    client_cpu: Json | None = None
    remote: Json | None = None  # the remote load workers' entries
    # -- the session's: what was done around the load
    signals: Json | None = None  # ``signals.level.LevelSignals`` as JSON
    faults: tuple[Json, ...] | None = None
    series: Json | None = None
    scale_up: Json | None = None
    #: Keys the code does not know, as given (a ``LoadJob``'s own ``meta``).
    other: Json = field(default_factory=dict)
    #: The fields given as JSON null.
    nulls: frozenset[str] = frozenset()
    #: The keys in the order they were first set (of fields and ``other``).
    order: tuple[str, ...] = ()

    # ---- construction

    @classmethod
    def from_dict(cls, meta: Mapping[str, Any]) -> RunMeta:
        """The ``RunMeta`` of a JSON object: each known key whose value has its field's type
        fills that field; the other keys, and a known key with a value of another type
        (which no reader could use), are kept in ``other`` as given. ``ValueError`` when
        ``meta`` is not a JSON object."""
        if isinstance(meta, RunMeta):
            return meta
        if not isinstance(meta, Mapping):
            raise ValueError(f"a run's meta is a JSON object, got {type(meta).__name__}")
        values: dict[str, Any] = {}
        other: dict[str, Any] = {}
        nulls: set[str] = set()
        for key, value in meta.items():
            key = str(key)
            kind = _KINDS.get(key)
            if kind is not None and value is None:
                nulls.add(key)
                continue
            checked = None if kind is None else _checked(kind, value)
            if checked is None:
                other[key] = value
            else:
                values[key] = checked
        return cls(**values, other=other, nulls=frozenset(nulls), order=tuple(map(str, meta)))

    def with_(self, **changes: Any) -> RunMeta:
        """This meta with fields changed (``dataclasses.replace``), as a JSON object's keys
        are set: a new key after those set before, None a null key."""
        unknown = set(changes) - set(_KINDS)
        if unknown:
            raise TypeError(f"RunMeta has no field {sorted(unknown)[0]!r}")
        order = self.order + tuple(k for k in changes if k not in self.order)
        given_null = {k for k, v in changes.items() if v is None}
        nulls = (self.nulls - set(changes)) | given_null
        other = {k: v for k, v in self.other.items() if k not in changes}
        return dataclasses.replace(self, **changes, other=other, nulls=nulls, order=order)

    def merged(self, other: RunMeta) -> RunMeta:
        """This meta with the fields ``other`` sets (a ``LoadJob``'s meta onto the load
        generator's own)."""
        changes = {k: getattr(other, k) for k in _KINDS if getattr(other, k) is not None}
        changes.update({k: None for k in other.nulls})
        merged = self.with_(**changes)
        extra = {**merged.other, **other.other}
        order = merged.order + tuple(k for k in other.order if k not in merged.order)
        return dataclasses.replace(merged, other=extra, order=order)

    # ---- the JSON object

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the set fields (lists for ``faults``) and ``other``, in
        ``order`` (keys not in it after)."""
        out: dict[str, Any] = {}
        for name in _KINDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value) if name == "faults" else value
            elif name in self.nulls:
                out[name] = None
        out.update(self.other)
        rank = {k: i for i, k in enumerate(self.order)}
        return dict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(rank))))

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __repr__(self) -> str:
        return f"RunMeta({self.to_dict()!r})"


def _checked(kind: str, value: Any) -> Any:
    """``value`` as a field of ``kind`` holds it; None when it is not of that kind."""
    if kind == _STR and isinstance(value, str):
        return value
    if kind == _BOOL and isinstance(value, bool):
        return value
    if kind == _INT and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == _FLOAT and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if kind == _OBJ and isinstance(value, Mapping):
        return value
    if kind == _OBJS and isinstance(value, (list, tuple)):
        if all(isinstance(v, Mapping) for v in value):
            return tuple(cast(Json, v) for v in value)
    return None


def _kind(annotation: str) -> str:
    if annotation.startswith("tuple"):
        return _OBJS
    for name, kind in (("str", _STR), ("int", _INT), ("float", _FLOAT), ("bool", _BOOL)):
        if annotation.startswith(name + " "):
            return kind
    return _OBJ


#: The typed fields (every field but ``other``, ``nulls``, ``order``) and their kinds.
_KINDS: dict[str, str] = {
    f.name: _kind(str(f.type))
    for f in dataclasses.fields(RunMeta)
    if f.name not in ("other", "nulls", "order")
}
