"""The capacity search: the highest load that meets the SLO, found with few levels.

``CapacitySearch`` is a state machine with no I/O (an exponential probe, then a bisection);
``CapacitySpec`` says where it starts, how fine it brackets and where it stops;
``CapacityResult`` is where it stands, and what the results document keeps of it (the
``capacity`` of a sweep, ``to_dict``/``from_dict``). The session runs the levels the
search asks for (``session.search_capacity``) and the regression check compares two
results (``regression.compare_capacity``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_llmslo.records import Arrival, LoadLevel, LoadMode
from pytest_llmslo.sweep import finite_or_none
from pytest_llmslo.sweepextend import round_significant

__all__ = ["DEFAULT_MAX_PROBES", "CapacityResult", "CapacitySearch", "CapacitySpec"]

#: The probe budget of a search whose spec sets none.
DEFAULT_MAX_PROBES = 40


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """Where a ``CapacitySearch`` stands. ``capacity`` is the highest level that passed
    (None when none did); the true capacity lies in ``[lower, upper)`` (``upper`` None: no
    level failed, capacity is at least ``lower``). ``probes`` is the number of levels run.
    ``client_limited``: some level was recorded as invalid (``passed=None``) and bounded the
    search from above."""

    mode: LoadMode
    capacity: LoadLevel | None
    lower: float | None
    upper: float | None
    probes: int
    history: tuple[tuple[LoadLevel, bool | None], ...]
    done: bool
    reason: str
    client_limited: bool = False

    @property
    def value(self) -> float:
        """The capacity as a number for comparisons: its level's value, 0 when no level
        passed (the engine meets the SLO at no load that was tried)."""
        return 0.0 if self.capacity is None else float(self.capacity.value)

    def _label(self, value: float | None) -> str:
        if value is None:
            return "-"
        for level, _ in self.history:
            if level.value == value:
                return level.label
        if self.mode == "concurrency":
            return LoadLevel.concurrency(int(value)).label
        return LoadLevel("rate", value).label

    def describe(self) -> str:
        """One sentence: the capacity, its bracket, the number of levels and why the search
        stopped (``capacity c8 (c9 failed), 5 levels: bracketed to the resolution``)."""
        if self.capacity is None:
            text = "capacity: none"
        else:
            text = f"capacity: {self.capacity.label}"
        if self.upper is not None:
            text += f" ({self._label(self.upper)} failed)"
        elif self.capacity is not None:
            text += " (no level failed: at least that)"
        plural = "s" if self.probes != 1 else ""
        text += f", {self.probes} level{plural}"
        if self.reason:
            text += f": {self.reason}"
        if self.client_limited:
            text += "; an invalid client run bounded the search"
        return text

    def probes_text(self) -> str:
        """The probed levels in order with their outcome (``c1 pass, c2 pass, c4 FAIL``)."""
        outcome = {True: "pass", False: "FAIL", None: "invalid"}
        return ", ".join(f"{lv.label} {outcome[passed]}" for lv, passed in self.history)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "capacity": None if self.capacity is None else self.capacity.to_dict(),
            "lower": self.lower,
            "upper": self.upper,
            "probes": self.probes,
            "history": [
                {"level": level.to_dict(), "passed": passed} for level, passed in self.history
            ],
            "done": self.done,
            "reason": self.reason,
            "client_limited": self.client_limited,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CapacityResult:
        capacity = d.get("capacity")
        history = tuple(
            (LoadLevel.from_dict(h["level"]), h.get("passed")) for h in d.get("history", ())
        )
        return cls(
            mode=d.get("mode", "concurrency"),
            capacity=None if capacity is None else LoadLevel.from_dict(capacity),
            lower=finite_or_none(d.get("lower")),
            upper=finite_or_none(d.get("upper")),
            probes=int(d.get("probes", len(history))),
            history=history,
            done=bool(d.get("done", True)),
            reason=str(d.get("reason", "")),
            client_limited=bool(d.get("client_limited", False)),
        )


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """What a ``CapacitySearch`` searches: the load ``mode`` (``concurrency``: integers;
    ``rate``: req/s), the first level ``start`` and the growth ``factor`` of the probe, the
    bracket it stops at (``resolution``, and ``rel_resolution`` of the lower end; None:
    1 for concurrency, 0.01 req/s and 5 % for a rate), the range (``min_value`` for a rate
    probing down, ``max_value`` where it stops probing up), the probe budget
    ``max_probes`` (None: ``DEFAULT_MAX_PROBES``), and for a rate the ``arrival`` process
    and ``seed`` of its levels, or a ``template`` level whose shape every probe keeps
    (gamma burstiness, a cap, a profile: ``template.scaled(value)``).

    A spec that cannot be searched is refused here, with the setting named."""

    mode: LoadMode = "concurrency"
    start: float = 1
    factor: float = 2.0
    resolution: float | None = None
    rel_resolution: float | None = None
    max_value: float | None = None
    min_value: float | None = None
    max_probes: int | None = None
    arrival: Arrival = "poisson"
    seed: int = 0
    template: LoadLevel | None = None

    def __post_init__(self) -> None:
        mode, start = self.mode, self.start
        if mode not in ("concurrency", "rate"):
            raise ValueError(f"mode must be 'concurrency' or 'rate', got {mode!r}")
        if not self.factor > 1:
            raise ValueError(f"factor must be > 1, got {self.factor!r}")
        if not start > 0:
            raise ValueError(f"start must be > 0, got {start!r}")
        if mode == "concurrency" and float(start) != int(start):
            raise ValueError(f"a concurrency search starts at an integer, got {start!r}")
        if self.max_value is not None and self.max_value < start:
            raise ValueError(f"max_value {self.max_value!r} is below start {start!r}")
        if self.max_probes is not None and self.max_probes < 1:
            raise ValueError(f"max_probes must be >= 1, got {self.max_probes!r}")

    @classmethod
    def from_level(cls, level: LoadLevel, *, max_value: float | None = None) -> CapacitySpec:
        """The search of a test whose first level is ``level`` (``--slo-capacity``): it
        starts there, and a rate search keeps that level's arrival process, seed and
        shape."""
        if level.mode == "rate":
            return cls(
                "rate",
                start=level.value,
                max_value=max_value,
                arrival=level.arrival,
                seed=level.seed,
                template=level,
            )
        return cls(level.mode, start=level.value, max_value=max_value)


class CapacitySearch:
    """The maximum concurrency (integers) or rate that meets the SLO, with few levels.

    Exponential probe from ``spec.start`` (1, 2, 4, ... with ``factor=2``) until a level
    fails, then bisection between the highest pass and the lowest failure until they are
    within the resolution: 1 for concurrency (the exact integer), ``max(resolution,
    rel_resolution * lower)`` for a rate (defaults 0.01 req/s and 5 %). If the first level
    fails, a rate search probes downwards (``start / factor``, ...) to ``min_value``; a
    concurrency search at 1 stops with no capacity. The search also stops at ``max_value``
    (capacity is at least that) and after ``max_probes`` levels.

    Use::

        search = CapacitySearch(CapacitySpec("concurrency"))
        while (level := search.next_level()) is not None:
            search.record(level, passed=run_and_check(level))
        search.result.capacity

    ``record(level, None)`` marks an invalid run (the client was the bottleneck): it bounds
    the search from above like a failure, and the result says so. The search assumes that
    passing is monotone in load; on a noisy curve it returns a level that passed with a
    failure within the resolution above it, somewhere inside the noisy band.
    """

    __slots__ = (
        "_arrival",
        "_client_limited",
        "_factor",
        "_hi",
        "_history",
        "_lo",
        "_max_probes",
        "_max_value",
        "_min_value",
        "_mode",
        "_pending",
        "_reason",
        "_rel_resolution",
        "_resolution",
        "_seed",
        "_start",
        "_template",
    )

    def __init__(self, spec: CapacitySpec | None = None) -> None:
        spec = CapacitySpec() if spec is None else spec
        mode = spec.mode
        self._mode: LoadMode = mode
        self._start = float(spec.start)
        self._factor = float(spec.factor)
        resolution, rel_resolution, min_value = spec.resolution, spec.rel_resolution, spec.min_value
        if mode == "concurrency":
            self._resolution = max(1.0, float(resolution or 1.0))
            self._rel_resolution = float(rel_resolution or 0.0)
            self._min_value = max(1.0, float(min_value or 1.0))
        else:
            self._resolution = 0.01 if resolution is None else float(resolution)
            self._rel_resolution = 0.05 if rel_resolution is None else float(rel_resolution)
            self._min_value = 0.01 if min_value is None else float(min_value)
        if spec.max_value is None:
            self._max_value: float | None = None
        elif mode == "concurrency":
            self._max_value = float(math.floor(spec.max_value))  # the highest integer allowed
        else:
            self._max_value = float(spec.max_value)
        self._max_probes = int(DEFAULT_MAX_PROBES if spec.max_probes is None else spec.max_probes)
        self._arrival: Arrival = "closed" if mode == "concurrency" else spec.arrival
        self._seed = int(spec.seed)
        # A rate probe keeps the shape of the test's level (gamma burstiness, a cap, a
        # profile): ``template.scaled(value)``.
        template = spec.template
        self._template = template if template is not None and template.mode == mode else None
        self._lo: float | None = None
        self._hi: float | None = None
        self._pending: LoadLevel | None = None
        self._history: list[tuple[LoadLevel, bool | None]] = []
        self._reason = ""
        self._client_limited = False

    @property
    def done(self) -> bool:
        return bool(self._reason)

    @property
    def probes(self) -> int:
        return len(self._history)

    def next_level(self) -> LoadLevel | None:
        """The next level to run, or None when the search is over. Asking again before
        ``record`` returns the same level."""
        if self._pending is not None or self.done:
            return self._pending
        value = self._next_value()
        if value is None:
            return None
        self._pending = self._level(value)
        return self._pending

    def record(self, level: LoadLevel, passed: bool | None) -> None:
        """Record the outcome of the level ``next_level`` returned: True (every objective
        held), False (one failed) or None (invalid run: the client was the bottleneck)."""
        if self._pending is None:
            raise ValueError("record() without a pending level: call next_level() first")
        if level.mode != self._pending.mode or level.value != self._pending.value:
            raise ValueError(
                f"recorded {level.label}, but the pending level is {self._pending.label}"
            )
        self._pending = None
        self._history.append((level, passed))
        if passed is True:
            self._lo = level.value if self._lo is None else max(self._lo, level.value)
        else:
            self._client_limited |= passed is None
            self._hi = level.value if self._hi is None else min(self._hi, level.value)

    @property
    def result(self) -> CapacityResult:
        return CapacityResult(
            mode=self._mode,
            capacity=None if self._lo is None else self._level(self._lo),
            lower=self._lo,
            upper=self._hi,
            probes=len(self._history),
            history=tuple(self._history),
            done=self.done,
            reason=self._reason,
            client_limited=self._client_limited,
        )

    def _level(self, value: float) -> LoadLevel:
        if self._mode == "concurrency":
            return LoadLevel.concurrency(int(value))
        if self._template is not None:
            return self._template.scaled(value)
        return LoadLevel("rate", value, self._arrival, self._seed)

    def _stop(self, reason: str) -> None:
        self._reason = reason

    def _next_value(self) -> float | None:
        value, reason = self._candidate()
        if value is not None and len(self._history) >= self._max_probes:
            value, reason = None, f"probe budget of {self._max_probes} levels spent"
        if value is None:
            self._stop(reason)
        return value

    def _candidate(self) -> tuple[float | None, str]:
        """The next value to probe, or None and why the search is over."""
        lo, hi = self._lo, self._hi
        if hi is None:  # probing up: everything so far passed (or nothing was run yet)
            if lo is None:
                return self._start, ""
            if self._max_value is not None and lo >= self._max_value:
                return None, "every level passed up to max_value: capacity is at least that"
            up = self._up(lo)
            return (up if self._max_value is None else min(up, self._max_value)), ""
        if lo is None:  # probing down: everything so far failed
            down = self._down(hi)
            return down, "" if down is not None else "even the lowest level failed: no capacity"
        if hi - lo <= max(self._resolution, self._rel_resolution * lo):
            return None, "bracketed to the resolution"
        if self._mode == "concurrency":
            return float((int(lo) + int(hi)) // 2), ""
        mid = (lo + hi) / 2.0
        # A rounder rate reads better in test ids and tables, as long as it stays inside.
        nice = round_significant(mid, 3)
        return (nice if lo < nice < hi else mid), ""

    def _up(self, lo: float) -> float:
        if self._mode == "concurrency":
            return float(max(math.ceil(lo * self._factor - 1e-9), int(lo) + 1))
        return lo * self._factor

    def _down(self, hi: float) -> float | None:
        if self._mode == "concurrency":
            nxt = float(int(hi / self._factor))
            return nxt if nxt >= self._min_value and nxt < hi else None
        nxt = hi / self._factor
        return nxt if nxt >= self._min_value else None
