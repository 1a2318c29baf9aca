"""Named setups for the sim engine: GPU x model x tensor parallelism x engine scheduling.

A ``Profile`` is everything the sim needs: the hardware and model numbers behind the
roofline (``costmodel.py``) and the scheduling limits and overheads of an engine
(``scheduler.py``). Profile names read ``<model>-<gpus>-<engine>``, for example
``llama3-70b-fp8-4xh100-vllm``.

Hardware numbers are the vendors' dense figures (H100 SXM: 80 GB HBM3 at 3.35 TB/s, 989
TFLOPS BF16, 1979 TFLOPS FP8, NVLink 450 GB/s per direction). Model numbers are the
published Llama 3.1 configs. The engine presets differ where the engines do:

- vLLM-like: 2048-token budget (``max_num_batched_tokens``), 16-token blocks, prefix
  caching, the largest per-step and per-sequence CPU overheads (Python scheduler,
  detokenisation in the API server), and limits on prefills that make TTFT grow with
  load as the reference's sweep does: chunks of at most 96 tokens per prefill
  (``long_prefill_token_threshold``), at most 4 prefills at once
  (``max_num_partial_prefills``), 62 running requests (``max_num_seqs``; more wait for
  a slot), and a prefill chunk lengthens the decodes' step by a quarter of the compute the
  roofline hides under their memory time (``prefill_interference``);
- SGLang-like: 8192-token chunked prefill, token-granular radix cache (block size 1),
  lower overheads (the overlap scheduler hides most of the CPU work);
- TRT-LLM-like: 8192 max tokens, 32-token blocks, the C++ runtime's small overheads and
  slightly better kernel efficiency.

The overheads and efficiencies are calibrated against the reference comparison of these
engines (Llama-3.1-70B FP8 on 4x H100, ISL ~512 / OSL ~256): the vLLM-like profile gives an
inter-token latency of about 12 ms at concurrency 1 and a TTFT P99 < 500 ms / ITL P50 <
30 ms knee between concurrency 32 and 48; the SGLang- and TRT-LLM-like per-sequence costs
put their knee throughput at 1.30x and 1.18x the vLLM-like one. The vLLM-like prefill
limits above put its TTFT P99 within 30 % of the reference sweep's at c8 to c64 (210 to
1,200 ms; vLLM's own defaults leave the first two off and allow 256 or more sequences).
``docs/sim.md`` has the sweep and the fidelity table (``benchmarks/sim_fidelity.py``).

Dynamo-like profiles (``...-dynamo-<engine>``) run the same engine behind a disaggregated
frontend (``cluster.Topology``): one prefill instance and one decode instance of TP2 each
(P/D 2+2 of the 4 GPUs), the KV cache moved over NVLink, a KV-aware router and 1 ms of
frontend time. Their workers keep ``DYNAMO_WORKER_SHARE`` of the engine's per-sequence
costs: Dynamo's Rust frontend does tokenisation, detokenisation and streaming, so the
worker's per-sequence CPU work is smaller; and none of the engine's prefill limits, since
a worker has no decodes to protect from prefills. That share is calibrated on the vLLM + Dynamo
row of the reference comparison alone; the SGLang and TRT-LLM rows are predictions.

Without chunked prefill a prompt is prefilled in one step, so, as vLLM does, a profile with
``chunked_prefill=False`` must have ``max_num_batched_tokens >= max_model_len``
(``Profile`` raises ``ValueError`` otherwise): a longer prompt could never be scheduled.

Custom numbers: ``profile_from_mapping`` (a JSON file given to ``--profile-file``) starts
from a named profile (``"base"``) and overrides any field of ``gpu``, ``model``, ``engine``
and ``topology``, or ``tp``, ``max_model_len``, ``num_blocks``.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from .answerer import QualityModel, quality_from_mapping
from .cluster import Cluster, Pool, Topology, topology_from_mapping
from .costmodel import CostModel, Gpu, ModelSpec
from .scheduler import SchedulerConfig
from .speednoise import NoisyCostModel, SimNoise

_T = TypeVar("_T")

GPUS: dict[str, Gpu] = {
    "h100-sxm": Gpu(
        name="H100-SXM-80GB",
        hbm_bytes=80e9,
        hbm_bw=3.35e12,
        bf16_flops=989e12,
        fp8_flops=1979e12,
        link_bw=450e9,
        allreduce_latency_s=12e-6,
    ),
    "h200": Gpu(
        name="H200-141GB",
        hbm_bytes=141e9,
        hbm_bw=4.8e12,
        bf16_flops=989e12,
        fp8_flops=1979e12,
        link_bw=450e9,
        allreduce_latency_s=12e-6,
    ),
    "a100-sxm": Gpu(
        name="A100-SXM-80GB",
        hbm_bytes=80e9,
        hbm_bw=2.039e12,
        bf16_flops=312e12,
        fp8_flops=None,
        link_bw=300e9,
        allreduce_latency_s=15e-6,
    ),
}

MODELS: dict[str, ModelSpec] = {
    "llama-3.1-70b": ModelSpec(
        name="meta-llama/Llama-3.1-70B-Instruct",
        params=70.6e9,
        layers=80,
        hidden=8192,
        heads=64,
        kv_heads=8,
        head_dim=128,
        vocab=128256,
        weight_bytes=2.0,
        kv_bytes=2.0,
        max_model_len=131072,
    ),
    "llama-3.1-8b": ModelSpec(
        name="meta-llama/Llama-3.1-8B-Instruct",
        params=8.03e9,
        layers=32,
        hidden=4096,
        heads=32,
        kv_heads=8,
        head_dim=128,
        vocab=128256,
        weight_bytes=2.0,
        kv_bytes=2.0,
        max_model_len=131072,
    ),
}


@dataclass(frozen=True, slots=True)
class EnginePreset:
    """Scheduling limits, CPU overheads and kernel efficiencies of one engine
    (``scheduler.SchedulerConfig`` and ``costmodel.CostModel`` say what each does)."""

    name: str
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    enable_prefix_caching: bool = True
    chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    max_num_partial_prefills: int = 0
    step_overhead_s: float = 2e-3
    per_seq_overhead_s: float = 20e-6
    per_seq_layer_s: float = 0.0
    gpu_memory_utilization: float = 0.9
    mem_efficiency: float = 0.8
    attn_mem_efficiency: float = 0.6
    compute_efficiency: float = 0.6
    prefill_interference: float = 0.0


ENGINES: dict[str, EnginePreset] = {
    "vllm": EnginePreset(
        name="vllm",
        max_num_batched_tokens=2048,
        max_num_seqs=62,
        block_size=16,
        long_prefill_token_threshold=96,
        max_num_partial_prefills=4,
        prefill_interference=0.25,
        step_overhead_s=3.0e-3,
        per_seq_overhead_s=40e-6,
        per_seq_layer_s=4.25e-6,
        mem_efficiency=0.8,
        attn_mem_efficiency=0.55,
        compute_efficiency=0.55,
    ),
    "sglang": EnginePreset(
        name="sglang",
        max_num_batched_tokens=8192,
        max_num_seqs=1024,
        block_size=1,
        step_overhead_s=1.8e-3,
        per_seq_overhead_s=27e-6,
        per_seq_layer_s=3.4e-6,
        mem_efficiency=0.82,
        attn_mem_efficiency=0.6,
        compute_efficiency=0.58,
    ),
    "trtllm": EnginePreset(
        name="trtllm",
        max_num_batched_tokens=8192,
        max_num_seqs=2048,
        block_size=32,
        step_overhead_s=1.2e-3,
        per_seq_overhead_s=20e-6,
        per_seq_layer_s=4.2e-6,
        mem_efficiency=0.85,
        attn_mem_efficiency=0.65,
        compute_efficiency=0.62,
    ),
}


#: The share of an engine's per-sequence costs left in a worker behind Dynamo's frontend
#: (see the module docstring); calibrated on the vLLM + Dynamo row of the reference table.
DYNAMO_WORKER_SHARE = 0.4

#: Dynamo-like deployment of 4 GPUs: P/D 2+2 (one TP2 prefill and one TP2 decode
#: instance), KV over NVLink, KV-aware routing, 1 ms in the frontend.
DYNAMO_TOPOLOGY = Topology(
    mode="disaggregated",
    prefill=Pool(instances=1, tp=2),
    decode=Pool(instances=1, tp=2),
    router="kv",
    link="nvlink",
    frontend_overhead_s=1e-3,
)


def dynamo_worker(preset: EnginePreset, share: float = DYNAMO_WORKER_SHARE) -> EnginePreset:
    """``preset`` as a worker behind Dynamo's frontend: its per-sequence costs x ``share``."""
    return dataclasses.replace(
        preset,
        name=f"dynamo-{preset.name}",
        per_seq_overhead_s=preset.per_seq_overhead_s * share,
        per_seq_layer_s=preset.per_seq_layer_s * share,
        # A worker runs only prefills or only decodes: no decode to protect from a long
        # prefill, none to slow down, and the frontend holds the requests that wait.
        max_num_seqs=max(preset.max_num_seqs, 1024),
        long_prefill_token_threshold=0,
        max_num_partial_prefills=0,
        prefill_interference=0.0,
    )


@dataclass(frozen=True, slots=True)
class Profile:
    """One sim setup. ``num_blocks=None`` sizes the KV cache from GPU memory."""

    name: str
    description: str
    gpu: Gpu
    model: ModelSpec
    tp: int
    engine: EnginePreset
    max_model_len: int = 8192
    num_blocks: int | None = None
    topology: Topology = field(default_factory=Topology)
    #: Run-to-run noise (``speednoise.py``): none unless asked for.
    noise: SimNoise = field(default_factory=SimNoise)
    #: How its "model" answers eval items (``answerer.py``).
    quality: QualityModel = field(default_factory=QualityModel)

    def __post_init__(self) -> None:
        e = self.engine
        if not e.chunked_prefill and e.max_num_batched_tokens < self.max_model_len:
            # vLLM refuses this configuration at startup for the same reason.
            raise ValueError(
                f"chunked prefill is disabled (--no-chunked-prefill) and "
                f"max_num_batched_tokens ({e.max_num_batched_tokens}) is smaller than "
                f"max_model_len ({self.max_model_len}): a prompt longer than "
                f"{e.max_num_batched_tokens} tokens could never be scheduled. Raise "
                f"--max-num-batched-tokens to at least {self.max_model_len}, lower "
                "--max-model-len, or leave chunked prefill on."
            )

    def cost_model(self, tp: int | None = None) -> CostModel:
        """The step costs of one instance of ``tp`` GPUs (default: the profile's)."""
        e = self.engine
        kw: dict[str, Any] = {
            "gpu": self.gpu,
            "model": self.model,
            "tp": self.tp if tp is None else tp,
            "mem_efficiency": e.mem_efficiency,
            "attn_mem_efficiency": e.attn_mem_efficiency,
            "compute_efficiency": e.compute_efficiency,
            "step_overhead_s": e.step_overhead_s,
            "per_seq_overhead_s": e.per_seq_overhead_s,
            "per_seq_layer_s": e.per_seq_layer_s,
            "prefill_interference": e.prefill_interference,
        }
        if self.noise.active:
            return NoisyCostModel(**kw, noise=self.noise)
        return CostModel(**kw)

    def kv_blocks(self, tp: int | None = None) -> int:
        """KV-cache blocks of one instance of ``tp`` GPUs (``num_blocks`` when set)."""
        if self.num_blocks is not None:
            return self.num_blocks
        cost = self.cost_model(tp)
        tokens = cost.kv_cache_tokens(self.engine.gpu_memory_utilization)
        return max(tokens // self.engine.block_size, 1)

    def scheduler_config(self, tp: int | None = None) -> SchedulerConfig:
        e = self.engine
        return SchedulerConfig(
            max_num_batched_tokens=e.max_num_batched_tokens,
            max_num_seqs=e.max_num_seqs,
            block_size=e.block_size,
            num_blocks=self.kv_blocks(tp),
            enable_prefix_caching=e.enable_prefix_caching,
            chunked_prefill=e.chunked_prefill,
            long_prefill_token_threshold=e.long_prefill_token_threshold,
            max_num_partial_prefills=e.max_num_partial_prefills,
        )

    @property
    def gpus(self) -> int:
        return self.topology.gpus(self.tp)

    def cluster(self) -> Cluster:
        """The deployment of this profile: its instances behind a frontend."""
        t = self.topology
        if t.disaggregated and t.prefill is not None and t.decode is not None:
            configs = {
                role: (self.scheduler_config(pool.tp), self.cost_model(pool.tp))
                for role, pool in (("prefill", t.prefill), ("decode", t.decode))
            }
        else:
            configs = {"aggregated": (self.scheduler_config(), self.cost_model())}
        return Cluster(t, configs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "gpu": asdict(self.gpu),
            "model": asdict(self.model),
            "tp": self.tp,
            "engine": asdict(self.engine),
            "max_model_len": self.max_model_len,
            "num_blocks": self.kv_blocks(),
            "topology": self.topology.to_dict(),
            "gpus": self.gpus,
            **({"noise": self.noise.to_dict()} if self.noise.active else {}),
            "quality": self.quality.to_dict(),
        }


def _fp8(model: ModelSpec) -> ModelSpec:
    # FP8 weights; the KV cache stays BF16 (vLLM's default kv_cache_dtype="auto").
    return dataclasses.replace(model, name=model.name + "-FP8", weight_bytes=1.0)


def _build() -> dict[str, Profile]:
    out: dict[str, Profile] = {}
    setups = (
        (
            "llama3-70b-fp8-4xh100",
            "Llama-3.1-70B FP8 on 4x H100 SXM (TP4)",
            _fp8(MODELS["llama-3.1-70b"]),
            "h100-sxm",
            4,
        ),
        (
            "llama3-70b-bf16-4xh100",
            "Llama-3.1-70B BF16 on 4x H100 SXM (TP4)",
            MODELS["llama-3.1-70b"],
            "h100-sxm",
            4,
        ),
        (
            "llama3-8b-1xh100",
            "Llama-3.1-8B BF16 on 1x H100 SXM",
            MODELS["llama-3.1-8b"],
            "h100-sxm",
            1,
        ),
        (
            "llama3-8b-fp8-1xh100",
            "Llama-3.1-8B FP8 on 1x H100 SXM",
            _fp8(MODELS["llama-3.1-8b"]),
            "h100-sxm",
            1,
        ),
    )
    for prefix, desc, model, gpu, tp in setups:
        for ename, preset in ENGINES.items():
            name = f"{prefix}-{ename}"
            out[name] = Profile(
                name=name,
                description=f"{desc}, {ename}-like scheduling",
                gpu=GPUS[gpu],
                model=model,
                tp=tp,
                engine=preset,
            )
    # The article's disaggregated rows: each engine behind a Dynamo-like frontend.
    for ename, preset in ENGINES.items():
        name = f"llama3-70b-fp8-4xh100-dynamo-{ename}"
        out[name] = Profile(
            name=name,
            description=(
                f"Llama-3.1-70B FP8 on 4x H100 SXM, {ename}-like workers behind a Dynamo-like "
                "frontend: disaggregated P/D 2+2 (TP2 prefill + TP2 decode), KV-aware router"
            ),
            gpu=GPUS["h100-sxm"],
            model=_fp8(MODELS["llama-3.1-70b"]),
            tp=2,
            engine=dynamo_worker(preset),
            topology=DYNAMO_TOPOLOGY,
        )
    return out


PROFILES: dict[str, Profile] = _build()
DEFAULT_PROFILE = "llama3-70b-fp8-4xh100-vllm"


def get_profile(name: str) -> Profile:
    """The named profile; ``ValueError`` listing the valid names otherwise."""
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        close = difflib.get_close_matches(name, list(PROFILES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{name!r} is not a sim profile{hint}. Valid profiles: {valid}.") from None


def _override(obj: Any, values: Mapping[str, Any], what: str) -> Any:
    names = {f.name for f in dataclasses.fields(obj)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"unknown {what} field(s) {unknown}; valid: {sorted(names)}")
    return dataclasses.replace(obj, **values)


def _part(d: Mapping[str, Any], key: str, table: Mapping[str, _T], base: _T) -> _T:
    """``d[key]`` as a named entry of ``table`` or field overrides of ``base``; ``base``
    when ``d`` has no ``key``."""
    if key not in d:
        return base
    value = d[key]
    return table[value] if isinstance(value, str) else _override(base, value, key)


def profile_from_mapping(d: Mapping[str, Any]) -> Profile:
    """A custom profile: ``{"base": NAME, "name": ..., "gpu": {...} or GPU key,
    "model": {...} or model key, "engine": {...} or engine key, "tp": N, ...}``."""
    base = get_profile(str(d.get("base", DEFAULT_PROFILE)))
    gpu = _part(d, "gpu", GPUS, base.gpu)
    model = _part(d, "model", MODELS, base.model)
    engine = _part(d, "engine", ENGINES, base.engine)
    known = {"base", "gpu", "model", "engine", "name", "description", "tp", "max_model_len"}
    known |= {"num_blocks", "topology", "quality"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown profile key(s) {unknown}; valid: {sorted(known)}")
    return Profile(
        name=str(d.get("name", base.name + "-custom")),
        description=str(d.get("description", base.description + " (custom)")),
        gpu=gpu,
        model=model,
        tp=int(d.get("tp", base.tp)),
        engine=engine,
        max_model_len=int(d.get("max_model_len", base.max_model_len)),
        num_blocks=d.get("num_blocks", base.num_blocks),
        topology=topology_from_mapping(d["topology"], base.topology)
        if "topology" in d
        else base.topology,
        quality=(
            quality_from_mapping(d["quality"], base.quality) if "quality" in d else base.quality
        ),
    )
