"""Stage 5 of a level (verdict), on its way back: where one test's assertions leave their
verdicts for the code that asked for them.

The session opens a :class:`Judging` around a test (:func:`judging`), binds the run the
test measured in it, and reads back what the body's ``assert_goodput``/``assert_slo``,
``assert_recovery`` and ``assert_quality`` judged (:meth:`Judging.take`) once the body
returns or raises: each verdict comes with the run it judged (:class:`Judged`), and the
session records it on that run's point. The open judging lives in a ``ContextVar``, not
in a module-level slot: two tests that run at once in different threads or asyncio tasks
each see their own, and a thread a body starts sees none unless it runs in a copy of the
body's context (``contextvars.copy_context().run``, as ``asyncio.to_thread`` does)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from pytest_llmslo.records import Run

from .verdict import Verdict

T = TypeVar("T")

__all__ = ["Judged", "Judgement", "Judging", "current_judging", "judging"]


@dataclass(frozen=True)
class Judged:
    """One verdict of ``assert_goodput``/``assert_slo`` and the run it judged."""

    run: Run
    verdict: Verdict


@dataclass(frozen=True)
class Judgement:
    """What a test's assertions judged since the last :meth:`Judging.take`, in the order
    they judged it: the runs' verdicts, and the other verdicts of the level (the recovery
    of its faults: ``recovery.RecoveryVerdict``, the quality of its answers:
    ``quality.QualityVerdict``), each kind read with :meth:`of`."""

    verdicts: tuple[Judged, ...] = ()
    others: tuple[object, ...] = ()

    def of(self, kind: type[T]) -> tuple[T, ...]:
        """The other verdicts of type ``kind``, in order."""
        return tuple(v for v in self.others if isinstance(v, kind))

    def __bool__(self) -> bool:
        return bool(self.verdicts or self.others)


class Judging:
    """The judging of one test: the run its assertions judge when none is passed
    (:attr:`run`), the engine ``assert_startup`` judges when none is passed and that
    engine's cold start (:attr:`engine`, :attr:`cold_start`), and every verdict given so
    far. Safe to share between the threads of one test (a lock guards it)."""

    def __init__(
        self, run: Run | None = None, *, engine: str | None = None, cold_start: Any = None
    ) -> None:
        self._lock = threading.Lock()
        self._run = run
        self._engine = engine
        self._cold_start = cold_start
        self._verdicts: list[Judged] = []
        self._others: list[object] = []

    @property
    def run(self) -> Run | None:
        return self._run

    @property
    def engine(self) -> str | None:
        return self._engine

    @property
    def cold_start(self) -> Any:
        """The cold start of :attr:`engine` (``engines.coldstart.ColdStart`` or its dict)."""
        return self._cold_start

    def bind(self, run: Run | None) -> Run | None:
        """Make ``run`` the one judged by default (None: none); returns the previous one."""
        if run is not None and not isinstance(run, Run):
            raise TypeError(f"bind_run() needs a Run, got {type(run).__name__}")
        with self._lock:
            previous, self._run = self._run, run
        return previous

    def bind_engine(self, engine: str | None, cold_start: Any) -> None:
        """Make ``engine`` (with its cold start) the one ``assert_startup`` judges."""
        with self._lock:
            self._engine, self._cold_start = engine, cold_start

    def record(self, run: Run, verdict: Verdict) -> None:
        with self._lock:
            self._verdicts.append(Judged(run, verdict))

    def record_other(self, verdict: object) -> None:
        """Keep a verdict of another kind than a run's (``assert_recovery``'s,
        ``assert_quality``'s)."""
        with self._lock:
            self._others.append(verdict)

    def take(self) -> Judgement:
        """Everything judged since the last call, handed over (the judging keeps none)."""
        with self._lock:
            out = Judgement(tuple(self._verdicts), tuple(self._others))
            self._verdicts.clear()
            self._others.clear()
        return out


#: The judging open in this context (a thread's, an asyncio task's), None outside a test.
_OPEN: ContextVar[Judging | None] = ContextVar("pytest_llmslo_judging", default=None)


def current_judging() -> Judging | None:
    """The judging open in this context, or None."""
    return _OPEN.get()


def open_judging(judging: Judging | None) -> Any:
    """Make ``judging`` the open one in this context; returns what :func:`close_judging`
    takes to restore the one before it."""
    return _OPEN.set(judging)


def close_judging(token: Any) -> None:
    """Restore the judging that was open before :func:`open_judging` returned ``token``."""
    try:
        _OPEN.reset(token)
    except ValueError:  # opened in another context (a fixture's): forget it here
        _OPEN.set(None)


@contextmanager
def judging(*, run: Run | None = None) -> Iterator[tuple[Judging, bool]]:
    """The judging open in this context with ``run`` bound (when given), or a new one
    opened until the block ends; yields it and whether this block opened it (the opener
    reads it back: :meth:`Judging.take`)."""
    found = _OPEN.get()
    if found is not None:
        if run is not None:
            found.bind(run)
        yield found, False
        return
    new = Judging(run)
    token = _OPEN.set(new)
    try:
        yield new, True
    finally:
        close_judging(token)
