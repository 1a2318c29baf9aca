"""Quality objectives through the plugin: eval items in a level's traffic on the sim, the
configured objective and ``assert_quality`` in a body, in the outcome and the JSON."""

from __future__ import annotations

import importlib.util
import json

import pytest

ARGS = (
    "-p", "no:cacheprovider", "--engine=sim", "--sim-profile=llama3-8b-fp8-1xh100-vllm",
    "--warmup=0", "--requests=30", "--isl=64", "--osl=8",
    "--client-max-lag=2000", "--client-max-cpu=1.5", "--slo-json=r.json",
)  # fmt: skip


@pytest.mark.slow
def test_thirty_items_at_95_percent_are_inconclusive_not_a_pass(
    slo_pytester: pytest.Pytester,
) -> None:
    slo_pytester.makepyfile(
        test_q="""
        import pytest

        @pytest.mark.slo(concurrency=[4])
        def test_configured(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(
        *ARGS, "--slo-eval=arithmetic", "--slo-quality=accuracy>=0.95", "--junitxml=j.xml"
    )
    assert result.ret != 0
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*Inconclusive: quality inconclusive (too few eval items to show the objective) "
         "on the arithmetic eval: accuracy >= 0.95: *right*"]
    )  # fmt: skip
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    quality = point["quality"]
    assert quality["task"] == "arithmetic" and quality["items"] == 30
    assert len(quality["answers"]) == 30
    assert quality["verdict"]["outcome"] == "inconclusive"
    assert any("quality inconclusive" in n for n in point["notes"])
    # Every output's outcome is the test's: inconclusive, with the objective it cannot show.
    assert point["judged"]["outcome"] == "inconclusive"
    assert point["judged"]["reason"].startswith("too few eval items to show accuracy >= 0.95")
    junit = (slo_pytester.path / "j.xml").read_text()
    assert 'name="llmslo.outcome" value="inconclusive"' in junit
    assert 'name="llmslo.quality.outcome" value="inconclusive"' in junit
    assert 'name="llmslo.quality.0.objective" value="accuracy &gt;= 0.95"' in junit


def test_a_quality_objective_rides_in_the_slo_string(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(
        test_q="""
        import pytest

        @pytest.mark.slo(concurrency=[2])
        def test_configured(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(
        *ARGS, "--slo-eval=arithmetic", "--slo=ttft_p99<60000,accuracy>=0.5"
    )
    result.assert_outcomes(passed=1)
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    assert point["quality"]["verdict"]["objectives"][0]["objective"] == "accuracy >= 0.5"
    assert [r["objective"]["metric"] for r in point["verdict"]["results"]] == ["ttft"]
    assert point["judged"]["outcome"] == "pass"


@pytest.mark.slow
def test_a_body_asserts_quality_on_a_share_of_the_traffic(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(
        test_q="""
        import pytest
        from pytest_llmslo import accuracy, assert_quality

        @pytest.mark.slo(concurrency=[4], eval="retrieval:50%", quality="accuracy>=0.99")
        def test_body(slo_run):
            # What the body asserts replaces the configured objective.
            assert_quality(accuracy >= 0.2, confidence=0.9)
        """
    )
    result = slo_pytester.runpytest_subprocess(*ARGS)
    result.assert_outcomes(passed=1)
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    quality = point["quality"]
    assert quality["task"] == "retrieval" and 5 < quality["items"] < 25
    assert quality["verdict"]["outcome"] == "pass"
    assert quality["verdict"]["confidence"] == 0.9


def test_a_bad_eval_or_objective_is_a_usage_error(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_q="def test_nothing():\n    pass\n")
    result = slo_pytester.runpytest_subprocess(*ARGS, "--slo-eval=trivia")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*'trivia' is not an eval task*"])
    result = slo_pytester.runpytest_subprocess(*ARGS, "--slo-quality=accuracy<0.5")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*write accuracy>=0.95*"])


@pytest.mark.slow
def test_an_engine_not_deterministic_at_temperature_0_is_inconclusive(
    slo_pytester: pytest.Pytester, misbehaving
) -> None:
    slo_pytester.makepyfile(
        test_q="""
        import pytest

        @pytest.mark.slo(concurrency=[4])
        def test_answers(slo_run):
            pass
        """
    )
    url = misbehaving("random-text")
    common = (
        "-p", "no:cacheprovider", "--engine=external", f"--engine-url={url}",
        "--warmup=0", "--requests=80", "--isl=8", "--osl=8", "--slo-eval=arithmetic",
        "--client-max-lag=2000", "--client-max-cpu=1.5", "--client-min-load=0.5",
    )  # fmt: skip
    result = slo_pytester.runpytest_subprocess(*common, "--extra-body", '{"temperature": 0}')
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["Inconclusive: inconclusive at c4: the engine is not deterministic at temperature 0: "
         "* eval items asked twice got two different answers (requests *"]
    )  # fmt: skip
    # Without temperature 0 nothing asked for determinism: the level is not held to it.
    result = slo_pytester.runpytest_subprocess(*common)
    result.assert_outcomes(passed=1)


@pytest.mark.skipif(
    importlib.util.find_spec("datasets") is None, reason="the datasets library is not installed"
)
def test_a_hugging_face_dataset_is_sent_and_scored_under_load(
    slo_pytester: pytest.Pytester,
) -> None:
    from datasets import Dataset, DatasetDict

    from pytest_llmslo.evals import make_item

    # Rows the sim's "model" can answer (arithmetic in the built-in form) and rows it
    # cannot (it answers those with filler words); the references as GSM8K has them.
    items = [make_item("arithmetic", 11, i) for i in range(6)]
    questions = [it.prompt for it in items] + ["Capital of France?"] * 2
    answers = [f"Steps.\n#### {it.answer}" for it in items] + ["Paris.\n#### Paris"] * 2
    DatasetDict(
        {"test": Dataset.from_dict({"question": questions, "answer": answers})}
    ).save_to_disk(str(slo_pytester.path / "evals_ds"))
    slo_pytester.makepyfile(
        test_q="""
        import pytest

        @pytest.mark.slo(concurrency=[2], eval="hf:evals_ds")
        def test_dataset(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(
        *ARGS,
        "--slo-eval-hf=prompt=question,reference=answer,reference_after=####,scorer=contains",
        "--slo-quality=accuracy>=0.1",
    )
    result.assert_outcomes(passed=1)
    quality = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]["quality"]
    assert quality["task"] == "hf" and quality["path"] == "evals_ds"
    assert quality["hf"]["reference_after"] == "####" and quality["hf"]["scorer"] == "contains"
    assert quality["items"] == 30 and quality["failed"] == 0
    samples = quality["samples"]
    assert {s["expected"] for s in samples} <= {it.answer for it in items} | {"Paris"}
    # What the sim cannot answer is wrong; nearly all of what it can is right.
    assert all(not s["correct"] for s in samples if s["expected"] == "Paris")
    answerable = [s for s in samples if s["expected"] != "Paris"]
    assert answerable and sum(s["correct"] for s in answerable) >= len(answerable) - 2
    assert quality["verdict"]["outcome"] == "pass"
