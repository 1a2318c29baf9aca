"""What an engine answered, against its baseline: accuracy and drift of the eval answers.

Two points whose levels carried the same eval (task and seed: the same questions) are
compared answer by answer, by the digests their runs kept (``evals.answers``):

- ``accuracy`` (better higher): the share answered right, old against new. Its change is
  bounded with Newcombe's hybrid score interval (from the Wilson bounds of each side at the
  comparison's confidence): a drop beyond the tolerance whose interval holds 0 is noise
  (too few items to show it), not a regression;
- ``drift`` (better lower): the share of the items asked in both runs whose answers
  differ (baseline 0). At temperature 0 an engine that did not change answers the same,
  so any drift says the bump changed what it computes. Its tolerance is in percentage
  points of the items (``drift:5%`` and ``drift:5pp`` alike).

Where the runs kept the text of an answer on both sides (the first answers, by index),
the comparison says where the first changed answer diverges: the position of the first
whitespace-separated word that differs (a word, not the model's token: the harness has
no tokenizer of the engine). Without tolerances for them, accuracy is gated at
``accuracy:2pp`` and drift only reported (``drift:100pp``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_llmslo.regression.noise import NoiseJudgement
from pytest_llmslo.regression.rows import ComparisonRow, change
from pytest_llmslo.regression.tolerances import Tolerance
from pytest_llmslo.slo.quality import wilson_interval
from pytest_llmslo.sweep import SweepPoint

__all__ = ["ANSWER_METRICS", "answer_rows", "first_divergence"]

ANSWER_METRICS = ("accuracy", "drift")
_DEFAULTS = {
    "accuracy": Tolerance("accuracy", 0.02, False),
    "drift": Tolerance("drift", 1.0, False),
}


def first_divergence(old: str, new: str) -> int | None:
    """The position (0: the first) of the first word that differs; None when equal."""
    a, b = old.split(), new.split()
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _answers(quality: Mapping[str, Any]) -> dict[int, tuple[int, str]]:
    rows = quality.get("answers")
    out: dict[int, tuple[int, str]] = {}
    for row in rows if isinstance(rows, list) else ():
        if isinstance(row, list) and len(row) == 3 and isinstance(row[0], int):
            out[row[0]] = (int(bool(row[1])), str(row[2]))
    return out


def _texts(quality: Mapping[str, Any]) -> dict[int, str]:
    samples = quality.get("samples")
    kept = samples if isinstance(samples, list) else []
    return {
        int(s["index"]): str(s["answer"])
        for s in kept
        if isinstance(s, Mapping) and isinstance(s.get("answer"), str) and "index" in s
    }


def _accuracy_row(
    old: Sequence[int], new: Sequence[int], tol: Tolerance, confidence: float
) -> ComparisonRow:
    n1, n2, r1, r2 = len(old), len(new), sum(old), sum(new)
    p1, p2 = r1 / n1, r2 / n2
    delta, delta_pct, status = change(tol, p1, p2)
    l1, u1 = wilson_interval(r1, n1, confidence)
    l2, u2 = wilson_interval(r2, n2, confidence)
    low = delta - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = delta + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    holds_zero = low <= 0.0 <= high
    note = (
        f"{confidence:.0%} interval of the change [{100 * low:+.1f}, {100 * high:+.1f}] pp "
        f"{'contains' if holds_zero else 'excludes'} 0 (Newcombe, n={n1}/{n2})"
    )
    if status != "within tolerance" and holds_zero:
        status = "noise"
    noise = NoiseJudgement("newcombe", holds_zero, None, low, high, confidence, n1, n2, note)
    return ComparisonRow("accuracy", p1, p2, delta, delta_pct, status, tol, noise)


def _drift_row(changed: int, both: int, tol: Tolerance) -> ComparisonRow:
    share = changed / both
    if tol.relative:  # drift:5% is 5 points of the items, not 5 % of a baseline of 0
        tol = Tolerance("drift", tol.amount / 100.0, False)
    delta, _, status = change(tol, 0.0, share)
    return ComparisonRow("drift", 0.0, share, delta, None, status, tol)


def answer_rows(
    old_point: SweepPoint,
    new_point: SweepPoint,
    tolerances: Mapping[str, Tolerance],
    confidence: float,
) -> tuple[tuple[ComparisonRow, ...], tuple[str, ...]]:
    """The ``accuracy`` and ``drift`` rows of two points and the notes that go with them
    (none when either level carried no eval, or not the same one)."""
    old_q, new_q = old_point.quality, new_point.quality
    if old_q is None or new_q is None:
        return (), ()
    if (old_q.get("task"), old_q.get("seed")) != (new_q.get("task"), new_q.get("seed")):
        return (), ("answers not compared: the two levels asked different eval items",)
    old_a, new_a = _answers(old_q), _answers(new_q)
    both = sorted(set(old_a) & set(new_a))
    if not both:
        return (), ("answers not compared: no eval item was answered in both runs",)
    tols = {m: tolerances.get(m, _DEFAULTS[m]) for m in ANSWER_METRICS}
    accuracy = _accuracy_row(
        [r for r, _ in old_a.values()], [r for r, _ in new_a.values()], tols["accuracy"], confidence
    )
    changed = [i for i in both if old_a[i][1] != new_a[i][1]]
    drift = _drift_row(len(changed), len(both), tols["drift"])
    note = f"drift: {len(changed)} of {len(both)} answers changed"
    old_t, new_t = _texts(old_q), _texts(new_q)
    where = [
        (i, first_divergence(old_t[i], new_t[i])) for i in changed if i in old_t and i in new_t
    ]
    where = [(i, p) for i, p in where if p is not None]
    if where:
        i, pos = where[0]
        note += (
            f"; the first changed answer with its text kept (item {i}) diverges at word "
            f"{pos}: {old_t[i][:60]!r} -> {new_t[i][:60]!r}"
        )
    notes = (note, f"accuracy: {accuracy.noise.note}") if accuracy.noise else (note,)
    return (accuracy, drift), notes
