"""The plugin's hooks for users (hookspecs.py), what the session header and the lines after
collection say, and the quiet pytest-asyncio warning."""

from __future__ import annotations

import json

import pytest

from pytest_llmslo.document import validate_document

CONFTEST = """
import dataclasses
import json

def pytest_llmslo_engine_config(config, name, engine_config):
    # A conftest-wide change to every engine before it starts.
    return dataclasses.replace(engine_config, startup_timeout_s=123.0)

def pytest_llmslo_level_result(config, point, run):
    with open("levels.jsonl", "a") as f:
        f.write(json.dumps({
            "engine": point.engine, "test": point.test, "level": point.level.label,
            "outcome": point.outcome, "requests": len(run.records),
            "verdict": None if point.verdict is None else point.verdict.passed,
        }) + "\\n")

def pytest_llmslo_update_document(config, document):
    document["ci"] = {"job": "42"}
"""

SUITE = """
import pytest
from pytest_llmslo import assert_goodput, ttft_p99

@pytest.mark.slo(concurrency=[1, 2], extend=False)
def test_chat(slo_run, slo_engine):
    assert slo_engine.config.startup_timeout_s == 123.0  # the config the engine started with
    assert_goodput(ttft_p99 < 500)
"""


def test_hooks_change_the_engine_config_see_each_level_and_extend_the_document(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makeconftest(CONFTEST)
    slo_pytester.makepyfile(test_suite=SUITE)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-json=out.json"))
    result.assert_outcomes(passed=2)
    levels = [
        json.loads(line) for line in (slo_pytester.path / "levels.jsonl").read_text().splitlines()
    ]
    assert [(r["level"], r["outcome"], r["verdict"]) for r in levels] == [
        ("c1", "pass", True),
        ("c2", "pass", True),
    ]
    assert all(r["requests"] == 12 and r["engine"] == "external" for r in levels)
    doc = json.loads((slo_pytester.path / "out.json").read_text())
    validate_document(doc)
    assert doc["ci"] == {"job": "42"}
    # pytest-benchmark's machine and commit information, in the document (and baselines).
    assert doc["machine_info"]["python_version"]
    assert "cpu" in doc["machine_info"]
    assert "id" in doc["commit_info"] or "error" in doc["commit_info"]


def test_a_failing_level_result_hook_does_not_change_the_outcome(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makeconftest(
        "def pytest_llmslo_level_result(config, point, run):\n"
        "    raise RuntimeError('dashboard down')\n"
    )
    slo_pytester.makepyfile(test_suite="import pytest\n@pytest.mark.slo(concurrency=[1])\n"
                            "def test_x(slo_run):\n    pass\n")  # fmt: skip
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*the level_result hook failed: RuntimeError('dashboard down')*"])


def test_each_test_says_what_it_will_run_after_collection(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(
        test_two="""
        import pytest

        @pytest.mark.slo(concurrency=[3, 5], isl=32, isl_stddev=8)
        def test_a(slo_run):
            pass

        @pytest.mark.slo(rate=[2])
        def test_b(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args("--collect-only", "-q"))
    out = result.stdout.str()
    # The CLI's --isl=16 overrides the marker's isl=32 (CLI > marker); the levels are the
    # markers' own, not the session's default sweep.
    # Each names the URL it measures.
    result.stdout.fnmatch_lines(
        [
            "llmslo: test_two.py::test_a: external (http://127.0.0.1:*) x c3,c5; "
            "synthetic isl=16±8 osl=8*",
            "llmslo: test_two.py::test_b: external (http://127.0.0.1:*) x r2;*",
        ]
    )
    assert "llmslo: test_two.py::test_a: external (" in out


def test_no_asyncio_loop_scope_warning_in_a_project_without_the_key(
    pytester: pytest.Pytester,
) -> None:
    # A user's project: no ini key for pytest-asyncio (slo_pytester would set it).
    pytester.makepyfile(test_plain="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str() + result.stderr.str()
    assert "PytestDeprecationWarning" not in out and "is unset" not in out


ASYNC_AND_THREADS = """
import asyncio
import contextvars
import threading

import pytest
from pytest_llmslo import assert_goodput, assert_slo, ttft_p99

@pytest.mark.slo(concurrency=[1], extend=False)
@pytest.mark.asyncio
async def test_async_body(slo_run):
    await asyncio.sleep(0)
    assert_goodput(ttft_p99 < 500)

@pytest.mark.slo(concurrency=[2], extend=False)
def test_thread_of_the_body(slo_run):
    caught = []

    def judge():
        try:
            assert_slo(ttft_p99 < 0.001)
        except AssertionError as exc:
            caught.append(exc)

    thread = threading.Thread(target=contextvars.copy_context().run, args=(judge,))
    thread.start()
    thread.join()
    assert caught  # raised to the code that asked, and left for the session
"""


def test_verdicts_of_an_async_body_and_of_a_thread_reach_their_level(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makeconftest(
        "import json\n"
        "def pytest_llmslo_level_result(config, point, run):\n"
        "    with open('levels.jsonl', 'a') as f:\n"
        "        verdict = None if point.verdict is None else point.verdict.passed\n"
        "        f.write(json.dumps({'level': point.level.label, 'verdict': verdict}) + '\\n')\n"
    )
    slo_pytester.makepyfile(test_suite=ASYNC_AND_THREADS)
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(passed=2)
    levels = [
        json.loads(line) for line in (slo_pytester.path / "levels.jsonl").read_text().splitlines()
    ]
    # The async body's passing verdict, and the failing one its thread asserted (caught by
    # the body, so the test passed), each on the level it judged.
    assert [(r["level"], r["verdict"]) for r in levels] == [("c1", True), ("c2", False)]
