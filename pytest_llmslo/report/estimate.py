"""What a session will run, and how long it will take: the plan printed before the first
level (``plan_lines``) and the estimate printed once the first level is measured
(``estimate_line``).

Both read the session's tests (``session.TestContext``: a test's engine, level, settings
and the points it measured), one per engine x level, and import nothing of the session.

The estimate scales the first level's measured time (calibration, warm-up, measurement
and drain) to each level still to run. A closed loop's time is taken as proportional to
its request rounds, requests / concurrency: its latency per request is the first level's,
so levels past the knee, where latency grows, take longer than estimated. An open loop
sends its requests at its rate. A duration bound caps the measurement of a level. Trace
replays, ramps and steps take the first level's time. Capacity searches and sweep
extensions choose their levels as they go: they are named, not estimated.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable
from typing import Any

__all__ = [
    "estimate_basis",
    "estimate_line",
    "format_seconds",
    "level_seconds",
    "plan_lines",
    "where_text",
]


def format_seconds(seconds: float) -> str:
    """``42 s``, ``7 min``, ``1.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _counts(ts: Any) -> str:
    """A level's request counts in words: ``20 warm-up + up to 500 measured or 30 s``."""
    measured = f"{ts.requests} measured requests" if ts.requests else "measured requests"
    if ts.duration_s:
        measured = (
            f"up to {measured} or {ts.duration_s:g} s" if ts.requests else f"{ts.duration_s:g} s"
        )
    plural = "s" if ts.warmup != 1 else ""
    warm = f"{ts.warmup} warm-up request{plural} (at least one wave of a closed loop)"
    return f"{warm}, then {measured}" if ts.warmup else measured


def plan_lines(contexts: Iterable[Any]) -> list[str]:
    """The plan of a session: its levels (tests x engines x levels) and the requests of
    each; empty without SLO tests."""
    ctxs = list(contexts)
    if not ctxs:
        return []
    levels = [c for c in ctxs if not c.capacity]
    searches = [c for c in ctxs if c.capacity]
    tests = {c.test for c in ctxs}
    engines = {c.engine for c in ctxs}
    counts = {_counts(c.settings) for c in ctxs}
    what = [f"{len(levels)} level{'s' if len(levels) != 1 else ''}"] if levels else []
    if searches:
        what.append(f"{len(searches)} capacity search{'es' if len(searches) != 1 else ''}")
    line = (
        f"llmslo: plan: {' and '.join(what)} ({len(tests)} test{'s' if len(tests) != 1 else ''}"
        f", {len(engines)} engine{'s' if len(engines) != 1 else ''}); each level "
    )
    line += counts.pop() if len(counts) == 1 else "its test's requests (see each test's line)"
    extra = []
    if searches:
        extra.append("a capacity search runs up to 12 levels")
    if any(c.settings.extend for c in levels):
        extra.append("an extended sweep up to 6 more")
    if extra:
        line += "; " + ", ".join(extra)
    return [line + "; an estimate follows the first level"]


def _rounds(level: Any, requests: float) -> float | None:
    """Request rounds of a closed loop (requests / concurrency); None for other loads."""
    if level.mode != "concurrency":
        return None
    return requests / max(float(level.value), 1.0)


def level_seconds(ctx: Any, round_s: float | None, first_s: float) -> float:
    """The estimated seconds of the level of test ``ctx`` (see the module docstring):
    ``round_s`` is a closed loop's seconds per request round, from the first level (None:
    it was no closed loop), ``first_s`` that level's time."""
    ts, level = ctx.settings, ctx.level
    warm = ts.warmup_for(level)
    measured = float(ts.requests) if ts.requests else math.inf
    if level.mode == "rate" and level.value > 0:
        warm_s, meas_s = warm / level.value, measured / level.value
    else:
        w, m = _rounds(level, warm), _rounds(level, measured)
        if w is None or m is None or round_s is None:
            return first_s
        warm_s, meas_s = w * round_s, m * round_s
    if ts.duration_s:
        # The requests sent in the window end about one round after it.
        meas_s = min(meas_s, ts.duration_s + (round_s or 0.0))
    return first_s if math.isinf(meas_s) else warm_s + meas_s


def estimate_line(
    contexts: Iterable[Any], first: Any, run: Any, warmup: int, seconds: float
) -> str | None:
    """The estimate of what is left once the first level (``first``, its ``run`` after
    ``warmup`` warm-up requests, ``seconds`` in all) was measured; None when nothing is."""
    left = [c for c in contexts if c is not first and not c.point_keys]
    if not left:
        return None
    level = run.level
    round_s, _ = estimate_basis(run, warmup, seconds)
    levels = [c for c in left if not c.capacity]
    total = sum(level_seconds(c, round_s, seconds) for c in levels)
    end = datetime.datetime.now() + datetime.timedelta(seconds=total)
    text = (
        f"llmslo: estimate: {level.label} took {seconds:.1f} s; the {len(levels)} "
        f"level{'s' if len(levels) != 1 else ''} left take about {format_seconds(total)} more "
        f"(until about {end:%H:%M})"
    )
    searches = len(left) - len(levels)
    if searches:
        text += f", plus {searches} capacity search{'es' if searches != 1 else ''}"
    if any(c.settings.extend for c in left):
        text += ", plus any sweep extension"
    return text + "; scaled from the first level: levels past the knee take longer"


def estimate_basis(run: Any, warmup: int, seconds: float) -> tuple[float | None, float]:
    """What estimates scale from: the seconds per request round of the first level's
    ``run`` (None: no closed loop) and its ``seconds`` in all."""
    rounds = _rounds(run.level, warmup + len(run.records))
    return (seconds / rounds if rounds else None), seconds


def where_text(
    contexts: Iterable[Any],
    current: Any,
    basis: tuple[float | None, float] | None = None,
    elapsed_s: float = 0.0,
) -> str:
    """Where a session stands while the level of test ``current`` runs: ``test 3/5, level
    2/3, ~2 min left`` (its test among the session's, its level among its test's on its
    engine; the time left, once ``basis`` (``estimate_basis``) is known, is the current
    level's rest and the levels not yet run, capacity searches not counted)."""
    ctxs = list(contexts)
    tests = list(dict.fromkeys(c.test for c in ctxs))
    mine = [c for c in ctxs if c.test == current.test and c.engine == current.engine]
    if current not in mine:
        return ""
    text = f"test {tests.index(current.test) + 1}/{len(tests)}, "
    text += f"level {mine.index(current) + 1}/{len(mine)}"
    if basis is None:
        return text
    round_s, first_s = basis
    left = [c for c in ctxs if c is not current and not c.point_keys and not c.capacity]
    total = sum(level_seconds(c, round_s, first_s) for c in left)
    if not current.capacity:
        total += max(level_seconds(current, round_s, first_s) - elapsed_s, 0.0)
    return text + f", ~{format_seconds(total)} left"
