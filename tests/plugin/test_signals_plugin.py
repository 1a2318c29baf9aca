"""Engine signals through the plugin: the sweep's signal lines, the verdict's attribution,
JUnit and JSON, and a /metrics that is not there (pytester, subprocess, the sim)."""

from __future__ import annotations

import json

import pytest

KV_BOUND = """
import pytest
from pytest_llmslo import assert_slo, ttft_p99

@pytest.mark.slo(concurrency=[32], isl=256, osl=64, requests=48, warmup=32)
def test_tight(slo_run):
    assert_slo(ttft_p99 < 50)
"""


@pytest.mark.slow
def test_a_miss_names_the_signal_that_explains_it(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(test_kv=KV_BOUND)
    (slo_pytester.path / "engines.toml").write_text(
        '[engines.sim]\nkind = "sim"\nextra_args = ["--num-gpu-blocks", "320"]\n'
    )
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine-config=engines.toml",
        "--slo-json=r.json", "--junitxml=j.xml", "--signals-interval=0.2", "-v",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "why: TTFT P99 " in out and "KV-cache bound" in out
    # Named for the engine measured; the sim answers in vLLM's names.
    result.stdout.fnmatch_lines(
        ["*c32: sim signals (vLLM-style /metrics): queue P99 * ms, * waiting (peak *), * running*"]
    )
    # The gauges' means are time-weighted over the samples taken while the load ran.
    assert "gauges: time-weighted over " in " ".join(out.split())
    # What "client +N ms" is, said once under the sweep tables.
    if "(client " in out:
        assert out.count("client +N ms: the client's TTFT P99 minus the engine's own") == 1
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    sig = doc["points"][0]["summary"]["signals"]
    assert sig["engines"] == ["vllm"] and sig["kv_usage_max"] > 0.9
    assert sig["gauge_samples"] >= 3 and sig["running_mean"] > 1
    assert "client_minus_engine_ttft_p99_ms" in sig
    assert doc["points"][0]["verdict"]["attribution"][0].endswith("KV-cache bound")
    xml = (slo_pytester.path / "j.xml").read_text()
    assert 'name="llmslo.signals.kv_usage_max"' in xml
    assert 'name="llmslo.signals.queue_time_p99_ms"' in xml


def test_signals_off_and_missing_metrics(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makepyfile(
        test_a="""
        import pytest

        @pytest.mark.slo(concurrency=[1], requests=3, warmup=0, osl=8)
        def test_a(slo_run):
            print("SIGNALS", slo_run.meta.get("signals"))
        """
    )
    result = slo_pytester.runpytest_subprocess(
        "-s", "-p", "no:cacheprovider", "--slo-signals=false"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SIGNALS None"])


@pytest.mark.slow
def test_a_server_without_metrics_still_runs(slo_pytester: pytest.Pytester) -> None:
    # The known-timing server answers /metrics with 404: the level runs, the report says why.
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmslo.sim.truth_server", "--port", "0", "--ttft-ms", "5",
         "--itl-ms", "1", "--tokens", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        url = line.rsplit("ready on ", 1)[1].strip()
        slo_pytester.makepyfile(
            test_a="""
            import pytest

            @pytest.mark.slo(concurrency=[2], requests=6, warmup=0, osl=8)
            def test_a(slo_run):
                assert all(r.ok for r in slo_run.records)
            """
        )
        args = ("-p", "no:cacheprovider", "--engine=external", f"--engine-url={url}")
        result = slo_pytester.runpytest_subprocess(*args, "-v")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["*c2: no engine signals: GET */metrics answered HTTP 404*"])
        # Without -v the summary keeps the table and says what -v adds.
        result = slo_pytester.runpytest_subprocess(*args)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            # The signals' line and the weight of a TTFT P99 from 6 requests.
            ["-     external | test_a.py::test_a: 1 level, no SLO judged", "(2 lines of per-level*"]
        )
        result.stdout.no_fnmatch_line("*c2: no engine signals*")
    finally:
        proc.terminate()
        proc.wait(10)
