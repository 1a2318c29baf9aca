"""The groups a test's settings are made of, one record for each component that takes them.

``TestSettings`` is the union of these records (``resolved.py``), so its flat attributes
(``ts.isl``, ``ts.objectives``) are theirs, and a test's settings can go wherever a group is
expected. Each group that a component takes whole has the function that hands it over, next
to its fields:

- ``LoadOptions``: a level's bounds (warm-up, requests, duration, level timeout, retries);
- ``WorkloadOptions``: ``workload_spec`` gives the ``load.WorkloadSpec``;
- ``ClientOptions``: ``client_settings`` gives the ``load.ClientSettings`` (the engine's base
  URL and served model are the session's to add);
- ``HealthOptions``: ``health_thresholds`` gives the ``load.HealthThresholds``;
- ``GateOptions``: ``gate_kwargs`` gives the keywords of ``slo.evaluate``;
- ``SweepOptions`` and ``SignalsOptions``: what the sweep does past its levels, and the
  engine signals' scrapes.

The field names are the settings' public names (``slo_load(isl=...)`` and
``dataclasses.replace`` take them), each spec's ``Spec.field``. The load generator is imported
only inside the functions that build its records: reading the settings never imports it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_llmslo.choices import (
    EarlyStopMode,
    Endpoint,
    LengthDistribution,
    ReceiveStamps,
    ThinkDistribution,
    TraceFormat,
    TransportName,
    WorkloadKind,
)
from pytest_llmslo.evals import EvalChoice, HfReading
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.stats import DEFAULT_CONFIDENCE

from .specs import DEFAULT_CONCURRENCY

if TYPE_CHECKING:
    from pytest_llmslo.load import ClientSettings, HealthThresholds, WorkloadSpec


@dataclass(frozen=True)
class LoadOptions:
    """The load levels of a test and the bounds of each: warm-up and measured requests,
    the duration and wall-clock bounds, and the retries of an invalid client run."""

    levels: tuple[LoadLevel, ...] = tuple(LoadLevel.concurrency(n) for n in DEFAULT_CONCURRENCY)
    warmup: int = 200
    requests: int | None = 500
    duration_s: float | None = None
    level_timeout_s: float | None = None
    retries: int = 2
    #: The shape of the levels' arrivals (already in ``levels``; kept to be read).
    burstiness: float = 1.0
    max_concurrency: int | None = None
    #: Megabytes of a level's records the parent keeps in memory, the rest in files
    #: (``recordstore.RecordStore``); None: no bound.
    records_memory_mb: float | None = 64.0

    @property
    def records_memory(self) -> int | None:
        """``records_memory_mb`` in bytes (None: no bound)."""
        mb = self.records_memory_mb
        return None if mb is None else int(mb * 1024 * 1024)

    def warmup_for(self, level: LoadLevel) -> int:
        """Warm-up requests at ``level``: the setting, but never less than one wave of a
        closed loop. Its first ``concurrency`` requests all leave at the same instant, a
        burst of prefills that no steady load has; measured, it puts a cold-start spike
        into TTFT P99 (at c32 with 4 warm-up requests the sim's TTFT P99 read 780 ms instead
        of 300 ms). ``warmup=0`` still means none."""
        if self.warmup <= 0 or level.mode != "concurrency":
            return self.warmup
        return max(self.warmup, math.ceil(level.value))

    # The drain (``grace_s``) and the level's bound (``level_bound_s``) depend on the
    # request deadlines too: ``TestSettings`` (settings/resolved.py) has them.


@dataclass(frozen=True)
class WorkloadOptions:
    """The prompts and lengths of a test's requests: what ``load.WorkloadSpec`` takes."""

    isl: int = 512
    osl: int = 256
    isl_stddev: float = 0.0
    osl_stddev: float = 0.0
    distribution: LengthDistribution | None = None
    dataset: str | None = None
    workload_kind: WorkloadKind | None = None
    num_prefixes: int = 0
    prefix_len: int = 0
    seed: int = 0
    #: ``auto`` (the session's salt), ``none`` or the salt itself (``--prompt-salt``).
    prompt_salt: str = "auto"
    trace: str | None = None
    trace_format: TraceFormat = "auto"
    trace_start_s: float = 0.0
    trace_window_s: float | None = None
    block_tokens: int = 512
    turns: int = 1
    think_time_s: float = 0.0
    think_distribution: ThinkDistribution = "fixed"
    history_turns: int = 0
    #: Eval items inside the traffic (``--slo-eval``): the task and the share carrying one.
    evals: EvalChoice | None = None
    #: The function scoring an eval file's ``custom`` rows (``--slo-eval-scorer``).
    eval_scorer: str | None = None
    #: How the ``hf`` eval reads its dataset (``--slo-eval-hf``).
    eval_hf: HfReading | None = None
    tokenizer: str | None = None

    def workload_fields(self) -> dict[str, Any]:
        """Keyword arguments of ``load.WorkloadSpec`` for this test."""
        kind, path = self.dataset_kind()
        dist = self.distribution
        if dist is None:
            dist = "normal" if (self.isl_stddev or self.osl_stddev) else "fixed"
        return {
            "kind": kind,
            "isl": self.isl,
            "osl": self.osl,
            "isl_stddev": self.isl_stddev,
            "osl_stddev": self.osl_stddev,
            "distribution": dist,
            "path": path,
            "num_prefixes": self.num_prefixes,
            "prefix_len": self.prefix_len,
            "seed": self.seed,
            "trace_format": self.trace_format,
            "block_tokens": self.block_tokens,
            "trace_start_s": self.trace_start_s,
            "trace_window_s": self.trace_window_s,
            "turns": self.turns,
            "think_time_s": self.think_time_s,
            "think_distribution": self.think_distribution,
            "history_turns": self.history_turns,
            "eval_task": self.evals.task if self.evals else None,
            "eval_share": self.evals.share if self.evals else 1.0,
            "eval_path": self.evals.path if self.evals else None,
            "eval_scorer": self.eval_scorer if self.evals else None,
            "eval_hf": self.eval_hf if self.evals and self.evals.task == "hf" else None,
            "tokenizer": self.tokenizer,
        }

    def workload_spec(self, salt: str) -> WorkloadSpec:
        """The ``load.WorkloadSpec`` of this test; ``salt``: the salt of its built prompts,
        ``prompt_salt`` resolved (the session's own for ``auto``). A bad combination raises
        what ``WorkloadSpec`` raises (``WorkloadError``)."""
        from pytest_llmslo.load import WorkloadSpec

        return WorkloadSpec(**self.workload_fields(), salt=salt)

    def dataset_kind(self) -> tuple[str, str | None]:
        """(workload kind, dataset path)."""
        if self.trace:
            return "trace", self.trace
        if self.dataset:
            text = self.dataset
            for k in ("sharegpt", "jsonl"):
                if text.startswith(k + ":"):
                    return k, text[len(k) + 1 :]
            if self.workload_kind in ("sharegpt", "jsonl"):
                return self.workload_kind, text
            return ("jsonl" if text.endswith(".jsonl") else "sharegpt"), text
        return (self.workload_kind or "synthetic"), None


@dataclass(frozen=True)
class ClientOptions:
    """How the load generator talks to an engine: what ``load.ClientSettings`` takes, but
    for the engine's base URL and the model it serves."""

    endpoint: Endpoint = "chat"
    request_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    first_byte_timeout_s: float = 300.0
    idle_timeout_s: float = 60.0
    pin_output: bool = True
    transport: TransportName = "auto"
    receive_stamps: ReceiveStamps = "auto"
    #: The variable that holds the API key; empty for none.
    api_key_env: str = "OPENAI_API_KEY"
    insecure: bool = False
    ca_bundle: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    models: tuple[tuple[str, float], ...] | None = None
    session_header: str | None = None
    extra_body: Mapping[str, Any] | None = None

    def client_settings(self, base_url: str, model: str) -> ClientSettings:
        """The ``load.ClientSettings`` of the engine at ``base_url`` serving ``model``; a
        bad header or model list raises ``ConfigError`` (``ClientSettings`` checks them)."""
        from pytest_llmslo.load import ClientSettings

        return ClientSettings(
            base_url=base_url,
            model=model,
            endpoint=self.endpoint,
            timeout_s=self.request_timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            first_byte_timeout_s=self.first_byte_timeout_s,
            idle_timeout_s=self.idle_timeout_s,
            ignore_eos=self.pin_output,
            transport=self.transport,
            receive_stamps=self.receive_stamps,
            api_key_env=self.api_key_env or None,
            verify_tls=not self.insecure,
            ca_bundle=self.ca_bundle,
            headers=dict(self.headers),
            models=tuple(self.models or ()),
            session_header=self.session_header,
            extra_body=dict(self.extra_body or {}),
        )


@dataclass(frozen=True)
class HealthOptions:
    """When a client run is invalid (the load generator, not the engine, was the
    bottleneck): what ``load.HealthThresholds`` takes. ``None``: the thresholds' default."""

    client_max_lag_ms: float | None = None
    client_max_cpu: float | None = None
    client_max_stalled: float = 0.001
    client_min_load: float = 0.9
    client_max_clock_ms: float = 1.0

    def health_thresholds(self) -> HealthThresholds:
        """The ``load.HealthThresholds`` of these options: the lag bound is both the schedule
        lag's and the event loop's."""
        from pytest_llmslo.load import HealthThresholds

        base = HealthThresholds()
        lag = self.client_max_lag_ms
        cpu = self.client_max_cpu
        return dataclasses.replace(
            base,
            max_schedule_lag_p99_ms=base.max_schedule_lag_p99_ms if lag is None else lag,
            max_loop_lag_p99_ms=base.max_loop_lag_p99_ms if lag is None else lag,
            max_cpu_util=base.max_cpu_util if cpu is None else cpu,
            max_stalled_tokens=self.client_max_stalled,
            min_load_share=self.client_min_load,
            max_clock_uncertainty_ms=self.client_max_clock_ms,
        )


@dataclass(frozen=True)
class GateOptions:
    """How a level is judged: its objectives and the gates beside them (attainment, goodput,
    failures, outputs the engine shortened or miscounted), and when a verdict is settled
    early."""

    objectives: tuple[Any, ...] = ()
    strict: bool = False
    confidence: float = DEFAULT_CONFIDENCE
    #: ``None``: ``slo.DEFAULT_MIN_ATTAINMENT``.
    min_attainment: float | None = None
    min_goodput_tok_s: float | None = None
    max_error_rate: float = 0.01
    max_short_outputs: float = 0.05
    max_usage_mismatch: float = 0.05
    early_stop: EarlyStopMode = "auto"
    early_stop_min: int = 100

    def gate_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``slo.evaluate`` (beside the run and the objectives)."""
        from pytest_llmslo import slo

        return {
            "strict": self.strict,
            "confidence": self.confidence,
            "min_attainment": (
                slo.DEFAULT_MIN_ATTAINMENT if self.min_attainment is None else self.min_attainment
            ),
            "min_goodput_tok_s": self.min_goodput_tok_s,
            "max_error_rate": self.max_error_rate,
        }

    @property
    def slo_text(self) -> str:
        return ", ".join(getattr(o, "label", str(o)) for o in self.objectives)


@dataclass(frozen=True)
class SweepOptions:
    """What a test's sweep does past its levels (``extend``) or instead of them (a capacity
    search, up to ``capacity_max``)."""

    extend: bool = False
    capacity: bool = False
    capacity_max: float | None = None


@dataclass(frozen=True)
class SignalsOptions:
    """The engine signals: the /metrics scrapes (and NVML or DCGM) around each level."""

    signals: bool = True
    signals_interval_s: float = 1.0
    dcgm_url: str | None = None
    signals_timeout_s: float = 5.0


#: The groups of ``TestSettings``, in the order of its fields.
GROUPS: tuple[type, ...] = (
    LoadOptions,
    WorkloadOptions,
    ClientOptions,
    HealthOptions,
    GateOptions,
    SweepOptions,
    SignalsOptions,
)
