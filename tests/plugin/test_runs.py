"""SLO tests that run real loads (tiny ones, against the fixed-timing server)."""

from __future__ import annotations

import itertools
import json

import pytest

SUITE = """
import pytest
from pytest_llmslo import assert_goodput, assert_slo, itl_p50, ttft_p99, e2e_p99

@pytest.mark.slo(concurrency=[1, 2])
def test_chat(slo_run):
    assert_goodput(ttft_p99 < 500, itl_p50 < 30)

@pytest.mark.slo(concurrency=[2])
def test_too_tight(slo_run):
    assert_slo(ttft_p99 < 1, itl_p50 < 30)
"""


def test_passing_and_violating_slos(slo_pytester: pytest.Pytester, tiny_args) -> None:
    slo_pytester.makepyfile(test_suite=SUITE)
    result = slo_pytester.runpytest_subprocess(*tiny_args("-v"), "-rA")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*SloViolation: SLO not met: ttft_p99 < 1 ms (observed *ms)*",
            "*ttft_p99 < 1 ms*FAIL*",
            "*itl_p50 < 30 ms*pass*",
        ]
    )
    # The same run's terminal summary: the sweep table and the knee, within 100 columns.
    result.stdout.fnmatch_lines(
        [
            "*llmslo external c1: 12/12 requests ok*",
            "*test_chat[[]external-c1] PASSED*",
            "*= llmslo: SLO sweeps =*",
            "external | test_suite.py::test_chat | concurrency sweep, 2 levels",
            "*load*TTFT p50*TTFT p99*ITL p50*",
            "*c1*pass*",
            "*c2*pass*",
            "*knee: c2*",
        ]
    )
    # Our section only: pytest's own short test summary that follows is not cut to the
    # terminal width where CI is set in the environment.
    section = result.stdout.str().split("llmslo: SLO sweeps")[1].splitlines()[1:]
    ours = list(itertools.takewhile(lambda ln: not ln.startswith("="), section))
    assert len(ours) > 5
    for line in ours:
        assert len(line) <= 100, line


def test_bare_assert_raises_type_error(slo_pytester: pytest.Pytester, tiny_args) -> None:
    slo_pytester.makepyfile(
        test_bare="""
        import pytest
        from pytest_llmslo import ttft_p99

        @pytest.mark.slo(concurrency=[1])
        def test_bare(slo_run):
            assert ttft_p99 < 500
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TypeError*assert_goodput*"])


def test_marker_objectives_gate_without_an_assert(slo_pytester: pytest.Pytester, tiny_args):
    slo_pytester.makepyfile(
        test_gate="""
        import pytest
        from pytest_llmslo import ttft_p99

        @pytest.mark.slo(ttft_p99 < 500, concurrency=[1])
        def test_ok(slo_run):
            pass

        @pytest.mark.slo(objectives="ttft_p99<1", concurrency=[1])
        def test_red(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*_ test_red[[]external-c1] _*", "E * SLO not met: ttft_p99 < 1 ms*"]
    )
    # --slo on the command line replaces the markers' objectives
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo=ttft_p99<5000"))
    result.assert_outcomes(passed=2)


@pytest.mark.slow
def test_strict_mode_needs_samples(slo_pytester: pytest.Pytester, tiny_args) -> None:
    """12 requests cannot show a P99 bound: the point estimate passes, strict mode fails."""
    slo_pytester.makepyfile(
        test_strict="""
        import pytest
        from pytest_llmslo import assert_goodput, ttft_p99

        @pytest.mark.slo(concurrency=[1])
        def test_gate(slo_run):
            assert_goodput(ttft_p99 < 500)
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(passed=1)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-strict"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*SLO failed under strict*", "*ttft_p99 < 500 ms*"])


def test_slo_load_and_capacity_fixtures(slo_pytester: pytest.Pytester, tiny_args) -> None:
    slo_pytester.makepyfile(
        test_low="""
        import pytest
        from pytest_llmslo import LoadLevel, assert_slo, ttft_p99

        @pytest.mark.slo(concurrency=[1])
        def test_custom(slo_load):
            run = slo_load(LoadLevel.rate(20, "constant"), requests=6)
            assert len(run.records) == 6
            assert_slo(ttft_p99 < 500)

        @pytest.mark.slo(concurrency=[1])
        def test_capacity(slo_capacity):
            result = slo_capacity(ttft_p99 < 500, max_value=4)
            assert result.capacity is not None and result.capacity.value == 4
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*capacity c4 after 3 levels*"])


@pytest.mark.slow
def test_extension_runs_past_the_last_level(slo_pytester: pytest.Pytester, tiny_args) -> None:
    slo_pytester.makepyfile(
        test_ext="""
        import pytest
        from pytest_llmslo import assert_goodput, ttft_p99

        @pytest.mark.slo(concurrency=[1, 2], extend=True)
        def test_chat(slo_run):
            assert_goodput(ttft_p99 < 500)
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args())
    result.assert_outcomes(passed=2)
    # Never saturates: the extension stops after its cap of extra levels.
    result.stdout.fnmatch_lines(["*extended past c2: c3, c5, c8, c12, c18, c27 (--slo-extend)*"])


def test_unavailable_and_failing_engines(slo_pytester: pytest.Pytester, tiny_args) -> None:
    """A failed start is an error on that engine's tests only; unavailable is a skip."""
    slo_pytester.makefile(
        ".toml",
        engines="""
        [engines.broken]
        kind = "external"
        url = "http://127.0.0.1:9"
        startup_timeout_s = 1.0

        [engines.gpu]
        kind = "sim"
        runtime = "docker"
        image = "pytest-llmslo/none:nope"
        """,
    )
    slo_pytester.makepyfile(
        test_e="""
        import pytest
        from pytest_llmslo import assert_goodput, ttft_p99

        @pytest.mark.slo(concurrency=[1, 2])
        def test_chat(slo_run):
            assert_goodput(ttft_p99 < 500)
        """
    )
    args = tiny_args()
    url = next(a for a in args if a.startswith("--slo-engine-url="))
    cfg = (slo_pytester.path / "engines.toml").read_text()
    cfg += f'\n[engines.good]\nkind = "external"\nurl = "{url.split("=", 1)[1]}"\n'
    (slo_pytester.path / "engines.toml").write_text(cfg)
    args = [a for a in args if not a.startswith("--slo-engine")]
    result = slo_pytester.runpytest_subprocess(
        *args, "--engine-config=engines.toml", "--engine=broken,gpu,good", "-rA"
    )
    result.assert_outcomes(passed=2, errors=2, skipped=2)
    result.stdout.fnmatch_lines(["*ERROR*test_chat[[]broken-c1]*engine 'broken' did not start*"])
    result.stdout.fnmatch_lines(["*SKIPPED*engine 'gpu' unavailable*"])


def test_sim_engine_pass_and_violation(slo_pytester: pytest.Pytester) -> None:
    """The real sim engine (started by the plugin), tiny loads."""
    slo_pytester.makepyfile(
        test_sim="""
        import pytest
        from pytest_llmslo import assert_goodput, itl_p50, ttft_p99

        @pytest.mark.slo(concurrency=[1, 4])
        def test_chat(slo_run):
            assert_goodput(ttft_p99 < 2000, itl_p50 < 100)

        @pytest.mark.slo(concurrency=[4])
        def test_impossible(slo_run):
            assert_goodput(itl_p50 < 0.5)
        """
    )
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine=sim", "--sim-profile=llama3-8b-fp8-1xh100-vllm",
        "--warmup=2", "--requests=8", "--isl=64", "--osl=8",
        "--client-max-lag=2000", "--client-max-cpu=1.5",
    )  # fmt: skip
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*itl_p50 < 0.5 ms*FAIL*", "sim | test_sim.py::test_chat *"])


@pytest.mark.slow
def test_pareto_across_engines(
    slo_pytester: pytest.Pytester, fixed_server: str, slow_fixed_server: str
) -> None:
    slo_pytester.makefile(
        ".toml",
        engines=f"""
        [engines.fast]
        kind = "external"
        url = "{fixed_server}"

        [engines.slow]
        kind = "external"
        url = "{slow_fixed_server}"
        """,
    )
    slo_pytester.makepyfile(test_suite=SUITE.replace("[1, 2]", "[1]"))
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine-config=engines.toml", "--engine=fast,slow",
        "--warmup=1", "--requests=12", "--isl=16", "--osl=8", "-k", "test_chat",
        "--client-max-lag=2000", "--client-max-cpu=1.5",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            # The verdicts and the Pareto table lead; the sweeps follow.
            "* fast | test_suite.py::test_chat: *",
            "* slow | test_suite.py::test_chat: *",
            "Pareto | test_suite.py::test_chat | *",
            "*at each engine's knee:*",
            "*fast*c1*",
            "fast | test_suite.py::test_chat | *",
            "slow | test_suite.py::test_chat | *",
        ]
    )


DIE_AT_C1 = """
import pytest

@pytest.mark.slo(concurrency=[1, 2])
def test_chat(slo_run, slo_engine, slo_level):
    if slo_level.value == 1:
        slo_engine.handle.alive = lambda: False  # as if the engine process had exited
"""


@pytest.mark.slow
def test_engine_gone_is_an_error_and_results_are_kept(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    # Restarts off: the engine's later tests error, with a message and no traceback.
    slo_pytester.makepyfile(test_die=DIE_AT_C1)
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--slo-json=out.json", "--slo-engine-restarts=0")
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*EngineDiedError: engine 'external' is not running any more: exited*"]
    )
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*plugin.py:*")
    import json

    doc = json.loads((slo_pytester.path / "out.json").read_text())
    assert [p["level"]["value"] for p in doc["points"]] == [1.0]


@pytest.mark.slow
def test_engine_that_died_is_restarted_for_the_next_test(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(test_die=DIE_AT_C1)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-json=out.json", "-v"))
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*llmslo: engine external exited*; restarting it (1 of 1, --engine-restarts)*"]
    )
    import json

    doc = json.loads((slo_pytester.path / "out.json").read_text())
    assert [p["level"]["value"] for p in doc["points"]] == [1.0, 2.0]


@pytest.mark.slow
def test_capacity_search_option(slo_pytester: pytest.Pytester, tiny_args) -> None:
    slo_pytester.makepyfile(
        test_cap="""
        import pytest
        from pytest_llmslo import assert_goodput, ttft_p99

        @pytest.mark.slo(ttft_p99 < 500, concurrency=[1, 2, 4])
        def test_chat(slo_run):
            assert slo_run.level.value == 8  # the run at the capacity is the test's run
        """
    )
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--slo-capacity", "--slo-capacity-max=8", "-v", "--junitxml=x.xml")
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*test_chat[[]external-capacity] PASSED*", "*capacity c8 after 4 levels*"]
    )
    assert 'name="llmslo.level" value="c8"' in (slo_pytester.path / "x.xml").read_text()


def test_capacity_search_needs_objectives(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_cap="def test_chat(slo_run):\n    pass\n")
    result = slo_pytester.runpytest_subprocess("--slo-capacity", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --slo-capacity: test_cap.py::test_chat has no objec*"])


@pytest.mark.slow
def test_extended_levels_are_judged_by_the_tests_gate(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(
        test_ext="""
        import pytest
        from pytest_llmslo import assert_goodput, ttft_p99

        @pytest.mark.slo(concurrency=[1], extend=True)
        def test_body(slo_run):
            assert_goodput(ttft_p99 < 500, min_attainment=0.8)

        @pytest.mark.slo(ttft_p99 < 500, concurrency=[1], extend=True)
        def test_configured(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-json=r.json", "--slo-strict"))
    result.assert_outcomes(failed=2)  # 12 requests bound no P99: strict fails both
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    gates: dict[str, set[tuple[object, object]]] = {}
    for p in doc["points"]:
        v = p["verdict"]
        gates.setdefault(p["test"].rsplit("::", 1)[1], set()).add(
            (v["min_attainment"], v["strict"])
        )
    # Every level, the test's own and the extended ones, under one gate.
    assert gates == {"test_body": {(0.8, True)}, "test_configured": {(0.9, True)}}
    counts = {name: sum(p["test"].endswith(name) for p in doc["points"]) for name in gates}
    assert min(counts.values()) > 1, result.stdout.str()
