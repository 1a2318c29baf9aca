"""The docker launcher against a real Docker engine, with the locally built sim image
(``bash docker/build-sim-image.sh``): start, ready, a streamed request, labels, log tail,
teardown, the reaper, and SIGTERM of the harness. Skips when there is no daemon/image."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from engines_helpers import HERE, SIM_IMAGE
from engines_helpers import fake_docker_plan as _fake_plan

from pytest_llmslo.engines import EngineConfig, reap_stale_containers, start_engine
from pytest_llmslo.engines.launch import launch
from pytest_llmslo.engines.ports import pick_free_port, port_is_free
from pytest_llmslo.engines.runtimes import docker as dk
from pytest_llmslo.errors import EngineStartError, EngineUnavailable

HAVE_SIM = importlib.util.find_spec("pytest_llmslo.sim.__main__") is not None

pytestmark = pytest.mark.docker


@pytest.fixture
def no_leftovers(client: Any) -> Iterator[None]:
    yield
    left = client.containers.list(
        all=True, filters={"label": f"{dk.LABEL_SESSION}={dk.SESSION_ID}"}
    )
    for c in left:
        c.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"


def test_container_start_stream_stop(client: Any, no_leftovers: None) -> None:
    port = pick_free_port()
    secret = "hf_dockerSECRET42"
    handle = launch(_fake_plan(port, "--ready-after", "0.5", "--spawn-child", HF_TOKEN=secret))
    try:
        (unit,) = handle._units
        c = client.containers.get(unit.id)
        labels = c.labels
        assert labels[dk.LABEL_SESSION] == dk.SESSION_ID
        assert labels[dk.LABEL_PID] == str(__import__("os").getpid())
        assert labels[dk.LABEL_ENGINE] == "fake-docker"
        host_cfg = c.attrs["HostConfig"]
        assert host_cfg["NetworkMode"] == "host"
        assert host_cfg["IpcMode"] == "host"
        with httpx.stream(
            "POST", handle.base_url + "/v1/chat/completions", json={"max_tokens": 5}
        ) as r:
            data = [line for line in r.iter_lines() if line.startswith("data:")]
        assert data[-1] == "data: [DONE]" and len(data) == 7
        assert handle.version() == "9.9.9-fake"
        meta = repr(handle.metadata())
        assert secret not in meta and "***" in meta
        tail = handle.log_tail()
        assert "token=***" in tail and secret not in tail
    finally:
        handle.stop()
    assert not client.containers.list(all=True, filters={"id": unit.id})
    assert port_is_free(port)


def test_container_start_failure_has_log_tail_and_is_removed(
    client: Any, no_leftovers: None
) -> None:
    port = pick_free_port()
    with pytest.raises(EngineStartError) as info:
        launch(_fake_plan(port, "--exit-after", "0.3"))
    assert "exited before it was ready" in str(info.value)
    assert "simulated start failure" in info.value.log_tail


def test_missing_image_is_unavailable_with_hint(client: Any, no_leftovers: None) -> None:
    cfg = EngineConfig(kind="sim", runtime="docker", image="pytest-llmslo/none:nope")
    with pytest.raises(EngineUnavailable, match=r"not present locally.*build-sim-image"):
        start_engine(cfg)


def test_gpu_engine_without_gpu_is_unavailable(client: Any) -> None:
    if dk.gpu_unavailable_reason(client.info()) is None:
        pytest.skip("this machine has GPUs for docker")
    cfg = EngineConfig(kind="vllm", runtime="docker", model="facebook/opt-125m")
    with pytest.raises(EngineUnavailable, match="GPU"):
        start_engine(cfg)


@pytest.fixture
def sleeper(client: Any) -> Iterator[Callable[[dict[str, str]], Any]]:
    """Starts idle containers with the given labels; removes whatever is left of them."""
    made: list[Any] = []

    def start(labels: dict[str, str]) -> Any:
        c = client.containers.run(
            SIM_IMAGE,
            ["python3", "-c", "import time; time.sleep(600)"],
            detach=True,
            network_mode="none",
            labels=labels,
        )
        made.append(c)
        return c

    yield start
    for c in made:
        try:
            c.remove(force=True)
        except Exception:  # already reaped: what the tests want
            pass


def test_reaper_removes_containers_of_dead_sessions_only(client: Any, sleeper: Any) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cfg = EngineConfig(kind="sim", name="reap-me")
    stale_labels = {
        **dk.session_labels(cfg, "engine"),
        dk.LABEL_SESSION: "deadbeef",
        dk.LABEL_PID: str(dead.pid),
        dk.LABEL_PID_START: "",
    }
    live_labels = {**dk.session_labels(cfg, "engine"), dk.LABEL_SESSION: "other-live"}
    stale = sleeper(stale_labels)
    live = sleeper(live_labels)
    removed = reap_stale_containers()
    assert stale.name in removed
    assert live.name not in removed
    assert not client.containers.list(all=True, filters={"id": stale.id})
    assert client.containers.list(all=True, filters={"id": live.id})


def test_starting_an_engine_reaps_what_a_crashed_session_left(
    client: Any, sleeper: Any, no_leftovers: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cfg = EngineConfig(kind="sim", name="crashed")
    stale = sleeper(
        {
            **dk.session_labels(cfg, "engine"),
            dk.LABEL_SESSION: "crashed-session",
            dk.LABEL_PID: str(dead.pid),
            dk.LABEL_PID_START: "",
        },
    )
    live = sleeper({**dk.session_labels(cfg, "engine"), dk.LABEL_SESSION: "live"})
    # As in a fresh process: nothing reaped yet.
    monkeypatch.setattr(dk, "_reaped", False)
    handle = launch(_fake_plan(pick_free_port()))
    handle.stop()
    assert not client.containers.list(all=True, filters={"id": stale.id})
    assert client.containers.list(all=True, filters={"id": live.id})


def test_reused_pid_counts_as_stale() -> None:
    labels = {dk.LABEL_SESSION: "x", dk.LABEL_PID: "1", dk.LABEL_PID_START: "not-a-time"}
    assert dk.is_stale(labels)
    own = {dk.LABEL_SESSION: dk.SESSION_ID, dk.LABEL_PID: "999999999"}
    assert not dk.is_stale(own)
    other_host = {dk.LABEL_SESSION: "x", dk.LABEL_PID: "999999999", dk.LABEL_HOST: "elsewhere"}
    assert not dk.is_stale(other_host)


def test_sigterm_to_harness_removes_its_containers(client: Any, tmp_path) -> None:
    port = pick_free_port()
    script = tmp_path / "harness.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(HERE)!r})
        from engines_helpers import fake_docker_plan as _fake_plan
        from pytest_llmslo.engines.launch import launch
        from pytest_llmslo.engines.runtimes import docker as dk
        h = launch(_fake_plan({port}))
        print(dk.SESSION_ID, flush=True)
        time.sleep(600)
    """)
    )
    harness = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout is not None
        session = harness.stdout.readline().strip()
        assert session, "harness did not start its container"
        flt = {"label": f"{dk.LABEL_SESSION}={session}"}
        assert client.containers.list(all=True, filters=flt)
        harness.send_signal(signal.SIGTERM)
        assert harness.wait(timeout=60) != 0  # interrupted, as by Ctrl-C
        assert not client.containers.list(all=True, filters=flt)
    finally:
        if harness.poll() is None:
            harness.kill()
    deadline = time.monotonic() + 10
    while not port_is_free(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert port_is_free(port)


def test_a_third_signal_removes_the_containers_before_the_process_ends(
    client: Any, tmp_path
) -> None:
    """In a session (its handler installed), a third SIGTERM ends the process at once
    (status 128 + 15): its container is gone by then, without a shutdown of the session."""
    port = pick_free_port()
    script = tmp_path / "harness.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(HERE)!r})
        from engines_helpers import fake_docker_plan as _fake_plan
        from pytest_llmslo import interrupts
        from pytest_llmslo.engines.launch import launch
        from pytest_llmslo.engines.runtimes import docker as dk
        guard = interrupts.Interrupts()
        assert guard.install()
        h = launch(_fake_plan({port}))
        print(dk.SESSION_ID, flush=True)
        seen = 0
        print(seen, flush=True)
        while True:  # each signal is noted, nothing more, until the third
            time.sleep(0.01)
            if len(guard.received) != seen:
                seen = len(guard.received)
                print(seen, flush=True)
    """)
    )
    harness = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    flt: dict[str, str] = {}
    try:
        assert harness.stdout is not None
        session = harness.stdout.readline().strip()
        assert session, "harness did not start its container"
        flt = {"label": f"{dk.LABEL_SESSION}={session}"}
        assert client.containers.list(all=True, filters=flt)
        assert harness.stdout.readline().strip() == "0"
        for noted in ("1", "2"):
            harness.send_signal(signal.SIGTERM)
            assert harness.stdout.readline().strip() == noted
        harness.send_signal(signal.SIGTERM)
        assert harness.wait(timeout=30) == 128 + signal.SIGTERM
        assert not client.containers.list(all=True, filters=flt)
    finally:
        if harness.poll() is None:
            harness.kill()
            harness.wait(10)
        for c in client.containers.list(all=True, filters=flt) if flt else ():
            c.remove(force=True)


@pytest.mark.skipif(not HAVE_SIM, reason="pytest_llmslo.sim server is not installed yet")
def test_sim_image_end_to_end(client: Any, no_leftovers: None) -> None:
    handle = start_engine(EngineConfig(kind="sim", runtime="docker", startup_timeout_s=120))
    port = int(handle.base_url.rsplit(":", 1)[1])
    try:
        assert handle.metadata()["image"] == SIM_IMAGE
        body = {
            "model": handle.model,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "stream": True,
        }
        with httpx.stream(
            "POST", handle.base_url + "/v1/chat/completions", json=body, timeout=60
        ) as r:
            assert r.status_code == 200
            lines = [line for line in r.iter_lines() if line.startswith("data:")]
        assert lines[-1].strip() == "data: [DONE]"
        assert any('"content"' in line for line in lines)
        assert handle.version()
    finally:
        handle.stop()
    assert port_is_free(port)
