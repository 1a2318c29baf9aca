"""Which engine signal explains a missed objective (the rules of docs/signals.md).

For a latency objective that failed at one level, the rules compare the client's figure
with the engine's own, at the same statistic (P99 with P99, P50 with P50, else the mean):

TTFT (and TTFOT, and E2E when the engine's TTFT is most of it):

1. **client/network-bound**: the engine's own TTFT is known and less than half the
   client's: the rest is spent between them (network, API server, the client);
2. **KV-cache bound**: the engine's queue time is at least 30 % of the client's TTFT and
   the KV cache was at least 90 % full or requests were preempted: requests wait for KV
   space;
3. **queue-bound**: the queue time is at least 30 % of the TTFT, the KV cache had room:
   the batch is full (``max_num_seqs``, token budget) or the engine is behind;
4. **prefill-bound**: the engine's TTFT is most of the client's and its queue time is
   short: computing the prompts themselves takes the time (long prompts, few prefix hits);

ITL and TPOT:

1. **client/network-bound**: the engine's ITL is less than half the client's;
2. **KV-cache bound**: preemptions during the level, or the KV cache at least 90 % full;
3. **prefill interference**: at least 75 % of the tokens the engine processed were
   prompt tokens: prefill chunks take most of the steps the decode batch shares;
4. **decode-bound**: otherwise, the decode batch itself (its mean running requests and
   the prefill share named).

Without engine signals, or when none of the rules apply, the explanation says so: the
verdict never invents a cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from .levelsignals import LevelSignals

QUEUE_SHARE = 0.30
KV_FULL = 0.90
CLIENT_SHARE = 0.50
PREFILL_SHARE = 0.75


@dataclass(frozen=True, slots=True)
class Attribution:
    #: kv-cache, queue, prefill, prefill-interference, decode, client or unexplained
    kind: str
    text: str


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _stat_key(stat: str) -> str:
    return "p99" if stat in ("p99", "p999", "p95", "p90") else "p50" if stat == "p50" else "mean"


def _engine_stat(sig: LevelSignals, metric: str, stat: str) -> float | None:
    key = _stat_key(stat)
    if metric == "queue_time":
        return getattr(sig, f"queue_time_{key}_ms", None)
    if metric == "ttft":
        return getattr(sig, f"ttft_{key}_ms", None)
    if metric == "itl":
        return sig.itl_p50_ms if key == "p50" else sig.itl_mean_ms
    return None


def _context(sig: LevelSignals) -> list[str]:
    bits = []
    if sig.waiting_mean is not None:
        bits.append(f"{sig.waiting_mean:.0f} waiting on average")
    if sig.running_mean is not None:
        bits.append(f"{sig.running_mean:.0f} running")
    if sig.kv_usage_max is not None:
        bits.append(f"KV cache {_pct(sig.kv_usage_max)}")
    if sig.preemptions:
        bits.append(f"{sig.preemptions:.0f} preemptions")
    return bits


def explain(metric: str, stat: str, observed_ms: float, sig: LevelSignals | None) -> Attribution:
    """Why ``metric`` at ``stat`` (``p99``, ``p50``, ``mean``...) read ``observed_ms``."""
    if sig is None or not sig.present:
        note = sig.note if sig is not None and sig.note else "no engine signals were scraped"
        return Attribution("unexplained", f"no engine signal explains it ({note})")
    kv_full = (sig.kv_usage_max or 0.0) >= KV_FULL or (sig.preemptions or 0) > 0
    ctx = ", ".join(_context(sig))
    tail = f" ({ctx})" if ctx else ""
    label = stat.upper() if stat.startswith("p") else stat
    if metric in ("ttft", "ttfot", "e2e"):
        eng = _engine_stat(sig, "ttft", stat)
        queue = _engine_stat(sig, "queue_time", stat)
        base = observed_ms
        if metric == "e2e":
            # E2E: the TTFT part is the engine's TTFT plus what the client adds.
            if eng is None or eng < 0.5 * observed_ms:
                return _decode_side(sig, tail, f"E2E {label}")
            base = observed_ms
        if eng is not None and eng < CLIENT_SHARE * base:
            gap = base - eng
            return Attribution(
                "client",
                f"the engine's own TTFT {label} is {eng:.0f} ms; {gap:.0f} ms "
                f"({_pct(gap / base)}) is spent between the client and the engine (network, "
                "API server or the client): client/network-bound",
            )
        if queue is not None and queue >= QUEUE_SHARE * base:
            share = f"engine queue time {label} {queue:.0f} ms ({_pct(queue / base)} of it)"
            if kv_full:
                return Attribution("kv-cache", f"{share}{tail}: KV-cache bound")
            return Attribution("queue", f"{share}{tail}: queue-bound (the batch is full)")
        if eng is not None and eng >= CLIENT_SHARE * base:
            q = "" if queue is None else f", queue time {queue:.0f} ms"
            rate = f", {sig.prompt_tok_s:.0f} prompt tok/s" if sig.prompt_tok_s is not None else ""
            hits = (
                f", prefix-cache hits {_pct(sig.prefix_hit_rate)}"
                if sig.prefix_hit_rate is not None
                else ""
            )
            return Attribution(
                "prefill",
                f"the engine's own TTFT {label} is {eng:.0f} ms{q}{rate}{hits}: prefill-bound "
                "(computing the prompts takes the time)",
            )
        return Attribution(
            "unexplained",
            f"no engine signal explains it{tail} (engine TTFT and queue time unknown)",
        )
    if metric in ("itl", "tpot"):
        eng = _engine_stat(sig, "itl", stat)
        if eng is not None and eng < CLIENT_SHARE * observed_ms:
            return Attribution(
                "client",
                f"the engine's own ITL is {eng:.1f} ms: the rest is spent between the client and "
                "the engine (network, API server or the client): client/network-bound",
            )
        return _decode_side(sig, tail, f"{metric.upper()} {label}")
    return Attribution("unexplained", f"no rule for {metric}")


def _decode_side(sig: LevelSignals, tail: str, what: str) -> Attribution:
    if (sig.preemptions or 0) > 0 or (sig.kv_usage_max or 0.0) >= KV_FULL:
        return Attribution(
            "kv-cache", f"{what}{tail}: KV-cache bound (preempted requests recompute)"
        )
    prompt, gen = sig.prompt_tok_s, sig.generation_tok_s
    share = prompt / (prompt + gen) if prompt is not None and gen else None
    if share is not None and share >= PREFILL_SHARE:
        return Attribution(
            "prefill-interference",
            f"{what}: {prompt:.0f} prompt tok/s against {gen:.0f} generated ({_pct(share)} of "
            f"the tokens are prefill){tail}: prefill interference (prompt chunks share the "
            "decode steps)",
        )
    mix = "" if share is None else f"; prefill is {_pct(share)} of the tokens"
    return Attribution("decode", f"{what}{tail}: decode-bound (the batch's own pace{mix})")
