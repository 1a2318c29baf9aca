"""Secrets never leave: one test per case of a new user's tour (a server that echoes the
key)."""

from __future__ import annotations

CHAT = """
import pytest

@pytest.mark.slo(concurrency=[2])
def test_chat(slo_run):
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
