"""The live progress line of one load level (or of an engine's start), for any text
stream: updated in place on a terminal (every half second), only the final line in a log,
unless a snapshot asks to be logged now and then (``log_every_s``: a start that waits for
minutes says so in a CI log too). The pytest plugin writes it through the terminal
reporter with capture suspended; ``llmslo run`` to standard error.

The time a level's line shows is the level's own, from its first line to its last, on one
clock: ``level 25 s`` while it runs, ``level 34 s`` on its final line. ``where`` (set by
the session) says where the session stands: ``test 3/5, level 2/3, ~2 min left``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["LevelProgress", "progress_text"]


def progress_text(p: Any, elapsed_s: float | None = None) -> str:
    """A load generator progress snapshot (or an engine's startup phase) in a few words;
    ``elapsed_s``: the level's time so far (default: the snapshot's)."""
    if p.phase == "starting":
        return str(p.text)
    if p.phase == "calibrating":
        text = "calibrating prompt lengths"
    else:
        text = f"{p.phase} {p.done}/{p.total}" if p.total else f"{p.phase} {p.done}"
        if not p.warmup:
            text += f" ({p.failed} failed)"
    if elapsed_s is None:
        text += f" {p.elapsed_s:.0f} s"
    else:
        text += f", level {elapsed_s:.0f} s"
    if p.left_s is not None:
        text += f", level bound in {p.left_s:.0f} s"
    return text


class LevelProgress:
    """``LevelProgress(label, write=..., tty=...)`` is called with progress snapshots and
    closed with the level's final line. ``write(text)`` writes raw text (``\\r`` and
    ``\\n`` included); ``begin()`` is called once before the first write (the plugin
    starts a fresh line there); ``enabled=False`` shows nothing. ``done()`` ends a line
    that has no final text (an engine's start: the session says it is ready)."""

    def __init__(
        self,
        label: str,
        *,
        write: Callable[[str], None],
        tty: bool,
        enabled: bool = True,
        begin: Callable[[], None] | None = None,
    ) -> None:
        self.label = label
        self._write_raw = write
        self._begin = begin
        self.tty = tty
        self.enabled = enabled
        self.started = False
        self.last = 0.0
        self.width = 0
        self._first: float | None = None
        self._t0 = time.monotonic()
        #: Where the session stands, given the level's seconds so far (set by the session).
        self.where: Callable[[float], str] | None = None

    def _where(self) -> str:
        text = self.where(time.monotonic() - self._t0) if self.where is not None else ""
        return f" · {text}" if text else ""

    def _write(self, text: str, *, final: bool) -> None:
        if not self.enabled:
            return
        if not self.started:
            if self._begin is not None:
                self._begin()
            self.started = True
        line = f"  llmslo {self.label}: {text}"
        if self.tty:
            pad = max(self.width - len(line), 0)
            self._write_raw("\r" + line + " " * pad + ("\n" if final else ""))
            self.width = len(line)
        elif final:
            self._write_raw(line + "\n")

    def __call__(self, p: Any) -> None:
        now = time.monotonic()
        if not self.tty:
            # In a log only the final line, or a line every ``log_every_s`` when the
            # snapshot asks (the first one that long after the first snapshot).
            every = getattr(p, "log_every_s", None)
            if every is None:
                return
            if self._first is None:
                self._first = self.last = now
                return
            if now - self.last < every:
                return
            self.last = now
            self._write(progress_text(p, now - self._t0) + self._where(), final=True)
            return
        # On a terminal every half second.
        if now - self.last < 0.5 and p.phase != "calibrating":
            return
        self.last = now
        self._write(progress_text(p, now - self._t0) + self._where(), final=False)

    def close(self, text: str) -> None:
        """The level's final line: ``text``, then the level's time on the live line's clock
        and where the session stands."""
        if self.where is not None:
            text += f"; level {time.monotonic() - self._t0:.1f} s{self._where()}"
        self._write(text, final=True)

    def done(self) -> None:
        """End the line without a final text: on a terminal it is cleared."""
        if self.enabled and self.tty and self.started and self.width:
            self._write_raw("\r" + " " * self.width + "\r")
            self.width = 0
