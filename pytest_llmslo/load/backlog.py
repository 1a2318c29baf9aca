"""Finished requests waiting to be decoded into records, on a byte budget.

Decoding a response (SSE split, JSON) costs about 4 µs per streamed token, as much as a
third of reading it; doing it while streams are read would delay their timestamps. So the
raw bytes of each finished request wait in a backlog. With several load processes the
workers do not decode at all: they ship each finished request's bytes to the parent process
(``pack``/``unpack``; a pickle and a write, about 0.2 µs per token), whose backlog decodes
them. A lone in-process worker keeps its own. Either way:

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

from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns, thread_time_ns
from typing import Any

from ..records import RequestRecord
from .client import RawExchange, build_record

__all__ = ["Backlog", "Finished", "pack", "unpack"]

DEFAULT_BUDGET = 256 * 1024 * 1024
SLICE_NS = 1_000_000


@dataclass(frozen=True, slots=True)
class Finished:
    """What a record needs of its job besides the exchange."""

    index: int
    isl: int
    osl: int
    session: int = -1
    turn: int = 0


Packed = tuple[int, int, int, int, int, int, int, Any, Any, bytes, bytes, bytes, int, int]


def pack(
    index: int,
    isl: int,
    osl: int,
    scheduled_ns: int,
    raw: RawExchange,
    session: int = -1,
    turn: int = 0,
) -> Packed:
    """A finished exchange as plain data for the parent process: its reads joined into one
    bytes object, with their arrival times and lengths as packed arrays, so that pickling
    it copies three buffers instead of walking a hundred small objects."""
    return (
        index, isl, osl, scheduled_ns, raw.sent_ns, raw.end_ns, raw.status, raw.kind, raw.error,
        array("q", raw.times).tobytes(), array("I", map(len, raw.pieces)).tobytes(),
        b"".join(raw.pieces), session, turn,
    )  # fmt: skip


def unpack(item: Packed) -> tuple[Finished, int, RawExchange]:
    index, isl, osl, scheduled, sent, end, status, kind, error, times, lengths, body, ses, turn = (
        item
    )
    raw = RawExchange()
    raw.sent_ns, raw.end_ns, raw.status, raw.kind, raw.error = sent, end, status, kind, error
    t = array("q")
    t.frombytes(times)
    n = array("I")
    n.frombytes(lengths)
    pieces = []
    at = 0
    for size in n:
        pieces.append(body[at : at + size])
        at += size
    raw.times, raw.pieces = t.tolist(), pieces
    return Finished(index, isl, osl, ses, turn), scheduled, raw


class Backlog:
    """Raw exchanges in finishing order, decoded into ``records`` (see the module
    docstring). ``on_record`` is told each new record (early stop watches them)."""

    def __init__(
        self,
        worker: int = 0,
        budget: int = DEFAULT_BUDGET,
        slice_ns: int = SLICE_NS,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self.worker = worker
        self.budget = budget
        self.slice_ns = slice_ns
        self.on_record = on_record
        self.records: list[RequestRecord] = []
        self._raw: deque[tuple[Any, int, RawExchange, int, int]] = deque()
        self.bytes = 0
        self.decode_cpu_ns = 0  # CPU spent decoding during the run
        self.slices = 0
        self.longest_slice_ns = 0  # wall time: how long the event loop waited

    def add(self, job: Any, scheduled_ns: int, raw: RawExchange, worker: int | None = None) -> None:
        """Queue a finished exchange of ``job`` (anything with ``index``, ``isl``, ``osl``,
        ``session`` and ``turn``)
        run by ``worker`` (default: this backlog's)."""
        size = sum(map(len, raw.pieces))
        self._raw.append((job, scheduled_ns, raw, size, self.worker if worker is None else worker))
        self.bytes += size

    def add_packed(self, item: Packed, worker: int) -> None:
        job, scheduled, raw = unpack(item)
        self.add(job, scheduled, raw, worker)

    def __len__(self) -> int:
        return len(self._raw)

    @property
    def over_budget(self) -> bool:
        return bool(self._raw) and self.bytes > self.budget

    def _decode_one(self) -> None:
        job, scheduled, raw, size, worker = self._raw.popleft()
        self.bytes -= size
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
            if self.bytes <= target or perf_counter_ns() >= end:
                break
        self.decode_cpu_ns += thread_time_ns() - c0
        self.slices += 1
        self.longest_slice_ns = max(self.longest_slice_ns, perf_counter_ns() - t0)

    def drain(self) -> None:
        """Decode everything left (after the run)."""
        while self._raw:
            self._decode_one()
