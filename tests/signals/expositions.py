"""Prometheus expositions of each engine, built from their documented metric names (see
``pytest_llmslo/signals/names.py`` for the versions), before and after a level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
ITL_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25)


def histogram(
    name: str, values: Sequence[float], buckets: Sequence[float], labels: str
) -> list[str]:
    out = [f"# HELP {name} A histogram.", f"# TYPE {name} histogram"]
    for b in buckets:
        n = sum(v <= b for v in values)
        out.append(f'{name}_bucket{{{labels},le="{b}"}} {float(n)}')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {float(len(values))}')
    out.append(f"{name}_sum{{{labels}}} {float(sum(values))}")
    out.append(f"{name}_count{{{labels}}} {float(len(values))}")
    return out


def exposition(
    gauges: Mapping[str, float],
    counters: Mapping[str, float],
    hists: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    labels: str = 'model_name="m"',
) -> str:
    lines: list[str] = []
    for name, v in gauges.items():
        lines += [f"# HELP {name} A gauge.", f"# TYPE {name} gauge", f"{name}{{{labels}}} {v}"]
    for name, v in counters.items():
        base = name.removesuffix("_total")
        lines += [f"# HELP {base} A counter.", f"# TYPE {base} counter", f"{name}{{{labels}}} {v}"]
    for name, (values, buckets) in hists.items():
        lines += histogram(name, values, buckets, labels)
    return "\n".join(lines) + "\n"


def vllm(level: int) -> str:
    """vLLM v0.11 after ``level`` levels of 100 requests each (0: at start)."""
    n = 100 * level
    return exposition(
        {
            "vllm:num_requests_running": 30.0 if level else 0.0,
            "vllm:num_requests_waiting": 14.0 if level else 0.0,
            "vllm:kv_cache_usage_perc": 0.97 if level else 0.0,
        },
        {
            "vllm:num_preemptions_total": 38.0 * level,
            "vllm:prefix_cache_queries_total": 50_000.0 * level,
            "vllm:prefix_cache_hits_total": 10_000.0 * level,
            "vllm:prompt_tokens_total": 51_200.0 * level,
            "vllm:generation_tokens_total": 25_600.0 * level,
        },
        {
            "vllm:request_queue_time_seconds": ([0.3] * (n // 2) + [0.6] * (n // 2), TTFT_BUCKETS),
            "vllm:time_to_first_token_seconds": ([0.4] * (n // 2) + [0.8] * (n // 2), TTFT_BUCKETS),
            "vllm:inter_token_latency_seconds": ([0.025] * n, ITL_BUCKETS),
            "vllm:e2e_request_latency_seconds": ([3.0] * n, (1.0, 2.0, 4.0, 8.0)),
        },
    )


def sglang(level: int) -> str:
    n = 100 * level
    return exposition(
        {
            "sglang:num_running_reqs": 20.0,
            "sglang:num_queue_reqs": 2.0,
            "sglang:token_usage": 0.41,
            "sglang:cache_hit_rate": 0.62,
        },
        {
            "sglang:prompt_tokens_total": 1000.0 * level,
            "sglang:generation_tokens_total": 500.0 * level,
        },
        {
            "sglang:queue_time_seconds": ([0.004] * n, TTFT_BUCKETS),
            "sglang:time_to_first_token_seconds": ([0.09] * n, TTFT_BUCKETS),
            "sglang:inter_token_latency_seconds": ([0.012] * n, ITL_BUCKETS),
            "sglang:e2e_request_latency_seconds": ([1.5] * n, (1.0, 2.0, 4.0)),
        },
    )


def trtllm(level: int) -> str:
    n = 100 * level
    return exposition(
        {"trtllm_kv_cache_utilization": 0.62, "trtllm_kv_cache_hit_rate": 0.38},
        {},
        {
            "trtllm_request_queue_time_seconds": ([0.02] * n, TTFT_BUCKETS),
            "trtllm_time_to_first_token_seconds": ([0.15] * n, TTFT_BUCKETS),
            "trtllm_time_per_output_token_seconds": ([0.018] * n, ITL_BUCKETS),
            "trtllm_e2e_request_latency_seconds": ([2.0] * n, (1.0, 2.0, 4.0)),
        },
        labels='model_name="m",engine_type="trtllm"',
    )


def dynamo_frontend(level: int) -> str:
    n = 100 * level
    return exposition(
        {"dynamo_frontend_inflight_requests": 48.0, "dynamo_frontend_queued_requests": 6.0},
        {"dynamo_frontend_requests_total": float(n)},
        {
            "dynamo_frontend_time_to_first_token_seconds": ([0.2] * n, TTFT_BUCKETS),
            "dynamo_frontend_inter_token_latency_seconds": ([0.02] * n, ITL_BUCKETS),
            "dynamo_frontend_request_duration_seconds": ([2.5] * n, (1.0, 2.0, 4.0)),
            "dynamo_component_router_kv_hit_rate": ([0.25] * n, (0.25, 0.5, 0.75, 1.0)),
        },
        labels='model="m"',
    )


def dynamo_worker(level: int, usage: float) -> str:
    return exposition(
        {
            "dynamo_component_kvstats_gpu_cache_usage_percent": usage,
            "dynamo_component_kvstats_gpu_prefix_cache_hit_rate": 0.5,
        },
        {"vllm:num_preemptions_total": 3.0 * level},
        {},
        labels='dynamo_component="backend"',
    )
