"""Where a run came from, recorded with it in the history (the document's ``run`` key):
its id and time, the git commit of the project (``git rev-parse`` under a timeout), each
engine's version and image, and the machine of the load generator."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .store import new_run_id

__all__ = ["GIT_TIMEOUT_S", "git_commit", "run_record"]

#: ``git`` gets this long to answer; a slow or hung one leaves the commit unknown.
GIT_TIMEOUT_S = 5.0


def _git(path: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=path,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_commit(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The commit checked out at ``path`` (``id``, ``branch``, ``dirty``: tracked files
    changed), or ``{}`` outside a repository or without git."""
    where = Path(path)
    commit = _git(where, "rev-parse", "HEAD")
    if not commit:
        return {}
    out: dict[str, Any] = {"id": commit}
    branch = _git(where, "rev-parse", "--abbrev-ref", "HEAD")
    if branch and branch != "HEAD":
        out["branch"] = branch
    status = _git(where, "status", "--porcelain", "--untracked-files=no")
    if status is not None:
        out["dirty"] = bool(status)
    return out


def _engines(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    engines = doc.get("engines")
    for name, entry in engines.items() if isinstance(engines, Mapping) else ():
        entry = entry if isinstance(entry, Mapping) else {}
        meta = entry.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        version = entry.get("version") or meta.get("version")
        out[str(name)] = {
            "version": version if isinstance(version, str) else None,
            "image": meta.get("image") if isinstance(meta.get("image"), str) else None,
        }
    return out


def _machine(doc: Mapping[str, Any]) -> dict[str, Any]:
    info = doc.get("machine_info")
    info = info if isinstance(info, Mapping) else {}
    cpu = info.get("cpu")
    brand = cpu.get("brand_raw") if isinstance(cpu, Mapping) else None
    keys = ("node", "system", "machine", "python_version", "cpus")
    return {k: info[k] for k in keys if isinstance(info.get(k), (str, int))} | (
        {"cpu": brand} if isinstance(brand, str) else {}
    )


def run_record(
    doc: Mapping[str, Any], rootpath: str | os.PathLike[str], now: datetime | None = None
) -> dict[str, Any]:
    """The ``run`` record of ``doc``: id and UTC time, commit, engines, machine."""
    now = now or datetime.now(timezone.utc)
    return {
        "id": new_run_id(now),
        "time_utc": now.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(rootpath),
        "engines": _engines(doc),
        "machine": _machine(doc),
    }
