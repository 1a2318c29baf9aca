"""Everything beside the load is bounded, caches are honest, secrets never leave: one
test per case of a new user's tour (a /metrics that never ends, an endpoint that is up
but never ready, a second run against a warm engine, a server that echoes the key)."""

from __future__ import annotations

import json
import time

import pytest

CHAT = """
import pytest

@pytest.mark.slo(concurrency=[2])
def test_chat(slo_run):
    pass
"""

TWO_ALIKE = """
import pytest

@pytest.mark.slo(concurrency=[2])
def test_first(slo_run):
    pass

@pytest.mark.slo(concurrency=[2])
def test_second(slo_run):
    pass
"""


def args(url: str, *extra: str) -> list[str]:
    return [
        "-p", "no:cacheprovider",
        "--engine=external", f"--engine-url={url}",
        "--warmup=0", "--requests=4", "--isl=8", "--osl=8",
        "--client-max-lag=2000", "--client-max-cpu=1.5",
        *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "seen"),
    [
        ("metrics-endless", "is over 16 MiB"),
        pytest.param("metrics-trickle", "did not end within 1 s", marks=pytest.mark.slow),
    ],
)
def test_a_metrics_body_that_never_ends_does_not_hold_the_session(
    slo_pytester, misbehaving, mode: str, seen: str
) -> None:
    # Before: the scrape after the load waited for the end of the body, forever.
    slo_pytester.makepyfile(test_chat=CHAT)
    url = misbehaving(mode)
    result = slo_pytester.runpytest_subprocess(
        *args(url, "--signals-timeout=1", "--slo-json=r.json"), timeout=120
    )
    result.assert_outcomes(passed=1)
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    assert len(point["samples"]["ttft_ms"]) == 4
    note = point["summary"]["signals"]["note"]
    assert seen in note and "not scraped again in this level" in note


@pytest.mark.slow
def test_a_metrics_endpoint_that_never_answers_is_bounded_by_the_level(
    slo_pytester, misbehaving
) -> None:
    # A scrape's own deadline (--signals-timeout) is never past the level's bound
    # (--level-timeout): with a scrape deadline of 10 minutes, a /metrics that never answers
    # costs the level's few seconds, not the scrape's ten minutes.
    slo_pytester.makepyfile(test_chat=CHAT)
    url = misbehaving("metrics-silent")
    t0 = time.monotonic()
    result = slo_pytester.runpytest_subprocess(
        *args(url, "--signals-timeout=600", "--level-timeout=6", "--slo-json=r.json"),
        timeout=120,
    )
    took = time.monotonic() - t0
    result.assert_outcomes(passed=1)
    assert took < 60, f"the session took {took:.0f} s"
    point = json.loads((slo_pytester.path / "r.json").read_text())["points"][0]
    assert len(point["samples"]["ttft_ms"]) == 4
    assert "no engine signals" in point["summary"]["signals"]["note"]


@pytest.mark.slow
def test_ctrl_c_after_the_load_keeps_and_counts_its_requests(slo_pytester, fixed_server) -> None:
    # Ctrl-C while the level's last scrape runs (after every request was measured).
    slo_pytester.makeconftest(
        """
        import pytest_llmslo.session.level as core

        def interrupted(run, scraper):
            if scraper is not None:
                scraper.stop()
            raise KeyboardInterrupt

        core.with_signals = interrupted
        """
    )
    slo_pytester.makepyfile(test_chat=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *args(fixed_server, "--slo-json=r.json", "-v"), timeout=120
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*llmslo external c2: interrupted; the 4 measured requests are kept*"]
    )
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    assert doc["complete"] is False
    assert len(doc["points"][0]["samples"]["ttft_ms"]) == 4


def test_an_endpoint_that_lists_another_model_fails_within_the_ready_timeout(
    slo_pytester, misbehaving
) -> None:
    # Before: 15 silent minutes (startup_timeout_s), though the probe knew at once.
    slo_pytester.makepyfile(test_chat=CHAT)
    url = misbehaving("models-other")
    result = slo_pytester.runpytest_subprocess(
        *args(url, "--model=bad-model", "--external-ready-timeout=1"), timeout=120
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*accepts connections but was not ready within 1 s (--external-ready-timeout); "
            "the last probe saw: GET /v1/models lists other-model; --model bad-model*"
        ]
    )


def _sim_args(*extra: str) -> list[str]:
    return [
        "-p", "no:cacheprovider", "--engine=sim", "--warmup=0", "--requests=8",
        "--isl=256", "--osl=8", "--signals-interval=0.2", "--slo-retries=0",
        "--client-max-lag=2000", "--client-max-cpu=1.5", "-v",
        *extra,
    ]  # fmt: skip


@pytest.mark.slow
def test_a_second_identical_test_on_a_warm_engine_is_warned_of(slo_pytester) -> None:
    # Two tests alike on one engine that stays up: without a reset the second finds its
    # prompts in the engine's prefix cache (the sim's counters say so).
    slo_pytester.makepyfile(test_two=TWO_ALIKE)
    result = slo_pytester.runpytest_subprocess(
        *_sim_args("--reset-cache=off", "--slo-json=r.json"), timeout=300
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*llmslo sim c2: 8/8 requests ok in * [[]warm prefix cache: *"])
    first, second = json.loads((slo_pytester.path / "r.json").read_text())["points"]
    assert first["cache"]["reset"] is False and "warning" not in first["cache"]
    assert second["cache"]["prefix_hit_rate"] > 0.5
    assert second["cache"]["expected_prefix_share"] < 0.1
    assert "warm prefix cache" in second["cache"]["warning"]
    assert any("warm prefix cache" in n for n in second["notes"])


@pytest.mark.slow
def test_a_harness_started_engine_starts_each_level_cold(slo_pytester) -> None:
    slo_pytester.makepyfile(test_two=TWO_ALIKE)
    result = slo_pytester.runpytest_subprocess(
        *_sim_args("--slo-json=r.json", "--junitxml=j.xml"), timeout=300
    )
    result.assert_outcomes(passed=2)
    assert "warm prefix cache" not in result.stdout.str()
    points = json.loads((slo_pytester.path / "r.json").read_text())["points"]
    for p in points:
        assert p["cache"]["reset"] is True and p["cache"]["how"] == "POST /reset_prefix_cache"
        assert p["cache"]["mode"] == "auto"
        assert p["cache"]["prefix_hit_rate"] < 0.1
    assert 'name="llmslo.cache_reset" value="true"' in (slo_pytester.path / "j.xml").read_text()


def test_an_echoed_key_and_a_url_password_never_reach_an_output(
    slo_pytester, misbehaving, monkeypatch
) -> None:
    key, password = "sk-live-ECHOED-0123456789", "PaSsW0rd-42"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    url = misbehaving("echo-key").replace("http://", f"http://llm:{password}@")
    slo_pytester.makepyfile(test_chat=CHAT)
    outputs = {
        "slo-json": "r.json", "junitxml": "j.xml", "slo-markdown": "r.md",
        "slo-csv": "r.csv", "slo-svg": "r.svg",
    }  # fmt: skip
    result = slo_pytester.runpytest_subprocess(
        *args(url, "--requests=8", *(f"--{k}={v}" for k, v in outputs.items()), "-v"),
        timeout=120,
    )
    result.assert_outcomes(failed=1)
    shown = {"terminal": result.stdout.str() + result.stderr.str()}
    for name in outputs.values():
        shown[name] = (slo_pytester.path / name).read_text()
    for where, text in shown.items():
        assert key not in text, f"the API key reached the {where} output"
        assert password not in text, f"the URL password reached the {where} output"
    # Still understandable: what the server said, with the secret masked.
    assert "HTTP 401: auth: invalid key Bearer ***" in shown["terminal"]
    assert "quota exceeded for Bearer ***" in shown["r.json"]
    assert "http://llm:***@127.0.0.1" in shown["r.json"]
