"""The engine's cold start through the plugin: in the JSON document, the JUnit properties
(each test case's and the suite's), the terminal and Markdown reports, and
``assert_startup`` passing and failing with the measured seconds in its message."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from pytest_llmslo.document import validate_document

SUITE = """
import pytest
from pytest_llmslo import assert_startup, first_token_s, model_listed_s, ready_s

@pytest.mark.slo(concurrency=[1])
def test_starts_fast(slo_run):
    verdict = assert_startup(ready_s < 120, first_token_s < 120)
    assert verdict.passed

@pytest.mark.slo(concurrency=[1])
def test_starts_too_slowly(slo_run):
    assert_startup(ready_s < 120, first_token_s < 0.000001)

@pytest.mark.slo(concurrency=[1])
def test_the_engine_given(slo_engine):
    assert_startup(slo_engine, model_listed_s <= 120)
"""


def _args(*extra: str) -> list[str]:
    return [
        "-p", "no:cacheprovider", "--engine=sim", "--warmup=0", "--requests=4",
        "--isl=32", "--osl=4", "--slo-retries=0",
        "--client-max-lag=2000", "--client-max-cpu=1.5", "--client-min-load=0.5",
        *extra,
    ]  # fmt: skip


def test_cold_start_in_json_junit_reports_and_assert_startup(slo_pytester: pytest.Pytester):
    slo_pytester.makepyfile(test_suite=SUITE)
    result = slo_pytester.runpytest_subprocess(
        *_args("--slo-json=out.json", "--junitxml=out.xml", "--slo-markdown=out.md")
    )
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    # The failure names the objective and what was measured.
    assert "start objectives missed by engine sim: first_token_s < 1e-06 s: measured" in out
    assert "cold start (process): spawned" in out
    # The terminal summary shows the engine's cold start under its sweeps.
    assert "cold start of sim (process): first token" in out

    doc = json.loads((slo_pytester.path / "out.json").read_text())
    validate_document(doc)
    cold = doc["engines"]["sim"]["cold_start"]
    assert cold["runtime"] == "process"
    phases = cold["phases"]
    assert list(phases) == [
        "spawned_s",
        "port_open_s",
        "ready_s",
        "model_listed_s",
        "first_token_s",
    ]
    assert all(isinstance(v, float) for v in phases.values())
    assert list(phases.values()) == sorted(phases.values())
    assert "cold_start" not in doc["engines"]["sim"]["metadata"]

    root = ET.parse(slo_pytester.path / "out.xml").getroot()
    suite = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties")}
    assert float(suite["llmslo.engines.sim.cold_start.first_token_s"]) == phases["first_token_s"]
    assert suite["llmslo.engines.sim.cold_start.runtime"] == "process"
    case = next(c for c in root.iter("testcase") if c.get("name") == "test_starts_fast[sim-c1]")
    props = {p.get("name"): p.get("value") for p in case.find("properties")}
    assert float(props["llmslo.cold_start.ready_s"]) == phases["ready_s"]
    assert float(props["llmslo.cold_start.first_token_s"]) == phases["first_token_s"]

    md = (slo_pytester.path / "out.md").read_text()
    assert "### Cold starts" in md
    assert "| engine | runtime | spawned | port open | ready | model listed | first token |" in md


def test_assert_startup_on_an_external_engine_says_it_has_no_cold_start(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(
        test_ext="""
        import pytest
        from pytest_llmslo import assert_startup, ready_s

        @pytest.mark.slo(concurrency=[1])
        def test_ext(slo_run):
            assert_startup(ready_s < 10)
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*engine 'external' has no cold start: it was not started by pytest-llmslo*"]
    )
