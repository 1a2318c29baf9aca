"""The requests one load worker sends, built ahead of need.

A worker owns the indices ``start, start + step, ...`` of the workload's sequence (below
``stop``, or without end for a level bounded by time alone). ``JobSource`` turns each into a
``Job``: the prompt of that index (``workload.PromptSource``, seeded by the index), its
encoded request body, its requested lengths, whether it is warm-up, and, in an open loop,
its arrival offset.

Bodies are built before the run up to a memory budget (``prefill``), so a run of a few
thousand requests builds nothing while it measures; past that, ``refill`` keeps a buffer
ahead of the senders in slices of about a millisecond, so building never holds the event
loop longer than that. ``next`` builds one on the spot only when the buffer ran dry.

With several workers, a multi-turn workload's conversations are dealt by a hash of their
id (``shard_of``; ``JobSpec.shard``): a conversation and all its turns stay on one worker,
and which worker does not depend on the order or the count of the others.

A multi-turn workload's indices are conversations (``next_conversation``): a turn's body
holds the replies of the turns before it, so it is built when the turn is due
(``turn_job``). A request asks for the settings' model, or one drawn from their weighted
list by its index (``ClientSettings.model_for``).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter_ns

import numpy as np

from .client import ClientSettings, request_body
from .promptlengths import LengthModel
from .workload import Conversation, PromptSource, WorkloadSpec

__all__ = ["Job", "JobSource", "JobSpec", "shard_of"]

#: Bodies built before the run, per worker, at most (the rest are built during it).
PREFILL_BYTES = 128 * 1024 * 1024
#: Longest stretch ``refill`` builds without yielding to the event loop.
SLICE_NS = 1_000_000
#: Conversations built before the run, per worker, at most (their turns' bodies are built
#: when due; a conversation itself is a few prompts).
PREFILL_CONVERSATIONS = 4096
#: Where the indices of spare (cool-down) requests start: past any real sequence.
SPARE_BASE = 1 << 40


_MASK = (1 << 64) - 1
_SHARD_CHUNK = 4096


def shard_of(ids: np.ndarray, seed: int, workers: int) -> np.ndarray:
    """The worker of each id: splitmix64 of the id mixed with the seed, modulo
    ``workers`` (the same on every host and in every version of numpy)."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) & _MASK)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(workers)).astype(np.int64)


def _sharded(worker: int, workers: int, seed: int, stop: int | None) -> Iterator[int]:
    """The ids below ``stop`` (without end: None) whose shard is ``worker``, in order."""
    for lo in itertools.count(0, _SHARD_CHUNK):
        hi = lo + _SHARD_CHUNK if stop is None else min(lo + _SHARD_CHUNK, stop)
        if hi <= lo:
            return
        ids = np.arange(lo, hi, dtype=np.int64)
        yield from (int(i) for i in ids[shard_of(ids, seed, workers) == worker])


@dataclass(slots=True)
class Job:
    index: int
    body: bytes
    isl: int
    osl: int
    warmup: bool
    offset_ns: int = 0
    session: int = -1
    turn: int = 0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a worker needs to build its own jobs (sent to worker processes instead of the
    bodies themselves). ``offsets`` holds the arrival offsets of this worker's indices in
    order (open loop), else None."""

    settings: ClientSettings
    workload: WorkloadSpec
    length_model: LengthModel
    start: int
    step: int
    stop: int | None
    warmup: int
    offsets: np.ndarray | None = None
    low_water: int = 64
    #: (this worker, of how many): the ids are those of ``shard_of`` this worker (below
    #: ``stop``) instead of ``start, start + step, ...``; None: those.
    shard: tuple[int, int] | None = None
    #: Spare (cool-down) requests kept built once the sequence is: a closed loop's slots,
    #: whose last wave all ask for one within a few milliseconds (0: an open loop, none).
    spares: int = 0

    @property
    def count(self) -> int | None:
        """How many jobs this worker has (None: no end)."""
        if self.stop is None:
            return None
        if self.shard is not None:
            ids = np.arange(self.stop, dtype=np.int64)
            w, n = self.shard
            return int((shard_of(ids, self.workload.seed, n) == w).sum())
        return max(0, -(-(self.stop - self.start) // self.step))


class JobSource:
    """This worker's jobs in order (see the module docstring)."""

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self._prompts = PromptSource(spec.workload, spec.length_model)
        indices: Iterator[int]
        if spec.shard is not None:
            indices = _sharded(spec.shard[0], spec.shard[1], spec.workload.seed, spec.stop)
        elif spec.stop is None:
            indices = itertools.count(spec.start, spec.step)
        else:
            indices = iter(range(spec.start, spec.stop, spec.step))
        self._indices = indices
        self._position = 0
        self._buffer: deque[Job] = deque()
        self._buffered_bytes = 0
        self.exhausted = False
        self.built = 0
        self._spares = 0
        self._spare_jobs: deque[Job] = deque()
        self._convs: deque[tuple[Conversation, bool, int]] = deque()

    def _take(self) -> tuple[int, int] | None:
        """The next index of this worker and its arrival offset (0 in a closed loop); None
        when the sequence or the schedule has ended."""
        i = next(self._indices, None)
        offsets = self.spec.offsets
        if i is None or (offsets is not None and self._position >= len(offsets)):
            self.exhausted = True
            return None
        offset = 0 if offsets is None else int(offsets[self._position])
        self._position += 1
        self.built += 1
        return i, offset

    def _make(self) -> Job | None:
        got = self._take()
        if got is None:
            return None
        i, offset = got
        spec = self.spec
        p = self._prompts.prompt(i)
        model = spec.settings.model_for(spec.workload.seed, i)
        body = request_body(
            spec.settings, p.text, p.osl, model=model, history=p.history, system=p.system
        )
        return Job(i, body, p.isl, p.osl, i < spec.warmup, offset)

    def _push(self, job: Job) -> None:
        self._buffer.append(job)
        self._buffered_bytes += len(job.body)

    def prefill(self, max_bytes: int = PREFILL_BYTES) -> None:
        """Build jobs before the run: all of them when they fit ``max_bytes``, else up to it
        (and, without an end, a few buffers' worth). Conversations are built ahead the same
        way (their turns' bodies when due): a closed loop's slots start and end their
        conversations in step, and building a hundred of them on the spot held the event
        loop for 120 ms at c=256."""
        if self.spec.workload.multi_turn:
            count = self.spec.count
            limit = self.spec.low_water * 4
            if count is not None and count <= PREFILL_CONVERSATIONS:
                limit = count
            while not self.exhausted and len(self._convs) < limit:
                got = self._make_conversation()
                if got is not None:
                    self._convs.append(got)
            return
        most = self.spec.low_water * 4 if self.spec.stop is None else None
        while not self.exhausted and self._buffered_bytes < max_bytes:
            if most is not None and len(self._buffer) >= most:
                return
            job = self._make()
            if job is not None:
                self._push(job)
        if self.exhausted:
            self._build_spares(None)

    def needs_refill(self) -> bool:
        if self.exhausted:
            return len(self._spare_jobs) < self.spec.spares
        held = len(self._convs) if self.spec.workload.multi_turn else len(self._buffer)
        return held < self.spec.low_water

    def refill(self) -> None:
        """Build jobs for about ``SLICE_NS`` or until the buffer holds twice the low
        water mark (a slice of the background refill)."""
        end = perf_counter_ns() + SLICE_NS
        if self.exhausted:
            self._build_spares(end)
            return
        high = 2 * self.spec.low_water
        if self.spec.workload.multi_turn:
            while not self.exhausted and len(self._convs) < high and perf_counter_ns() < end:
                got = self._make_conversation()
                if got is not None:
                    self._convs.append(got)
            return
        while not self.exhausted and len(self._buffer) < high and perf_counter_ns() < end:
            job = self._make()
            if job is not None:
                self._push(job)

    def next(self) -> Job | None:
        """The next job, or None when there are no more."""
        if self._buffer:
            job = self._buffer.popleft()
            self._buffered_bytes -= len(job.body)
            return job
        if self.exhausted:
            return None
        return self._make()

    def _build_spares(self, end_ns: int | None) -> None:
        """Build spare requests until ``spec.spares`` are held (or ``end_ns`` passes)."""
        while len(self._spare_jobs) < self.spec.spares:
            if end_ns is not None and perf_counter_ns() >= end_ns:
                return
            self._spare_jobs.append(self._make_spare())

    def spare(self) -> Job:
        """A request beyond the sequence, never measured (a closed loop's cool-down): the
        workload's prompt of a fresh index. Built ahead (``spec.spares`` of them, before the
        run or in the background once the sequence is built): the slots of a closed loop's
        last wave all ask for one within a few milliseconds, and building 256 on the spot
        held the event loop for 20–30 ms as their measured requests' last tokens arrived."""
        if self._spare_jobs:
            return self._spare_jobs.popleft()
        return self._make_spare()

    def _make_spare(self) -> Job:
        spec = self.spec
        i = SPARE_BASE + spec.start + self._spares * spec.step
        self._spares += 1
        p = self._prompts.prompt(i)
        model = spec.settings.model_for(spec.workload.seed, i)
        body = request_body(
            spec.settings, p.text, p.osl, model=model, history=p.history, system=p.system
        )
        return Job(i, body, p.isl, p.osl, True)

    # -- multi-turn ----------------------------------------------------------------------

    def next_conversation(self) -> tuple[Conversation, bool, int] | None:
        """The next conversation of this worker, whether it is warm-up, and its arrival
        offset (open loop); None when there are no more."""
        if self._convs:
            return self._convs.popleft()
        if self.exhausted:
            return None
        return self._make_conversation()

    def _make_conversation(self) -> tuple[Conversation, bool, int] | None:
        got = self._take()
        if got is None:
            return None
        i, offset = got
        return self._prompts.conversation(i), i < self.spec.warmup, offset

    def turn_job(
        self, conv: Conversation, k: int, history: list[tuple[str, str]], warmup: bool, isl: int
    ) -> Job:
        """Turn ``k`` of ``conv`` after ``history`` (the earlier turns' messages and
        replies); ``isl`` is the whole prompt's expected tokens."""
        spec = self.spec
        turn = conv.turns[k]
        keep = spec.workload.history_turns
        past = history[-keep:] if keep else history
        index = conv.index * spec.workload.turns + k
        model = spec.settings.model_for(spec.workload.seed, conv.index)
        body = request_body(spec.settings, turn.text, turn.osl, model=model, history=past)
        return Job(index, body, isl, turn.osl, warmup, 0, conv.index, k)

    def session_headers(self, conv: Conversation) -> dict[str, str] | None:
        name = self.spec.settings.session_header
        if not name:
            return None
        return {name: f"llmslo-{self.spec.workload.seed:x}-{conv.index}"}

    def __iter__(self) -> Iterator[Job]:
        while (job := self.next()) is not None:
            yield job
