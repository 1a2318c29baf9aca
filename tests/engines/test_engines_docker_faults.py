"""Faults on the docker runtime against a real daemon: a container killed (it exits; the
engine is then not alive), restarted (the same container, serving again), paused for a
while (a request in the pause waits it out). Needs docker and the sim image
(``bash docker/build-sim-image.sh``); skips elsewhere."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from engines_helpers import fake_docker_plan

from pytest_llmslo.engines.launch import launch
from pytest_llmslo.engines.ports import pick_free_port

pytestmark = pytest.mark.docker


def _serves(url: str, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def test_a_container_killed_restarted_and_paused(client: Any) -> None:
    handle = launch(fake_docker_plan(pick_free_port(), "--ready-after", "0.2"))
    runtime = handle.runtime
    (unit,) = handle.units
    try:
        took: list[float] = []

        def ask() -> None:
            t0 = time.monotonic()
            httpx.get(handle.base_url + "/health", timeout=30)
            took.append(time.monotonic() - t0)

        paused = runtime.stall(unit, 2.0)
        assert paused["for_s"] == 2.0
        t = threading.Thread(target=ask)
        t.start()
        t.join(30)
        assert took and took[0] >= 1.5, took
        restarted = runtime.restart(unit)
        assert restarted["signal"] == "SIGKILL"
        assert _serves(handle.base_url), handle.log_tail()
        assert handle.alive()
        runtime.kill(unit)
        assert not handle.alive()
    finally:
        handle.stop()
    assert not client.containers.list(all=True, filters={"id": unit.id})
