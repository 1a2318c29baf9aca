"""How close the sim's six setups come to the reference engine comparison (Llama-3.1-70B
FP8 on 4x H100), run offline (no HTTP) with short levels, so the bounds are loose: the
full comparison, with its figures, is ``benchmarks/sim_fidelity.py`` (docs/sim.md)."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_llmslo.metrics import RunSummary
from pytest_llmslo.sim import fidelity
from pytest_llmslo.sim.offline import Workload, closed_loop
from pytest_llmslo.sim.profiles import PROFILES
from pytest_llmslo.sweep import SweepPoint, pareto_front, summary_stat

# Offline sweeps of every simulated setup (about a minute): behind the slow marker.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows() -> list[fidelity.RowResult]:
    return fidelity.row_results(step=8, measured=150)


def test_every_setup_has_a_knee_under_the_slo(rows) -> None:
    for r in rows:
        assert r.knee is not None, r.row.label
        assert r.knee.meets(fidelity.KNEE_SLO)
        assert r.value("goodput_pct") >= 90.0


def test_the_six_setups_are_ordered_as_the_reference(rows) -> None:
    assert fidelity.order_matches(rows) == []


@pytest.mark.parametrize(
    "label", ["SGLang", "TRT-LLM", "vLLM + Dynamo", "SGLang + Dynamo", "TRT-LLM + Dynamo"]
)
def test_knee_throughput_over_vllm_within_a_fifth_of_the_reference(rows, label) -> None:
    sim, ref = fidelity.ratio(rows, label)
    assert abs(sim / ref - 1) < 0.2, f"{label}: sim {sim:.2f}x vLLM, reference {ref:.2f}x"


def test_vllm_knee_falls_where_the_reference_puts_it() -> None:
    sweep = fidelity.vllm_sweep(measured=150)
    assert fidelity.knee_between(sweep) == fidelity.REFERENCE_KNEE
    # ITL P50 follows the reference's sweep on the way up (its c64 point excepted:
    # past the knee the sim is ITL-bound where the reference is not, docs/sim.md).
    for r in sweep[:-1]:
        assert abs(r.error("itl_p50_ms")) < 0.45, (r.ref.concurrency, r.sim.itl_p50)
    tok_s = [r.sim.tok_s for r in sweep]
    assert tok_s == sorted(tok_s), "throughput rises with concurrency up to c64"


def test_vllm_ttft_p99_follows_the_reference_sweep() -> None:
    # Prefill queueing and interference: TTFT P99 grows with concurrency as the
    # reference's does (210 -> 1,200 ms from c8 to c64), within the band at each point.
    sweep = fidelity.vllm_sweep()
    assert fidelity.ttft_outside_band(sweep) == []
    ttft = [r.sim.ttft_p99 for r in sweep]
    assert ttft == sorted(ttft) and ttft[-1] > 4 * ttft[0]


def test_the_band_check_names_the_points_outside() -> None:
    sweep = fidelity.vllm_sweep(measured=60)
    off = [dataclasses.replace(r, ref=dataclasses.replace(r.ref, ttft_p99_ms=10.0)) for r in sweep]
    outside = fidelity.ttft_outside_band(off)
    assert [m.split(":")[0] for m in outside] == ["c8", "c16", "c32", "c48", "c64"]
    assert "vs 10 ms" in outside[0]


def test_disaggregation_pays_more_with_reusable_prefixes() -> None:
    shared = dataclasses.replace(fidelity.SHAREGPT_LIKE, prefixes=16, prefix_len=256)
    gains = fidelity.dynamo_gains(
        {"unique": fidelity.SHAREGPT_LIKE, "shared": shared}, engines=("vllm",), step=8,
        measured=150,
    )  # fmt: skip
    assert gains["unique"]["vllm"] > 1.1
    assert gains["shared"]["vllm"] > 1.1


def test_kv_aware_router_beats_round_robin_on_shared_prefixes() -> None:
    rr, kv = fidelity.router_gain(measured=200)  # once the 96 prefixes are cached
    assert kv.level.prefix_hit_rate > rr.level.prefix_hit_rate + 0.1
    assert kv.level.ttft_p50 < rr.level.ttft_p50
    assert kv.level.tok_s > rr.level.tok_s


def test_disaggregation_pays_more_for_long_prompts() -> None:
    # The reference: disaggregation pays when ISL > 1,024. The vLLM-like engine prefills a
    # long prompt in capped chunks between decodes; the Dynamo-like prefill worker at once.
    (_, agg_short, dis_short), (_, agg_long, dis_long) = fidelity.isl_regimes(
        (512, 2048), step=4, measured=100
    )
    assert dis_short / agg_short > 1.1
    assert dis_long / agg_long > 2 * (dis_short / agg_short)


def _point(engine: str, tok_s: float, ttft_p99_ms: float) -> SweepPoint:
    summary = RunSummary.from_dict(
        {
            "level": {"mode": "concurrency", "value": 32},
            "requests": 100,
            "completed": 100,
            "failed": 0,
            "output_tok_s": tok_s,
            "distributions": {
                "ttft": {"name": "ttft", "count": 100, "percentiles": {"99": ttft_p99_ms}}
            },
        }
    )
    return SweepPoint(engine=engine, test="t", level=summary.level, summary=summary)


def test_pareto_front_of_the_six_knees(rows) -> None:
    # At each setup's knee: throughput up, TTFT P99 down. The Dynamo-like setups give the
    # most throughput; which of the six are on the frontier is what the report prints.
    points = [_point(r.row.label, r.value("tok_s"), r.value("ttft_p99_ms")) for r in rows]
    on = pareto_front(points)
    front = {p.engine for p, f in zip(points, on, strict=True) if f}
    best = max(rows, key=lambda r: r.value("tok_s"))
    assert best.row.label in front and "Dynamo" in best.row.label
    fastest = min(rows, key=lambda r: r.value("ttft_p99_ms"))
    assert fastest.row.label in front
    # Every setup off the frontier is dominated by one on it.
    for p, f in zip(points, on, strict=True):
        if not f:
            assert any(
                q.summary.output_tok_s >= p.summary.output_tok_s
                and summary_stat(q.summary, "ttft", 99) <= summary_stat(p.summary, "ttft", 99)
                for q, g in zip(points, on, strict=True)
                if g
            ), p.engine


def test_a_profile_level_reports_prefix_hits_only_with_shared_prefixes() -> None:
    prof = PROFILES["llama3-70b-fp8-4xh100-vllm"]
    unique = closed_loop(prof, 8, Workload(isl=256, osl=16, seed=2), measured=24)
    shared = closed_loop(
        prof, 8, Workload(isl=256, osl=16, prefixes=2, prefix_len=192, seed=2), measured=24
    )
    assert (unique.prefix_hit_rate or 0.0) == 0.0
    assert shared.prefix_hit_rate is not None and shared.prefix_hit_rate > 0.5
