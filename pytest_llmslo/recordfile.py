"""The records file: the columns a run's records are kept as (``FIXED``, the flat chunk
columns, the table of texts) and the ``.npz`` files they are written to and read back
from, a store's own spilled segments (``write_segment``, ``read_segment``) and the export
of a whole run (``save``, ``load``: ``RecordStore.save`` and ``RecordStore.load``).

Every file is numpy's own format, uncompressed, holding plain arrays: texts are a unicode
column, never objects, so nothing is read with pickle (``allow_pickle=False``: an object
array in a file is refused). A file the user may have been sent is checked before it is
used (``load``): its columns must be the ones this version writes and agree with each
other, else ``ValueError`` says what does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = [
    "FIXED",
    "NONE",
    "OPTIONAL",
    "TEXTS",
    "Columns",
    "load",
    "read_segment",
    "save",
    "write_segment",
]

#: An optional int that is missing (``None`` in the record).
NONE = np.iinfo(np.int64).min

#: The fixed fields of a record, one row each.
FIXED = np.dtype(
    [
        ("index", np.int64),
        ("scheduled_ns", np.int64),
        ("sent_ns", np.int64),
        ("end_ns", np.int64),
        ("first_content_ns", np.int64),
        ("prompt_tokens", np.int64),
        ("completion_tokens", np.int64),
        ("requested_prompt_tokens", np.int64),
        ("requested_output_tokens", np.int64),
        ("session", np.int64),
        ("status", np.int32),
        ("worker", np.int32),
        ("turn", np.int32),
        ("n_chunks", np.int32),
        ("n_counts", np.int32),
        ("error", np.int32),
        ("error_kind", np.int32),
        ("finish_reason", np.int32),
        ("tokens_exact", np.bool_),
    ]
)
#: The fixed fields that may be missing (``NONE``).
OPTIONAL = (
    "first_content_ns",
    "prompt_tokens",
    "completion_tokens",
    "requested_prompt_tokens",
    "requested_output_tokens",
)
#: The fixed fields that are a text: a code into the table of texts, -1 for none.
TEXTS = ("error", "error_kind", "finish_reason")


class Columns(NamedTuple):
    """Records as columns: the fixed fields (``FIXED``), every record's chunk arrival
    times (int64 ns) flat, ``n_chunks`` a record, and the per-chunk token counts (uint32)
    flat, ``n_counts`` a record."""

    fixed: np.ndarray
    chunk_ns: np.ndarray
    chunk_tokens: np.ndarray


def write_segment(path: str, columns: Columns) -> None:
    """A store's segment to its file (the store's own, in a directory of its own)."""
    fixed, chunk_ns, chunk_tokens = columns
    np.savez(path, fixed=fixed, chunk_ns=chunk_ns, chunk_tokens=chunk_tokens)


def read_segment(path: str, fixed_only: bool = False) -> Columns:
    """A segment ``write_segment`` wrote (with empty chunk columns when ``fixed_only``)."""
    with np.load(path, allow_pickle=False) as z:
        if fixed_only:
            empty = np.empty(0, dtype=np.int64)
            return Columns(z["fixed"], empty, empty.astype(np.uint32))
        return Columns(z["fixed"], z["chunk_ns"], z["chunk_tokens"])


def save(path: str, columns: Columns, texts: Sequence[str]) -> None:
    """Every record of a run in one ``.npz`` file (``load`` reads it back)."""
    np.savez(
        path,
        fixed=columns.fixed,
        chunk_ns=columns.chunk_ns,
        chunk_tokens=columns.chunk_tokens,
        # Text as a unicode column, not objects: read back without pickle.
        texts=np.array(list(texts), dtype=np.str_),
    )


def load(path: str) -> tuple[Columns, list[str]]:
    """The columns and texts ``save`` wrote, checked (``ValueError`` naming what is not
    as ``save`` writes it)."""
    with np.load(path, allow_pickle=False) as z:
        texts = [str(t) for t in z["texts"]]
        columns = Columns(z["fixed"], z["chunk_ns"], z["chunk_tokens"])
    _check(path, columns, len(texts))
    return columns, texts


def _check(path: str, columns: Columns, texts: int) -> None:
    """``ValueError`` unless a saved run's columns are what ``save`` writes."""
    fixed, ns, toks = columns
    if fixed.dtype != FIXED or fixed.ndim != 1:
        raise ValueError(f"{path}: its records are not the fixed fields this version saves")
    if ns.dtype != np.int64 or ns.ndim != 1 or toks.dtype != np.uint32 or toks.ndim != 1:
        raise ValueError(f"{path}: its chunk columns are not flat integer columns")
    n_chunks, n_counts = fixed["n_chunks"], fixed["n_counts"]
    if len(fixed) and (int(n_chunks.min()) < 0 or int(n_counts.min()) < 0):
        raise ValueError(f"{path}: a record counts fewer than no chunks")
    if int(n_chunks.sum(dtype=np.int64)) != len(ns) or int(n_counts.sum(dtype=np.int64)) != len(
        toks
    ):
        raise ValueError(f"{path}: its records' chunk counts do not match its chunk columns")
    for name in TEXTS:
        codes = fixed[name]
        if len(codes) and (int(codes.min()) < -1 or int(codes.max()) >= texts):
            raise ValueError(f"{path}: a record's {name} names no text it holds")
