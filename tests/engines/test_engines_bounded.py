"""Nothing waits without a word: an external endpoint that is up but never ready fails
within ``external_ready_timeout_s`` with what the probe saw; a harness-started engine
reports what its start waits for."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_llmslo.engines import start_engine, startup
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.launch import LaunchPlan, launch
from pytest_llmslo.engines.process import ProcessSpec, pick_free_port
from pytest_llmslo.engines.readiness import http_ok
from pytest_llmslo.errors import EngineStartError


def _external(url: str, model: str = "bad-model") -> EngineConfig:
    # startup_timeout_s stays long: only the short external bound may end these waits.
    return EngineConfig(
        kind="external", url=url, model=model, startup_timeout_s=300, external_ready_timeout_s=1
    )


@pytest.mark.parametrize(
    ("mode", "seen"),
    [
        ("models-silent", "/v1/models: ReadTimeout"),
        ("models-slow", "did not end within"),
        ("models-empty", "GET /v1/models lists no model"),
        ("models-other", "GET /v1/models lists other-model; --model bad-model is not one"),
    ],
)
def test_an_endpoint_that_is_up_but_never_ready_fails_with_what_it_saw(
    misbehaving: Callable[..., str], mode: str, seen: str
) -> None:
    url = misbehaving(mode)
    with pytest.raises(EngineStartError) as info:
        start_engine(_external(url))
    msg = str(info.value)
    assert "accepts connections but was not ready within 1 s (--external-ready-timeout)" in msg
    assert seen in msg


def test_http_to_an_https_port_says_to_use_https(
    misbehaving: Callable[..., str], tmp_path: Path
) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    url = misbehaving("ok", "--tls-cert", str(cert), "--tls-key", str(key))
    plain = url.replace("https://", "http://")
    with pytest.raises(EngineStartError, match="is an https server reached over http://") as info:
        start_engine(_external(plain, model="m"))
    assert f"use --engine-url {url}" in str(info.value)


def test_a_started_engine_reports_what_its_start_waits_for(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    cfg = EngineConfig(kind="sim", name="fake", startup_timeout_s=60)
    plan = LaunchPlan(
        config=cfg,
        host="127.0.0.1",
        port=port,
        model="fake-model",
        ready=http_ok("/health"),
        processes=(
            ProcessSpec(
                argv=(*fake_engine_argv, "--port", str(port), "--ready-after", "1.0"), role="fake"
            ),
        ),
        ports=(port,),
    )
    phases: list[startup.StartupPhase] = []
    with startup.reporting(phases.append):
        handle = launch(plan)
    handle.stop()
    texts = [p.text for p in phases]
    assert texts[0].startswith("starting fake;")
    waiting = [p for p in phases if p.waiting_for.startswith("waiting for readiness: GET")]
    assert waiting, texts
    assert all(p.deadline_s == 60 and p.bound == "startup_timeout_s" for p in waiting)
    assert "of 60 s (startup_timeout_s)" in waiting[-1].text
