"""The per-request records of a run as JSONL or Parquet, one row per request of every
measured level, from the samples its document keeps (``document.samples``).

Schema (the Parquet column types; in JSONL the same names, ``null`` where empty;
``docs/exports.md`` has the table):

- ``engine``, ``test``, ``level`` (string): the level the request belongs to (``c32``);
- ``index`` (int64): its position in the level's measured requests;
- ``ok`` (bool): completed without an error;
- ``good`` (bool, nullable): completed within every per-request threshold of the
  verdict's objectives (what goodput counts); null for a level judged by none;
- ``ttft_ms``, ``ttfot_ms``, ``itl_ms`` (its mean gap), ``tpot_ms``, ``e2e_ms`` (float64,
  nullable): its latencies;
- ``output_tokens`` (int64, nullable): the tokens it received;
- ``sent_s``, ``first_token_s``, ``end_s`` (float64, nullable): when it was sent, got
  its first token and ended, in seconds from the level's first measured send.

Parquet goes through pyarrow (``pip install pytest-llmslo[parquet]``), one row group per
level, so memory holds one level at a time.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_llmslo.document import Results
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.sweep import SweepPoint

__all__ = ["COLUMNS", "point_rows", "write_jsonl", "write_parquet"]

_FLOATS = ("ttft_ms", "ttfot_ms", "itl_ms", "tpot_ms", "e2e_ms", "sent_s", "first_token_s", "end_s")
#: The columns, in order, with their Parquet types.
COLUMNS: dict[str, str] = {
    "engine": "string",
    "test": "string",
    "level": "string",
    "index": "int64",
    "ok": "bool_",
    "good": "bool_",
    **{name: "float64" for name in _FLOATS[:5]},
    "output_tokens": "int64",
    **{name: "float64" for name in _FLOATS[5:]},
}


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def point_rows(point: SweepPoint) -> list[dict[str, Any]]:
    """The rows of one level (none without stored samples)."""
    samples = point.samples or {}
    oks = samples.get("ok")
    if not isinstance(oks, list | tuple):
        return []
    n = len(oks)

    def column(name: str) -> list[Any]:
        values = samples.get(name)
        return list(values) if isinstance(values, list | tuple) and len(values) == n else [None] * n

    floats = {name: column(name) for name in _FLOATS}
    goods = column("good")
    tokens = column("output_tokens")
    rows = []
    for i in range(n):
        tok = tokens[i]
        row: dict[str, Any] = {
            "engine": point.engine,
            "test": point.test,
            "level": point.level.label,
            "index": i,
            "ok": oks[i] == 1,
            "good": None if goods[i] not in (0, 1) else goods[i] == 1,
        }
        for name in _FLOATS:
            row[name] = _float(floats[name][i])
        row["output_tokens"] = tok if isinstance(tok, int) and not isinstance(tok, bool) else None
        rows.append({k: row[k] for k in COLUMNS})
    return rows


def _levels(results: Results) -> Iterator[list[dict[str, Any]]]:
    for point in results.points:
        rows = point_rows(point)
        if rows:
            yield rows


def write_jsonl(results: Results, path: str | os.PathLike[str]) -> int:
    """Write the rows as JSON lines; return how many."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as f:
        for rows in _levels(results):
            for row in rows:
                f.write(json.dumps(row, allow_nan=False) + "\n")
                count += 1
    return count


def write_parquet(results: Results, path: str | os.PathLike[str]) -> int:
    """Write the rows as Parquet (one row group per level); return how many.
    ``ConfigError`` without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(
            "Parquet needs pyarrow: pip install 'pytest-llmslo[parquet]' (or write JSONL)"
        ) from None
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in COLUMNS.items()])
    count = 0
    with pq.ParquetWriter(os.fspath(path), schema) as writer:
        for rows in _levels(results):
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))
            count += len(rows)
        if count == 0:
            writer.write_table(schema.empty_table())
    return count
