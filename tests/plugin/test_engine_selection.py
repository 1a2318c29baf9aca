"""Which engines a test runs on (``engines=`` on the marker, narrowed by ``--engine``), and
the comparison reports of a session (``--slo-markdown``, ``--slo-svg``, the JSON's
``reports``)."""

from __future__ import annotations

import json

import pytest

from pytest_llmslo.document import validate_document


def _engines_toml(url: str) -> str:
    # Three external engines, all the fixed-timing server under different names.
    return "\n".join(
        f'[engines.{name}]\nkind = "external"\nurl = "{url}"\n' for name in ("red", "green", "blue")
    )


SUITE = """
import pytest
from pytest_llmslo import assert_goodput, itl_p50, ttft_p99

@pytest.mark.slo(engines=["green", "blue"], concurrency=[1, 2])
def test_compare(slo_run):
    assert_goodput(ttft_p99 < 500, itl_p50 < 30)

@pytest.mark.slo(concurrency=[1])
def test_default(slo_run):
    assert slo_run.ok_records
"""


def _args(url: str, *extra: str) -> list[str]:
    return [
        "-p", "no:cacheprovider", "-v",
        "--engine-config=engines.toml",
        "--warmup=1", "--requests=8", "--isl=16", "--osl=8",
        "--client-max-lag=2000", "--client-max-cpu=1.5",
        *extra,
    ]  # fmt: skip


@pytest.fixture
def suite(slo_pytester: pytest.Pytester, fixed_server: str) -> pytest.Pytester:
    slo_pytester.makefile(".toml", engines=_engines_toml(fixed_server))
    slo_pytester.makepyfile(test_suite=SUITE)
    return slo_pytester


@pytest.mark.slow
def test_marker_engines_replace_the_session_engines(suite: pytest.Pytester, fixed_server):
    # The session's engine (ini) runs the test without engines=; the marker's run the other.
    suite.makefile(
        ".ini",
        pytest="[pytest]\nllmslo_engine = red\nasyncio_default_fixture_loop_scope = function\n",
    )
    result = suite.runpytest_subprocess(*_args(fixed_server))
    result.assert_outcomes(passed=5)
    out = result.stdout.str()
    for node in (
        "test_compare[green-c1]",
        "test_compare[green-c2]",
        "test_compare[blue-c1]",
        "test_compare[blue-c2]",
        "test_default[red-c1]",
    ):
        assert node in out
    assert "test_compare[red" not in out


@pytest.mark.slow
def test_engine_option_narrows_the_marker_engines(suite: pytest.Pytester, fixed_server):
    result = suite.runpytest_subprocess(*_args(fixed_server, "--engine=blue"))
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "test_compare[blue-c1]" in out and "test_default[blue-c1]" in out
    assert "green" not in out.split("short test summary")[0].split("collected")[1]


def test_a_test_none_of_whose_engines_was_chosen_is_skipped(suite: pytest.Pytester, fixed_server):
    result = suite.runpytest_subprocess(*_args(fixed_server, "--engine=red", "-rs"))
    result.assert_outcomes(passed=1, skipped=2)  # one per level
    result.stdout.fnmatch_lines(
        ["*this test runs on green, blue (its engines=); --engine chose red*"]
    )


def test_unknown_engine_on_the_marker_is_a_usage_error(slo_pytester: pytest.Pytester, fixed_server):
    slo_pytester.makefile(".toml", engines=_engines_toml(fixed_server))
    slo_pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.slo(engines=["green", "purple"], concurrency=[1])
        def test_x(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(*_args(fixed_server, "--engine=green"))
    assert result.ret != 0
    out = result.stdout.str() + result.stderr.str()
    assert "purple" in out and "engines=" in out
    assert "Traceback" not in out


def test_markdown_svg_and_json_reports(suite: pytest.Pytester, fixed_server):
    result = suite.runpytest_subprocess(
        *_args(
            fixed_server,
            "--engine=green,blue",
            "--slo-json=out/run.json",
            "--slo-markdown=out/report.md",
            "--slo-svg=out/report.svg",
        )
    )
    result.assert_outcomes(passed=6)
    out = result.stdout.str()
    assert "Markdown report written to" in out and "SVG report written to" in out

    md = (suite.path / "out" / "report.md").read_text()
    # Each engine's sweep, and the Pareto table across the engines with the article columns.
    assert "green" in md and "blue" in md
    assert "Pareto" in md
    for column in ("TTFT", "ITL", "goodput"):
        assert column in md

    svg = (suite.path / "out" / "report.svg").read_text()
    assert svg.lstrip().startswith("<svg") or svg.lstrip().startswith("<?xml")
    assert "green" in svg and "</svg>" in svg

    doc = json.loads((suite.path / "out" / "run.json").read_text())
    validate_document(doc)
    reports = {(r["engine"]["name"], r["test"]): r for r in doc["reports"]}
    assert set(reports) == {
        ("green", "test_suite.py::test_compare"),
        ("blue", "test_suite.py::test_compare"),
        ("green", "test_suite.py::test_default"),
        ("blue", "test_suite.py::test_default"),
    }
    rep = reports[("green", "test_suite.py::test_compare")]
    assert rep["harness"]["name"] == "pytest-llmslo" and rep["harness"]["version"]
    assert rep["engine"]["kind"] == "external"
    assert rep["mode"] == "concurrency"
    # The asserted objectives are the sweep's SLO.
    assert rep["slo"] == ["ttft_p99 < 500 ms", "itl_p50 < 30 ms"]
    assert rep["dataset"]["workload"]["isl"] == 16
    assert [level["concurrency"] for level in rep["sweep"]] == [1, 2]
    knee = rep["results_at_knee"]
    assert knee is not None and knee["concurrency"] == 2
    for key in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "output_tok_s", "goodput_tok_s"):
        assert knee[key] > 0, key
    assert knee["goodput_pct"] == 100.0
    assert knee["ttft_p50_ms"] <= knee["ttft_p99_ms"]


def test_a_markdown_path_that_cannot_be_written_is_a_usage_error(
    suite: pytest.Pytester, fixed_server
):
    (suite.path / "blocker").write_text("a file, not a folder")
    result = suite.runpytest_subprocess(
        *_args(fixed_server, "--engine=green", "--slo-markdown=blocker/report.md")
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--slo-markdown" in result.stderr.str() + result.stdout.str()


def test_markdown_appends_to_the_step_summary_and_no_slo_is_named(
    suite: pytest.Pytester, fixed_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GitHub Actions collects every step's summary in one file: ours goes after the others'.
    summary = suite.path / "step_summary.md"
    summary.write_text("## an earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = suite.runpytest_subprocess(
        *_args(fixed_server, "--slo-engine=green", f"--slo-markdown={summary}", "-k", "default")
    )
    result.assert_outcomes(passed=1)
    text = summary.read_text()
    assert text.startswith("## an earlier step\n\n") and "green" in text
    # The test measured, but asserted no SLO: the session says so, and how to add one.
    result.stdout.fnmatch_lines(["llmslo: no SLO was asserted: *"])
    assert "--slo 'ttft_p99<500,itl_p50<30'" in result.stdout.str()


def test_a_session_with_an_slo_has_no_such_note(suite: pytest.Pytester, fixed_server: str):
    result = suite.runpytest_subprocess(*_args(fixed_server, "--slo-engine=green", "-k", "compare"))
    result.assert_outcomes(passed=2)
    assert "no SLO was asserted" not in result.stdout.str()
