"""Named baselines: results documents saved under ``.llmslo/baselines/NAME.json`` (by
``--slo-save`` or ``llmslo save``) and read back by name or path for a regression check.

A name is letters, digits, ``.``, ``_`` and ``-``; a document from an interrupted session
is saved as ``NAME.partial`` and never replaces the baseline. Reading validates and
upgrades the document (``document.files``), so a baseline written by an older version
compares with a new run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_llmslo.document import DocumentError, read_document, write_atomic
from pytest_llmslo.errors import ConfigError

__all__ = [
    "DEFAULT_BASELINE_ROOT",
    "PARTIAL_SUFFIX",
    "baseline_path",
    "list_baselines",
    "load_baseline",
    "partial_name",
    "save_baseline",
]


DEFAULT_BASELINE_ROOT = os.path.join(".llmslo", "baselines")


#: A baseline saved from an interrupted session gets this suffix: ``NAME.partial``.
PARTIAL_SUFFIX = ".partial"


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or name.endswith(".json"):
        raise ConfigError(
            f"{name!r} is not a valid baseline name: use letters, digits, '.', '_' and '-' "
            "(no path separators, no .json suffix), e.g. vllm-0.9"
        )
    return name


def baseline_path(name: str, root: str | os.PathLike[str] = DEFAULT_BASELINE_ROOT) -> Path:
    """Where the baseline ``name`` lives: ``ROOT/NAME.json``."""
    return Path(root) / f"{_check_name(name)}.json"


def list_baselines(root: str | os.PathLike[str] = DEFAULT_BASELINE_ROOT) -> list[str]:
    """Names of the baselines saved under ``root``, sorted."""
    try:
        return sorted(p.stem for p in Path(root).glob("*.json") if p.is_file())
    except OSError:
        return []


def partial_name(name: str) -> str:
    """The name a partial (interrupted) run is saved under instead of ``name``."""
    _check_name(name)
    return name if name.endswith(PARTIAL_SUFFIX) else name + PARTIAL_SUFFIX


def save_baseline(
    doc: Mapping[str, Any], name: str, root: str | os.PathLike[str] = DEFAULT_BASELINE_ROOT
) -> Path:
    """Save the run document ``doc`` as the baseline ``name`` (validated, written
    atomically, replacing an older one of that name); return its path.

    A partial document (``"complete": false``, an interrupted session) never replaces a
    baseline: it is saved as ``NAME.partial`` (``partial_name``) and ``NAME`` is left as
    it was. The returned path says which file was written."""
    if doc.get("complete") is False:
        name = partial_name(name)
    return write_atomic(baseline_path(name, root), doc)


def _looks_like_path(text: str) -> bool:
    return text.endswith(".json") or "/" in text or os.sep in text or text.startswith(".")


def load_baseline(
    name_or_path: str | os.PathLike[str], root: str | os.PathLike[str] = DEFAULT_BASELINE_ROOT
) -> dict[str, Any]:
    """Read a baseline by name (``ROOT/NAME.json``) or by path (anything with a ``/`` or
    ending in ``.json``, or an existing file). Raises ``document.DocumentError`` (a
    ``ConfigError``) for a missing or malformed document; a missing name lists the saved
    ones."""
    text = os.fspath(name_or_path)
    if isinstance(name_or_path, os.PathLike) or _looks_like_path(text) or Path(text).is_file():
        return read_document(text)
    path = baseline_path(text, root)
    if not path.is_file():
        saved = list_baselines(root)
        have = f"saved baselines: {', '.join(saved)}" if saved else "no baseline is saved there"
        raise DocumentError(
            f"no baseline named {text!r} under {os.fspath(root)} ({have}); save one with "
            f"--slo-save={text}, or pass the path of a run document",
            source=os.fspath(path),
        )
    return read_document(path)
