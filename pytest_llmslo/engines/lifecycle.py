"""Teardown that happens even when the session does not end normally.

Every started engine unit (process group or container) registers a stop callback here.
They are all run at interpreter exit (``atexit``) and, outside a session, on SIGTERM, so
a CI job that is cancelled or a user who presses Ctrl-C leaves no engine, container or
held port behind. Outside a session, after SIGTERM has stopped the engines, the run ends
as if interrupted by Ctrl-C; in a session the session's handler (``interrupts.py``) takes
SIGTERM, and the session stops its engines on its way out.
Ctrl-C reaches fixtures as ``KeyboardInterrupt`` and their ``finally`` blocks stop engines
normally; the atexit hook is the backstop for anything still registered.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from pytest_llmslo import interrupts

_lock = threading.RLock()
_stops: dict[int, Callable[[], None]] = {}
# The fast kills (no waiting) of the units that have one, run on a third stop signal.
_kills: dict[int, Callable[[], None]] = {}
_next_id = 0
_installed = False
_sigterm_installed = False
_previous_sigterm: Any = None


def register(stop: Callable[[], None], kill: Callable[[], None] | None = None) -> int:
    """Remember ``stop`` until :func:`unregister`; returns a token. ``kill``: a fast way
    to end the unit without waiting (a SIGKILL to its process group), run instead when a
    third stop signal ends the process at once (``interrupts.hard_exit``)."""
    global _next_id
    _install()
    with _lock:
        _next_id += 1
        _stops[_next_id] = stop
        if kill is not None:
            _kills[_next_id] = kill
        return _next_id


def unregister(token: int) -> None:
    with _lock:
        _stops.pop(token, None)
        _kills.pop(token, None)


def kill_all_now() -> None:
    """The registered fast kills, each once (one registered by several units runs once),
    failures ignored (a signal handler's step: no lock, no unbounded wait; another thread
    changing the table is a reason to try it again)."""
    for _ in range(3):
        try:
            kills = list(dict.fromkeys(_kills.values()))
        except RuntimeError:  # changed while copied
            continue
        for kill in kills:
            with contextlib.suppress(Exception):
                kill()
        return


def stop_all() -> None:
    """Run every registered stop callback, newest first, ignoring their failures
    (one engine that cannot be stopped must not keep the others running)."""
    with _lock:
        items = sorted(_stops.items(), reverse=True)
        _stops.clear()
        _kills.clear()
    for _, stop in items:
        with contextlib.suppress(Exception):
            stop()


def registered() -> int:
    """How many units are still registered (for tests)."""
    with _lock:
        return len(_stops)


def tokens() -> set[int]:
    """The tokens of the units registered now (for tests)."""
    with _lock:
        return set(_stops)


def stop(token: int) -> None:
    """Run and forget one registered stop callback (a no-op for an unknown token)."""
    with _lock:
        fn = _stops.pop(token, None)
        _kills.pop(token, None)
    if fn is not None:
        with contextlib.suppress(Exception):
            fn()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    stop_all()
    prev = _previous_sigterm
    if callable(prev):
        prev(signum, frame)
        return
    if prev == signal.SIG_IGN:
        return
    # Then end the run the way Ctrl-C does: pytest treats KeyboardInterrupt as an
    # interrupted session (it stops, runs its session-finish hooks and keeps partial
    # results), where a SystemExit raised inside a test would only fail that test.
    raise KeyboardInterrupt(f"signal {signum} (SIGTERM)")


def _install() -> None:
    global _installed, _sigterm_installed, _previous_sigterm
    with _lock:
        if not _installed:
            _installed = True
            atexit.register(stop_all)
            interrupts.on_hard_exit(kill_all_now)
        # In a session its own handler (interrupts.py) takes SIGTERM: it stops the engines
        # at a safe point. Signal handlers can only be set from the main thread; elsewhere
        # atexit remains.
        if (
            _sigterm_installed
            or interrupts.active() is not None
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        _sigterm_installed = True
        with contextlib.suppress(ValueError, OSError):
            _previous_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, _on_sigterm)


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (zombies included)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell a live owner
    from an unrelated process that reused its pid. None where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22; the command name (field 2) may hold spaces, so split after its ')'.
    rest = stat.rpartition(")")[2].split()
    return rest[19] if len(rest) > 19 else None
