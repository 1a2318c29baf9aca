"""Resolution: every spec of a scope looked up on its sources (``sources.lookup``) and put in
the field it names (``Spec.field``), so a new setting needs no line here. What is resolved
beyond that is said here: the session's engines, a test's levels and its own engines."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytest_llmslo.engines.base import ENGINE_KINDS
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.suggest import did_you_mean

from .levels import resolve_levels
from .resolved import SessionSettings, TestSettings
from .sources import Sources, check_environment, lookup
from .specs import MARKER_ALIASES, MARKER_KWARGS, MARKER_ONLY, SPEC_BY_NAME, SPECS, Scope


def _look_up_all(
    scope: Scope, sources: Sources, marker: Mapping[str, Any] | None, where: str
) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    """The specs of ``scope`` on their sources: (value by spec name, source label by spec
    name, value by the field each fills)."""
    vals: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for spec in SPECS:
        if spec.scope == scope:
            vals[spec.name], labels[spec.name], _found = lookup(spec, sources, marker, where)
    fields = {s.field: vals[s.name] for s in SPECS if s.scope == scope and s.field}
    return vals, labels, fields


def resolve_session(sources: Sources) -> SessionSettings:
    """Resolve the session-wide settings; raises ``ConfigError`` naming the source.

    ``--engine-url`` without ``--engine`` (from any source) means the external engine:
    a URL is never left unused while the built-in sim is measured."""
    vals, where, fields = _look_up_all("session", sources, None, "")
    api_key_env, _, _ = lookup(SPEC_BY_NAME["api_key_env"], sources, None, "")
    warnings = check_environment(sources.env, (api_key_env,))
    engines = tuple(dict.fromkeys(vals["engine"]))  # de-duplicated, order kept
    if vals["engine_url"] and where["engine"] == "default":
        engines = ("external",)
        where["engine"] = where["engine_url"]
    fields["engines"] = engines
    outputs = {s.name: vals[s.name] for s in SPECS if s.scope == "session" and s.topic == "outputs"}
    return SessionSettings(**fields, sources=where, outputs=outputs, warnings=tuple(warnings))


def split_marker(args: Sequence[Any], kwargs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Marker positional arguments are objectives; keyword arguments must be known."""
    out: dict[str, Any] = {}
    for k, v in kwargs.items():
        key = MARKER_ALIASES.get(k, k)
        if key not in MARKER_KWARGS and key not in MARKER_ONLY:
            valid = ", ".join(sorted([*MARKER_KWARGS, *MARKER_ONLY]))
            raise ConfigError(
                f"@pytest.mark.slo on {where}: {k!r} is not a known argument. Valid: {valid}."
            )
        out[key] = v
    if args:
        extra = list(args)
        if "objectives" in out:
            extra.append(out["objectives"])
        out["objectives"] = extra
    return out


def check_marker(marker: Mapping[str, Any], where: str) -> None:
    """Every marker value must be valid, also one a higher source (CLI, env, ini)
    overrides: a bad marker is a bug in the test file that must not hide until someone
    runs it without the override."""
    for key, value in marker.items():
        spec = MARKER_KWARGS.get(key)
        coerce = MARKER_ONLY.get(key) or (spec.coerce_marker if spec is not None else None)
        if coerce is None:
            continue  # split_marker rejects unknown keywords, naming the valid ones
        try:
            coerce(value)
        except ValueError as exc:
            raise ConfigError(f"@pytest.mark.slo({key}=...) on {where}: {exc}") from None


def resolve_test(
    sources: Sources,
    marker: Mapping[str, Any] | None = None,
    where: str = "",
) -> TestSettings:
    """Resolve one test's settings; ``marker`` holds the merged ``slo`` marker keywords
    (from ``split_marker``). Raises ``ConfigError`` naming the source."""
    marker = marker or {}
    check_marker(marker, where)
    vals, where_from, fields = _look_up_all("test", sources, marker, where)
    levels = resolve_levels(vals, where_from)
    if vals["requests"] is None and not vals["duration"] and not vals["trace"]:
        raise ConfigError(
            f"{where_from['requests']}: a level without a request count needs a duration: "
            "give --duration (or a request count)"
        )
    engines: tuple[str, ...] = ()
    if "engines" in marker:
        engines = tuple(dict.fromkeys(MARKER_ONLY["engines"](marker["engines"])))
    if isinstance(fields["objectives"], tuple) and isinstance(fields["quality"], tuple):
        fields["objectives"], fields["quality"] = _split_quality(
            fields["objectives"], fields["quality"]
        )
    return TestSettings(**fields, levels=levels, engines=engines, sources=where_from)


def _split_quality(
    objectives: Sequence[Any], quality: Sequence[Any]
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The quality objectives given with the latency ones (``--slo 'ttft_p99<500,
    accuracy>=0.95'``, ``@pytest.mark.slo(ttft_p99 < 500, accuracy >= 0.95)``) join those
    of ``--slo-quality``/``quality=``: one SLO in one place, judged by each gate."""
    from pytest_llmslo.slo.quality import QualityObjective

    moved = tuple(o for o in objectives if isinstance(o, QualityObjective))
    if not moved:
        return tuple(objectives), tuple(quality)
    latency = tuple(o for o in objectives if not isinstance(o, QualityObjective))
    return latency, tuple(dict.fromkeys((*quality, *moved)))


def check_engine_names(names: Sequence[str], configured: Iterable[str], label: str) -> None:
    """Every name must be a configured engine or a bare kind."""
    known = list(dict.fromkeys([*configured, *ENGINE_KINDS]))
    for n in names:
        if n not in known:
            raise ConfigError(
                f"{label}: {n!r} is not a known engine{did_you_mean(n, known)}. "
                f"Known: {', '.join(known)}."
            )
