"""What share of its prompt tokens a workload was built to share, and the warning when an
engine's prefix cache hit far more than that.

An engine that stays up keeps the KV blocks of the prompts it computed: a second run (or
a later test) with the same prompts is served from the cache, its TTFT a fraction of a
cold one's, while every number still looks plausible. The engine's own prefix-hit rate
(``LevelSignals.prefix_hit_rate``: hit tokens over looked-up tokens) tells it, once it is
compared with what the workload itself shares:

- synthetic: nothing but the chat template around each prompt (the ``overhead`` a
  calibration measured, when it did);
- shared_prefix: the shared prefix, ``prefix_len / isl`` (a little less in truth: each
  prefix is computed once before it is shared);
- multi-turn conversations: the history each turn resends; with every turn kept, turn
  k's prompt is (k - 1) x (isl + osl) tokens of history and isl new ones, so the share is
  the sum of the first over the sum of both (fewer with ``history_turns``: an upper
  bound, as the warning needs);
- datasets and traces: unknown (a ShareGPT file may share system prompts, a trace shares
  what its hash ids say), so nothing is compared.

A hit rate more than ``WARM_MARGIN`` above the expected share is a warm cache: the
level's line and notes say so, with both numbers.
"""

from __future__ import annotations

#: How far above the workload's own share a hit rate must be to be called warm.
WARM_MARGIN = 0.25


def expected_prefix_share(
    kind: str,
    *,
    isl: int,
    osl: int,
    prefix_len: int = 0,
    turns: int = 1,
    overhead: float = 0.0,
) -> float | None:
    """The share of prompt tokens the workload itself repeats (0..1), None when unknown.
    ``overhead``: the tokens a server adds around each prompt (its chat template)."""
    if kind not in ("synthetic", "shared_prefix") or isl <= 0:
        return None
    shared = float(prefix_len) if kind == "shared_prefix" else 0.0
    template = max(float(overhead), 0.0)
    if turns <= 1:
        return min((shared + template) / (isl + template), 1.0)
    history = sum((k - 1) * (isl + osl) for k in range(1, turns + 1))
    total = history + turns * (isl + template)
    return min((history + shared + turns * template) / total, 1.0)


def warm_cache_warning(hit_rate: float | None, expected: float | None) -> str | None:
    """A warning when the engine's prefix-hit rate is far above what the workload shares
    (None: no warning, or nothing to compare)."""
    if hit_rate is None or expected is None or hit_rate <= expected + WARM_MARGIN:
        return None
    return (
        f"warm prefix cache: the engine found {hit_rate:.0%} of prompt tokens in its "
        f"prefix cache, far above the {expected:.0%} this workload shares: earlier requests "
        "(an earlier run or test) left these prompts cached, so TTFT is not a cold one "
        "(--reset-cache=on empties it before each level)"
    )
