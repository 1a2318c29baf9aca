"""Deployments of the sim engine (``sim/cluster.py``): aggregated replicas behind a router,
and disaggregated prefill and decode pools with the KV cache moved between them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pytest_llmslo.sim.__main__ import build_parser, resolve_profile
from pytest_llmslo.sim.cluster import LINKS, Cluster, Pool, Topology, topology_from_mapping
from pytest_llmslo.sim.fidelity import ROUTER_WORKLOAD, replicas, router_gain
from pytest_llmslo.sim.offline import Workload, closed_loop
from pytest_llmslo.sim.profiles import PROFILES, profile_from_mapping
from pytest_llmslo.sim.scheduler import SimRequest
from pytest_llmslo.sim.tokens import block_hashes

DYNAMO = PROFILES["llama3-70b-fp8-4xh100-dynamo-vllm"]
VLLM = PROFILES["llama3-70b-fp8-4xh100-vllm"]


def record_steps(cluster: Cluster) -> dict[str, list[Any]]:
    """Every step each instance runs, by instance name."""
    steps: dict[str, list[Any]] = {}
    for inst in cluster:
        taken = steps.setdefault(inst.name, [])
        original = inst.scheduler.step

        def step(now: float, _orig: Any = original, _taken: list[Any] = taken) -> Any:
            result = _orig(now)
            _taken.append(result)
            return result

        inst.scheduler.step = step  # type: ignore[method-assign]
    return steps


def run_all(cluster: Cluster, until: float = 60.0) -> list[Any]:
    emitted = []
    while (t := cluster.next_event_s()) is not None and t < until:
        emitted += cluster.advance(t).emitted
    return emitted


def test_disaggregated_prefill_then_transfer_then_decode() -> None:
    cluster = DYNAMO.cluster()
    steps = record_steps(cluster)
    req = SimRequest("r", 2000, 8)
    cluster.submit(req, 0.0)
    emitted = run_all(cluster)
    assert [e.index for e in emitted] == list(range(8)) and emitted[-1].last
    prefill, decode = steps["prefill0"], steps["decode0"]
    # The prompt is computed on the prefill instance alone, over a 2048-token budget: one
    # step of 2000 tokens, sampling the first token.
    assert sum(n for s in prefill for _, n in s.scheduled) == 2000
    # The decode instance never computes a prompt token: one token per request per step.
    assert all(n == 1 for s in decode for _, n in s.scheduled)
    assert len(decode) == 7  # the first token came from the prefill instance
    # The first token reaches the client when the KV has crossed the link:
    # frontend + prefill step + latency + bytes / (NVLink x GPU pairs).
    kv = 2000 * DYNAMO.model.kv_bytes_per_token
    link = LINKS["nvlink"]
    transfer = link.latency_s + kv / (link.bandwidth * 2)
    assert emitted[0].at_s == pytest.approx(1e-3 + prefill[0].end_s - 1e-3 + transfer)
    assert prefill[0].start_s == pytest.approx(1e-3)  # after the frontend's millisecond
    assert cluster.transfers == 1 and cluster.transfer_s == pytest.approx(transfer)
    # Decoding starts when the KV landed, not before.
    assert decode[0].start_s == pytest.approx(emitted[0].at_s)
    # Both instances freed the request's blocks (the prefill side keeps cached ones).
    assert cluster.running() == 0 and cluster.waiting() == 0


def test_infiniband_transfers_take_longer() -> None:
    ib = dataclasses.replace(DYNAMO, topology=dataclasses.replace(DYNAMO.topology, link="ib"))
    times = {}
    for name, prof in (("nvlink", DYNAMO), ("ib", ib)):
        cluster = prof.cluster()
        cluster.submit(SimRequest("r", 4000, 2), 0.0)
        run_all(cluster)
        times[name] = cluster.transfer_s
    kv = 4000 * DYNAMO.model.kv_bytes_per_token
    assert times["ib"] - times["nvlink"] == pytest.approx(
        LINKS["ib"].latency_s - LINKS["nvlink"].latency_s
        + kv / (2 * LINKS["ib"].bandwidth) - kv / (2 * LINKS["nvlink"].bandwidth)
    )  # fmt: skip
    assert times["ib"] > 4 * times["nvlink"]


def test_decode_steps_carry_no_prefill_so_itl_stays_flat() -> None:
    # A long prompt arriving while others decode: the aggregated engine's decoders wait
    # for its prefill chunks; the disaggregated decode pool never sees them.
    def worst_gap(profile: Any) -> float:
        cluster = profile.cluster()
        for i in range(8):
            cluster.submit(SimRequest(f"d{i}", 64, 200), 0.0)
        run_all(cluster, until=0.5)
        cluster.submit(SimRequest("long", 8000, 2), 0.5)
        last: dict[str, float] = {}
        worst = 0.0
        for e in run_all(cluster):
            if e.req.rid.startswith("d") and e.req.rid in last:
                worst = max(worst, e.at_s - last[e.req.rid])
            last[e.req.rid] = e.at_s
        return worst

    # The vLLM-like preset caps each prefill's chunk (long_prefill_token_threshold): lifted,
    # one step carries a whole budget of the prompt and its decoders wait for it.
    whole = dataclasses.replace(
        VLLM, engine=dataclasses.replace(VLLM.engine, long_prefill_token_threshold=0)
    )
    assert worst_gap(whole) > 2 * worst_gap(DYNAMO)
    # Capped, the prompt's chunks still lengthen the decoders' steps, less.
    assert worst_gap(whole) > worst_gap(VLLM) > VLLM.cost_model().step([(64, 1)] * 8).total_s


def test_round_robin_alternates_between_replicas() -> None:
    prof = replicas(VLLM, 2, 2, "round_robin")
    cluster = prof.cluster()
    steps = record_steps(cluster)
    for i in range(4):
        cluster.submit(SimRequest(f"r{i}", 100, 4), 0.0)
    run_all(cluster)
    served = {name: {r.rid for s in st for r, _ in s.scheduled} for name, st in steps.items()}
    assert served == {"replica0": {"r0", "r2"}, "replica1": {"r1", "r3"}}
    assert prof.gpus == 4


def test_kv_router_sends_a_prefix_where_it_is_cached() -> None:
    prof = replicas(VLLM, 2, 2, "kv")
    cluster = prof.cluster()
    bs = cluster.block_size
    doc = [f"doc.{j}" for j in range(1024)]

    def req(rid: str, at: float) -> SimRequest:
        tokens = doc + [f"{rid}.{j}" for j in range(64)]
        r = SimRequest(rid, len(tokens), 2, block_hashes=block_hashes(tokens, bs))
        cluster.submit(r, at)
        return r

    steps = record_steps(cluster)
    req("a", 0.0)
    run_all(cluster)
    # Whoever got "a" holds the document; busy or not, "b" goes there and skips it.
    for i, t in enumerate((1.0, 1.0, 1.0)):
        req(f"b{i}", t)
    run_all(cluster)
    home = next(
        n for n, st in steps.items() if any(r.rid == "a" for s in st for r, _ in s.scheduled)
    )
    for i in range(3):
        assert any(r.rid == f"b{i}" for s in steps[home] for r, _ in s.scheduled)
    computed = sum(n for s in steps[home] for r, n in s.scheduled if r.rid.startswith("b"))
    assert computed < 3 * (64 + 2 * bs)  # the 1,024 shared tokens were not recomputed
    assert cluster.prefix_hit_rate() == pytest.approx(3 * 1024 / (4 * 1088), rel=0.05)


def test_kv_aware_routing_wins_on_shared_prefixes() -> None:
    # More shared documents than one replica's cache holds: round robin scatters every
    # document over both replicas and evicts; KV-aware routing keeps each on one.
    rr, kv = router_gain(concurrency=32, measured=300)
    assert rr.policy == "round_robin" and kv.policy == "kv"
    assert kv.level.prefix_hit_rate > rr.level.prefix_hit_rate + 0.15  # type: ignore[operator]
    assert kv.level.ttft_p50 < 0.7 * rr.level.ttft_p50
    assert kv.level.tok_s > 1.1 * rr.level.tok_s
    # Without shared prefixes the two routers do the same work.
    unique = Workload(isl=512, osl=64, seed=2)
    a = closed_loop(replicas(VLLM, 2, 2, "round_robin"), 16, unique, measured=64)
    b = closed_loop(replicas(VLLM, 2, 2, "kv"), 16, unique, measured=64)
    assert b.tok_s == pytest.approx(a.tok_s, rel=0.1)
    assert ROUTER_WORKLOAD.prefixes * ROUTER_WORKLOAD.prefix_len > VLLM.kv_blocks(2) * 16


def test_topology_from_mapping_and_errors() -> None:
    t = topology_from_mapping(
        {"mode": "disaggregated", "prefill": {"instances": 2, "tp": 2},
         "decode": {"tp": 4}, "router": "kv", "link": "ib", "frontend_overhead_s": 0.002}
    )  # fmt: skip
    assert t.prefill == Pool(2, 2) and t.decode == Pool(1, 4) and t.gpus(4) == 8
    assert "2 prefill x TP2 + 1 decode x TP4" in t.describe()
    with pytest.raises(ValueError, match="unknown topology field"):
        topology_from_mapping({"routers": "kv"})
    with pytest.raises(ValueError, match="needs a prefill and a decode pool"):
        Topology(mode="disaggregated")
    with pytest.raises(ValueError, match="router must be"):
        Topology(router="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="link must be"):
        Topology(link="ethernet")
    with pytest.raises(ValueError, match="instances >= 1"):
        Pool(0, 1)


def test_profile_file_sets_the_topology() -> None:
    prof = profile_from_mapping(
        {"base": "llama3-70b-fp8-4xh100-vllm", "tp": 4,
         "topology": {"mode": "aggregated", "replicas": 2, "router": "kv"}}
    )  # fmt: skip
    assert prof.gpus == 8 and len(prof.cluster().instances) == 2
    assert prof.to_dict()["topology"]["replicas"] == 2


def test_cli_flags_override_the_deployment() -> None:
    args = build_parser().parse_args(
        ["--topology", "disaggregated", "--prefill-workers", "2", "--prefill-tp", "2",
         "--decode-tp", "4", "--router", "kv", "--kv-link", "ib", "--frontend-overhead-ms", "2"]
    )  # fmt: skip
    prof = resolve_profile(args)
    t = prof.topology
    assert (t.mode, t.prefill, t.decode, t.router, t.link) == (
        "disaggregated", Pool(2, 2), Pool(1, 4), "kv", "ib"
    )  # fmt: skip
    assert t.frontend_overhead_s == pytest.approx(0.002) and prof.gpus == 8
    # A Dynamo profile back to one aggregated instance.
    args = build_parser().parse_args(
        ["--profile", "llama3-70b-fp8-4xh100-dynamo-sglang", "--topology", "aggregated",
         "--tp", "4"]
    )  # fmt: skip
    assert resolve_profile(args).cluster().instances[0].role == "aggregated"


def test_a_pool_too_small_for_the_model_is_refused() -> None:
    from pytest_llmslo.sim.__main__ import main

    assert main(["--topology", "disaggregated", "--prefill-tp", "1", "--show-profile"]) == 2


def test_six_reference_profiles_use_four_gpus() -> None:
    names = [f"llama3-70b-fp8-4xh100-{e}" for e in ("vllm", "sglang", "trtllm")]
    names += [f"llama3-70b-fp8-4xh100-dynamo-{e}" for e in ("vllm", "sglang", "trtllm")]
    for n in names:
        prof = PROFILES[n]
        assert prof.gpus == 4, n
        prof.cluster()
    assert PROFILES[names[3]].topology.disaggregated
    assert PROFILES[names[3]].engine.per_seq_layer_s < PROFILES[names[0]].engine.per_seq_layer_s
