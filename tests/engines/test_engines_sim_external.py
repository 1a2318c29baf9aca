"""The sim launcher (argv, and a real start when the sim server is installed) and the
external launcher (readiness on /v1/models, model discovered)."""

from __future__ import annotations

import importlib.util
import sys

import httpx
import pytest

from pytest_llmslo.engines import EngineConfig, plan_engine, start_engine
from pytest_llmslo.engines.ports import pick_free_port, port_is_free
from pytest_llmslo.engines.runtimes import RUNTIMES
from pytest_llmslo.engines.runtimes.process import ManagedProcess
from pytest_llmslo.engines.sim import DEFAULT_PROFILE
from pytest_llmslo.engines.units import ProcessUnit
from pytest_llmslo.errors import ConfigError, EngineStartError

HAVE_SIM = importlib.util.find_spec("pytest_llmslo.sim.__main__") is not None


def test_sim_process_argv() -> None:
    cfg = EngineConfig(kind="sim", port=8123, model="m1", options={"trace_file": "/tmp/t.jsonl"})
    plan = plan_engine(cfg)
    (proc,) = plan.processes
    assert proc.argv == (
        sys.executable, "-m", "pytest_llmslo.sim",
        "--host", "127.0.0.1", "--port", "8123",
        "--profile", DEFAULT_PROFILE, "--model", "m1",
        "--trace-file", "/tmp/t.jsonl",
    )  # fmt: skip
    assert plan.base_url == "http://127.0.0.1:8123"
    assert plan.model == "m1"
    # The process runtime runs the processes, never the image form.
    assert RUNTIMES["process"].units(plan) == (proc,)


def test_sim_picks_a_free_port_and_default_model() -> None:
    plan = plan_engine(EngineConfig(kind="sim"))
    assert plan.port > 0 and port_is_free(plan.port)
    assert plan.model == "llmslo-sim"
    assert "--profile" in plan.processes[0].argv


@pytest.mark.skipif(not HAVE_SIM, reason="pytest_llmslo.sim server is not installed yet")
def test_sim_process_end_to_end() -> None:
    handle = start_engine(EngineConfig(kind="sim", startup_timeout_s=120))
    port = int(handle.base_url.rsplit(":", 1)[1])
    try:
        assert handle.alive()
        body = {
            "model": handle.model,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 8,
            "stream": True,
        }
        with httpx.stream(
            "POST", handle.base_url + "/v1/chat/completions", json=body, timeout=60
        ) as r:
            assert r.status_code == 200
            lines = [line for line in r.iter_lines() if line.startswith("data:")]
        assert lines[-1].strip() == "data: [DONE]"
        assert handle.version()
        assert handle.metadata()["kind"] == "sim"
    finally:
        handle.stop()
    assert not handle.alive()
    assert port_is_free(port)


def test_external_discovers_model_and_version(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    server = ManagedProcess(
        ProcessUnit(argv=(*fake_engine_argv, "--port", str(port), "--model", "served-x"))
    )
    try:
        handle = start_engine(
            EngineConfig(kind="external", url=f"http://127.0.0.1:{port}/v1/", startup_timeout_s=30)
        )
        assert handle.base_url == f"http://127.0.0.1:{port}"
        assert handle.model == "served-x"
        assert handle.version() == "9.9.9-fake"
        assert handle.alive()
        handle.stop()  # does nothing to a server it did not start
        assert server.alive()
    finally:
        server.stop()


def test_external_needs_url() -> None:
    with pytest.raises(ConfigError, match="needs url="):
        start_engine(EngineConfig(kind="external"))


def test_external_unreachable_times_out() -> None:
    port = pick_free_port()
    with pytest.raises(EngineStartError, match="not ready after 1 s"):
        start_engine(
            EngineConfig(kind="external", url=f"http://127.0.0.1:{port}", startup_timeout_s=1)
        )


def test_external_wrong_model_is_reported(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    server = ManagedProcess(ProcessUnit(argv=(*fake_engine_argv, "--port", str(port))))
    try:
        with pytest.raises(EngineStartError, match="lists fake-model; --model other is not one"):
            start_engine(
                EngineConfig(
                    kind="external",
                    url=f"http://127.0.0.1:{port}",
                    model="other",
                    startup_timeout_s=2,
                )
            )
    finally:
        server.stop()


def test_unknown_kind() -> None:
    with pytest.raises(ConfigError, match="Valid kinds"):
        start_engine(EngineConfig(kind="tgi"))
