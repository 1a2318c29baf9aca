"""Every verdict tells the truth about what it measured, on the load path: no token the
client did not see, no load the engine did not get, and blame where it belongs. Each test
runs a session against a server that misbehaves in one way (``tests/misbehaving_server.py``)."""

from __future__ import annotations

import json

import pytest

CHAT = """
import pytest

@pytest.mark.slo(concurrency=[4])
def test_chat(slo_run):
    pass
"""


def args(url: str, *extra: str) -> list[str]:
    # Default client-health thresholds: what is judged here is who gets the blame.
    return [
        "-p", "no:cacheprovider",
        "--engine=external", f"--engine-url={url}",
        "--warmup=0", "--requests=8", "--isl=8", "--osl=16",
        *extra,
    ]  # fmt: skip


# (mode, extra options, the error text each failed request carries)
MID_STREAM = [
    ("stall", ("--idle-timeout=1",), "timeout 8: stream stalled: no data for 1 s"),
    ("reset-mid", (), "reset 8:"),
    ("close-mid", (), "reset 8:"),
    ("truncated", (), "truncated 8: stream ended without ?DONE? or a finish_reason"),
]


@pytest.mark.parametrize("transport", ["fast", "httpx"])
@pytest.mark.parametrize(("mode", "extra", "error"), MID_STREAM, ids=[m[0] for m in MID_STREAM])
def test_requests_failing_mid_stream_fail_the_engine_not_the_client(
    slo_pytester, misbehaving, transport: str, mode: str, extra: tuple[str, ...], error: str
) -> None:
    # The fast client dated a failed request's end at its last data: the wait for the
    # failure (a deadline, a reset 300 ms later) counted as the client's turnaround, the
    # run was "client-limited", and the level ended inconclusive after three tries.
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *args(misbehaving(mode), f"--transport={transport}", "--slo-json=r.json", *extra),
        timeout=180,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*SloViolation: SLO not met: every request failed (8 of 8)*", f"*{error}*"]
    )
    result.stdout.no_fnmatch_line("*nconclusive*")
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    assert point["outcome"] == "fail"
    assert not any(n.startswith("try ") for n in point["notes"]), point["notes"]
