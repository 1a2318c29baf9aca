"""Eval answers across an engine bump: accuracy with its bound, drift, the first divergence,
and ``llmslo compare`` reporting a quantisation bump of the sim as both."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from regression_helpers import point as helper_point

from pytest_llmslo import cli
from pytest_llmslo.regression import compare_points
from pytest_llmslo.regression.answerdrift import first_divergence
from pytest_llmslo.sweep import SweepPoint


def quality(rights: list[int], digests: list[str], task: str = "arithmetic") -> dict[str, Any]:
    return {
        "task": task,
        "seed": 1,
        "items": len(rights),
        "correct": sum(rights),
        "answers": [[i, r, d] for i, (r, d) in enumerate(zip(rights, digests, strict=True))],
        "samples": [{"index": 0, "answer": f"{digests[0]} the model serves", "correct": True}],
    }


def point(q: dict[str, Any]) -> SweepPoint:
    base = helper_point([100.0] * 20, objectives=None, samples=False)
    return dataclasses.replace(base, quality=q)


def test_first_divergence_is_the_first_word_that_differs() -> None:
    assert first_divergence("42 the model", "42 the batch") == 2
    assert first_divergence("42 the", "42 the model") == 2
    assert first_divergence("42  the", "42 the") is None


def test_a_drop_in_accuracy_regresses_and_changed_answers_are_drift() -> None:
    old = quality([1] * 200, ["a"] * 200)
    new = quality([1] * 150 + [0] * 50, ["a"] * 150 + ["b"] * 50)
    new["samples"][0]["answer"] = "a the batch"
    c = compare_points(point(old), point(new), "accuracy:1pp,drift:5%")
    rows = {r.metric: r for r in c.rows}
    assert rows["accuracy"].status == "regressed"
    assert rows["accuracy"].new == pytest.approx(0.75)
    assert rows["drift"].new == pytest.approx(0.25) and rows["drift"].status == "regressed"
    text = c.format()
    assert "drift: 50 of 200 answers changed" in text
    assert "excludes 0 (Newcombe, n=200/200)" in text
    # No changed answer kept its text on both sides (item 0 did not change): no position.
    assert "diverges" not in text


def test_a_small_sample_drop_is_noise_and_unchanged_answers_do_not_drift() -> None:
    old = quality([1] * 20, ["a"] * 20)
    new = quality([1] * 18 + [0] * 2, ["a"] * 20)
    rows = {r.metric: r for r in compare_points(point(old), point(new), "accuracy:1pp").rows}
    assert rows["accuracy"].status == "noise"
    assert rows["drift"].new == 0.0 and rows["drift"].status == "within tolerance"


def test_different_evals_are_not_compared_answer_by_answer() -> None:
    c = compare_points(point(quality([1], ["a"])), point(quality([1], ["a"], "retrieval")), "")
    assert not [r for r in c.rows if r.metric in ("accuracy", "drift")]
    assert any("different eval items" in n for n in c.notes)


SIM_TEST = """
import pytest

@pytest.mark.slo(concurrency=[2], eval="arithmetic")
def test_answers(slo_run):
    pass
"""


def _session(pytester: pytest.Pytester, name: str, *extra: str) -> Path:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine=sim", "--sim-profile=llama3-8b-fp8-1xh100-vllm",
        "--warmup=0", "--requests=60", "--isl=32", "--osl=8",
        "--client-max-lag=2000", "--client-max-cpu=1.5", f"--slo-json={name}", *extra,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    return pytester.path / name


@pytest.mark.slow
def test_llmslo_compare_reports_a_quantisation_bump(
    slo_pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    slo_pytester.makepyfile(test_q=SIM_TEST)
    old = _session(slo_pytester, "old.json")
    again = _session(slo_pytester, "again.json")
    bumped = _session(slo_pytester, "new.json", "--engine-opt=sim.extra_args=--quant-penalty=0.4")
    for doc in (old, again, bumped):
        assert json.loads(doc.read_text())["points"][0]["quality"]["items"] == 60
    # Greedy answers of an unchanged engine are the same: no drift, no regression.
    assert cli.main(["compare", str(old), str(again), "--fail", "drift:0pp"]) == 0
    assert "drift: 0 of 60 answers changed" in capsys.readouterr().out
    code = cli.main(["compare", str(old), str(bumped), "--fail", "accuracy:1pp,drift:5%"])
    out = capsys.readouterr().out
    assert code == 1
    assert "drift: " in out and "answers changed" in out and "diverges at word 0" in out
    assert "accuracy" in out and "REGRESSED" in out
