"""The results document of a session, versioned JSON (DESIGN "Reports"), and ``Results``,
the typed results every report is made from.

- ``results``: ``Results`` (points, knees, capacities, constants, engines), built once
  from a session's objects (``Results.of``) or from a document (``Results.from_document``);
- ``build``: the document of a ``Results`` (``build_document``);
- ``schema``: its layout and ``validate_document``;
- ``files``: atomic, durable writes (``write_atomic``), validated reads and upgrades of
  older versions (``read_document``);
- ``samples``: the compact per-request samples a point carries;
- ``constants``: the pinned constants, and whether two runs may be compared;
- ``jsonable``: plain JSON data of any value.
"""

from __future__ import annotations

from pytest_llmslo.document.build import build_document
from pytest_llmslo.document.files import (
    read_document,
    upgrade_document,
    write_atomic,
    write_atomic_bytes,
    write_atomic_text,
)
from pytest_llmslo.document.jsonable import jsonable
from pytest_llmslo.document.results import EngineEntry, Results, Sweep
from pytest_llmslo.document.samples import SAMPLE_METRICS, compact_samples
from pytest_llmslo.document.schema import (
    HARNESS,
    OLDEST_READABLE,
    SCHEMA,
    SCHEMA_VERSION,
    DocumentError,
    validate_document,
)

__all__ = [
    "HARNESS",
    "OLDEST_READABLE",
    "SAMPLE_METRICS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "DocumentError",
    "EngineEntry",
    "Results",
    "Sweep",
    "build_document",
    "compact_samples",
    "jsonable",
    "read_document",
    "upgrade_document",
    "validate_document",
    "write_atomic",
    "write_atomic_bytes",
    "write_atomic_text",
]
