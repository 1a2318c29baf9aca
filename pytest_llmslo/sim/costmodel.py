"""How long one engine step takes: a roofline of the GPU and the model.

A step runs the model once over a batch: some sequences decode one token, some prefill a
chunk of their prompt. Its time on the GPUs is the larger of

- memory time: the weights (read once per step) plus the KV cache each sequence's
  attention reads and writes, over the achievable HBM bandwidth, and
- compute time: the linear layers' FLOPs (2 x parameters x tokens) at the weights'
  tensor throughput (FP8 or BF16) plus attention's FLOPs at BF16 throughput,

each divided over the ``tp`` GPUs of a tensor-parallel group. Tensor parallelism adds two
all-reduces per layer over the activations (a fixed latency plus ring all-reduce bytes
over NVLink), which do not overlap with compute. The engine adds a fixed CPU overhead per
step (scheduling, sampling, kernel launch), a small CPU cost per sequence in the batch
(input preparation, detokenisation, streaming the output) and a GPU cost per sequence and
layer that the roofline misses (paged-attention block gathers, per-sequence work in the
attention and sampling kernels, under-filled tiles). The last two are what make decode
steps slow down with batch size faster than bytes and FLOPs alone predict, and what makes
engines differ at high batch sizes; they are calibrated, not derived.

Small decode batches are memory-bound (every step reads all weights for a handful of
tokens); large prefill chunks are compute-bound. ``StepCost.bound`` says which.

A step that batches prefill chunks with decodes (chunked prefill) is, in the roofline
alone, as long as its decodes while the chunks' compute fits under their memory time.
Measured engines slow down more: the chunks' attention and the decodes' run as separate
kernels. ``prefill_interference`` is the share of the chunks' compute (up to the step's
memory time) that does not overlap and is added to such a step: 0 is the roofline, 1
runs them one after the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True, slots=True)
class Gpu:
    """One accelerator. Bandwidths in bytes/s, throughputs in dense FLOP/s."""

    name: str
    hbm_bytes: float
    hbm_bw: float
    bf16_flops: float
    fp8_flops: float | None = None
    link_bw: float = 450e9  # NVLink, per direction per GPU
    allreduce_latency_s: float = 10e-6  # one small all-reduce across the TP group

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A dense decoder-only transformer. ``weight_bytes`` per parameter (1 for FP8, 2 for
    BF16) and ``kv_bytes`` per cached element (2 for a BF16 KV cache)."""

    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    weight_bytes: float = 2.0
    kv_bytes: float = 2.0
    max_model_len: int = 131072

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token takes across all layers (keys and values)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes

    @property
    def weights_total_bytes(self) -> float:
        return self.params * self.weight_bytes

    @property
    def embedding_params(self) -> float:
        return float(self.vocab * self.hidden)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StepCost:
    """The parts of one step's time (seconds) and what bounded it."""

    tokens: int
    seqs: int
    flops: float
    bytes: float
    memory_s: float
    compute_s: float
    comm_s: float
    overhead_s: float
    total_s: float
    bound: Literal["memory", "compute", "idle"]


@dataclass(frozen=True, slots=True)
class CostModel:
    """Step times of ``model`` on ``tp`` x ``gpu``.

    ``mem_efficiency`` and ``compute_efficiency`` are the fractions of peak HBM bandwidth
    and tensor throughput real kernels reach; ``attn_mem_efficiency`` the fraction paged
    attention reaches reading the KV cache (scattered blocks, lower than a weight GEMM).
    """

    gpu: Gpu
    model: ModelSpec
    tp: int = 1
    mem_efficiency: float = 0.8
    attn_mem_efficiency: float = 0.6
    compute_efficiency: float = 0.6
    step_overhead_s: float = 2e-3
    per_seq_overhead_s: float = 20e-6
    per_seq_layer_s: float = 0.0
    allreduces_per_layer: int = 2
    activation_bytes: float = 2.0
    prefill_interference: float = 0.0

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError(f"tp must be >= 1, got {self.tp}")
        for name in ("mem_efficiency", "attn_mem_efficiency", "compute_efficiency"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {v}")
        if not 0 <= self.prefill_interference <= 1:
            raise ValueError(
                f"prefill_interference must be in [0, 1], got {self.prefill_interference}"
            )

    @property
    def linear_flops_peak(self) -> float:
        """Tensor throughput of one GPU for the weights' precision."""
        if self.model.weight_bytes <= 1 and self.gpu.fp8_flops:
            return self.gpu.fp8_flops
        return self.gpu.bf16_flops

    def comm_time(self, tokens: int) -> float:
        """All-reduce time of one step over ``tokens`` rows of activations (0 at tp=1)."""
        if self.tp == 1 or tokens <= 0:
            return 0.0
        msg = tokens * self.model.hidden * self.activation_bytes
        ring = 2.0 * (self.tp - 1) / self.tp * msg / self.gpu.link_bw
        per = self.gpu.allreduce_latency_s + ring
        return self.model.layers * self.allreduces_per_layer * per

    def step(self, seqs: Iterable[tuple[int, int]]) -> StepCost:
        """The cost of one step over ``seqs``: (tokens already in the KV cache, new tokens
        this step) for each sequence; a decode is ``(context, 1)``, a prefill chunk
        ``(computed, chunk)``."""
        m = self.model
        tokens = 0
        n_seqs = 0
        kv_tokens = 0.0
        attn_flops = 0.0
        # 4 = 2 FLOPs per multiply-add x (QK^T and AV); causal within the new chunk.
        attn_coeff = 4.0 * m.layers * m.heads * m.head_dim
        decodes = 0
        prefill_tokens = 0
        prefill_attn = 0.0
        for ctx, new in seqs:
            if new <= 0:
                continue
            tokens += new
            n_seqs += 1
            kv_tokens += ctx + new
            a = attn_coeff * new * (ctx + (new + 1) / 2.0)
            attn_flops += a
            if new == 1:
                decodes += 1
            else:
                prefill_tokens += new
                prefill_attn += a
        if n_seqs == 0:
            return StepCost(0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, "idle")
        body_params = m.params - 2.0 * m.embedding_params
        # Only each sequence's last position goes through the LM head (one sample each).
        linear_flops = 2.0 * body_params * tokens + 2.0 * m.embedding_params * n_seqs
        weight_bytes = (m.params - m.embedding_params) * m.weight_bytes
        kv_bytes = kv_tokens * m.kv_bytes_per_token
        tp = self.tp
        memory_s = weight_bytes / tp / (self.gpu.hbm_bw * self.mem_efficiency) + kv_bytes / tp / (
            self.gpu.hbm_bw * self.attn_mem_efficiency
        )
        compute_s = linear_flops / tp / (self.linear_flops_peak * self.compute_efficiency)
        compute_s += attn_flops / tp / (self.gpu.bf16_flops * self.compute_efficiency)
        comm_s = self.comm_time(tokens)
        interference_s = 0.0
        if decodes and prefill_tokens and self.prefill_interference:
            # A prefill chunk batched with decodes: the share of its compute that the
            # roofline hides under the step's memory time but that does not overlap.
            chunk_s = 2.0 * body_params * prefill_tokens / tp / (
                self.linear_flops_peak * self.compute_efficiency
            ) + prefill_attn / tp / (self.gpu.bf16_flops * self.compute_efficiency)
            interference_s = self.prefill_interference * min(memory_s, chunk_s)
        per_seq = self.per_seq_overhead_s + self.per_seq_layer_s * m.layers
        overhead_s = self.step_overhead_s + per_seq * n_seqs
        total = max(memory_s, compute_s) + interference_s + comm_s + overhead_s
        return StepCost(
            tokens=tokens,
            seqs=n_seqs,
            flops=linear_flops + attn_flops,
            bytes=weight_bytes + kv_bytes,
            memory_s=memory_s,
            compute_s=compute_s,
            comm_s=comm_s,
            overhead_s=overhead_s,
            total_s=total,
            bound="memory" if memory_s >= compute_s else "compute",
        )

    def kv_cache_tokens(
        self, gpu_memory_utilization: float = 0.9, reserve_bytes_per_gpu: float = 4e9
    ) -> int:
        """Tokens the KV cache holds: what is left of ``gpu_memory_utilization`` of every
        GPU's memory after its shard of the weights and an activation reserve."""
        per_gpu = (
            self.gpu.hbm_bytes * gpu_memory_utilization
            - self.model.weights_total_bytes / self.tp
            - reserve_bytes_per_gpu
        )
        if per_gpu <= 0:
            raise ValueError(
                f"{self.model.name} does not fit on {self.tp} x {self.gpu.name}: no memory "
                "left for the KV cache"
            )
        return int(per_gpu * self.tp / self.model.kv_bytes_per_token)

    def describe(self) -> Mapping[str, Any]:
        """The constants behind the model, for /version and reports."""
        return {
            "gpu": self.gpu.to_dict(),
            "model": self.model.to_dict(),
            "tp": self.tp,
            "mem_efficiency": self.mem_efficiency,
            "attn_mem_efficiency": self.attn_mem_efficiency,
            "compute_efficiency": self.compute_efficiency,
            "step_overhead_s": self.step_overhead_s,
            "per_seq_overhead_s": self.per_seq_overhead_s,
            "per_seq_layer_s": self.per_seq_layer_s,
            "prefill_interference": self.prefill_interference,
        }
