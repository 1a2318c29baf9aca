"""A level ends as a pass, an SLO failure, or inconclusive: a level whose client run stays
invalid through its retries is an error of its own kind in the terminal, JUnit and JSON,
never the engine failing its SLO (the retries themselves: tests/session/test_levels.py).
A level may stop early once its verdict is settled, and may be bounded by time alone."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

# Makes the first BAD_TRIES client runs of the session invalid, deterministically: the
# health assessment is the client's own, so this stands for a starved client.
INJECT = """
import dataclasses, os
import pytest_llmslo.load.runner as runner

_real = runner.assess
_calls = [0]

def _assess(results, th, nproc):
    h = _real(results, th, nproc)
    _calls[0] += 1
    if _calls[0] <= int(os.environ["BAD_TRIES"]):
        return dataclasses.replace(h, valid=False, reasons=("client starved (injected)",))
    return h

runner.assess = _assess
"""

CHAT = """
import pytest
from pytest_llmslo import assert_goodput, ttft_p99

@pytest.mark.slo(concurrency=[2])
def test_chat(slo_run):
    assert_goodput(ttft_p99 < 5000)
"""


def test_a_level_that_stays_invalid_is_inconclusive(slo_pytester, tiny_args, monkeypatch) -> None:
    monkeypatch.setenv("BAD_TRIES", "99")
    slo_pytester.makeconftest(INJECT)
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--slo-json=r.json", "--junitxml=j.xml", "-rE")
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*Inconclusive: inconclusive at c2 after 3 tries: the load generator, not the "
            "engine, was the bottleneck (client starved (injected))*",
            "*c2 * inconclusive",
            "*! inconclusive (no verdict; excluded from knee and Pareto): c2: the load "
            "generator, not the engine,*",
        ]
    )
    result.stdout.no_fnmatch_line("*SloViolation*")
    result.stdout.no_fnmatch_line("*Traceback*")
    (point,) = json.loads((slo_pytester.path / "r.json").read_text())["points"]
    assert point["outcome"] == "inconclusive" and point["summary"]["valid"] is False
    assert point["notes"][-1] == "inconclusive after 3 tries: the client stayed the bottleneck"
    case = ET.parse(slo_pytester.path / "j.xml").getroot().find(".//testcase")
    assert case is not None
    error = case.find("error")
    assert error is not None and case.find("failure") is None
    assert "Inconclusive" in (error.get("message") or "") + (error.text or "")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["llmslo.outcome"] == "inconclusive"


def test_strict_gate_with_too_few_samples_stays_a_failure(slo_pytester, tiny_args) -> None:
    # Inconclusive is for the client's failings only: a strict gate that cannot show its
    # bound with 12 requests is an SLO failure, as before.
    slo_pytester.makepyfile(
        test_chat="""
        import pytest
        from pytest_llmslo import assert_slo, ttft_p99

        @pytest.mark.slo(concurrency=[2], strict=True)
        def test_chat(slo_run):
            assert_slo(ttft_p99 < 5000, strict=True)
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SloViolation*too few samples*"])


@pytest.mark.parametrize(
    ("marker", "outcome", "reason"),
    [
        ("ttft_p99 < 5", "failed", "ttft_p99 < 5 ms is violated at 95% confidence"),
        ("ttft_p99 < 5000, strict=True", "passed", "every objective holds at 95% confidence"),
    ],
)
def test_early_stop_in_both_directions(
    slo_pytester, tiny_args, marker: str, outcome: str, reason: str
) -> None:
    slo_pytester.makepyfile(
        test_chat=f"""
        import pytest
        from pytest_llmslo import ttft_p99

        @pytest.mark.slo({marker}, concurrency=[8])
        def test_chat(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--requests=4000", "--slo-early-stop=on", "--slo-json=r.json", "-v"),
        timeout=300,
    )
    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines([f"*stopped early after * requests (--slo-early-stop): {reason}*"])
    (point,) = json.loads((slo_pytester.path / "r.json").read_text())["points"]
    assert 100 <= point["summary"]["requests"] < 4000
    assert point["summary"]["early_stop"].startswith(reason)


@pytest.mark.slow
def test_early_stop_is_off_for_plain_levels_by_default(slo_pytester, tiny_args) -> None:
    slo_pytester.makepyfile(
        test_chat="""
        import pytest
        from pytest_llmslo import ttft_p99

        @pytest.mark.slo(ttft_p99 < 5, concurrency=[8])
        def test_chat(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args("--requests=400", "--slo-json=r.json"))
    result.assert_outcomes(failed=1)
    (point,) = json.loads((slo_pytester.path / "r.json").read_text())["points"]
    assert point["summary"]["requests"] == 400 and point["summary"]["early_stop"] is None


@pytest.mark.slow
def test_a_level_bounded_by_time_alone(slo_pytester, tiny_args) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--requests=none", "--duration=1", "--slo-json=r.json")
    )
    result.assert_outcomes(passed=1)
    (point,) = json.loads((slo_pytester.path / "r.json").read_text())["points"]
    assert point["summary"]["requests"] > 12
    result = slo_pytester.runpytest_subprocess(*tiny_args("--requests=none"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--requests: a level without a request count needs a duration*"])


SIM_ONE_SLOT = """
[engines.one]
kind = "sim"
extra_args = ["--max-num-seqs", "1"]
"""

KNEE = """
import pytest

# One request at a time: at c1 TTFT is a prefill, at c8 a request waits for the seven
# ahead of it, far past 150 ms.
@pytest.mark.slo("ttft_p99 < 150", concurrency=[1, 8])
def test_chat(slo_run):
    pass
"""


@pytest.mark.slow
def test_junit_says_expected_miss_above_the_knee(slo_pytester: pytest.Pytester) -> None:
    # A test case is judged before its sweep's knee exists; the JUnit file written at the
    # end carries the outcome every other output prints.
    slo_pytester.makefile(".toml", engines=SIM_ONE_SLOT)
    slo_pytester.makepyfile(test_chat=KNEE)
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine-config=engines.toml", "--engine=one",
        "--warmup=1", "--requests=12", "--isl=16", "--osl=16", "--slo-retries=0",
        "--client-max-lag=2000", "--client-max-cpu=1.5", "--client-min-load=0.5",
        "--slo-json=r.json", "--junitxml=j.xml",
        timeout=180,
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    assert [p["judged"]["outcome"] for p in doc["points"]] == ["pass", "expected_miss"]
    root = ET.parse(slo_pytester.path / "j.xml").getroot()
    got = {}
    for case in root.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert [p.get("name") for p in case.iter("property")].count("llmslo.outcome") == 1
        got[props["llmslo.level"]] = (props["llmslo.outcome"], props["llmslo.outcome_reason"])
    assert got["c1"] == ("pass", "every objective held")
    assert got["c8"][0] == "expected_miss"
    assert got["c8"][1].startswith("above the knee (c1): missed ttft_p99")
