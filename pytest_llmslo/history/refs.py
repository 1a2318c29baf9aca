"""What names a run for ``llmslo compare``, ``llmslo history show`` and ``--slo-compare``:
``latest`` (the newest run of the history), ``latest~N`` (N runs before it), a run id or
a unique prefix of one (``20261207T04``), a baseline name, or a document's path."""

from __future__ import annotations

import os
import re
from typing import Any

from pytest_llmslo.document import DocumentError
from pytest_llmslo.regression import baselines

from .store import DEFAULT_HISTORY_ROOT, RunEntry, list_runs, read_run

__all__ = ["is_run_ref", "load_ref", "resolve_run"]

_LATEST_RE = re.compile(r"^latest(?:~(\d{1,6}))?$")
_ID_PREFIX_RE = re.compile(r"^\d{8}(?:T[\d.]*Z?(?:-\d{1,3})?)?$")


def is_run_ref(text: str) -> bool:
    """Whether ``text`` names a run of the history (``latest``, ``latest~N``, an id or id
    prefix) rather than a baseline or a path."""
    return bool(_LATEST_RE.match(text) or _ID_PREFIX_RE.match(text))


def resolve_run(text: str, runs: list[RunEntry], root: str) -> RunEntry:
    """The run ``text`` names among ``runs`` (oldest first); ``DocumentError`` naming
    what the history holds when none or several match."""
    m = _LATEST_RE.match(text)
    if m:
        back = int(m.group(1) or 0)
        if back >= len(runs):
            have = f"it holds {len(runs)} run{'s' if len(runs) != 1 else ''}"
            raise DocumentError(
                f"{text!r}: the run history under {root} has no run {back} before the latest "
                f"({have}); every pytest -m slo or llmslo run session adds one"
            )
        return runs[len(runs) - 1 - back]
    found = [r for r in runs if r.id == text] or [r for r in runs if r.id.startswith(text)]
    if len(found) == 1:
        return found[0]
    if not found:
        raise DocumentError(
            f"no run {text!r} in the run history under {root} (llmslo history lists them)"
        )
    ids = ", ".join(r.id for r in found[:5])
    raise DocumentError(f"{text!r} names several runs ({ids}...): give more of the id")


def load_ref(
    text: str,
    *,
    runs_root: str | os.PathLike[str] = DEFAULT_HISTORY_ROOT,
    baselines_root: str | os.PathLike[str] = baselines.DEFAULT_BASELINE_ROOT,
) -> tuple[str, dict[str, Any]]:
    """The document ``text`` names and a label for it (the run id, the baseline name or
    the path). A run reference is looked up in the history, anything else as a baseline
    name or a path (``baselines.load_baseline``). ``DocumentError`` (a ``ConfigError``)
    when it names nothing readable."""
    if is_run_ref(text) and not os.path.exists(text):
        root = os.fspath(runs_root)
        runs, _problems = list_runs(root)
        entry = resolve_run(text, runs, root)
        return entry.id, read_run(entry.path)
    return text, baselines.load_baseline(text, root=baselines_root)
