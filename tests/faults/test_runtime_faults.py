"""Faults on the runtime seam: the process runtime's kill (the process group SIGKILLed),
restart (started again, serving on its port) and stall (SIGSTOP, then SIGCONT) on a real
engine process (the sim); a runtime that cannot says so; the injector picks the unit a
fault names and takes an engine of another kind to its runtime."""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.runtimes.process import ManagedProcess, ProcessRuntime
from pytest_llmslo.engines.runtimes.runtime import UnitFaults
from pytest_llmslo.engines.units import ProcessUnit
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.faults import inject, parse_faults, pick_unit


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def sim_process(tmp_path: Path):  # type: ignore[no-untyped-def]
    port = _free_port()
    unit = ProcessUnit(
        argv=(sys.executable, "-m", "pytest_llmslo.sim", "--port", str(port), "--model", "m"),
        role="sim",
    )
    proc = ManagedProcess(unit, tmp_path / "sim.log", grace_s=2)
    url = f"http://127.0.0.1:{port}"
    try:
        assert _ready(url), proc.log_tail()
        yield proc, url
    finally:
        proc.stop()
        assert not _group_alive(proc.pgid)


def test_a_kill_ends_the_process_group_at_once(sim_process) -> None:  # type: ignore[no-untyped-def]
    proc, url = sim_process
    done = ProcessRuntime().kill(proc)
    assert done["signal"] == "SIGKILL" and done["pid"] == proc.pid
    assert not proc.alive() and proc.returncode() == -signal.SIGKILL
    assert not _group_alive(proc.pgid)
    with pytest.raises(httpx.HTTPError):
        httpx.get(url + "/health", timeout=1)


def test_a_restart_serves_again_on_its_port(sim_process) -> None:  # type: ignore[no-untyped-def]
    proc, url = sim_process
    before = proc.pid
    done = ProcessRuntime().restart(proc)
    assert done["pid"] == before and done["new_pid"] == proc.pid != before
    assert not _group_alive(before)
    assert _ready(url), proc.log_tail()
    assert proc.alive()


def test_a_stall_freezes_the_process_then_lets_it_go(sim_process) -> None:  # type: ignore[no-untyped-def]
    proc, url = sim_process
    answered: list[float] = []

    def ask() -> None:
        t0 = time.monotonic()
        httpx.get(url + "/health", timeout=10)
        answered.append(time.monotonic() - t0)

    done = ProcessRuntime().stall(proc, 1.0)
    assert done["signal"] == "SIGSTOP" and done["for_s"] == 1.0
    t = threading.Thread(target=ask)
    t.start()
    t.join(10)
    # Asked while frozen: answered once it was continued, about a second later.
    assert answered and 0.8 <= answered[0] <= 5.0, answered
    assert proc.alive()


def test_a_runtime_that_cannot_says_so() -> None:
    class Pods(UnitFaults):
        name = "kubernetes"

    with pytest.raises(ConfigError, match="runtime kubernetes cannot kill a unit of a running"):
        Pods().kill(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="runtime kubernetes cannot stall"):
        Pods().stall(object(), 1.0)  # type: ignore[arg-type]


def _handle(runtime: object, *units: object, kind: str = "vllm") -> SimpleNamespace:
    config = EngineConfig(kind=kind, runtime="process", name="e")  # type: ignore[arg-type]
    return SimpleNamespace(config=config, runtime=runtime, units=units, base_url="http://x")


def test_the_injector_takes_the_unit_a_fault_names_to_the_runtime() -> None:
    calls: list[tuple[str, object]] = []

    class Recording(UnitFaults):
        name = "process"

        def kill(self, unit):  # type: ignore[no-untyped-def]
            calls.append(("kill", unit))
            return {"pid": 1}

    front = SimpleNamespace(spec=SimpleNamespace(role="frontend"))
    worker = SimpleNamespace(spec=SimpleNamespace(role="decode-worker"))
    handle = _handle(Recording(), front, worker)
    (kill,) = parse_faults("kill at=1s")
    assert inject(handle, kill) == {"how": "process kill", "unit": 1, "pid": 1}
    assert calls == [("kill", worker)]  # the last unit by default: the worker
    (named,) = parse_faults("kill at=1s,replica=frontend")
    inject(handle, named)
    assert calls[-1] == ("kill", front)
    with pytest.raises(ConfigError, match="cannot restart a unit"):
        inject(handle, parse_faults("restart at=1s")[0])
    with pytest.raises(ConfigError, match=r"no unit 'x' in the engine; its units: 0 \(frontend\)"):
        pick_unit((front,), "x")
    # A runtime without the methods at all (not yet implemented) says the same.
    with pytest.raises(ConfigError, match="runtime kube cannot kill"):
        inject(_handle(SimpleNamespace(name="kube"), worker), kill)
    external = SimpleNamespace(config=handle.config, base_url="http://x")
    with pytest.raises(ConfigError, match="was not started here"):
        inject(external, kill)
    with pytest.raises(ConfigError, match="no proxy runs in front of the engine"):
        inject(handle, parse_faults("drop at=1s,for=1s")[0])


def test_on_kubernetes_the_injector_kills_and_restarts_a_pod_through_the_started_unit() -> None:
    calls: list[tuple[str, object]] = []

    class Pods:  # what KubeEngine offers: kill/restart of a pod by index or name
        def kill(self, replica):  # type: ignore[no-untyped-def]
            calls.append(("kill", replica))
            return {"target": "pod e-0", "replicas": 2}

        def restart(self, replica):  # type: ignore[no-untyped-def]
            calls.append(("restart", replica))
            return {"target": f"pod {replica}", "replicas": 2}

    config = EngineConfig(kind="vllm", runtime="kubernetes", name="e")  # type: ignore[arg-type]
    handle = SimpleNamespace(config=config, runtime=object(), units=(Pods(),), base_url="http://x")
    done = inject(handle, parse_faults("kill at=1s,replica=0")[0])
    assert done == {"how": "kubernetes kill", "target": "pod e-0", "replicas": 2}
    inject(handle, parse_faults("restart at=1s,replica=e-abc")[0])
    inject(handle, parse_faults("kill at=1s")[0])
    assert calls == [("kill", 0), ("restart", "e-abc"), ("kill", None)]
    with pytest.raises(ConfigError, match="a pod cannot be stalled through the API"):
        inject(handle, parse_faults("stall at=1s,for=1s")[0])
    bare = SimpleNamespace(config=config, runtime=object(), units=(), base_url="http://x")
    with pytest.raises(ConfigError, match="has no started unit to kill"):
        inject(bare, parse_faults("kill at=1s")[0])
