"""``llmslo config``: the settings a run would use, each with where it came from (the
command line, a variable, the run file and its line, or the default)."""

from __future__ import annotations

from typing import Any

from .options import default_text
from .sources import Sources, lookup
from .specs import RUN_DEFAULTS, SPECS, Spec


def shown(spec: Spec, value: Any, found: bool) -> str:
    """A setting's value as a person reads it (the default as ``--help`` shows it)."""
    if not found:
        return default_text(spec, RUN_DEFAULTS)
    if isinstance(value, (tuple, list)):
        return ",".join(getattr(v, "label", None) or _item(v) for v in value) or "none"
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _item(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ":".join(str(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def explain(sources: Sources) -> list[str]:
    """One line per setting of ``llmslo run``: its option, its value and its source."""
    rows = []
    for spec in SPECS:
        if not spec.cli:
            continue
        value, label, found = lookup(spec, sources, None, "")
        rows.append((str(spec.cli), shown(spec, value, found), label if found else "default"))
    width = max(len(flag) for flag, _, _ in rows)
    return [f"{flag:<{width}}  {value}  ({label})" for flag, value, label in rows]
