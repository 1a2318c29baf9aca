"""SIGINT and SIGTERM of a session, from its start to its end: noted where they land,
acted on at safe points.

A signal handler that raises puts the exception wherever the main thread happens to be:
inside a ``finally``, a lock release, a ``__del__`` or a callback whose exceptions Python
ignores ("Exception ignored in ..."), where it is lost and leaves the session believing
that its shutdown is under way while nothing shuts down. So the handler here never
raises: it records the signal, and the session's own code checks at safe points.

``Interrupts.install()`` (the plugin's ``pytest_configure``, ``llmslo run`` at its start)
takes both signals over:

- the first is recorded (``stop_requested``); the load in progress is cut at its next
  check (``load/runner.py`` polls it a few times a second), a readiness wait at its next
  probe (``pause``), and ``checkpoint()`` raises ``KeyboardInterrupt`` once, from a known
  point of the session's code (between tests, between levels, between readiness probes),
  unless a ``shielded`` section (writing the results, stopping engines) runs: then the
  section runs to its end (``deferred``: the checkpoint comes right after it);
- the second is recorded and changes nothing: the shutdown the first started is bounded
  (engines get a grace period, then SIGKILL) and writes what was measured;
- a third ends the process at once (``os._exit``, status 128 + the signal's number, as a
  shell reports a killed process), after the results document is flushed where it is
  being written (``writing``): a way out should the shutdown hang. Engines die with the
  session: the hooks of ``on_hard_exit`` run first (the engines' lifecycle registers one
  that SIGKILLs every process group it started, grandchildren included, and force-removes
  the session's containers, within a few seconds), and the parent-death signal backs up
  the processes (engines, load workers); nothing else is waited for.

One exception: the code of a test itself (its setup, body and teardown, ``foreign``: the
plugin marks them) is not the session's and may block anywhere (``time.sleep(600)``);
there a first signal raises ``KeyboardInterrupt`` where it lands, as Python's default
Ctrl-C does, except inside the session's own code called from the test (a load, an engine
start: ``owned``), which acts on it at its safe points.

When a session that took the interpreter's default handlers over ends (``uninstall``),
up to two signals more are absorbed (the process is exiting with the session's status),
and at interpreter exit they are ignored; a third before then gets the default. A session
run inside another gives the signals back to it.

Signal handlers can only be set from the main thread; elsewhere ``install`` does nothing.
``active()`` is the instance installed now, for the layers below the session (the load
generator, the engine launcher) that check it without a session object at hand.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = [
    "STOP_SIGNALS",
    "Interrupts",
    "active",
    "checkpoint",
    "hard_exit",
    "on_hard_exit",
    "owned",
    "pause",
]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)

# How often a wait looks at the recorded signals: a readiness wait or a load notices a
# stop within this.
POLL_S = 0.05

_active: Interrupts | None = None

# What must happen even on a third signal, before ``os._exit``: fast, signal-safe steps
# only (a SIGKILL to a process group), registered by the layers above (engines/lifecycle).
_hard_exit_hooks: list[Callable[[], None]] = []


def on_hard_exit(hook: Callable[[], None]) -> None:
    """Run ``hook`` (fast, no waiting) when a third signal ends the process at once."""
    if hook not in _hard_exit_hooks:
        _hard_exit_hooks.append(hook)


def hard_exit(code: int) -> None:
    """End the process now with ``code``, after the ``on_hard_exit`` hooks (whose failures
    are ignored: the exit must happen)."""
    for hook in list(_hard_exit_hooks):
        with contextlib.suppress(Exception):
            hook()
    os._exit(code)


def active() -> Interrupts | None:
    """The ``Interrupts`` installed now (None outside a session)."""
    return _active


def checkpoint() -> None:
    """A safe point: ``KeyboardInterrupt`` once a stop signal was recorded by the
    installed ``Interrupts`` (``Interrupts.checkpoint``); nothing outside a session."""
    guard = _active
    if guard is not None:
        guard.checkpoint()


@contextlib.contextmanager
def owned() -> Iterator[None]:
    """``Interrupts.owned`` of the installed instance; nothing outside a session."""
    guard = _active
    if guard is None:
        yield
        return
    with guard.owned():
        yield


def pause(seconds: float) -> bool:
    """Sleep ``seconds``, ended early by a stop signal; True when one was recorded."""
    guard = _active
    if guard is None:
        time.sleep(max(seconds, 0.0))
        return False
    return guard.pause(seconds)


def _is_default(sig: int, handler: Any) -> bool:
    return (
        handler is signal.default_int_handler if sig == signal.SIGINT else handler == signal.SIG_DFL
    )


def _after_session(sig: int) -> Callable[[int, FrameType | None], None]:
    """The handler left when a session that had the interpreter's default handler ends:
    the process is about to exit with the session's status (its results are written), so
    a signal now (a CI system's second SIGTERM, 0.3 s after the first) is absorbed, up to
    two; a third gets the default back and is delivered to it (a program that embeds
    ``pytest.main`` or ``cli.main`` and goes on can still be stopped)."""
    late: list[int] = []

    def on_late_signal(signum: int, frame: FrameType | None) -> None:
        late.append(signum)
        if len(late) >= 3:
            default: Any = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, default)
            os.kill(os.getpid(), signum)

    _late_handlers.add(on_late_signal)
    if not _exit_hook:
        _exit_hook.append(atexit.register(_ignore_at_exit))
    return on_late_signal


_late_handlers: set[Callable[[int, FrameType | None], None]] = set()
_exit_hook: list[object] = []


def _ignore_at_exit() -> None:
    """At interpreter exit Python puts the default handler back in place of a Python one
    (SIGTERM then kills a process that is only exiting, with status -15): where the
    signals are still absorbed after a session, they are ignored to the end instead."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError, TypeError):
            if signal.getsignal(sig) in _late_handlers:
                signal.signal(sig, signal.SIG_IGN)


class Interrupts:
    """The stop signals one session received (``received``: their names, in order).

    ``exit`` ends the process on the third signal (``hard_exit``; a test passes its own)."""

    def __init__(self, *, exit: Callable[[int], object] = hard_exit) -> None:
        self.received: list[str] = []
        self._previous: dict[int, Any] = {}
        self._shielded = 0
        self._foreign = 0
        self._owned = 0
        self._writing = 0
        self._raised = False
        self._exit_code: int | None = None
        self._exit = exit
        self._outer: Interrupts | None = None

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    @property
    def stop_requested(self) -> bool:
        """Whether a stop signal arrived: what every wait and load loop checks."""
        return bool(self.received)

    def install(self) -> bool:
        """Take over SIGINT and SIGTERM (the main thread only); True when installed."""
        global _active
        if self._previous or threading.current_thread() is not threading.main_thread():
            return bool(self._previous)
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        if self._previous:
            self._outer, _active = _active, self
        return bool(self._previous)

    def uninstall(self) -> None:
        """Give the signals back to the handlers of before, where ours is still the one in
        place."""
        global _active
        previous, self._previous = self._previous, {}
        if _active is self:
            _active, self._outer = self._outer, None  # a session run inside another one
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(
                        sig, _after_session(sig) if _is_default(sig, handler) else handler
                    )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Only plain assignments and appends here: no lock, no I/O.
        name = signal.Signals(signum).name
        self.received.append(name)
        if not self._previous:
            return
        if len(self.received) == 1 and self._foreign and not (self._owned or self._shielded):
            # A test's own code (``foreign``), not the session's: Ctrl-C as Python does it.
            __tracebackhide__ = True
            self._raised = True
            raise KeyboardInterrupt(name)
        if len(self.received) < 3:
            return
        code = 128 + signum
        if self._writing:
            self._exit_code = code  # ends the process once the document is flushed
            return
        self._exit(code)

    def checkpoint(self) -> None:
        """A safe point of the session: ``KeyboardInterrupt`` (naming the first signal)
        once a stop signal was recorded, the first time only, never inside a ``shielded``
        section nor on a thread other than the main one."""
        __tracebackhide__ = True
        if threading.current_thread() is not threading.main_thread():
            return  # the session's own thread acts on it
        if self.received and not self._raised and not self._shielded:
            self._raised = True
            raise KeyboardInterrupt(self.received[0])

    def pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` in slices of ``POLL_S``; True (at once) when a stop signal
        was recorded."""
        end = time.monotonic() + max(seconds, 0.0)
        while not self.received:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(POLL_S, left))
        return True

    def note(self, name: str | None) -> None:
        """The session is stopping through a path of its own (the load generator cut its
        load and the level raised ``KeyboardInterrupt``): no checkpoint raises again. A
        signal this instance did not see (its handler was not in place) is recorded."""
        if not self.received:
            self.received.append(name or "SIGINT")
        self._raised = True

    @contextlib.contextmanager
    def shielded(self, *, deferred: bool = False) -> Iterator[None]:
        """Run the block with no checkpoint raising in it; ``deferred``: a signal recorded
        before its end raises ``KeyboardInterrupt`` right after it (``checkpoint``), where
        the block itself did not raise."""
        self._shielded += 1
        try:
            yield
        finally:
            self._shielded -= 1
        if deferred:
            self.checkpoint()

    @contextlib.contextmanager
    def foreign(self) -> Iterator[None]:
        """The main thread runs code that is not the session's (a test's own setup, body
        or teardown, which may sleep or block anywhere): a first signal there raises
        ``KeyboardInterrupt`` where it lands, as Python's default Ctrl-C does, except
        inside the session's own code called from it (``owned``, ``shielded``)."""
        self._foreign += 1
        try:
            yield
        finally:
            self._foreign -= 1

    @contextlib.contextmanager
    def owned(self) -> Iterator[None]:
        """The session's own code (a load, an engine start) called from a ``foreign``
        block: signals are only recorded, and acted on at its checkpoints."""
        self._owned += 1
        try:
            yield
        finally:
            self._owned -= 1

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """The results document is being written: a third signal ends the process only
        once the block is done (the document is flushed and renamed into place)."""
        self._writing += 1
        try:
            yield
        finally:
            self._writing -= 1
            code = self._exit_code
            if not self._writing and code is not None:
                self._exit(code)

    @property
    def interrupted(self) -> bool:
        """Whether a stop signal arrived (while installed)."""
        return bool(self.received)

    def describe(self) -> str:
        """The signals received, for a message (``SIGTERM``, ``SIGINT x2``)."""
        if not self.received:
            return ""
        names = list(dict.fromkeys(self.received))
        if len(names) == 1 and len(self.received) > 1:
            return f"{names[0]} x{len(self.received)}"
        return ", then ".join(self.received)
