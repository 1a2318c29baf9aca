"""The load levels of a test: one setting given five ways (a concurrency sweep, a rate sweep,
a ramp, steps, or a trace's speed-ups), shaped by the arrival process, its burstiness and a
cap on the requests in flight."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_llmslo import arrivals
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.records import LoadLevel

from .runfile import LABEL_PREFIX
from .specs import DEFAULT_CONCURRENCY, ENV_PREFIX

#: The settings that give the load, one way each; the highest source giving one wins.
LOAD_KINDS = ("concurrency", "rate", "ramp", "steps", "trace_speed")
#: The specs that fill no field of their own (``Spec.field`` is None): they are read here,
#: into ``TestSettings.levels``.
LEVEL_SPECS = (*LOAD_KINDS, "arrival")
# The sources in precedence order, as ``sources.lookup`` checks them.
_ORDER = ("cli", "env", "file", "ini", "marker", "default")
_DEFAULT = _ORDER.index("default")


def _rank(label: str) -> int:
    """The place of a source label (``sources.lookup``'s) in ``_ORDER``."""
    if label.startswith("--"):
        return 0
    if label.startswith(ENV_PREFIX):
        return 1
    if label.startswith(LABEL_PREFIX):
        return 2
    if label.startswith("ini "):
        return 3
    if label.startswith("@pytest"):
        return _ORDER.index("marker")
    return _DEFAULT


def resolve_levels(
    vals: Mapping[str, Any],
    where_from: dict[str, str],
) -> tuple[LoadLevel, ...]:
    """The load is one setting given five ways (concurrency, rate, ramp, steps, trace
    speed-ups): the highest source that gives one wins; one source giving two is an error.
    A trace without any of them is replayed at its own pace. ``vals`` holds each setting's
    value by spec name, ``where_from`` its source label; ``where_from["load"]`` is set to the
    source of the load."""
    ranks = {k: _rank(where_from[k]) for k in LOAD_KINDS}
    best = min(ranks.values())
    given = [k for k in LOAD_KINDS if ranks[k] == best]
    if best < _DEFAULT and len(given) > 1:
        src = _ORDER[best]
        what = " and ".join(given) if len(given) > 2 else f"both {given[0]} and {given[1]}"
        raise ConfigError(
            f"{' and '.join(where_from[k] for k in given)}: a {src} source sets {what}; "
            "give one of them."
        )
    cap = vals["max_concurrency"]
    seed = vals["seed"]
    arrival = vals["arrival"]
    # The gamma's shape is the one process parameter with an option of its own.
    takes = {p.name for p in arrivals.get(arrival).params}
    gamma: dict[str, Any] = {"burstiness": vals["burstiness"]} if "burstiness" in takes else {}
    if vals["burstiness"] != 1.0 and "burstiness" not in takes:
        raise ConfigError(
            f"{where_from['burstiness']}: burstiness shapes gamma arrivals; "
            "give --arrival=gamma with it"
        )
    kind = given[0] if best < _DEFAULT else ("trace_speed" if vals["trace"] else "concurrency")
    where_from["load"] = where_from[kind]
    if vals["trace"] and kind in ("ramp", "steps", "rate"):
        raise ConfigError(
            f"{where_from[kind]}: a trace brings its own arrival times; give --trace-speed "
            "(or a concurrency, to send its rows as a dataset)"
        )
    if kind == "trace_speed":
        if not vals["trace"]:
            raise ConfigError(
                f"{where_from['trace_speed']}: --trace-speed needs a trace (--trace-file)"
            )
        return tuple(LoadLevel.trace(x, max_concurrency=cap) for x in vals["trace_speed"] or (1.0,))
    if cap is not None and kind == "concurrency":
        raise ConfigError(
            f"{where_from['max_concurrency']}: max_concurrency caps an open loop; a closed "
            "loop's concurrency is its cap already"
        )
    if kind == "ramp":
        a, b, secs = vals["ramp"]
        return (LoadLevel.ramp(a, b, secs, arrival, seed, max_concurrency=cap, **gamma),)
    if kind == "steps":
        rates, secs = vals["steps"]
        return (LoadLevel.steps(rates, secs, arrival, seed, max_concurrency=cap, **gamma),)
    if kind == "rate":
        return tuple(
            LoadLevel.rate(r, arrival, seed, max_concurrency=cap, **gamma) for r in vals["rate"]
        )
    conc = vals["concurrency"] or DEFAULT_CONCURRENCY
    return tuple(LoadLevel.concurrency(n) for n in conc)


def level_ids(levels: Sequence[LoadLevel]) -> list[str]:
    """Test ids of the levels (``c32``, ``r2.5``), unique even when values repeat."""
    ids: list[str] = []
    seen: dict[str, int] = {}
    for lv in levels:
        label = lv.label
        n = seen.get(label, 0)
        seen[label] = n + 1
        ids.append(label if n == 0 else f"{label}_{n}")
    return ids
