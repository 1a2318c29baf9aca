"""Finished requests waiting to be decoded into records, on a byte budget.

Decoding a response (SSE split, JSON) costs about 4 µs per streamed token, as much as a
third of reading it; doing it while streams are read would delay their timestamps. So the
raw bytes of each finished request wait in a backlog. With several load processes the
workers do not decode at all: they ship their finished requests' bytes to the parent process
in columnar batches (``BatchBuilder``, ``RawBatch``: a few buffers framed as data, and a
write, about 0.2 µs per token), whose backlog keeps them packed until it decodes them into its
``RecordStore``. A lone in-process worker keeps its own. Either way:

- while the raw bytes held stay under ``budget`` (256 MiB by default: a minute at c=512
  fits), nothing is decoded during the run; what is left is decoded when it ends. On a
  machine that also runs the engine, or a busy CI runner, CPU spent decoding during a run
  is taken from the timestamps: at c=512 on two cores shared with the server, decoding in
  slices during a 60 s run took TTFT P50 from +6 % to +16 % of the truth;
- past it, the oldest are decoded in slices of at most ``slice_ns`` (1 ms) of CPU, with
  the event loop served between slices, until the backlog is back under three quarters of
  the budget. A long run thus decodes as it goes and never blocks the loop for long; a
  decode of the whole backlog at once (what a single threshold did) stalled the loop for
  two seconds in a 40 s run at c=512;
- ``budget=0`` decodes every request soon after it finished: early stop needs the values
  while the run goes on.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns, thread_time_ns
from typing import IO, Any

from ..evals import AnswerBook
from ..records import RequestRecord
from ..recordstore import RecordStore
from .client import RawExchange, build_record
from .rawbatch import RAW_FIXED, BatchBuilder, Finished, RawBatch, decode_batch, encode_batch
from .sse import stream_text

__all__ = ["RAW_FIXED", "Backlog", "BatchBuilder", "Finished", "RawBatch"]

DEFAULT_BUDGET = 256 * 1024 * 1024
SLICE_NS = 1_000_000
#: Past the budget by this much, a worker's batch waits in a file (``Backlog``).
SPILL_MARGIN = 32 * 1024 * 1024


class _Cursor:
    """A batch being decoded: the next exchange, its first read and its first byte."""

    __slots__ = ("at", "batch", "i", "reads", "worker")

    def __init__(self, batch: RawBatch, worker: int) -> None:
        self.batch, self.worker = batch, worker
        self.i = self.reads = self.at = 0


class _InFile:
    """A batch waiting in the backlog's file: where, and whose."""

    __slots__ = ("length", "offset", "worker")

    def __init__(self, offset: int, length: int, worker: int) -> None:
        self.offset, self.length, self.worker = offset, length, worker


class Backlog:
    """Raw exchanges in finishing order, decoded into ``records`` (see the module
    docstring), a ``RecordStore`` (a new one unless ``store`` is given). ``on_record``
    is told each new record (early stop watches them). Batches that come while more than
    ``spill_margin`` bytes past the budget are held (the decoding does not keep up: a
    busy machine) wait in a temporary file, encoded as data (``wire.encode_batch``, never a
    pickle) as they came, until their turn."""

    def __init__(
        self,
        worker: int = 0,
        budget: int = DEFAULT_BUDGET,
        slice_ns: int = SLICE_NS,
        on_record: Callable[[RequestRecord], None] | None = None,
        store: RecordStore | None = None,
        spill_margin: int | None = SPILL_MARGIN,
        answers: AnswerBook | None = None,
    ) -> None:
        self.worker = worker
        #: Scores the answers of the eval items among the records (``evals.answers``).
        self.answers = answers
        self.spill_margin = spill_margin
        self._file: IO[bytes] | None = None
        self.in_file = 0  # batches waiting in the file
        self.spilled = 0  # batches that went through it
        self.budget = budget
        self.slice_ns = slice_ns
        self.on_record = on_record
        self.records = RecordStore() if store is None else store
        self._raw: deque[tuple[Any, int, RawExchange, int, int] | _Cursor | _InFile] = deque()
        self._pending = 0  # exchanges not decoded yet
        self.bytes = 0
        self.decode_cpu_ns = 0  # CPU spent decoding during the run
        self.slices = 0
        self.longest_slice_ns = 0  # wall time: how long the event loop waited

    def add(self, job: Any, scheduled_ns: int, raw: RawExchange, worker: int | None = None) -> None:
        """Queue a finished exchange of ``job`` (anything with ``index``, ``isl``, ``osl``,
        ``session`` and ``turn``) run by ``worker`` (default: this backlog's)."""
        size = sum(map(len, raw.pieces))
        self._raw.append((job, scheduled_ns, raw, size, self.worker if worker is None else worker))
        self.bytes += size
        self._pending += 1

    def add_batch(self, batch: RawBatch, worker: int) -> None:
        """Queue a worker's batch of finished exchanges, kept packed until decoded."""
        if not len(batch):
            return
        self._pending += len(batch)
        margin = self.spill_margin
        if margin is not None and self.bytes + batch.nbytes > self.budget + margin:
            self._raw.append(self._to_file(batch, worker))
            return
        self._raw.append(_Cursor(batch, worker))
        self.bytes += batch.nbytes

    def _to_file(self, batch: RawBatch, worker: int) -> _InFile:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="llmslo-raw-")
        f = self._file
        f.seek(0, os.SEEK_END)
        data = encode_batch(batch)
        at = f.tell()
        f.write(data)
        self.in_file += 1
        self.spilled += 1
        return _InFile(at, len(data), worker)

    def _from_file(self, entry: _InFile) -> _Cursor:
        assert self._file is not None
        self._file.seek(entry.offset)
        batch = decode_batch(self._file.read(entry.length))
        self.in_file -= 1
        self.bytes += batch.nbytes
        return _Cursor(batch, entry.worker)

    def __len__(self) -> int:
        return self._pending

    @property
    def over_budget(self) -> bool:
        return bool(self._raw) and (self.bytes > self.budget or self.in_file > 0)

    def _decode_one(self) -> None:
        head = self._raw[0]
        if isinstance(head, _InFile):
            head = self._raw[0] = self._from_file(head)
        if isinstance(head, _Cursor):
            batch = head.batch
            job, scheduled, raw = batch.exchange(head.i, head.reads, head.at)
            worker = head.worker
            head.reads += len(raw.pieces)
            head.at += sum(map(len, raw.pieces))
            head.i += 1
            if head.i == len(batch):
                self._raw.popleft()
                self.bytes -= batch.nbytes
        else:
            job, scheduled, raw, size, worker = head
            self._raw.popleft()
            self.bytes -= size
        self._pending -= 1
        rec = build_record(
            job.index,
            scheduled,
            raw,
            requested_prompt_tokens=job.isl,
            requested_output_tokens=job.osl,
            worker=worker,
            session=job.session,
            turn=job.turn,
        )
        self.records.append(rec)
        book = self.answers
        if book is not None and book.wants(rec.index):
            book.add(rec.index, stream_text(raw.pieces) if rec.ok else None)
        if self.on_record is not None:
            self.on_record(rec)

    def decode_slice(self) -> None:
        """Decode the oldest requests for at most ``slice_ns`` (at least one), down to
        three quarters of the budget."""
        t0 = perf_counter_ns()
        c0 = thread_time_ns()
        target = self.budget * 3 // 4
        end = t0 + self.slice_ns
        while self._raw:
            self._decode_one()
            if (self.bytes <= target and not self.in_file) or perf_counter_ns() >= end:
                break
        self.decode_cpu_ns += thread_time_ns() - c0
        self.slices += 1
        self.longest_slice_ns = max(self.longest_slice_ns, perf_counter_ns() - t0)

    def decode_for(self, slice_ns: int) -> None:
        """Decode the oldest requests for at most ``slice_ns`` (at least one), whatever the
        budget (after the run: not counted as decoding during it): an interrupted level
        gets ahead on its decoding while its streams are cut."""
        end = perf_counter_ns() + slice_ns
        while self._raw:
            self._decode_one()
            if perf_counter_ns() >= end:
                break

    def drain(self) -> RecordStore:
        """Decode everything left (after the run); the records, sorted by index. The
        memory the raw bytes held goes back to the system (``trim_heap``): otherwise the
        allocator keeps it, and what the run's metrics allocate next comes on top."""
        while self._raw:
            self._decode_one()
        if self._file is not None:
            self._file.close()
            self._file = None
        store = self.records.finish()
        trim_heap()
        return store


def trim_heap() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``; nothing
    where there is none). Freed buffers of a few hundred KB, the raw batches, stay in the
    heap otherwise, and the process's RSS keeps the backlog's peak for good."""
    fn = _libc("malloc_trim")
    if fn is not None:
        fn(0)


#: glibc's ``M_MMAP_THRESHOLD`` (malloc.h) and its default, 128 KiB.
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 128 * 1024


def pin_mmap_threshold() -> None:
    """Keep glibc's mmap threshold at its default (128 KiB) for good (``mallopt``;
    nothing where there is none). glibc raises it to the size of each large buffer freed,
    so the raw batches (a few hundred KB, read by one thread and freed by another) come
    from the heap after the first, fragment it, and a long level's RSS crept up by about
    20 MB a minute at c=512; above the threshold a buffer is mapped alone and goes back
    to the system when freed."""
    fn = _libc("mallopt")
    if fn is not None:
        fn(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)


def _libc(name: str) -> Any:
    if name not in _LIBC:
        try:
            _LIBC[name] = getattr(ctypes.CDLL(None), name)
        except (AttributeError, OSError):
            _LIBC[name] = None
    return _LIBC[name]


_LIBC: dict[str, Any] = {}
