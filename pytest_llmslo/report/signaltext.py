"""How the engine's signals over a level read (``RunSummary.signals``): as short phrases
(``signal_bits``: the sweep's signal line, the SVG's hover titles, the HTML report's level
view), as the line under a level's row (``signal_lines``), named for the engine measured
(``signals_name``), and as the sweep table's extra columns (``SIGNAL_COLUMNS``,
``signal_cells``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_llmslo.sweep import SweepPoint

__all__ = [
    "CLIENT_LEGEND",
    "SIGNAL_COLUMNS",
    "has_client_delta",
    "has_signals",
    "signal_bits",
    "signal_cells",
    "signal_lines",
    "signals_name",
]

#: What the "(client +N ms)" of a signal line means; said once under the sweep tables.
CLIENT_LEGEND = "client +N ms: the client's TTFT P99 minus the engine's own"

# The engine's own figures, after the client's, when the sweep has signals: queue time
# P99, KV-cache usage (max) and preemptions over the level.
SIGNAL_COLUMNS: tuple[tuple[str, int], ...] = (("queue p99", 11), ("KV", 6), ("preempt", 9))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# (key, format) of the plain figures of a signals mapping, in the order they are shown.
_SIGNAL_FIGURES: tuple[tuple[str, str], ...] = (
    ("waiting_mean", "{:.1f} waiting"),
    ("running_mean", "{:.1f} running"),
    ("kv_usage_mean", "KV {:.0%}"),
    ("preemptions", "{:.0f} preemptions"),
    ("prefix_hit_rate", "prefix hits {:.0%}"),
)


def signal_bits(s: Mapping[str, Any]) -> list[str]:
    """A level's engine signals (``RunSummary.signals``) as short phrases: queue P99,
    waiting and running, KV cache, preemptions, prefix hits, the engine's TTFT P99 against
    the client's, GPU utilisation and power, J/token. The sweep's signal line and the
    SVG's hover titles both show these."""
    bits = []
    if s.get("queue_time_p99_ms") is not None:
        bits.append(f"queue P99 {_ms(s['queue_time_p99_ms'])} ms")
    for key, form in _SIGNAL_FIGURES:
        if s.get(key) is not None:
            text = form.format(s[key]).replace("%", " %")
            peak = s.get(key.replace("_mean", "_max")) if key.endswith("_mean") else None
            if peak is not None:
                shown = f"{peak:.0%}".replace("%", " %") if key == "kv_usage_mean" else f"{peak:g}"
                text += f" (peak {shown})"
            bits.append(text)
    if s.get("kv_usage_mean") is None and s.get("kv_usage_max") is not None:
        # A document from before the means were kept: its peak alone.
        at = next((i for i, b in enumerate(bits) if b.endswith(" preemptions")), len(bits))
        bits.insert(at, f"KV {s['kv_usage_max']:.0%}".replace("%", " %"))
    if s.get("running_mean") is not None and s.get("gauge_samples"):
        bits.append(f"gauges: time-weighted over {s['gauge_samples']} samples")
    elif s.get("gauge_note"):
        bits.append(str(s["gauge_note"]))
    if s.get("ttft_p99_ms") is not None:
        text = f"engine TTFT P99 {_ms(s['ttft_p99_ms'])} ms"
        delta = s.get("client_minus_engine_ttft_p99_ms")
        if delta is not None:
            text += f" (client {delta:+.1f} ms)"
        bits.append(text)
    gpu = s.get("gpu")
    if isinstance(gpu, Mapping):
        if gpu.get("util_pct_mean") is not None:
            bits.append(f"GPU {gpu['util_pct_mean']:.0f} %")
        if gpu.get("power_w_mean") is not None:
            bits.append(f"{gpu['power_w_mean']:.0f} W")
    if s.get("energy_j_per_token") is not None:
        bits.append(f"{s['energy_j_per_token']:.2f} J/token")
    return bits


def signal_lines(p: SweepPoint) -> list[str]:
    """What the engine said about itself over a level, under its row: queue time, waiting
    and running requests, KV cache, preemptions, prefix hits, its own TTFT against the
    client's, and GPU figures; or why there are no engine signals, with the GPU figures that
    were read all the same. None when signals were off."""
    s = p.summary.signals
    if not s:
        return []
    label = p.level.label
    if not s.get("engines"):
        # The GPU figures (NVML, DCGM) do not depend on the engine's /metrics.
        gpu = ", ".join(signal_bits(s))
        return [f"  {label}: {s.get('note') or 'no engine signals'}" + (f"; {gpu}" if gpu else "")]
    bits = signal_bits(s)
    name = signals_name(p.engine, s.get("engines") or ())
    return [f"  {label}: {name}: " + ", ".join(bits)] if bits else []


# The engines' /metrics dialects (``signals.names.PREFIXES``) as their projects write them.
_DIALECTS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TRT-LLM", "dynamo": "Dynamo"}


def signals_name(engine: str, dialects: Sequence[str]) -> str:
    """What a signal line is named: the engine measured, and the dialect of its /metrics
    when the engine's name does not already say it (the sim speaks vLLM's names whatever
    the engine it imitates): ``vllm signals``, ``sim-sglang signals (vLLM-style
    /metrics)``."""
    name = f"{engine} signals"
    own = engine.lower().replace("-", "").replace("_", "")
    other = [d for d in dialects if d.lower().replace("-", "") not in own]
    if other:
        styles = "+".join(_DIALECTS.get(d, d) for d in other)
        name += f" ({styles}-style /metrics)"
    return name


def has_client_delta(p: SweepPoint) -> bool:
    """Whether a level's signal line shows the client's TTFT P99 against the engine's."""
    s = p.summary.signals
    return bool(
        s
        and s.get("engines")
        and s.get("ttft_p99_ms") is not None
        and s.get("client_minus_engine_ttft_p99_ms") is not None
    )


def has_signals(p: SweepPoint) -> bool:
    s = p.summary.signals
    return bool(s and s.get("engines"))


def signal_cells(p: SweepPoint) -> list[str]:
    """The ``SIGNAL_COLUMNS`` cells of a point (``-`` where the engine did not say)."""
    s = p.summary.signals or {}
    kv = s.get("kv_usage_max")
    pre = s.get("preemptions")
    return [
        _ms(s.get("queue_time_p99_ms")),
        "-" if kv is None else f"{kv * 100:.0f}%",
        "-" if pre is None else f"{pre:.0f}",
    ]
