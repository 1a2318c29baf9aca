"""A level on remote workers: the parent side of ``pool.py`` over the session's TCP
connections (``remote.RemoteLink``) instead of child processes.

The same messages and the same steps as local worker processes, with the clock added
(``clock.py``): every worker gets its plan and says ready; then each one's offset is
measured (16 probes, in parallel), ``Go`` carries the shared start time and the level's
bound translated to each worker's clock, the workers run, and after their results each
offset is measured again. Their records, stall windows and side flights are then put on
the parent's clock, by the offset interpolated at each one's time, before anything reads
them: one merged set of raw records.

A worker whose eval rows (a user's file or dataset, read where it builds its requests) are
not the session's, by their fingerprint in its ``Ready``, stops the level before it starts:
the session scores every answer against its own rows.

A worker lost during the level (its connection ended, or it failed) is not the level's end:
the others run on, what it shipped before is kept, and ``RemoteLevel.lost`` names it (the
runner makes the level invalid, saying so). A worker lost before the start is an error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import LoadError
from ..evals import AnswerBook
from .clock import ClockLink, ClockOffset, shift_record, shift_spans
from .drive import WorkerResult
from .levelplan import Limits, WorkerPlan
from .pool import Gone, Interrupted, Pool, Report, Watch, drive_pool
from .protocol import PROTOCOL_VERSION, Failure, Go, Hello, Message, Ready, Stop
from .remote import Lost, RemoteLink

__all__ = ["RemoteLevel", "run_remote"]

#: ``t0`` this far after the clocks were measured: a ``Go`` must cross the network first.
START_MARGIN_NS = 250_000_000


@dataclass(slots=True)
class RemoteLevel:
    """What a level on remote workers adds to its results: each worker's name and clock,
    and the workers lost during it (by worker index, with why)."""

    names: dict[int, str] = field(default_factory=dict)
    clocks: dict[int, ClockLink] = field(default_factory=dict)
    lost: dict[int, str] = field(default_factory=dict)


class _RemotePool(Pool):
    def __init__(
        self,
        links: Sequence[RemoteLink],
        plans: list[WorkerPlan],
        report: Report,
        watch: Watch | None,
    ) -> None:
        super().__init__(plans, report, watch)
        self.links = list(links)
        names = {p.worker: link.label for p, link in zip(plans, links, strict=True)}
        self.level = RemoteLevel(names=names)
        self.before: dict[int, ClockOffset] = {}
        self.running = False
        self.partial: dict[int, WorkerResult] = {}
        self.settled = False

    def _sink(self, worker: int) -> Callable[[Message | Lost], None]:
        loop, inbox = self.loop, self.inbox

        def put(msg: Message | Lost) -> None:
            if isinstance(msg, Lost):
                item: Message | Gone = Gone(worker, msg.reason)
            elif isinstance(msg, Failure):
                item = Gone(worker, f"it failed:\n{msg.error}")
            else:
                item = msg
            with contextlib.suppress(RuntimeError):  # the level's loop is closed: it is over
                loop.call_soon_threadsafe(inbox.put_nowait, item)

        return put

    async def start(self) -> None:
        for plan, link in zip(self.plans, self.links, strict=True):
            link.attach(self._sink(plan.worker))
            try:
                link.send(Hello(PROTOCOL_VERSION, plan))
            except OSError as exc:
                raise LoadError(f"{link.label}: cannot send its plan ({exc})") from None
        ready = 0
        book = self.backlog.answers
        rows = None if book is None else book.fingerprint
        while ready < len(self.plans):
            msg = await self.next_msg(300.0)
            if isinstance(msg, Ready):
                if book is not None and msg.eval_digest != rows:
                    raise LoadError(_other_evals(self.level.names.get(msg.worker, ""), book))
                ready += 1
        offsets = await asyncio.gather(
            *(self.loop.run_in_executor(None, link.measure) for link in self.links)
        )
        self.before = {p.worker: o for p, o in zip(self.plans, offsets, strict=True)}
        self.running = True

    def go(self, t0_ns: int, limits: Limits) -> None:
        for plan, link in zip(self.plans, self.links, strict=True):
            clock = ClockLink(self.before[plan.worker])
            end = limits.level_end_ns
            mine = Limits(
                limits.duration_ns, limits.grace_ns, None if end is None else clock.to_worker(end)
            )
            try:
                link.send(Go(clock.to_worker(t0_ns), mine))
            except OSError as exc:
                # Gone between ready and go: the others run, and the level says so.
                self.level.lost[plan.worker] = f"its connection ended before the start ({exc})"

    def expected(self) -> int:
        return len(self.plans) - len(self.level.lost)

    async def next_msg(self, timeout: float | None) -> Message:
        while True:
            msg = await asyncio.wait_for(self.inbox.get(), timeout)
            if not isinstance(msg, Gone):
                return msg
            label = self.level.names.get(msg.worker, f"remote load worker {msg.worker}")
            if not self.running:
                raise LoadError(f"{label} was lost before the level started: {msg.reason}")
            if msg.worker not in self.results:
                self.level.lost[msg.worker] = msg.reason
                if len(self.results) >= self.expected():
                    # Nothing more to wait for: let the collector see its end.
                    return Stop()

    def send_all(self, msg: Message) -> None:
        for plan, link in zip(self.plans, self.links, strict=True):
            if plan.worker not in self.level.lost:
                try:
                    link.send(msg)
                except OSError:
                    continue

    async def settle(self) -> None:
        """End each worker's level (``Stop``) and measure its clock again."""
        self.settled = True
        self.send_all(Stop())
        live = [
            (p.worker, link)
            for p, link in zip(self.plans, self.links, strict=True)
            if p.worker not in self.level.lost and link.lost is None
        ]
        afters = await asyncio.gather(
            *(self.loop.run_in_executor(None, link.measure) for _, link in live),
            return_exceptions=True,
        )
        after = {w: a for (w, _), a in zip(live, afters, strict=True) if isinstance(a, ClockOffset)}
        for w, off in self.before.items():
            self.level.clocks[w] = ClockLink(off, after.get(w))

    def finish(self) -> list[WorkerResult]:
        results = super().finish()
        # What a lost worker shipped before it was lost is kept, as a result of its own.
        kept = {r.worker for r in results}
        store = self.store
        for plan in self.plans:
            shipped = store.where(plan.worker) if plan.worker not in kept else ()
            if len(shipped):
                self.partial[plan.worker] = WorkerResult(
                    plan.worker,
                    closed=plan.closed,
                    slots=plan.slots,
                    multi_turn=plan.jobs.workload.multi_turn,
                )
                self.partial[plan.worker].records = list(shipped)
        results = sorted([*results, *self.partial.values()], key=lambda r: r.worker)
        if results and all(r.answers is None for r in results):
            # Every worker lost: the answers they shipped were scored all the same.
            results[0].answers = self.backlog.answers
        for res in results:
            clock = self.level.clocks.get(res.worker)
            if clock is not None:
                _to_parent(res, clock)
        return results

    def close(self) -> None:
        if not self.settled:
            self.send_all(Stop())  # a level that did not start: the workers wait for Go
        for link in self.links:
            link.detach()


def _other_evals(label: str, book: AnswerBook) -> str:
    """Why a level cannot start on a worker whose eval rows are not the session's."""
    where = f"eval file {book.path}" if book.task == "jsonl" else f"eval dataset hf:{book.path}"
    return (
        f"{label or 'a remote load worker'} read other rows from the {where} than this "
        "session did, and the session scores the answers against its own: give every worker "
        "the same file or dataset, at the same path (or in its cache)"
    )


def _to_parent(res: WorkerResult, clock: ClockLink) -> None:
    """``res``'s timestamps on the parent's clock (its latencies unchanged). The records
    are moved one by one into a list: a remote level's records are held as objects, not
    in the columnar store (``recordstore.py``) a local level keeps them in."""
    res.records = [shift_record(r, clock.offset_at(r.sent_ns)) for r in res.records]
    if res.t0_ns:
        res.t0_ns = clock.to_parent(res.t0_ns)
    res.stalls = [(s - clock.offset_at(s), e - clock.offset_at(s)) for s, e in res.stalls]
    res.side_flight = shift_spans(res.side_flight, clock.before.offset_ns)


async def run_remote(
    links: Sequence[RemoteLink],
    plans: list[WorkerPlan],
    limits: Limits,
    report: Report,
    watch: Watch | None,
) -> tuple[list[WorkerResult] | Interrupted, RemoteLevel]:
    """``plans`` on ``links`` (one plan a worker), all started at one ``t0``."""
    if len(links) != len(plans):
        raise LoadError(f"{len(plans)} worker plans for {len(links)} remote workers")
    pool = _RemotePool(links, plans, report, watch)
    out = await drive_pool(pool, limits, report, START_MARGIN_NS)
    return out, pool.level
