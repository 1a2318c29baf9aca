"""The run history: every session's results document kept under ``.llmslo/runs/`` as
``ID.json``, with its provenance (``provenance.run_record``) under the document's ``run``
key; listed newest last, pruned to the last N runs or D days.

A run id is the UTC time the run was recorded, to the microsecond
(``20261207T044512.123456Z``): ids sort as the runs happened, and a short prefix names
one. Only files named like an id are listed or pruned: nothing else in the directory is
touched. Documents read back are validated (``document.read_document``) and refused above
``MAX_DOCUMENT_BYTES``: the directory may hold files we did not write.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pytest_llmslo.document import DocumentError, read_document, write_atomic

__all__ = [
    "DEFAULT_HISTORY_ROOT",
    "DEFAULT_KEEP",
    "MAX_DOCUMENT_BYTES",
    "RunEntry",
    "list_runs",
    "new_run_id",
    "printable",
    "prune",
    "read_run",
    "run_time",
    "save_run",
]

DEFAULT_HISTORY_ROOT = os.path.join(".llmslo", "runs")
#: Runs kept by default (``--slo-history-keep``); the oldest go first.
DEFAULT_KEEP = 100
#: A run document larger than this is not read back (a sweep's document with its
#: per-request samples is a few MB).
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024

_COMMIT_RE = re.compile(r"^[0-9a-f]{7,64}$")
_ID_RE = re.compile(r"^(\d{8}T\d{6}\.\d{6}Z)(?:-(\d{1,3}))?$")
_TIME_FORMAT = "%Y%m%dT%H%M%S.%fZ"


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One run of the history: its id, path, when it was recorded and what its ``run``
    record says (the commit, the engines' versions and images, the machine)."""

    id: str
    path: Path
    time: datetime
    record: Mapping[str, Any]
    complete: bool
    points: int

    @property
    def commit(self) -> str | None:
        """The commit id, when the record holds one that looks like one."""
        commit = self.record.get("commit")
        value = commit.get("id") if isinstance(commit, Mapping) else None
        return value if isinstance(value, str) and _COMMIT_RE.match(value) else None


def printable(value: object, limit: int = 80) -> str | None:
    """A recorded text as it may be shown on a terminal: control characters (an escape
    sequence in a file we did not write) replaced, at most ``limit`` characters; None for
    anything but a string."""
    if not isinstance(value, str):
        return None
    text = "".join(c if c.isprintable() else "?" for c in value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def new_run_id(now: datetime | None = None) -> str:
    """A run id for ``now`` (default: the current UTC time)."""
    now = now or datetime.now(timezone.utc)
    return now.astimezone(timezone.utc).strftime(_TIME_FORMAT)


def run_time(run_id: str) -> datetime | None:
    """When the run ``run_id`` was recorded; None for a name that is no run id."""
    m = _ID_RE.match(run_id)
    if m is None:
        return None
    return datetime.strptime(m.group(1), _TIME_FORMAT).replace(tzinfo=timezone.utc)


def save_run(
    doc: Mapping[str, Any],
    record: Mapping[str, Any],
    root: str | os.PathLike[str] = DEFAULT_HISTORY_ROOT,
) -> Path:
    """Write ``doc`` with ``record`` under its ``run`` key to ``ROOT/ID.json`` (the id is
    ``record["id"]``; ``-2``, ``-3``... when that file exists). ``OSError`` when the
    directory cannot be written."""
    run_id = str(record["id"])
    if run_time(run_id) is None:
        raise ValueError(f"not a run id: {run_id!r}")
    directory = Path(root)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{run_id}.json"
    n = 1
    while path.exists():
        n += 1
        run_id = f"{record['id']}-{n}"
        path = directory / f"{run_id}.json"
    out = dict(doc)
    out["run"] = {**record, "id": run_id}
    return write_atomic(path, out)


def _entry(path: Path) -> RunEntry:
    doc = read_run(path)
    found = doc.get("run")
    record: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    when = run_time(path.stem)
    assert when is not None  # listed by name
    points = doc.get("points")
    return RunEntry(
        id=path.stem,
        path=path,
        time=when,
        record=record,
        complete=bool(doc.get("complete")),
        points=len(points) if isinstance(points, list) else 0,
    )


def _run_files(root: str | os.PathLike[str]) -> list[Path]:
    try:
        files = [p for p in Path(root).glob("*.json") if run_time(p.stem) is not None]
    except OSError:
        return []
    return sorted((p for p in files if p.is_file()), key=lambda p: (run_time(p.stem), p.stem))


def read_run(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A run document of the history, validated; ``DocumentError`` for a file too large,
    malformed or of another kind."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise DocumentError(f"cannot read the file: {exc}", source=os.fspath(path)) from None
    if size > MAX_DOCUMENT_BYTES:
        raise DocumentError(
            f"{size} bytes is more than a run document holds ({MAX_DOCUMENT_BYTES}); not read",
            source=os.fspath(path),
        )
    return read_document(path)


def list_runs(
    root: str | os.PathLike[str] = DEFAULT_HISTORY_ROOT,
) -> tuple[list[RunEntry], list[str]]:
    """The runs under ``root``, oldest first, and one line per file that is named like a
    run but cannot be read (it is left out, and left where it is)."""
    entries: list[RunEntry] = []
    problems: list[str] = []
    for path in _run_files(root):
        try:
            entries.append(_entry(path))
        except (DocumentError, json.JSONDecodeError) as exc:
            problems.append(str(exc))
    return entries, problems


def prune(
    root: str | os.PathLike[str],
    *,
    keep: int = DEFAULT_KEEP,
    days: float = 0.0,
    now: datetime | None = None,
    spare: str | None = None,
) -> list[Path]:
    """Remove the runs beyond the newest ``keep`` (0: no limit) and those older than
    ``days`` (0: no limit), never the run ``spare``; return what was removed. A file that
    cannot be removed stays."""
    if keep < 0 or days < 0:
        raise ValueError(f"keep and days must be >= 0, got keep={keep}, days={days}")
    files = _run_files(root)
    now = now or datetime.now(timezone.utc)
    doomed = set(files[: len(files) - keep] if keep and len(files) > keep else [])
    if days:
        limit = now - timedelta(days=days)
        doomed.update(p for p in files if (run_time(p.stem) or now) < limit)
    removed = []
    for path in sorted(doomed):
        if path.stem == spare:
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed
