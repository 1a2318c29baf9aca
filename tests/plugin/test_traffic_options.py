"""Traffic options through the plugin: trace replay and its bad input, arrival shapes,
conversations and request shaping (pytester, subprocess, against the sim)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

PLAIN = """
import pytest

@pytest.mark.slo(concurrency=[1])
def test_a(slo_run):
    pass
"""


def _trace(path: Path, n: int = 6, gap_ms: int = 200) -> Path:
    path.write_text(
        "".join(
            json.dumps(
                {"timestamp": i * gap_ms, "input_length": 600, "output_length": 4,
                 "hash_ids": [0, 100 + i]}
            ) + "\n"
            for i in range(n)
        )
    )  # fmt: skip
    return path


@pytest.mark.slow
def test_trace_speeds_are_the_levels(slo_pytester: pytest.Pytester) -> None:
    trace = _trace(slo_pytester.path / "t.jsonl")
    slo_pytester.makepyfile(test_a=PLAIN)
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "-q", f"--trace-file={trace}", "--trace-speed=1,4", "--max-concurrency=8"
    )
    result.stdout.fnmatch_lines(["test_a.py::test_a[[]sim-x1m8]", "test_a.py::test_a[[]sim-x4m8]"])
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "-q", "--ramp=1:4:10", "--arrival=gamma", "--burstiness=0.5"
    )
    result.stdout.fnmatch_lines(["test_a.py::test_a[[]sim-r1-4g0.5]"])
    result = slo_pytester.runpytest_subprocess("--collect-only", "-q", "--steps=1,2,4:5")
    result.stdout.fnmatch_lines(["test_a.py::test_a[[]sim-r1/2/4]"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--rate=2", "--ramp=1:2:3"],
            "ERROR: --rate and --ramp: a cli source sets*",
        ),
        (
            ["--burstiness=0.5", "--rate=2"],
            "ERROR: --burstiness: burstiness shapes gamma*",
        ),
        (["--max-concurrency=4"], "ERROR: --max-concurrency: max_concurrency caps an open loop*"),
        (["--trace-speed=2"], "ERROR: --trace-speed: --trace-speed needs a trace (--trace-file)*"),
        (["--ramp=1:x:3"], "*--ramp: Could not parse value: '1:x:3'. Expected START:END:SECONDS*"),
        (
            ["--header=nocolon"],
            "*--header: *nocolon*Expected NAME: VALUE*",
        ),
        (["--header=Host: x"], "ERROR: request shaping: extra header 'Host' is set by the client*"),
        (["--extra-body=[1]"], "*--extra-body*Expected a JSON object*"),
        (["--models=a:0"], "*--models: Could not parse value: 'a:0'*"),
        (["--think-distribution=pareto"], "*'pareto' is not a valid think_distribution*"),
        (["--turns=2", "--dataset=x.json"], "ERROR: --dataset: dataset x.json: not found*"),
    ],
)
def test_bad_traffic_options_are_usage_errors(
    slo_pytester: pytest.Pytester, args: list[str], message: str
) -> None:
    slo_pytester.makepyfile(test_a=PLAIN)
    result = slo_pytester.runpytest_subprocess("--collect-only", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_bad_trace_fails_the_session_before_any_engine_starts(
    slo_pytester: pytest.Pytester,
) -> None:
    bad = slo_pytester.path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 10, "input_length": 5, "output_length": 2, "hash_ids": [1]}\n'
        '{"timestamp": 3, "input_length": 5, "output_length": 2, "hash_ids": [1]}\n'
    )
    slo_pytester.makepyfile(test_a=PLAIN)
    result = slo_pytester.runpytest_subprocess(f"--trace-file={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --trace-file: *bad.jsonl:2: the timestamp goes backwards (3 ms after 10 ms*"]
    )
    assert "ready on" not in result.stdout.str() + result.stderr.str()


def test_replay_conversations_and_shaping_reach_the_run(slo_pytester: pytest.Pytester) -> None:
    trace = _trace(slo_pytester.path / "t.jsonl")
    slo_pytester.makepyfile(
        test_t=f"""
        import pytest
        from pytest_llmslo.metrics import traffic

        @pytest.mark.slo(trace={str(trace)!r}, trace_speed=[4], warmup=0, requests=None,
                         headers={{"X-Tenant": "a"}})
        def test_replay(slo_run):
            t = traffic.summarize(slo_run)
            c = slo_run.meta["client"]
            print("REPLAY", len(slo_run.records), t["trace"]["requests"],
                  round(t["offered_req_s"]), c["headers"])
            assert all(r.ok for r in slo_run.records)

        @pytest.mark.slo(concurrency=[2], turns=3, isl=16, osl=4, requests=6, warmup=0,
                         session_header="X-Session-ID", extra_body={{"top_k": 5}})
        def test_chat(slo_run):
            turns = traffic.by_turn(slo_run)
            c = slo_run.meta["client"]
            print("CHAT", [t["requests"] for t in turns], c["session_header"], c["extra_body"])
        """
    )
    # The traffic lines under each level are per-level detail: -v shows them.
    result = slo_pytester.runpytest_subprocess("-s", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "REPLAY 6 6 20 ['X-Tenant']",
            "*CHAT [[]2, 2, 2[]] X-Session-ID {'top_k': 5}",
            "*x4: offered 20 req/s, sent * req/s (trace mooncake t.jsonl: 6 requests over 1.0 s)*",
            "*c2: TTFT p50 by turn t1 * → t2 * → t3 * ms; 2 of 2 conversations completed*",
        ]
    )
