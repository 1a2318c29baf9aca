"""What an engine start is waiting for, told while it waits.

A start can take minutes (pulling an image, loading weights, compiling graphs); a
launcher reports each phase (``report``) to whoever asked for it with ``reporting``
(the session's progress line: updated in place on a terminal, a line now and then in a
log). Without a reporter nothing is shown, and a reporter's failure never stops a start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

#: In a log (not a terminal) a phase is written at most this often.
LOG_EVERY_S = 30.0
#: How much of a readiness check's last answer a phase line shows.
_REASON_CHARS = 140


@dataclass(frozen=True, slots=True)
class StartupPhase:
    """One moment of a start: ``waiting_for`` (``pulling image vllm/vllm-openai:v0.32.0``,
    ``GET /health: ConnectError ...``), the seconds since the start began, and the
    deadline with the setting that sets it."""

    engine: str
    waiting_for: str
    elapsed_s: float
    deadline_s: float
    bound: str = "startup_timeout_s"
    phase: str = "starting"
    log_every_s: float = LOG_EVERY_S

    @property
    def text(self) -> str:
        what = self.waiting_for
        if len(what) > _REASON_CHARS:
            what = what[: _REASON_CHARS - 3] + "..."
        return f"{what}; {self.elapsed_s:.0f} s of {self.deadline_s:.0f} s ({self.bound})"


_reporter: ContextVar[Callable[[StartupPhase], None] | None] = ContextVar(
    "llmslo_startup_reporter", default=None
)


@contextlib.contextmanager
def reporting(callback: Callable[[StartupPhase], None] | None) -> Iterator[None]:
    """Starts inside this block report their phases to ``callback``."""
    token = _reporter.set(callback)
    try:
        yield
    finally:
        _reporter.reset(token)


def report(phase: StartupPhase) -> None:
    """Tell the current reporter (if any) about ``phase``."""
    callback = _reporter.get()
    if callback is None:
        return
    with contextlib.suppress(Exception):
        callback(phase)
