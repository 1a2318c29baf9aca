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


@pytest.mark.parametrize("transport", ["fast", pytest.param("httpx", marks=pytest.mark.slow)])
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


@pytest.mark.slow
def test_usage_beyond_the_stream_is_not_credited_and_flags_the_level(
    slo_pytester, misbehaving
) -> None:
    # 4 chunks 300 ms apart whose usage claims 1000 tokens (max_tokens is 16): spread over
    # the chunks, the claim read as an ITL of 1.2 ms and passed itl_p50 < 100, with output
    # tok/s and goodput about 60 times what streamed.
    slo_pytester.makepyfile(
        test_chat="""
        import pytest
        from pytest_llmslo import assert_goodput, itl_p50, ttft_p99

        @pytest.mark.slo(concurrency=[2])
        def test_itl(slo_run):
            assert_goodput(itl_p50 < 100)

        @pytest.mark.slo(concurrency=[2])
        def test_ttft(slo_run):
            assert_goodput(ttft_p99 < 5000)
        """
    )
    url = misbehaving("usage-inflated")
    result = slo_pytester.runpytest_subprocess(
        *args(url, "--requests=4", "--slo-json=r.json", "--junitxml=j.xml"), timeout=180
    )
    # test_itl's body failed its SLO; test_ttft's passed on another workload than asked:
    # inconclusive, not a pass.
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*SLO not met: itl_p50 < 100 ms (observed 3??.* ms)*",
            "*Inconclusive: inconclusive at c2: the engine answered another workload than the "
            "one asked*--max-usage-mismatch*",
            "*4 of 4 completed requests reported a usage that disagrees with the stream (4000 "
            "tokens claimed, 16 streamed)*",
        ]
    )
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    for point in doc["points"]:
        s = point["summary"]
        assert s["usage_mismatches"] == 4 and s["usage_claimed_tokens"] == 4000
        assert s["output_tokens"] == 16  # what streamed, not 4 x 1000 (nor 4 x 16)
        assert s["output_tok_s"] < 20  # 16 tokens over more than a second
        assert point["comparable"] is False
        assert any("--max-usage-mismatch" in n for n in point["notes"])
    ttft = next(p for p in doc["points"] if p["test"].endswith("test_ttft"))
    assert ttft["verdict"]["passed"] and ttft["verdict"]["goodput_tok_s"] < 20
    assert 'name="llmslo.usage_mismatches" value="4"' in (slo_pytester.path / "j.xml").read_text()


SLOW_CLIENT = """
import asyncio

from pytest_llmslo.load import client, http1


def _late(send):
    async def late(self, body, raw, headers=None):
        # The client is slow to send every request (descheduled, busy): 12 ms each time, a
        # turnaround the lag rules let pass (--client-max-lag=50), while the engine waits
        # with fewer requests than asked.
        await asyncio.sleep(0.012)
        return await send(self, body, raw, headers)

    return late


http1.FastTransport.send = _late(http1.FastTransport.send)
client.HttpxTransport.send = _late(client.HttpxTransport.send)
"""


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(("fast", "auto"), marks=pytest.mark.slow),
        ("fast", "read"),
        pytest.param(("httpx", "auto"), marks=pytest.mark.slow),
    ],
    ids=["kernel", "read", "httpx"],
)
def test_a_client_too_slow_to_keep_the_load_never_passes(
    slo_pytester, fixed_server, client: tuple[str, str]
) -> None:
    # A busy client broke the closed loop's waves: the engine saw fewer requests in flight
    # than asked, every lag stayed under its threshold, the run was "valid" and a level
    # that fails at its load could pass. Now the load applied is checked against the load
    # asked (here about 4 x 36 / 48 in flight at c4): invalid, retried, inconclusive.
    transport, stamps = client
    slo_pytester.makeconftest(SLOW_CLIENT)
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider",
        "--engine=external", f"--engine-url={fixed_server}",
        "--warmup=4", "--requests=24", "--isl=8", "--osl=8",
        "--client-max-lag=50", "--client-max-cpu=1.5", "--slo-retries=1",
        f"--transport={transport}", f"--receive-stamps={stamps}", "--slo-json=r.json",
        "--junitxml=j.xml",
    )  # fmt: skip
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*Inconclusive: inconclusive at c4 after 2 tries*the closed loop kept * requests in "
            "flight on average over its measured window, *% of the 4 asked (< 90%, "
            "--client-min-load)*"
        ]
    )
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    health = point["summary"]["client_health"]
    assert point["outcome"] == "inconclusive"
    assert health["load_kind"] == "in_flight" and health["load_asked"] == 4
    assert health["load_share"] < 0.9 and health["receive_stamps"] == (
        "kernel" if (transport, stamps) == ("fast", "auto") else "read"
    )
    assert 'name="llmslo.client.load_share"' in (slo_pytester.path / "j.xml").read_text()
