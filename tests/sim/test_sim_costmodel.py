"""The roofline cost model: memory vs compute bound, tensor parallelism, KV sizing."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_llmslo.sim.costmodel import CostModel
from pytest_llmslo.sim.profiles import GPUS, MODELS, get_profile

H100 = GPUS["h100-sxm"]
L70 = MODELS["llama-3.1-70b"]
L8 = MODELS["llama-3.1-8b"]


def bare(model=L8, tp: int = 1, **kw) -> CostModel:  # type: ignore[no-untyped-def]
    """No CPU overheads, so the GPU side shows on its own."""
    return CostModel(H100, model, tp=tp, step_overhead_s=0.0, per_seq_overhead_s=0.0, **kw)


def test_small_decode_batch_is_memory_bound_and_reads_the_weights() -> None:
    cm = bare()
    c = cm.step([(100, 1)])
    assert c.bound == "memory"
    weights = (L8.params - L8.embedding_params) * L8.weight_bytes
    assert c.memory_s == pytest.approx(weights / (H100.hbm_bw * cm.mem_efficiency), rel=0.02)
    assert c.total_s == pytest.approx(c.memory_s)


def test_bound_switches_from_memory_to_compute_with_batch_size() -> None:
    cm = bare()
    bounds = [cm.step([(0, n)]).bound for n in (1, 16, 64, 256, 1024, 4096)]
    assert bounds[0] == "memory" and bounds[-1] == "compute"
    # One switch only: once compute-bound, bigger batches stay compute-bound.
    first = bounds.index("compute")
    assert all(b == "compute" for b in bounds[first:])
    # Memory-bound decode batches cost about the same; compute-bound time grows linearly.
    assert cm.step([(0, 1)] * 8).total_s < 1.2 * cm.step([(0, 1)]).total_s
    big, bigger = cm.step([(0, 4096)]).total_s, cm.step([(0, 8192)]).total_s
    assert bigger == pytest.approx(2 * big, rel=0.15)


def test_kv_reads_grow_decode_time_with_context() -> None:
    cm = bare()
    short = cm.step([(100, 1)] * 64).total_s
    long = cm.step([(8000, 1)] * 64).total_s
    assert long > short * 1.3


def test_fp8_uses_fp8_throughput() -> None:
    fp8 = dataclasses.replace(L70, weight_bytes=1.0)
    assert bare(fp8, tp=4).linear_flops_peak == H100.fp8_flops
    assert bare(L70, tp=4).linear_flops_peak == H100.bf16_flops
    # Half the bytes per weight: a memory-bound decode step takes about half the time.
    assert bare(fp8, tp=4).step([(0, 1)]).memory_s == pytest.approx(
        bare(L70, tp=4).step([(0, 1)]).memory_s / 2, rel=0.05
    )


def test_tensor_parallelism_splits_work_and_adds_comm() -> None:
    one, four = bare(L70, tp=1), bare(L70, tp=4)
    assert one.comm_time(100) == 0.0
    c1, c4 = one.step([(0, 1)]), four.step([(0, 1)])
    assert c4.memory_s == pytest.approx(c1.memory_s / 4, rel=1e-6)
    assert c4.comm_s > 0
    # 2 all-reduces per layer: at least 160 fixed latencies for 80 layers.
    assert c4.comm_s >= 2 * L70.layers * H100.allreduce_latency_s
    # Comm grows with the tokens of the step (bytes over NVLink).
    assert four.comm_time(8192) > 5 * four.comm_time(1)
    # So TP4 is faster than TP1, but by less than 4x.
    assert c1.total_s / 4 < c4.total_s < c1.total_s


def test_overheads_add_per_step_and_per_sequence() -> None:
    cm = CostModel(H100, L8, step_overhead_s=1e-3, per_seq_overhead_s=1e-4)
    base = bare()
    d = cm.step([(10, 1)] * 10).total_s - base.step([(10, 1)] * 10).total_s
    assert d == pytest.approx(1e-3 + 10 * 1e-4)
    assert cm.step([]).total_s == 0.0 and cm.step([]).bound == "idle"
    # The per-sequence GPU cost scales with the layers of the model.
    per_layer = CostModel(H100, L70, step_overhead_s=0.0, per_seq_overhead_s=0.0,
                          per_seq_layer_s=1e-6, tp=4)  # fmt: skip
    d70 = per_layer.step([(10, 1)] * 10).total_s - bare(L70, tp=4).step([(10, 1)] * 10).total_s
    assert d70 == pytest.approx(10 * L70.layers * 1e-6)


def test_kv_cache_sizing() -> None:
    p = get_profile("llama3-70b-fp8-4xh100-vllm")
    tokens = p.cost_model().kv_cache_tokens(0.9)
    # 4 x 80 GB x 0.9 - 70.6 GB of FP8 weights - reserve, at 320 KiB per token.
    assert 400_000 < tokens < 800_000
    with pytest.raises(ValueError, match="does not fit"):
        bare(L70, tp=1).kv_cache_tokens()


def test_70b_fp8_tp4_decode_is_in_the_low_tens_of_ms() -> None:
    cm = get_profile("llama3-70b-fp8-4xh100-vllm").cost_model()
    itl = cm.step([(600, 1)]).total_s
    assert 0.008 < itl < 0.02
    # A 512-token prefill on its own: tens of ms.
    assert 0.01 < cm.step([(0, 512)]).total_s < 0.06


def test_a_prefill_chunk_slows_the_decodes_it_is_batched_with() -> None:
    decodes = [(600, 1)] * 32
    mixed = [*decodes, (0, 96)]
    steps = {f: bare(L70, tp=4, prefill_interference=f) for f in (0.0, 0.25, 1.0)}
    # The chunk's compute hides under the decodes' memory time in the roofline alone;
    # with interference the step (so every decode's gap) grows with it.
    t = {f: cm.step(mixed).total_s for f, cm in steps.items()}
    assert t[0.0] < t[0.25] < t[1.0]
    bigger = [*decodes, (0, 192)]
    assert steps[0.25].step(bigger).total_s > t[0.25]
    # Decodes alone, or a prefill alone, have nothing to interfere with.
    for cm in steps.values():
        assert cm.step(decodes).total_s == steps[0.0].step(decodes).total_s
        assert cm.step([(0, 96)]).total_s == steps[0.0].step([(0, 96)]).total_s
    with pytest.raises(ValueError, match="prefill_interference"):
        bare(prefill_interference=1.5)
