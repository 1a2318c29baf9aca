"""Each engine's Prometheus names for the common signals.

A signal is one of ``SIGNALS``; each engine lists, per signal, the sample names that carry
it, newest first (an engine renames a metric now and then; the older name still matters
for pinned versions). Checked against the engines' sources and docs:

- vLLM v0.10-v0.11 (``vllm/v1/metrics/loggers.py``), and the same names on a running
  vLLM CPU build 0.32.0 (the engine suite asserts them): ``vllm:num_requests_running``,
  ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc``
  before v0.10), ``vllm:num_preemptions_total``, ``vllm:prefix_cache_queries_total`` /
  ``vllm:prefix_cache_hits_total`` (``vllm:gpu_prefix_cache_*`` before), the histograms
  ``vllm:request_queue_time_seconds``, ``vllm:time_to_first_token_seconds``,
  ``vllm:inter_token_latency_seconds`` (v0.11; ``vllm:time_per_output_token_seconds``
  before), ``vllm:e2e_request_latency_seconds``, and the counters
  ``vllm:prompt_tokens_total`` / ``vllm:generation_tokens_total``;
- SGLang v0.4-v0.5 (``python/sglang/srt/metrics/collector.py``,
  ``docs/references/production_metrics.md``): ``sglang:num_running_reqs``,
  ``sglang:num_queue_reqs``, ``sglang:token_usage`` (KV-cache tokens used, 0-1),
  ``sglang:num_retracted_reqs`` (requests retracted for KV space: its preemptions),
  ``sglang:cache_hit_rate`` (a gauge), ``sglang:queue_time_seconds``,
  ``sglang:time_to_first_token_seconds``, ``sglang:inter_token_latency_seconds``
  (``sglang:time_per_output_token_seconds`` before), ``sglang:e2e_request_latency_seconds``,
  ``sglang:prompt_tokens_total``, ``sglang:generation_tokens_total``;
- TensorRT-LLM 1.1 ``trtllm-serve`` (``tensorrt_llm/metrics/collector.py``): ``trtllm_``
  names (``trtllm:`` in some builds): ``kv_cache_utilization``, ``kv_cache_hit_rate``,
  ``num_requests_running`` / ``num_requests_waiting``, ``request_queue_time_seconds``,
  ``time_to_first_token_seconds``, ``time_per_output_token_seconds``,
  ``e2e_request_latency_seconds``;
- Dynamo 0.5-0.6 (``docs/observability/metrics.md``) and 1.6.1 (the mocker engine suite
  scrapes them): the frontend's
  ``dynamo_frontend_inflight_requests``, ``dynamo_frontend_queued_requests``,
  ``dynamo_frontend_time_to_first_token_seconds``,
  ``dynamo_frontend_inter_token_latency_seconds``,
  ``dynamo_frontend_request_duration_seconds``, ``dynamo_frontend_input_sequence_tokens`` /
  ``..._output_sequence_tokens``; the workers' ``dynamo_component_kvstats_gpu_cache_usage_percent``
  and ``dynamo_component_kvstats_gpu_prefix_cache_hit_rate``, next to their engine's own
  (``vllm:``, ``sglang:``) names, which Dynamo passes through (the mocker's workers
  publish neither); the KV router's ``dynamo_component_router_kv_hit_rate`` histogram on
  the frontend (its mean over the level is the hit rate when no gauge says it);
- the sim publishes vLLM's names.

DCGM exporter (``dcgm-exporter`` 3.x/4.x default counters): ``DCGM_FI_DEV_GPU_UTIL`` (%),
``DCGM_FI_DEV_FB_USED`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W),
``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` (mJ since boot).
"""

from __future__ import annotations

from typing import Literal

Signal = Literal[
    "running",
    "waiting",
    "kv_usage",
    "preemptions",
    "prefix_queries",
    "prefix_hits",
    "prefix_hit_rate",
    "prefix_hit_hist",
    "queue_time",
    "ttft",
    "itl",
    "e2e",
    "prompt_tokens",
    "generation_tokens",
]

#: How each signal is read: gauges sampled during the level (mean, max); counters and
#: histograms as their change over the level.
KIND: dict[str, str] = {
    "running": "gauge",
    "waiting": "gauge",
    "kv_usage": "ratio",
    "preemptions": "counter",
    "prefix_queries": "counter",
    "prefix_hits": "counter",
    "prefix_hit_rate": "ratio",
    "prefix_hit_hist": "histogram",
    "queue_time": "histogram",
    "ttft": "histogram",
    "itl": "histogram",
    "e2e": "histogram",
    "prompt_tokens": "counter",
    "generation_tokens": "counter",
}


def _trt(suffix: str) -> tuple[str, ...]:
    return (f"trtllm_{suffix}", f"trtllm:{suffix}")


ENGINE_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "preemptions": ("vllm:num_preemptions_total",),
        "prefix_queries": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ),
        "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        "queue_time": ("vllm:request_queue_time_seconds",),
        "ttft": ("vllm:time_to_first_token_seconds",),
        "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        "e2e": ("vllm:e2e_request_latency_seconds",),
        "prompt_tokens": ("vllm:prompt_tokens_total",),
        "generation_tokens": ("vllm:generation_tokens_total",),
    },
    "sglang": {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_usage": ("sglang:token_usage",),
        "preemptions": ("sglang:num_retracted_reqs", "sglang:num_retracted_reqs_total"),
        "prefix_hit_rate": ("sglang:cache_hit_rate",),
        "queue_time": ("sglang:queue_time_seconds",),
        "ttft": ("sglang:time_to_first_token_seconds",),
        "itl": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        "e2e": ("sglang:e2e_request_latency_seconds",),
        "prompt_tokens": ("sglang:prompt_tokens_total",),
        "generation_tokens": ("sglang:generation_tokens_total",),
    },
    "trtllm": {
        "running": _trt("num_requests_running"),
        "waiting": _trt("num_requests_waiting"),
        "kv_usage": _trt("kv_cache_utilization"),
        "prefix_hit_rate": _trt("kv_cache_hit_rate"),
        "queue_time": _trt("request_queue_time_seconds"),
        "ttft": _trt("time_to_first_token_seconds"),
        "itl": _trt("time_per_output_token_seconds"),
        "e2e": _trt("e2e_request_latency_seconds"),
    },
    "dynamo": {
        "running": ("dynamo_frontend_inflight_requests",),
        "waiting": ("dynamo_frontend_queued_requests",),
        "kv_usage": ("dynamo_component_kvstats_gpu_cache_usage_percent",),
        "prefix_hit_rate": ("dynamo_component_kvstats_gpu_prefix_cache_hit_rate",),
        "prefix_hit_hist": ("dynamo_component_router_kv_hit_rate",),
        "ttft": ("dynamo_frontend_time_to_first_token_seconds",),
        "itl": ("dynamo_frontend_inter_token_latency_seconds",),
        "e2e": ("dynamo_frontend_request_duration_seconds",),
    },
}

#: The prefixes that tell an engine's exposition apart, in the order they are tried: a
#: Dynamo worker also shows its engine's names, so Dynamo's come first.
PREFIXES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dynamo", ("dynamo_frontend_", "dynamo_component_")),
    ("vllm", ("vllm:",)),
    ("sglang", ("sglang:",)),
    ("trtllm", ("trtllm_", "trtllm:")),
)

DCGM = {
    "gpu_util": "DCGM_FI_DEV_GPU_UTIL",
    "mem_used_mib": "DCGM_FI_DEV_FB_USED",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "energy_mj": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
}


def detect(names: set[str]) -> list[str]:
    """The engines whose names appear among ``names`` (sample names, histogram bases),
    Dynamo first; several when a Dynamo worker passes its engine's names through."""
    found = []
    for engine, prefixes in PREFIXES:
        if any(n.startswith(prefixes) for n in names):
            found.append(engine)
    return found


def lookup(engines: list[str], signal: str) -> tuple[str, ...]:
    """Every name that may carry ``signal`` for these engines, in order."""
    out: list[str] = []
    for e in engines:
        out.extend(ENGINE_NAMES.get(e, {}).get(signal, ()))
    return tuple(out)


_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def base_name(name: str) -> str:
    """A sample's family name: without ``_bucket``, ``_sum``, ``_count``, ``_total``."""
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def wanted(kinds: tuple[str, ...] | None = None) -> frozenset[str]:
    """The family names of every engine's signals (of these kinds: ``gauge``, ``ratio``,
    ``counter``, ``histogram``) and DCGM's: a scrape parses those lines only."""
    out = {
        base_name(n)
        for table in ENGINE_NAMES.values()
        for signal, names in table.items()
        if kinds is None or KIND[signal] in kinds
        for n in names
    }
    out.update(DCGM.values())
    return frozenset(out)
