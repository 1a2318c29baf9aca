"""The sim engine's ``GET /metrics``: Prometheus exposition text.

vLLM's names for what the engine reports (requests running and waiting, KV-cache usage,
preemptions, tokens, the prefix cache, finished requests, and the request latency
histograms of ``latencies.py``), then the sim's own ``llmslo_sim_*`` families: requests by
the model they asked for, KV blocks and transfers, steps, aborted and failed requests, and
how late its token writes were (``lateness.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .cluster import Cluster
from .latencies import RequestLatencies
from .lateness import LatenessStats
from .scheduler import SchedulerStats


def metrics_text(
    cluster: Cluster,
    latency: RequestLatencies,
    lateness: LatenessStats,
    model: str,
    requests_by_model: Mapping[str, int],
    adapters: Sequence[str] = (),
) -> str:
    """The exposition of one sim engine serving ``model`` (and LoRA ``adapters``)."""
    label = f'{{model_name="{model}"}}'
    st = cluster.stats()
    out = _vllm_lines(cluster, st, label)
    out.append("# HELP llmslo_sim_requests_total Requests accepted, by the model they asked for.")
    out.append("# TYPE llmslo_sim_requests_total counter")
    for name in (model, *adapters):
        n = requests_by_model.get(name, 0)
        out.append(f'llmslo_sim_requests_total{{model_name="{name}"}} {n}')
    out.extend(_sim_lines(cluster, st, label))
    out.extend(latency.lines(f'model_name="{model}"'))
    out.extend(_lateness_lines(lateness, model, label))
    return "\n".join(out) + "\n"


def _metric(name: str, kind: str, help_: str, value: float, labels: str) -> list[str]:
    return [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{labels} {value}"]


def _vllm_lines(c: Cluster, st: SchedulerStats, label: str) -> list[str]:
    """What vLLM's own /metrics says of its scheduler, KV cache and tokens."""
    usage = c.kv_usage()
    rows: list[tuple[str, str, str, float]] = [
        ("vllm:num_requests_running", "gauge", "Requests in the running batch.", c.running()),
        ("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.", c.waiting()),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage (1 = full).", usage),
        ("vllm:gpu_cache_usage_perc", "gauge", "KV-cache usage (1 = full), older name.", usage),
        ("vllm:num_preemptions_total", "counter", "Preemptions (by recompute).", st.preemptions),
        ("vllm:prompt_tokens_total", "counter", "Prompt tokens prefilled.", st.prompt_tokens),
        ("vllm:generation_tokens_total", "counter", "Tokens generated.", st.generation_tokens),
        ("vllm:prefix_cache_queries_total", "counter", "Tokens looked up in the prefix cache.",
         st.prefix_queries),
        ("vllm:prefix_cache_hits_total", "counter", "Tokens found in the prefix cache.",
         st.prefix_hits),
        ("vllm:request_success_total", "counter", "Requests finished.", st.finished),
    ]  # fmt: skip
    return [line for row in rows for line in _metric(*row, label)]


def _sim_lines(c: Cluster, st: SchedulerStats, label: str) -> list[str]:
    """The sim's own counts: KV blocks and transfers, steps, aborted and failed requests."""
    rows: list[tuple[str, str, str, float]] = [
        ("llmslo_sim_kv_cache_blocks", "gauge", "KV-cache blocks in total.", c.kv_blocks()),
        ("llmslo_sim_kv_transfers_total", "counter", "KV transfers, prefill to decode.",
         c.transfers),
        ("llmslo_sim_kv_transfer_seconds_total", "counter", "Simulated KV transfer time.",
         c.transfer_s),
        ("llmslo_sim_steps_total", "counter", "Engine steps simulated.", st.steps),
        ("llmslo_sim_busy_seconds_total", "counter", "Simulated time spent in steps.",
         st.busy_s),
        ("llmslo_sim_aborted_total", "counter", "Requests dropped because the client left.",
         st.aborted),
        ("llmslo_sim_failed_total", "counter",
         "Requests failed because the engine could never schedule them.", st.failed),
    ]  # fmt: skip
    return [line for row in rows for line in _metric(*row, label)]


def _lateness_lines(lat: LatenessStats, model: str, label: str) -> list[str]:
    """How late the token writes were: a histogram, then its gauges and counters."""
    out = lat.hist.lines(
        "llmslo_sim_emit_lateness_seconds",
        "Token write time minus its scheduled time.",
        f'model_name="{model}"',
    )
    mean = lat.total / lat.count if lat.count else 0.0
    rows: list[tuple[str, str, str, float]] = [
        ("llmslo_sim_lateness_max_seconds", "gauge", "Largest token write lateness.", lat.max),
        ("llmslo_sim_lateness_last_seconds", "gauge", "Last token write lateness.", lat.last),
        ("llmslo_sim_late_emits_total", "counter",
         "Token writes later than the warning threshold.", lat.late),
        ("llmslo_sim_behind_schedule", "gauge",
         "1 when the last step ended late beyond the threshold.", int(lat.behind)),
        ("llmslo_sim_resyncs_total", "counter", "Times the simulated clock was moved to now.",
         lat.resyncs),
        ("llmslo_sim_lateness_mean_seconds", "gauge", "Mean token write lateness.", mean),
    ]  # fmt: skip
    return out + [line for row in rows for line in _metric(*row, label)]
