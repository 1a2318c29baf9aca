"""Reports of a session: JUnit XML, the JSON document (also when interrupted), xdist."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_llmslo import plugin
from pytest_llmslo.document import validate_document

SUITE = """
import pytest
from pytest_llmslo import assert_goodput, itl_p50, ttft_p99

@pytest.mark.slo(concurrency=[1, 2])
def test_chat(slo_run):
    assert_goodput(ttft_p99 < 500, itl_p50 < 30)

@pytest.mark.slo(concurrency=[1])
def test_red(slo_run):
    assert_goodput(ttft_p99 < 1)
"""


def _cases(path) -> dict[str, ET.Element]:  # type: ignore[no-untyped-def]
    root = ET.parse(path).getroot()
    return {c.get("name"): c for c in root.iter("testcase")}


def test_junit_properties_failure_and_system_out(slo_pytester: pytest.Pytester, tiny_args):
    slo_pytester.makepyfile(test_suite=SUITE)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--junitxml=out.xml", "-W", "error"))
    result.assert_outcomes(passed=2, failed=1)
    assert "PytestWarning" not in result.stdout.str()
    root = ET.parse(slo_pytester.path / "out.xml").getroot()
    suite_props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert suite_props["llmslo.harness"] == "pytest-llmslo"
    assert suite_props["llmslo.osl"] == "8"
    cases = _cases(slo_pytester.path / "out.xml")
    ok = cases["test_chat[external-c2]"]
    props = {p.get("name"): p.get("value") for p in ok.find("properties")}
    assert props["llmslo.engine"] == "external"
    assert props["llmslo.level"] == "c2"
    assert props["llmslo.verdict"] == "pass"
    assert float(props["llmslo.ttft_p99_ms"]) > 0
    assert all(name.startswith("llmslo.") for name in props)
    assert "ttft" in ok.find("system-out").text
    red = cases["test_red[external-c1]"]
    failure = red.find("failure")
    assert "ttft_p99 < 1 ms (observed" in failure.get("message")
    assert "FAIL" in failure.text
    out = red.find("system-out").text
    assert "ttft: p50" in out and "SLO FAILED" in out


def test_json_document(slo_pytester: pytest.Pytester, tiny_args) -> None:
    slo_pytester.makepyfile(test_suite=SUITE)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-json=run/out.json"))
    result.assert_outcomes(passed=2, failed=1)
    doc = json.loads((slo_pytester.path / "run" / "out.json").read_text())
    validate_document(doc)
    assert doc["complete"] is True
    assert len(doc["points"]) == 3
    tests = {p["test"] for p in doc["points"]}
    assert tests == {"test_suite.py::test_chat", "test_suite.py::test_red"}
    assert doc["constants"]["isl"] == 16 and doc["constants"]["warmup"] == 1
    assert "external" in doc["engines"]
    chat = next(s for s in doc["sweeps"] if s["test"] == "test_suite.py::test_chat")
    assert chat["levels"] == ["c1", "c2"]
    assert doc["results_at_knee"]


def test_interrupt_keeps_partial_results(slo_pytester: pytest.Pytester, tiny_args) -> None:
    slo_pytester.makepyfile(
        test_int="""
        import pytest

        @pytest.mark.slo(concurrency=[1, 2, 4])
        def test_chat(slo_run, slo_level):
            if slo_level.value == 2:
                raise KeyboardInterrupt
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-json=out.json"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    doc = json.loads((slo_pytester.path / "out.json").read_text())
    validate_document(doc)
    assert doc["complete"] is False
    assert [p["level"]["value"] for p in doc["points"]] == [1.0, 2.0]


def test_xdist_is_refused_for_an_slo_session(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_suite=SUITE)
    result = slo_pytester.runpytest_subprocess(
        "-p", "xdist", "-n", "2", "-m", "slo", "--collect-only"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-llmslo: SLO tests cannot run under pytest-xdist*"])


@pytest.mark.slow
def test_xdist_skips_slo_tests_of_a_mixed_suite(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(
        test_mixed="""
        import pytest

        @pytest.mark.slo(concurrency=[1])
        def test_chat(slo_run):
            pass

        def test_plain():
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess("-p", "xdist", "-n", "2", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SLO tests cannot run under pytest-xdist*"])


def test_save_and_compare(slo_pytester: pytest.Pytester, tiny_args, slow_fixed_server: str) -> None:
    slo_pytester.makepyfile(
        test_cmp="""
        import pytest
        from pytest_llmslo import assert_goodput, ttft_p50

        @pytest.mark.slo(concurrency=[1])
        def test_chat(slo_run):
            assert_goodput(ttft_p50 < 500)
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-save=base"))
    result.assert_outcomes(passed=1)
    assert (slo_pytester.path / ".llmslo" / "baselines" / "base.json").is_file()
    # A slower engine (TTFT 20 -> 60 ms): the test that regressed fails, old vs new shown
    # (within the tolerance, or with constants that differ: tests/session/test_baseline.py).
    slow = tiny_args("--slo-compare=base", "--slo-compare-fail=ttft_p50:20%", "--junitxml=x.xml")
    slow = [a if not a.startswith("--slo-engine-url=") else f"--slo-engine-url={slow_fixed_server}"
            for a in slow]  # fmt: skip
    result = slo_pytester.runpytest_subprocess(*slow)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RegressionError: regression against baseline base*"])
    failure = _cases(slo_pytester.path / "x.xml")["test_chat[external-c1]"].find("failure")
    assert "ttft_p50" in failure.text and "REGRESSED" in failure.text
    result.stdout.fnmatch_lines(["*comparison with baseline base*", "external * c1: REGRESSED*"])


def test_missing_baseline_is_a_usage_error(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_suite=SUITE)
    result = slo_pytester.runpytest_subprocess("--slo-compare=nope", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --slo-compare: *no baseline named 'nope'*"])


@pytest.mark.slow
def test_junit_system_out_has_the_numbers_whatever_junit_logging(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(
        test_out="""
        import pytest
        from pytest_llmslo import assert_goodput, ttft_p99

        @pytest.mark.slo(concurrency=[1])
        def test_ok(slo_run):
            print("printed by the body")
            assert_goodput(ttft_p99 < 500)

        @pytest.mark.slo(concurrency=[1])
        def test_red(slo_run):
            assert_goodput(ttft_p99 < 1)
        """
    )
    for options in (
        ("-o", "junit_logging=all"),
        ("-o", "junit_logging=system-out"),
        ("-o", "junit_logging=log"),
        ("-o", "junit_logging=system-err", "-o", "junit_log_passing_tests=false"),
    ):
        result = slo_pytester.runpytest_subprocess(*tiny_args("--junitxml=x.xml", *options))
        result.assert_outcomes(passed=1, failed=1)
        root = ET.parse(slo_pytester.path / "x.xml").getroot()
        for case in root.iter("testcase"):
            outs = case.findall("system-out")
            assert len(outs) == 1, (options, case.get("name"))
            text = outs[0].text or ""
            assert text.count("external test_out.py::") == 1, (options, text)
            assert "ttft: p50" in text, options
        ok = next(c for c in root.iter("testcase") if c.get("name") == "test_ok[external-c1]")
        if "junit_logging=all" in options or "junit_logging=system-out" in options:
            # pytest's captured output and the SLO numbers in one system-out.
            text = ok.find("system-out").text
            assert "printed by the body" in text and "- llmslo -" in text


def _github_anchor(heading: str) -> str:
    text = heading.strip().lstrip("#").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_xdist_message_links_a_readme_heading() -> None:
    readme_path, _, anchor = plugin.README_XDIST.partition("#")
    readme = Path(__file__).resolve().parents[2] / readme_path
    anchors = {
        _github_anchor(line) for line in readme.read_text().splitlines() if line.startswith("#")
    }
    assert anchor in anchors
