"""Something done at a point of a level: after a time or a share of its measured requests.

A test asks for an action during a level (add capacity; later also faults) at a
``LevelPoint``: ``"20s"`` (seconds after the measured part began: its first measured
request) or ``"50%"`` (once that share of the level's measured requests is done; a level
bounded by time alone takes the share of its duration). ``AtPoint`` wraps the level's
progress callback: on the first report past the point it starts the action on a thread of
its own (an action may take seconds: starting a worker, a pod), so the load never waits
for it, and keeps when it was asked and when the action returned, on the load
generator's clock (``perf_counter_ns``: the records' clock), so the run's records can be
read around it.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["AtPoint", "LevelPoint", "parse_level_point"]

_POINT = re.compile(r"^\s*(?P<num>[0-9]*\.?[0-9]+)\s*(?P<unit>%|s|ms|m)?\s*$")


@dataclass(frozen=True, slots=True)
class LevelPoint:
    """``seconds`` after the measured part began, or a ``fraction`` (0..1) of it."""

    seconds: float | None = None
    fraction: float | None = None

    def __post_init__(self) -> None:
        if (self.seconds is None) == (self.fraction is None):
            raise ValueError("a point of a level is a time or a share of its requests, not both")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise ValueError(f"a point's time must be >= 0 s, got {self.seconds}")
        if self.fraction is not None and not 0 <= self.fraction < 1:
            raise ValueError(f"a point's share must be in [0 %, 100 %), got {self.fraction:.0%}")

    @property
    def label(self) -> str:
        if self.seconds is not None:
            return f"{self.seconds:g}s"
        return f"{(self.fraction or 0) * 100:g}%"

    def reached(
        self, done: int, total: int, measuring_s: float, duration_s: float | None = None
    ) -> bool:
        """Whether the point is passed: ``done`` of ``total`` measured requests after
        ``measuring_s`` seconds (``total`` 0: bounded by ``duration_s`` alone)."""
        if self.seconds is not None:
            return measuring_s >= self.seconds
        share = self.fraction or 0.0
        if total > 0:
            return done >= share * total
        return duration_s is not None and measuring_s >= share * duration_s


def parse_level_point(value: Any, what: str = "at") -> LevelPoint:
    """``"20s"``, ``"1500ms"``, ``"2m"``, ``"50%"`` (or a number of seconds) as a point;
    ``ValueError`` saying what is accepted."""
    if isinstance(value, LevelPoint):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return LevelPoint(seconds=float(value))
    m = _POINT.match(str(value))
    if not m:
        raise ValueError(
            f"{what}={value!r} is not a point of a level: give a time ('20s', '1500ms', "
            "'2m') from the start of the measured requests, or a share of them ('50%')"
        )
    num, unit = float(m["num"]), m["unit"] or "s"
    if unit == "%":
        return LevelPoint(fraction=num / 100)
    return LevelPoint(seconds=num * {"s": 1.0, "ms": 1e-3, "m": 60.0}[unit])


class AtPoint:
    """A progress callback that runs ``action`` once, on its own thread, when ``point`` is
    passed in the measured part of the level; ``inner`` still gets every report.
    ``asked_ns``/``done_ns`` are when the action was started and returned
    (``perf_counter_ns``), ``result`` what it returned, ``error`` what it raised."""

    def __init__(
        self,
        point: LevelPoint,
        action: Callable[[], Any],
        inner: Callable[[Any], None] | None = None,
        duration_s: float | None = None,
        name: str = "level action",
    ) -> None:
        self.point = point
        self.action = action
        self.inner = inner
        self.duration_s = duration_s
        self.name = name
        self.asked_ns: int | None = None
        self.asked_unix: float | None = None
        self.done_ns: int | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self._since: float | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __call__(self, progress: Any) -> None:
        if self.inner is not None:
            self.inner(progress)
        if getattr(progress, "phase", None) != "measuring" or getattr(progress, "warmup", False):
            return
        now = time.monotonic()
        with self._lock:
            if self._since is None:
                self._since = now
            if self._thread is not None:
                return
            done, total = int(progress.done), int(progress.total)
            if not self.point.reached(done, total, now - self._since, self.duration_s):
                return
            self.asked_ns = time.perf_counter_ns()
            self.asked_unix = time.time()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self.action()
        except BaseException as exc:  # told in the record, never raised into the load
            self.error = exc
        finally:
            self.done_ns = time.perf_counter_ns()

    @property
    def fired(self) -> bool:
        return self.asked_ns is not None

    def wait(self, timeout_s: float) -> bool:
        """Wait for the action to return (True when it has, or never started)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    def outcome(self, start_ns: int, wait_s: float, what: str) -> dict[str, Any]:
        """What happened to the action, as JSON data for the level's record, times in
        seconds from ``start_ns`` (the measured window's start): ``why`` when the level
        ended before its point; else ``asked_s``, ``asked_unix``, ``done_s`` and either
        ``done`` (what it returned) or ``error`` (what it raised, secrets masked; or that
        it had not returned ``wait_s`` after the level). ``what`` names it in the text."""
        from .redact import redact

        if not self.fired or self.asked_ns is None:
            return {"why": f"the level ended before its point ({self.point.label}) was reached"}
        self.wait(wait_s)
        out: dict[str, Any] = {
            "asked_s": round((self.asked_ns - start_ns) / 1e9, 3),
            "asked_unix": round(self.asked_unix or 0.0, 3),
        }
        if self.done_ns is not None:
            out["done_s"] = round((self.done_ns - start_ns) / 1e9, 3)
        if self.error is not None:
            out["error"] = redact(f"{type(self.error).__name__}: {self.error}")
        elif self.done_ns is None:
            out["error"] = f"the {what} had not returned {wait_s:g} s after the level"
        else:
            out["done"] = self.result
        return out
