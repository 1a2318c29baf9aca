"""The sim under production-shaped traffic: shared trace blocks and conversation histories
served from its prefix cache (its /metrics hit counter), and LoRA adapter names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_helpers import MODEL, start_sim

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.metrics.traffic import by_turn
from pytest_llmslo.records import LoadLevel

HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("sim")
    with start_sim(tmp, "--max-model-len", "16384", "--lora-modules", "sql=/x", "chat") as s:
        yield s


def _replay(sim, path: Path) -> tuple[float, float, list]:  # type: ignore[no-untyped-def]
    before = sim.metrics()
    client = ClientSettings(base_url=sim.url, model=MODEL)
    wl = WorkloadSpec(kind="trace", path=str(path), calibrate=False)
    run = run_load_sync(LoadJob(client, wl, LoadLevel.trace(4.0), requests=None, warmup=0))
    after = sim.metrics()
    assert all(r.ok for r in run.records), [r.error for r in run.records if not r.ok][:2]
    return after[HITS] - before[HITS], after[QUERIES] - before[QUERIES], list(run.records)


def test_shared_hash_ids_are_prefix_hits(sim_url, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def write(name: str, shared: bool) -> Path:
        p = tmp_path / name
        rows = []
        for i in range(12):
            ids = [0, 1, 2, 1000 + i] if shared else [10 * i + j + 100 for j in range(4)]
            rows.append({"timestamp": i * 200, "input_length": 1900, "output_length": 4,
                         "hash_ids": ids})  # fmt: skip
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return p

    hits_shared, q_shared, recs = _replay(sim_url, write("shared.jsonl", True))
    hits_unique, q_unique, _ = _replay(sim_url, write("unique.jsonl", False))
    assert q_shared > 12 * 1800 and q_unique > 12 * 1800
    # 11 of 12 requests find the 3 shared blocks (1,536 tokens) cached: most of 1,900.
    assert hits_shared / q_shared > 0.6
    assert hits_unique / q_unique < 0.02
    assert {r.prompt_tokens for r in recs} == {1900 + 10}  # + the chat template's 10


def test_conversation_histories_are_served_from_the_cache(sim_url) -> None:  # type: ignore[no-untyped-def]
    client = ClientSettings(base_url=sim_url.url, model=MODEL, session_header="X-Session-ID")
    wl = WorkloadSpec(isl=600, osl=32, turns=4, calibrate=False)
    before = sim_url.metrics()
    run = run_load_sync(LoadJob(client, wl, LoadLevel.concurrency(4), requests=32, warmup=0))
    after = sim_url.metrics()
    assert all(r.ok for r in run.records)
    turns = by_turn(run)
    assert [t["requests"] for t in turns] == [8, 8, 8, 8]
    # Each turn's prompt holds the earlier ones: ~632 tokens more per turn.
    grow = [t["prompt_tokens_mean"] for t in turns]
    assert grow[3] - grow[0] == pytest.approx(3 * (600 + 32 + 10), abs=20)
    hits = after[HITS] - before[HITS]
    queries = after[QUERIES] - before[QUERIES]
    assert hits / queries > 0.4  # turns 2-4 reuse everything but the newest message
    # The prefill left after the cache is the new message: TTFT does not grow with history.
    assert turns[3]["ttft_p50_ms"] < 1.5 * turns[0]["ttft_p50_ms"]


def test_weighted_models_reach_the_adapters(sim_url) -> None:  # type: ignore[no-untyped-def]
    client = ClientSettings(
        base_url=sim_url.url, model=MODEL, models=((MODEL, 2.0), ("sql", 1.0), ("chat", 1.0))
    )
    wl = WorkloadSpec(isl=16, osl=2, calibrate=False)
    run = run_load_sync(LoadJob(client, wl, LoadLevel.concurrency(8), requests=200, warmup=0))
    assert all(r.ok for r in run.records)
    import httpx

    text = httpx.get(sim_url.url + "/metrics", timeout=10).text
    counts = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("llmslo_sim_requests_total{")
    }
    assert sum(counts.values()) >= 200
    assert counts["sql"] == pytest.approx(50, abs=20) and counts["chat"] == pytest.approx(
        50, abs=20
    )
    assert counts[MODEL] > counts["sql"]
