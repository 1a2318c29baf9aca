"""The engines' cold starts as the terminal and Markdown reports show them: per engine the
phases of its start (``engines.coldstart``), until its first token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["cold_start_line", "cold_start_table"]


def _phases(cold: Any) -> list[tuple[str, float | None]]:
    if not isinstance(cold, Mapping) or not isinstance(cold.get("phases"), Mapping):
        return []
    out = []
    for name, value in cold["phases"].items():
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        out.append((str(name), None if number is None else float(number)))
    return out


def _label(phase: str) -> str:
    return phase.removesuffix("_s").replace("_", " ")


def _secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def cold_start_line(engine: str, cold: Mapping[str, Any] | None) -> str | None:
    """``cold start of sim (process): first token 0.15 s (spawned 0.01 s, port open 0.13 s,
    ready 0.13 s, model listed 0.13 s)``; None for an engine without one."""
    phases = _phases(cold)
    if not phases:
        return None
    runtime = f" ({cold['runtime']})" if cold and cold.get("runtime") else ""
    first = dict(phases).get("first_token_s")
    before = ", ".join(f"{_label(n)} {_secs(v)}" for n, v in phases if n != "first_token_s")
    return f"cold start of {engine}{runtime}: first token {_secs(first)} ({before})"


def cold_start_table(engines: Mapping[str, Any]) -> list[str]:
    """A Markdown table of the engines' cold starts (one row each, one column per phase
    any of them has, in start order), with a heading; [] when none has one. ``engines``
    maps a name to an ``EngineEntry`` (its ``cold_start``) or to the cold start itself."""
    rows: dict[str, list[tuple[str, float | None]]] = {}
    runtimes: dict[str, str] = {}
    for name, entry in engines.items():
        cold = getattr(entry, "cold_start", entry)
        phases = _phases(cold)
        if phases:
            rows[name] = phases
            runtimes[name] = str((cold or {}).get("runtime") or "")
    if not rows:
        return []
    columns: list[str] = []
    for phases in rows.values():
        for name, _ in phases:
            if name not in columns:
                columns.append(name)
    lines = [
        "### Cold starts",
        "",
        "Seconds from the start of each engine's start (`engines.NAME.cold_start`):",
        "",
        "| engine | runtime | " + " | ".join(_label(c) for c in columns) + " |",
        "|---|---|" + "---:|" * len(columns),
    ]
    for name, phases in rows.items():
        got = dict(phases)
        cells = [("" if c not in got else _secs(got[c]).removesuffix(" s")) for c in columns]
        lines.append(f"| {name} | {runtimes[name]} | " + " | ".join(cells) + " |")
    return lines
