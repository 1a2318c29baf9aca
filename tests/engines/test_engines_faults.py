"""Faults on the real engines CI runs, through the runtime: a Dynamo mocker worker
restarted (SIGKILL of its process group, started again, registering with the frontend
again, serving), and killed (the engine is then not alive: the session reports it died);
a vLLM CPU process stalled (a request in the stall waits it out) and restarted (serving
again after its start). They run where ``bash .ci/engines.sh dynamo model`` /
``vllm model`` set the engines up, and skip elsewhere."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from pytest_llmslo.engines import EngineConfig
from pytest_llmslo.errors import EngineUnavailable
from pytest_llmslo.faults import inject, parse_faults


def _wait(pred, timeout_s: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.5)
    return False


def _instances(base_url: str) -> set[str]:
    """The worker instance ids the Dynamo frontend's ``/health`` lists."""
    try:
        body = httpx.get(base_url + "/health", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return set()
    return {
        str(i.get("instance_id"))
        for i in body.get("instances") or []
        if isinstance(i, dict) and i.get("instance_id") is not None
    }


@pytest.mark.dynamo
def test_a_dynamo_worker_restarted_registers_again_and_serves(dynamo_config: EngineConfig) -> None:
    from engines_helpers import stream_chat

    from pytest_llmslo.engines import start_engine

    handle = start_engine(dynamo_config)
    try:
        before = _instances(handle.base_url)
        assert before, "the frontend's /health lists no worker instance"
        worker = handle.units[-1]  # the default target: the worker, not the frontend
        old_pid = worker.pid
        done = inject(handle, parse_faults("restart at=0s")[0])
        assert done["how"] == "process restart" and done["pid"] == old_pid != worker.pid
        # Started again: it registers as a new instance, and the frontend serves through it.
        assert _wait(lambda: _instances(handle.base_url) - before, 90), _instances(handle.base_url)
        assert handle.alive()
        # The frontend may route to the old instance (503) until its registration lapses:
        # a restart has recovered once a streamed completion goes through, within a bound.
        served: list[str] = []

        def serves() -> bool:
            try:
                pieces, _usage = stream_chat(handle.base_url, handle.model, max_tokens=8)
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code != 503:
                    raise
                return False
            served.append("".join(pieces))
            return True

        assert _wait(serves, 60), "the frontend answered 503 for 60 s after the restart"
        assert served[-1].strip()
        killed = inject(handle, parse_faults("kill at=0s")[0])
        assert killed["signal"] == "SIGKILL"
        assert not handle.alive()  # a unit down: the session says the engine died
    finally:
        handle.stop()


@pytest.mark.vllm
@pytest.mark.slow
def test_a_vllm_process_stalled_then_restarted() -> None:
    from engines_helpers import VLLM_PYTHON, missing_module, stream_chat

    from pytest_llmslo.engines import start_engine
    from pytest_llmslo.engines.local import vllm_cpu_config

    reason = missing_module(VLLM_PYTHON, "vllm")
    if reason:
        pytest.skip(f"vLLM CPU build not available: {reason}")
    try:
        config = vllm_cpu_config()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    handle = start_engine(config)
    try:
        took: list[float] = []

        def ask() -> None:
            t0 = time.monotonic()
            stream_chat(handle.base_url, handle.model, max_tokens=4)
            took.append(time.monotonic() - t0)

        done = inject(handle, parse_faults("stall at=0s,for=3s")[0])
        assert done["signal"] == "SIGSTOP"
        t = threading.Thread(target=ask)
        t.start()
        t.join(120)
        assert took and took[0] >= 2.5, took  # it waited for the stall to end
        restarted = inject(handle, parse_faults("restart at=0s")[0])
        assert restarted["new_pid"] != restarted["pid"]
        ready = _wait(
            lambda: (
                httpx.get(handle.base_url + "/v1/models", timeout=5).status_code == 200
                if _up(handle.base_url)
                else False
            ),
            300,
        )
        assert ready, handle.log_tail()
        pieces, _usage = stream_chat(handle.base_url, handle.model, max_tokens=8)
        assert len(pieces) >= 2
    finally:
        handle.stop()


def _up(base_url: str) -> bool:
    try:
        httpx.get(base_url + "/health", timeout=2)
    except httpx.HTTPError:
        return False
    return True
