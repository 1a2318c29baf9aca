"""The results document's files: written atomically and durably (``write_atomic``; other
reports through ``write_atomic_text``), read back validated (``read_document``) and
upgraded from older schema versions (``upgrade_document``).

Writing goes to a temporary file in the same directory, fsync, ``os.replace``: an
interrupted session leaves either the previous document or the new one, never half a
file. NaN and infinities become ``null``: the file is strict JSON that any parser reads.
The header is indented for reading; each point is one compact line.

Version 1 documents are still read: ``read_document`` upgrades them, deriving each
engine's constants from its recorded metadata (``constants.engine_constants``).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from pytest_llmslo.document.constants import engine_constants
from pytest_llmslo.document.schema import SCHEMA_VERSION, DocumentError, validate_document

__all__ = [
    "read_document",
    "upgrade_document",
    "write_atomic",
    "write_atomic_bytes",
    "write_atomic_text",
]


def write_atomic(
    path: str | os.PathLike[str], doc: Mapping[str, Any], *, validate: bool = True
) -> Path:
    """Write ``doc`` to ``path`` atomically and durably; return the path.

    The document goes to a temporary file in the same directory (same filesystem, so the
    rename is atomic), is fsync'ed, then renamed over ``path`` and the directory fsync'ed.
    If anything fails on the way the temporary file is removed and ``path`` keeps its
    previous content. The header is indented for reading; each point is one compact line.
    """
    if validate:
        validate_document(doc)
    return _write_durably(path, lambda f: _dump(doc, f))


def write_atomic_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` as ``write_atomic`` writes a document (Markdown and SVG
    reports: a reader never sees half a file)."""
    return _write_durably(path, lambda f: f.write(text))


def write_atomic_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` as ``write_atomic_text`` writes text (a report format
    whose writer returns bytes)."""
    return _write_durably(path, lambda f: f.write(data), binary=True)


def _write_durably(
    path: str | os.PathLike[str], write: Callable[[IO[Any]], object], *, binary: bool = False
) -> Path:
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)
    return target


def _dump(doc: Mapping[str, Any], f: Any) -> None:
    def enc(v: Any, indent: int | None = None) -> str:
        return json.dumps(v, ensure_ascii=False, allow_nan=False, indent=indent)

    f.write("{\n")
    keys = list(doc)
    for n, key in enumerate(keys):
        value = doc[key]
        f.write(f"  {enc(key)}: ")
        if key == "points" and isinstance(value, list):
            f.write("[" if value else "[]")
            for i, point in enumerate(value):
                f.write("\n    " + enc(point) + ("," if i < len(value) - 1 else "\n  ]"))
        else:
            f.write(enc(value, 2).replace("\n", "\n  "))
        f.write(",\n" if n < len(keys) - 1 else "\n")
    f.write("}\n")


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def read_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a run document, upgraded to the current schema version
    (``upgrade_document``). Raises ``DocumentError`` (a ``ConfigError``) for a missing file,
    malformed JSON, a document of another kind, a schema version this pytest-llmslo cannot
    read, or a malformed field (the message names its path)."""
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError("no such file", source=source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"cannot read the file: {exc}", source=source) from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "an interrupted writer never leaves such a file, so it was written or cut elsewhere",
            source=source,
        ) from exc
    try:
        validate_document(doc)
    except DocumentError as exc:
        raise DocumentError(_strip(exc), field=exc.field, source=source) from None
    checked: dict[str, Any] = doc  # a JSON object, as validate_document just checked
    return upgrade_document(checked)


def upgrade_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A valid run document at the current schema version: a current one as it is (a
    copy of its top level), an older one upgraded.

    Version 1 recorded ``model``, ``precision`` and ``hardware`` once for the whole
    session (the last being the client's machine). The upgrade adds ``constants.per_engine``
    with each engine's own constants, derived from what the document recorded
    (``constants.engine_constants``): the session's model or precision where there was one,
    else the engine's metadata; the engine's GPUs from its metadata, or the sim engine's
    profile. Points and sweeps need no change: their new fields are optional."""
    out = dict(doc)
    version = out.get("schema_version")
    if version == SCHEMA_VERSION:
        return out
    if version == 1:
        constants = dict(out.get("constants") or {})
        if "per_engine" not in constants:
            model = constants.get("model")
            precision = constants.get("precision")
            hardware = constants.get("hardware")
            profile = hardware.get("sim_profile") if isinstance(hardware, Mapping) else None
            # A joined value ("a,b") named several engines' models: each engine's own
            # comes from its metadata instead.
            one_model = model if isinstance(model, str) and "," not in model else None
            one_precision = (
                precision if isinstance(precision, str) and "," not in precision else None
            )
            per_engine: dict[str, Any] = {}
            for name, entry in (out.get("engines") or {}).items():
                metadata = (entry or {}).get("metadata") or {}
                per_engine[str(name)] = engine_constants(
                    metadata,
                    model=one_model,
                    precision=one_precision,
                    sim_profile=profile if isinstance(profile, str) else None,
                )
            constants["per_engine"] = per_engine
            out["constants"] = constants
        out["schema_version"] = SCHEMA_VERSION
        out["upgraded_from"] = version
    return out


def _strip(exc: DocumentError) -> str:
    text = str(exc)
    prefix = f"{exc.field}: " if exc.field else ""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text
