"""A run's records kept as columns, in memory up to a bound and in files beyond it.

A ``RequestRecord`` object of a 100-token stream costs about 1.5 KB of Python heap, and
the heap of a long-lived process does not shrink back: a 10-minute run at c=512 (about
300k requests) grew the process by more than a gigabyte. ``RecordStore`` keeps the same
fields as numpy columns instead, about 0.9 KB a request with its chunk times, in
segments of ``SEGMENT_ROWS`` records:

- one structured array of the fixed fields (``FIXED``; an optional int missing is
  ``NONE``, a text is a code into the store's table of texts);
- the chunk arrival times of every record (int64 ns), flat, ``n_chunks`` per record;
- the per-chunk token counts of the records that have them (uint32), flat, ``n_counts``
  per record (0: one token per chunk, the common case).

Segments beyond ``limit`` bytes are written to ``.npz`` files (numpy's own format, no
compression) in a directory of their own and read back when asked; the directory is
removed by ``close()``, when the store is collected, or at the process's exit. Every
reader takes what it needs: the fixed columns (``column``), the chunk times flat
(``chunk_ns``), the segments one at a time (``segments``), or the records themselves,
built on the fly (the store is a ``Sequence[RequestRecord]``), so a run's metrics, its
gates and its samples read the same data and no second full copy is ever built.

``finish()`` sorts the records by ``index`` (they arrive in the order they ended),
a segment at a time, and makes the store read-only. The bound holds for the stores of a
process together: when a store with a bound is made (before its level's load starts),
the finished stores that have a bound move what they hold in memory to their files (a
session keeps every level's run to its end; the levels before the one running are read
from files when asked).
``save``/``load`` export the records to one ``.npz`` file; the columns and their files
are ``recordfile``'s.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import shutil
import tempfile
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from . import recordfile
from .recordfile import FIXED, NONE, OPTIONAL, TEXTS, Columns
from .records import (
    FAILURE_KINDS,
    USAGE_TOLERANCE_SHARE,
    USAGE_TOLERANCE_TOKENS,
    RequestRecord,
)

__all__ = [
    "DEFAULT_LIMIT",
    "FIXED",
    "NONE",
    "SEGMENT_ROWS",
    "RecordStore",
    "RecordView",
    "credits",
]

#: The bytes of records a store keeps in memory before it writes segments to files.
DEFAULT_LIMIT = 64 * 1024 * 1024
#: Records per segment: a segment of 100-token streams is about 7 MB.
SEGMENT_ROWS = 8192
_NAMES: tuple[str, ...] = FIXED.names or ()
_N_CHUNKS = _NAMES.index("n_chunks")
_N_COUNTS = _NAMES.index("n_counts")
_Loaded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(slots=True)
class _Segment:
    """Records of one segment: in memory (``fixed`` etc.) or in the file ``path``."""

    rows: int
    nbytes: int
    fixed: np.ndarray | None = None
    chunk_ns: np.ndarray | None = None
    chunk_tokens: np.ndarray | None = None
    path: str | None = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self.fixed is not None and self.chunk_ns is not None and self.chunk_tokens is not None:
            return self.fixed, self.chunk_ns, self.chunk_tokens
        assert self.path is not None
        fixed, chunk_ns, chunk_tokens = recordfile.read_segment(self.path)
        return fixed, chunk_ns, chunk_tokens

    def fixed_only(self) -> np.ndarray:
        if self.fixed is not None:
            return self.fixed
        assert self.path is not None
        return recordfile.read_segment(self.path, fixed_only=True).fixed


_FINISHED: weakref.WeakSet[RecordStore] = weakref.WeakSet()


def _release_finished(new: RecordStore) -> None:
    """A store is made: the finished ones with a bound go to their files."""
    if new.limit is None:
        return
    for store in list(_FINISHED):
        if store is not new and store.limit is not None and store.memory_bytes:
            store.to_files()


def _offsets(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _gather(flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The slices ``flat[offsets[r]:offsets[r+1]]`` of ``rows``, one after the other."""
    counts = offsets[rows + 1] - offsets[rows]
    total = int(counts.sum())
    if total == 0:
        return flat[:0].copy()
    starts = offsets[rows]
    out_starts = np.cumsum(counts) - counts
    idx = np.repeat(starts - out_starts, counts) + np.arange(total, dtype=np.int64)
    return flat[idx]


class RecordStore(Sequence[RequestRecord]):
    """Records as columns (module docstring): ``append`` them, ``finish()``, then read.
    ``limit`` is the bytes kept in memory (None: no bound); ``directory`` where the
    files go (default: the system's temporary directory)."""

    def __init__(self, limit: int | None = DEFAULT_LIMIT, directory: str | None = None) -> None:
        if limit is not None and limit < 0:
            raise ValueError(f"a record store's memory limit must be >= 0 bytes, got {limit}")
        self.limit = limit
        self.directory = directory
        self._segments: list[_Segment] = []
        self._starts: list[int] = [0]  # the first row of each segment, then the total
        self._texts: list[str] = list(FAILURE_KINDS)
        self._codes: dict[str, int] = {t: i for i, t in enumerate(self._texts)}
        self._rows: list[tuple[Any, ...]] = []
        self._chunk_ns = array("q")
        self._chunk_tokens = array("I")
        self._dir: str | None = None
        self._finalizer: weakref.finalize[[str, bool], RecordStore] | None = None
        self._cache: tuple[int, _Loaded] | None = None
        self.finished = False
        self.spilled_segments = 0
        _release_finished(self)

    # ------------------------------------------------------------------ writing

    def _code(self, text: str | None) -> int:
        if text is None:
            return -1
        code = self._codes.get(text)
        if code is None:
            code = self._codes[text] = len(self._texts)
            self._texts.append(text)
        return code

    def append(self, rec: RequestRecord) -> None:
        """Add one record (before ``finish``)."""
        if self.finished:
            raise ValueError("a finished record store takes no more records")
        counts = rec.chunk_tokens
        self._rows.append(
            (
                rec.index,
                rec.scheduled_ns,
                rec.sent_ns,
                rec.end_ns,
                NONE if rec.first_content_ns is None else rec.first_content_ns,
                NONE if rec.prompt_tokens is None else rec.prompt_tokens,
                NONE if rec.completion_tokens is None else rec.completion_tokens,
                NONE if rec.requested_prompt_tokens is None else rec.requested_prompt_tokens,
                NONE if rec.requested_output_tokens is None else rec.requested_output_tokens,
                rec.session,
                rec.status,
                rec.worker,
                rec.turn,
                len(rec.chunk_ns),
                len(counts),
                self._code(rec.error),
                self._code(rec.error_kind),
                self._code(rec.finish_reason),
                rec.tokens_exact,
            )
        )
        self._chunk_ns.extend(rec.chunk_ns)
        if counts:
            self._chunk_tokens.extend(counts)
        if len(self._rows) >= SEGMENT_ROWS:
            self._seal()

    def extend(self, records: Iterable[RequestRecord]) -> None:
        for rec in records:
            self.append(rec)

    def _seal(self) -> None:
        """The open rows as a segment; the oldest segments to files past the limit."""
        if not self._rows:
            return
        fixed = np.array(self._rows, dtype=FIXED)
        ns = np.frombuffer(self._chunk_ns, dtype=np.int64).copy()
        toks = np.frombuffer(self._chunk_tokens, dtype=np.uint32).copy()
        self._rows, self._chunk_ns, self._chunk_tokens = [], array("q"), array("I")
        self._add_segment(fixed, ns, toks)

    def _add_segment(self, fixed: np.ndarray, ns: np.ndarray, toks: np.ndarray) -> None:
        nbytes = fixed.nbytes + ns.nbytes + toks.nbytes
        self._segments.append(_Segment(len(fixed), nbytes, fixed, ns, toks))
        self._starts.append(self._starts[-1] + len(fixed))
        self._spill()

    def _spill(self) -> None:
        if self.limit is None:
            return
        held = self.memory_bytes
        for seg in self._segments:
            if held <= self.limit:
                return
            if seg.path is None:
                held -= seg.nbytes
                self._write(seg)

    def _write(self, seg: _Segment) -> None:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="llmslo-records-", dir=self.directory)
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
        path = os.path.join(self._dir, f"segment-{self.spilled_segments:06d}.npz")
        fixed, chunk_ns, chunk_tokens = seg.arrays()  # in memory: the segment has no file yet
        recordfile.write_segment(path, Columns(fixed, chunk_ns, chunk_tokens))
        self.spilled_segments += 1
        seg.path, seg.fixed, seg.chunk_ns, seg.chunk_tokens = path, None, None, None

    def finish(self) -> RecordStore:
        """Seal what is open and sort the records by index; the store is then read-only."""
        if self.finished:
            return self
        self._seal()
        self.finished = True
        index = self.column("index")
        if index.size > 1 and bool((index[1:] < index[:-1]).any()):
            self._sort(np.argsort(index, kind="stable"))
        _FINISHED.add(self)
        return self

    def to_files(self) -> None:
        """Move every segment held in memory to the store's files (a bounded store)."""
        self._seal_if_open()
        for seg in self._segments:
            if seg.path is None:
                self._write(seg)
        self._cache = None

    def _sort(self, order: np.ndarray) -> None:
        """Rewrite the segments in ``order``, a segment of output at a time; a segment
        read is kept while later output still needs it (the records arrive nearly in
        order, so few are)."""
        old, starts = self._segments, np.asarray(self._starts[:-1], dtype=np.int64)
        seg_of = np.searchsorted(starts, order, side="right") - 1
        last_use = np.zeros(len(old), dtype=np.int64)
        np.maximum.at(last_use, seg_of, np.arange(order.size) // SEGMENT_ROWS)
        self._segments, self._starts = [], [0]
        loaded: dict[int, _Loaded] = {}
        for block, a in enumerate(range(0, order.size, SEGMENT_ROWS)):
            src, segs = order[a : a + SEGMENT_ROWS], seg_of[a : a + SEGMENT_ROWS]
            parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
            for s in np.unique(segs):
                s = int(s)
                if s not in loaded:
                    fixed, ns, toks = old[s].arrays()
                    loaded[s] = (fixed, ns, toks, _offsets(fixed["n_chunks"]),
                                 _offsets(fixed["n_counts"]))  # fmt: skip
                fixed, ns, toks, ns_off, _ = loaded[s]
                pos = np.flatnonzero(segs == s)
                rows = src[pos] - starts[s]
                parts.append((pos, fixed[rows], _gather(ns, ns_off, rows), rows))
            self._add_segment(*self._merge(parts, loaded, seg_of[a : a + SEGMENT_ROWS]))
            for s in [s for s in loaded if last_use[s] <= block]:
                del loaded[s]
                self._drop(old[s])

    @staticmethod
    def _merge(
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
        loaded: dict[int, _Loaded],
        segs: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One output segment from the rows each source segment gave, in output order."""
        n = sum(p[0].size for p in parts)
        fixed = np.empty(n, dtype=FIXED)
        for pos, rows_fixed, _, _ in parts:
            fixed[pos] = rows_fixed
        ns_off = _offsets(fixed["n_chunks"])
        tok_off = _offsets(fixed["n_counts"])
        ns = np.empty(int(ns_off[-1]), dtype=np.int64)
        toks = np.empty(int(tok_off[-1]), dtype=np.uint32)
        for (pos, _, flat, rows), s in zip(parts, np.unique(segs), strict=True):
            ns[_ranges(ns_off, pos)] = flat
            src = loaded[int(s)]
            toks[_ranges(tok_off, pos)] = _gather(src[2], src[4], rows)
        return fixed, ns, toks

    def _drop(self, seg: _Segment) -> None:
        seg.fixed = seg.chunk_ns = seg.chunk_tokens = None
        if seg.path is not None:
            with contextlib.suppress(OSError):
                os.remove(seg.path)

    def close(self) -> None:
        """Remove the store's files (its records in files are gone with them)."""
        if self._finalizer is not None:
            self._finalizer()

    # ------------------------------------------------------------------ reading

    @property
    def memory_bytes(self) -> int:
        """The bytes of the sealed segments held in memory."""
        return sum(s.nbytes for s in self._segments if s.path is None)

    @property
    def file_dir(self) -> str | None:
        """The directory of the store's files (None: nothing was written)."""
        return self._dir

    def texts(self) -> list[str]:
        """The table the text columns' codes index (-1: None)."""
        return self._texts

    def segments(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(fixed, chunk_ns, chunk_tokens) of each segment in order, read one at a time."""
        self._seal_if_open()
        for seg in self._segments:
            yield seg.arrays()

    def _seal_if_open(self) -> None:
        if self._rows:
            self._seal()

    def column(self, name: str) -> np.ndarray:
        """A fixed field of every record (``FIXED``), in order."""
        self._seal_if_open()
        parts = [seg.fixed_only()[name] for seg in self._segments]
        return np.concatenate(parts) if parts else np.empty(0, dtype=FIXED[name])

    def chunk_ns(self) -> np.ndarray:
        """Every record's chunk times, flat in record order (``n_chunks`` each)."""
        return self._flat(1, "n_chunks", np.int64)

    def chunk_tokens(self) -> np.ndarray:
        """The per-chunk token counts of the records that have them, flat (``n_counts``)."""
        return self._flat(2, "n_counts", np.uint32)

    def _flat(self, which: int, count: str, dtype: type) -> np.ndarray:
        """One ragged column of every segment in one array, filled a segment at a time
        (a segment read from its file is the only other copy alive)."""
        out: np.ndarray = np.empty(int(self.column(count).sum(dtype=np.int64)), dtype=dtype)
        at = 0
        for arrays in self.segments():
            part = arrays[which]
            out[at : at + part.size] = part
            at += part.size
        return out

    def nth_chunk_ns(self, k: int) -> np.ndarray:
        """The arrival of each record's k-th output chunk (0-based); -1 where it has none."""
        parts = []
        for fixed, ns, _ in self.segments():
            counts = fixed["n_chunks"].astype(np.int64)
            at = np.cumsum(counts) - counts + k
            has = counts > k
            out = np.full(counts.size, -1, dtype=np.int64)
            out[has] = ns[at[has]]
            parts.append(out)
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def ok(self) -> np.ndarray:
        """``RequestRecord.ok`` of every record."""
        kind, status = self.column("error_kind"), self.column("status")
        return (kind < 0) & (status >= 200) & (status < 300)

    def where(self, worker: int) -> RecordView:
        """The records of one load worker."""
        return RecordView(self, np.flatnonzero(self.column("worker") == worker))

    def __len__(self) -> int:
        return self._starts[-1] + len(self._rows)

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[RequestRecord]: ...
    def __getitem__(self, i: int | slice) -> RequestRecord | Sequence[RequestRecord]:
        if isinstance(i, slice):
            return RecordView(self, np.arange(len(self), dtype=np.int64)[i])
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("record index out of range")
        self._seal_if_open()
        s = bisect.bisect_right(self._starts, i) - 1
        fixed, ns, toks, ns_off, tok_off = self._arrays(s)
        local = i - self._starts[s]
        return self._record(
            fixed[local].tolist(), ns, toks, int(ns_off[local]), int(tok_off[local])
        )

    def _arrays(self, s: int) -> _Loaded:
        """Segment ``s`` with its offsets; the last one asked is kept (a walk by index)."""
        if self._cache is not None and self._cache[0] == s:
            return self._cache[1]
        fixed, ns, toks = self._segments[s].arrays()
        got = (fixed, ns, toks, _offsets(fixed["n_chunks"]), _offsets(fixed["n_counts"]))
        self._cache = (s, got)
        return got

    def __iter__(self) -> Iterator[RequestRecord]:
        for fixed, ns, toks in self.segments():
            at_ns = at_tok = 0
            for row in fixed.tolist():
                yield self._record(row, ns, toks, at_ns, at_tok)
                at_ns += row[_N_CHUNKS]
                at_tok += row[_N_COUNTS]

    def _record(
        self, row: tuple[Any, ...], ns: np.ndarray, toks: np.ndarray, at_ns: int, at_tok: int
    ) -> RequestRecord:
        texts = self._texts
        f = dict(zip(_NAMES, row, strict=True))
        chunk_ns = array("q")
        chunk_ns.frombytes(ns[at_ns : at_ns + f["n_chunks"]].tobytes())
        chunk_tokens = array("I")
        chunk_tokens.frombytes(toks[at_tok : at_tok + f["n_counts"]].tobytes())
        for k in OPTIONAL:
            if f[k] == NONE:
                f[k] = None
        for k in TEXTS:
            f[k] = None if f[k] < 0 else texts[f[k]]
        del f["n_chunks"], f["n_counts"]
        return RequestRecord(chunk_ns=chunk_ns, chunk_tokens=chunk_tokens, **f)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return (
            f"RecordStore({len(self)} records, {self.memory_bytes} bytes in memory, "
            f"{self.spilled_segments} segments in files)"
        )

    # ------------------------------------------------------------------ export

    def save(self, path: str) -> None:
        """Every record in one ``.npz`` file (``load`` reads it back; ``recordfile``)."""
        columns = Columns(self.column_all(), self.chunk_ns(), self.chunk_tokens())
        recordfile.save(path, columns, self._texts)

    def column_all(self) -> np.ndarray:
        """The fixed fields of every record as one structured array."""
        self._seal_if_open()
        parts = [seg.fixed_only() for seg in self._segments]
        return np.concatenate(parts) if parts else np.empty(0, dtype=FIXED)

    @classmethod
    def load(cls, path: str, limit: int | None = DEFAULT_LIMIT) -> RecordStore:
        """The records ``save`` wrote, as a finished store. The file is data alone (no
        pickle is read: an object array in it is refused), and its columns must agree
        with each other (``ValueError`` naming what does not)."""
        (fixed, ns, toks), texts = recordfile.load(path)
        store = cls(limit)
        store._texts = texts
        store._codes = {t: i for i, t in enumerate(texts)}
        ns_off, tok_off = _offsets(fixed["n_chunks"]), _offsets(fixed["n_counts"])
        for a in range(0, len(fixed), SEGMENT_ROWS):
            b = min(a + SEGMENT_ROWS, len(fixed))
            store._add_segment(
                fixed[a:b].copy(),
                ns[ns_off[a] : ns_off[b]].copy(),
                toks[tok_off[a] : tok_off[b]].copy(),
            )
        store.finished = True
        return store

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with every record in memory (the files stay this process's)."""
        return {
            "fixed": self.column_all(),
            "chunk_ns": self.chunk_ns(),
            "chunk_tokens": self.chunk_tokens(),
            "texts": self._texts,
            "limit": self.limit,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # misc: calling __init__ on an instance is unsound in general; here it is the
        # point (an unpickled store starts from the state a new one has).
        self.__init__(None)  # type: ignore[misc]
        self._texts = list(state["texts"])
        self._codes = {t: i for i, t in enumerate(self._texts)}
        if len(state["fixed"]):
            self._add_segment(state["fixed"], state["chunk_ns"], state["chunk_tokens"])
        self.limit = state["limit"]
        self.finished = True


def _ranges(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The flat positions of ``rows``' slices (``offsets`` as ``_gather`` takes them)."""
    counts = offsets[rows + 1] - offsets[rows]
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    out_starts = np.cumsum(counts) - counts
    return np.repeat(offsets[rows] - out_starts, counts) + np.arange(total, dtype=np.int64)


class RecordView(Sequence[RequestRecord]):
    """Some records of a store (``rows``, in store order): a worker's, a slice."""

    def __init__(self, store: RecordStore, rows: np.ndarray) -> None:
        self.store = store
        self.rows = rows

    def __len__(self) -> int:
        return int(self.rows.size)

    @overload
    def __getitem__(self, i: int) -> RequestRecord: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[RequestRecord]: ...
    def __getitem__(self, i: int | slice) -> RequestRecord | Sequence[RequestRecord]:
        if isinstance(i, slice):
            return RecordView(self.store, self.rows[i])
        return self.store[int(self.rows[i])]

    def __iter__(self) -> Iterator[RequestRecord]:
        for r in self.rows.tolist():
            yield self.store[r]

    def column(self, name: str) -> np.ndarray:
        values: np.ndarray = self.store.column(name)[self.rows]
        return values

    def ok(self) -> np.ndarray:
        ok: np.ndarray = self.store.ok()[self.rows]
        return ok

    def chunk_ns(self) -> np.ndarray:
        """The chunk times of these records, flat in their order (``rows`` ascending)."""
        return self._flat(1, "n_chunks", np.int64)

    def chunk_tokens(self) -> np.ndarray:
        """The per-chunk token counts of these records that have them, flat."""
        return self._flat(2, "n_counts", np.uint32)

    def _flat(self, which: int, count: str, dtype: type) -> np.ndarray:
        parts = []
        starts = self.store._starts
        for s, arrays in enumerate(self.store.segments()):
            lo, hi = starts[s], starts[s + 1]
            a, b = np.searchsorted(self.rows, (lo, hi))
            if b > a:
                fixed = arrays[0]
                parts.append(_gather(arrays[which], _offsets(fixed[count]), self.rows[a:b] - lo))
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)


def credits(store: RecordStore | RecordView) -> tuple[np.ndarray, np.ndarray]:
    """``RequestRecord.credit`` of every record, vectorised: (output tokens credited,
    whether usage disagreed with the stream)."""
    n_chunks = store.column("n_chunks").astype(np.int64)
    n_counts = store.column("n_counts").astype(np.int64)
    streamed = n_chunks.copy()
    has_counts = n_counts > 0
    if has_counts.any():
        sums = np.zeros(n_counts.size, dtype=np.int64)
        toks = store.chunk_tokens()
        starts = (np.cumsum(n_counts) - n_counts)[has_counts]
        sums[has_counts] = np.add.reduceat(toks.astype(np.int64), starts)
        streamed = np.where(has_counts, sums, streamed)
    n = store.column("completion_tokens")
    cap = store.column("requested_output_tokens")
    has_n, capped = n != NONE, (cap != NONE) & (cap != 0)
    with np.errstate(invalid="ignore"):
        tolerance = np.maximum(USAGE_TOLERANCE_TOKENS, USAGE_TOLERANCE_SHARE * streamed)
        mismatch = has_n & ((capped & (n > cap)) | (np.abs(n - streamed) > tolerance))
    tokens = np.where(~has_n | mismatch | (n_chunks == 0), streamed, n)
    return np.where(capped, np.minimum(tokens, cap), tokens), mismatch
