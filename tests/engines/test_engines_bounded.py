"""Nothing waits without a word: an external endpoint that is up but never ready fails
within ``external_ready_timeout_s`` with what the probe saw; a harness-started engine
reports what its start waits for; caches are emptied where the engine has a way, and
where it has none the reason is said."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from pytest_llmslo.engines import plan_engine, start_engine, startup
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.cache_reset import ANY, DYNAMO, SGLANG, VLLM, reset_cache
from pytest_llmslo.engines.launch import launch
from pytest_llmslo.engines.launchplan import LaunchPlan
from pytest_llmslo.engines.ports import pick_free_port
from pytest_llmslo.engines.readiness import http_ok
from pytest_llmslo.engines.units import ProcessUnit
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
            ProcessUnit(
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


# ------------------------------------------------------------------------ cache resets


def _client(routes: dict[str, httpx.Response]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        r = routes.get(f"{request.method} {request.url.path}")
        return r if r is not None else httpx.Response(404, json={"detail": "Not Found"})

    return httpx.Client(transport=httpx.MockTransport(handler), timeout=5.0)


def test_each_kind_names_its_reset_or_why_it_has_none() -> None:
    plans = {
        kind: plan_engine(EngineConfig(kind=kind, model="m", url="http://127.0.0.1:1"))
        for kind in ("sim", "vllm", "sglang", "dynamo", "trtllm", "external")
    }
    assert plans["sim"].cache_resets == (VLLM,)
    assert plans["vllm"].cache_resets == (VLLM,)
    # vLLM mounts /reset_prefix_cache only in its dev-server mode.
    assert plans["vllm"].processes[0].env["VLLM_SERVER_DEV_MODE"] == "1"
    assert plans["sglang"].cache_resets == (SGLANG,)
    assert plans["dynamo"].cache_resets == (DYNAMO,)
    assert plans["trtllm"].cache_resets == ()
    assert "trtllm-serve has no endpoint" in (plans["trtllm"].no_cache_reset or "")
    assert plans["external"].cache_resets == ANY
    for p in plans.values():
        for d in p.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)


def test_an_env_given_dev_mode_wins() -> None:
    p = plan_engine(EngineConfig(kind="vllm", model="m", env={"VLLM_SERVER_DEV_MODE": "0"}))
    assert p.processes[0].env["VLLM_SERVER_DEV_MODE"] == "0"


def test_reset_tries_the_endpoints_in_order_and_reads_their_answers() -> None:
    sglang = {"POST /flush_cache": httpx.Response(200, text="Cache flushed.")}
    with _client(sglang) as c:
        # An external server of unknown kind: vLLM's path is a 404, SGLang's answers.
        assert reset_cache(c, "http://e", ANY, None) == {
            "reset": True,
            "how": "POST /flush_cache",
        }
    busy = {"POST /flush_cache": httpx.Response(400, text="requests are running")}
    with _client(busy) as c:
        got = reset_cache(c, "http://e", (SGLANG,), None)
    assert got["reset"] is False and "HTTP 400 (requests are running)" in got["why"]
    sim = {"POST /reset_prefix_cache": httpx.Response(200, json={"success": False})}
    with _client(sim) as c:
        assert reset_cache(c, "http://e", (VLLM,), None)["reset"] is False
    none = json.dumps({"message": "No active worker groups found"})
    with _client({"POST /clear_kv_blocks": httpx.Response(200, text=none)}) as c:
        got = reset_cache(c, "http://e", (DYNAMO,), None)
    assert got == {
        "reset": False,
        "how": "POST /clear_kv_blocks",
        "why": "POST /clear_kv_blocks: No active worker groups found",
    }
    cleared = {"cleared_workers": [{"name": "w0"}], "failed_workers": []}
    with _client({"POST /clear_kv_blocks": httpx.Response(200, json=cleared)}) as c:
        assert reset_cache(c, "http://e", (DYNAMO,), None)["reset"] is True
    with _client({}) as c:
        got = reset_cache(c, "http://e", ANY, None)
    assert got["reset"] is False and "no cache-reset endpoint answered" in got["why"]
    with _client({}) as c:
        got = reset_cache(c, "http://e", (), "trtllm-serve has no endpoint")
    assert got == {"reset": False, "why": "trtllm-serve has no endpoint"}
