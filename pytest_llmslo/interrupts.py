"""SIGINT and SIGTERM of a session, from its start to its end.

Without this, what a signal did depended on where it landed: SIGTERM killed a session
against an external engine outright (the engines' teardown handler, ``engines/lifecycle``,
is installed only when an engine process or container starts), and a second signal during
the shutdown cut the writing of the results document.

``Interrupts.install()`` (the plugin's ``pytest_configure``, ``llmslo run`` at its start)
makes both signals end the session the way Ctrl-C does:

- the first raises ``KeyboardInterrupt`` where it lands (pytest ends the session as
  interrupted; ``llmslo run`` stops its sweep), unless it lands in a ``shielded`` section;
- while a section is ``shielded`` (writing the results, stopping engines), a signal is
  noted and the section runs to its end: with ``deferred`` (a write in the middle of a
  session) the first noted signal is raised once the section is done, otherwise (the
  session's own shutdown) the caller reads ``received`` and ends as interrupted;
- the second is noted and ignored: the shutdown the first started is under way and
  bounded (engines get a grace period, then SIGKILL), and it writes what was measured;
- a third raises ``KeyboardInterrupt`` again, shielded or not: a way out should the
  shutdown hang.

The load generator (``load/runner.py``) puts handlers of its own in place during a load, to
cut the load and keep its partial run; they hand back to these when the load returns.
Signal handlers can only be set from the main thread; elsewhere ``install`` does nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "Interrupts"]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """The stop signals one session received (``received``: their names, in order)."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self._previous: dict[int, Any] = {}
        self._shielded = 0
        self._deferred = 0
        self._raised = 0
        self._pending = False

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> bool:
        """Take over SIGINT and SIGTERM (the main thread only); True when installed."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return bool(self._previous)
        for sig in STOP_SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return bool(self._previous)

    def uninstall(self) -> None:
        """Give the signals back to the handlers of before, where ours is still the one in
        place (a handler installed after ours, such as the engines' teardown, keeps it and
        still calls it: then it acts as Ctrl-C does by default)."""
        previous, self._previous = self._previous, {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                if signal.getsignal(sig) == self._on_signal:
                    signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # pytest then points at the code the signal interrupted, not at this handler.
        __tracebackhide__ = True
        name = signal.Signals(signum).name
        self.received.append(name)
        if not self._previous:  # uninstalled, still called by a handler set after ours
            raise KeyboardInterrupt(name)
        if len(self.received) >= 3:
            self._raised += 1
            raise KeyboardInterrupt(f"{name} (a third stop signal)")
        if self._shielded:
            self._pending = self._pending or (self._deferred > 0 and not self._raised)
            return
        if self._raised:
            return  # the shutdown the first signal started is under way
        self._raised += 1
        raise KeyboardInterrupt(name)

    def note(self, name: str | None) -> None:
        """A stop signal another handler took (the load generator's, which cut its load and
        raised ``KeyboardInterrupt`` itself): the session is shutting down, and the next
        signal is a second one."""
        self.received.append(name or "SIGINT")
        self._raised += 1

    @contextlib.contextmanager
    def shielded(self, *, deferred: bool = False) -> Iterator[None]:
        """Run the block to its end whatever signal arrives (see the module docstring);
        ``deferred``: a signal noted here is raised as ``KeyboardInterrupt`` after it."""
        self._shielded += 1
        self._deferred += int(deferred)
        try:
            yield
        finally:
            self._shielded -= 1
            self._deferred -= int(deferred)
        if deferred and self._pending and not self._shielded:
            self._pending = False
            self._raised += 1
            raise KeyboardInterrupt(self.received[-1] if self.received else "interrupted")

    @property
    def interrupted(self) -> bool:
        """Whether a stop signal arrived (while installed)."""
        return bool(self.received)

    def describe(self) -> str:
        """The signals received, for a message (``SIGTERM``, ``SIGINT twice``)."""
        if not self.received:
            return ""
        names = list(dict.fromkeys(self.received))
        if len(names) == 1 and len(self.received) > 1:
            return f"{names[0]} x{len(self.received)}"
        return ", then ".join(self.received)
