"""The sim engine answers eval items: right or wrong from its profile's seeded error model,
more often wrong under KV pressure and preemption, and by a quantisation penalty."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sim_helpers import MODEL, start_sim

from pytest_llmslo.evals import EvalSource, make_item
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.sim.answerer import Answerer, QualityModel
from pytest_llmslo.sim.profiles import get_profile, profile_from_mapping
from pytest_llmslo.sim.scheduler import SimRequest
from pytest_llmslo.slo import accuracy, judge_quality

PROFILE = "llama3-8b-fp8-1xh100-vllm"
# 200 blocks of 16 tokens: a retrieval item of 300 words takes about 20 of them, so two at
# once use a fifth of the cache and 32 at once overflow it (preemption).
SIM_ARGS = ("--profile", PROFILE, "--num-gpu-blocks", "200", "--max-model-len", "2048")


def test_the_error_grows_with_pressure_preemption_and_the_penalty() -> None:
    m = QualityModel(base_error=0.02, pressure_from=0.6, pressure_error=0.6, preempt_error=0.3)
    assert m.error(0.1, 0) == pytest.approx(0.02)
    assert m.error(0.8, 0) == pytest.approx(0.02 + 0.6 * 0.5)
    assert m.error(0.1, 1) == pytest.approx(0.32)
    assert m.error(1.0, 5) == 1.0
    bumped = QualityModel(base_error=0.02, quant_penalty=0.1)
    assert bumped.error(0.0, 0) == pytest.approx(0.12)
    with pytest.raises(ValueError, match="between 0 and 1"):
        QualityModel(quant_penalty=1.5)


def test_answers_are_deterministic_and_wrong_ones_are_other_integers() -> None:
    body = {"messages": [{"role": "user", "content": make_item("arithmetic", 1, 0).prompt}]}
    sure = Answerer(QualityModel(base_error=0.0), lambda: 0.0)
    never = Answerer(QualityModel(base_error=1.0), lambda: 0.0)
    found = sure.read(body, chat=True)
    assert found is not None and found == never.read(body, chat=True)
    req = SimRequest("r", 10, 16)
    assert sure.say(found, req) == make_item("arithmetic", 1, 0).answer
    wrong = never.say(found, req)
    assert wrong != found.right and 1 <= int(wrong) - int(found.right) <= 9
    assert sure.read({"prompt": "the model serves"}, chat=False) is None


def test_a_profile_file_sets_the_quality_model() -> None:
    p = profile_from_mapping({"base": PROFILE, "quality": {"quant_penalty": 0.2}})
    assert p.quality.quant_penalty == 0.2
    assert p.quality.base_error == get_profile(PROFILE).quality.base_error
    assert p.to_dict()["quality"]["quant_penalty"] == 0.2
    with pytest.raises(ValueError, match="unknown quality key"):
        profile_from_mapping({"base": PROFILE, "quality": {"iq": 1}})


def _eval_level(url: str, concurrency: int, requests: int = 80) -> Run:
    return run_load_sync(
        LoadJob(
            ClientSettings(url, MODEL, processes=1),
            WorkloadSpec(isl=300, osl=16, calibrate=False, seed=3, eval_task="retrieval"),
            LoadLevel.concurrency(concurrency),
            requests=requests,
            warmup=0,
        )
    )


@pytest.mark.slow
def test_accuracy_holds_at_low_load_and_fails_under_kv_pressure(tmp_path: Path) -> None:
    with start_sim(tmp_path, *SIM_ARGS) as sim:
        low = _eval_level(sim.url, 2)
        high = _eval_level(sim.url, 32)
        preempted = sim.metrics()["vllm:num_preemptions_total"]
    assert all(r.ok for r in low.records) and all(r.ok for r in high.records)
    assert low.meta["quality"]["items"] == high.meta["quality"]["items"] == 80
    assert judge_quality(low, (accuracy >= 0.9,)).outcome == "pass"
    assert preempted > 0
    assert judge_quality(high, (accuracy >= 0.9,)).outcome == "fail"


@pytest.mark.slow
def test_a_quantisation_penalty_turns_answers_wrong(tmp_path: Path) -> None:
    runs: list[dict[str, Any]] = []
    for penalty in ("0", "0.3"):
        with start_sim(tmp_path, *SIM_ARGS, "--quant-penalty", penalty) as sim:
            runs.append(_eval_level(sim.url, 2, 60).meta["quality"])
    before, after = runs
    changed = [a for a, b in zip(before["answers"], after["answers"], strict=True) if a != b]
    assert changed and all(a[1] == 1 for a in changed)  # right before, wrong after
    assert after["correct"] == before["correct"] - len(changed)
    json.dumps(runs)  # what a run keeps is plain data


def test_a_users_eval_file_is_sent_and_scored_under_load(tmp_path: Path) -> None:
    # Rows the sim's "model" can answer (arithmetic in the built-in form, half of them chat
    # rows whose last user message asks it) and rows it cannot (it answers those with
    # filler words).
    rows: list[dict[str, Any]] = [
        {
            "prompt": make_item("arithmetic", 5, i).prompt,
            "reference": make_item("arithmetic", 5, i).answer,
            "scorer": "numeric",
        }
        for i in range(6)
    ] + [{"prompt": "Capital of France?", "reference": "Paris", "scorer": "exact"}] * 2
    for row in rows[::2]:
        row["messages"] = [
            {"role": "system", "content": "You are a calculator."},
            {"role": "user", "content": "Calculate 1 + 1."},
            {"role": "assistant", "content": "2"},
            {"role": "user", "content": row.pop("prompt")},
        ]
    path = tmp_path / "evals.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with start_sim(tmp_path, *SIM_ARGS) as sim:
        run = run_load_sync(
            LoadJob(
                ClientSettings(sim.url, MODEL, processes=1),
                WorkloadSpec(
                    isl=32, osl=8, calibrate=False, eval_task="jsonl", eval_path=str(path)
                ),
                LoadLevel.concurrency(4),
                requests=40,
                warmup=0,
            )
        )
    q = run.meta["quality"]
    assert q["task"] == "jsonl" and q["items"] == 40 and q["failed"] == 0
    # The items the sim cannot answer are wrong; of the rest, nearly all are right.
    source = EvalSource("jsonl", 0, path=str(path))
    answerable = sum(source.item(i).answer != "Paris" for i in range(40))
    assert answerable - 3 <= q["correct"] <= answerable < 40
    assert all(s["correct"] is False for s in q["samples"] if s["expected"] == "Paris")


@pytest.mark.slow
def test_ordering_and_schema_items_are_answered_through_the_stream(tmp_path: Path) -> None:
    # The sim says the sorted list and a JSON object valid against the schema; with a
    # penalty of 1 it says a wrong one of each, which the scorers reject.
    correct: dict[tuple[str, str], tuple[int, int]] = {}
    for penalty in ("0", "1"):
        with start_sim(tmp_path, *SIM_ARGS, "--quant-penalty", penalty) as sim:
            for task in ("ordering", "schema"):
                run = run_load_sync(
                    LoadJob(
                        ClientSettings(sim.url, MODEL, processes=1),
                        WorkloadSpec(isl=64, osl=16, calibrate=False, seed=4, eval_task=task),
                        LoadLevel.concurrency(2),
                        requests=30,
                        warmup=0,
                    )
                )
                q = run.meta["quality"]
                correct[(task, penalty)] = (q["correct"], q["items"])
    for task in ("ordering", "schema"):
        right, items = correct[(task, "0")]
        assert items == 30 and right >= 27, (task, right)
        assert correct[(task, "1")] == (0, 30), task
