"""The live progress line of one load level, for any text stream: updated in place on a
terminal (every half second), only the final line in a log. The pytest plugin writes it
through the terminal reporter with capture suspended; ``llmslo run`` to standard error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["LevelProgress", "progress_text"]


def progress_text(p: Any) -> str:
    """A load generator progress snapshot in a few words."""
    if p.phase == "calibrating":
        text = "calibrating prompt lengths"
    else:
        text = f"{p.phase} {p.done}/{p.total}" if p.total else f"{p.phase} {p.done}"
        if not p.warmup:
            text += f" ({p.failed} failed)"
    text += f" {p.elapsed_s:.0f} s"
    if p.left_s is not None:
        text += f", level bound in {p.left_s:.0f} s"
    return text


class LevelProgress:
    """``LevelProgress(label, write=..., tty=...)`` is called with progress snapshots and
    closed with the level's final line. ``write(text)`` writes raw text (``\\r`` and
    ``\\n`` included); ``begin()`` is called once before the first write (the plugin
    starts a fresh line there); ``enabled=False`` shows nothing."""

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
        # On a terminal every half second; in a log only the final line.
        if not self.tty or (now - self.last < 0.5 and p.phase != "calibrating"):
            return
        self.last = now
        self._write(progress_text(p), final=False)

    def close(self, text: str) -> None:
        self._write(text, final=True)
