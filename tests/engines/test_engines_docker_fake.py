"""The docker launcher against a fake docker client (no daemon needed): a container is
never leaked by an interrupt between its creation and its registration for teardown, and
the first engine a process starts in docker reaps what crashed sessions left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from docker.errors import NotFound
from engines_helpers import fake_docker_plan

from pytest_llmslo.engines import lifecycle
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.launch import launch
from pytest_llmslo.engines.ports import pick_free_port
from pytest_llmslo.engines.runtimes import docker as dk
from pytest_llmslo.engines.units import ImageUnit
from pytest_llmslo.errors import EngineStartError


class FakeContainer:
    def __init__(self, daemon: FakeDaemon, name: str, labels: dict[str, str]) -> None:
        self.daemon = daemon
        self.name = name
        self.id = f"id-{name}"
        self.labels = labels
        self.status = "created"
        self.attrs: dict[str, Any] = {"State": {"Running": False, "ExitCode": 0}}

    def start(self) -> None:
        self.status = "running"

    def reload(self) -> None:
        if self.name not in self.daemon.containers:
            raise NotFound("gone")

    def logs(self, tail: int = 40) -> bytes:
        return b""

    def stop(self, timeout: int = 10) -> None:
        self.status = "exited"

    def remove(self, force: bool = False) -> None:
        if self.daemon.containers.pop(self.name, None) is None:
            raise NotFound("gone")
        self.daemon.removed.append(self.name)


class FakeContainers:
    def __init__(self, daemon: FakeDaemon) -> None:
        self.daemon = daemon

    def create(self, **kw: Any) -> FakeContainer:
        c = FakeContainer(self.daemon, kw["name"], kw.get("labels") or {})
        self.daemon.containers[c.name] = c
        self.daemon.registered_at_create.append(lifecycle.registered())
        if self.daemon.interrupt_after_create:
            # The daemon made the container; the Ctrl-C lands before create returns.
            raise KeyboardInterrupt
        return c

    def get(self, name: str) -> FakeContainer:
        try:
            return self.daemon.containers[name]
        except KeyError:
            raise NotFound(name) from None

    def list(self, all: bool = False, filters: dict | None = None) -> list[FakeContainer]:
        self.daemon.list_calls += 1
        key = (filters or {}).get("label", "")
        return [c for c in self.daemon.containers.values() if key in c.labels]


class FakeImages:
    def get(self, image: str) -> object:
        return object()


class FakeDaemon:
    """What ``docker.from_env()`` returns, with the daemon's state in plain dicts."""

    def __init__(self) -> None:
        self.containers: dict[str, FakeContainer] = {}
        self.removed: list[str] = []
        self.registered_at_create: list[int] = []
        self.interrupt_after_create = False
        self.list_calls = 0
        self.images = FakeImages()


class FakeClient:
    def __init__(self, daemon: FakeDaemon) -> None:
        self.daemon = daemon
        self.containers = FakeContainers(daemon)
        self.images = daemon.images

    def info(self) -> dict:
        return {}


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDaemon]:
    d = FakeDaemon()
    monkeypatch.setattr(dk, "docker_client", lambda: FakeClient(d))
    monkeypatch.setattr(dk, "_reaped", False)
    yield d


def _spec(name: str = "fake") -> dk.ContainerSpec:
    cfg = EngineConfig(kind="sim", name=name, runtime="docker")
    return dk.container_spec(
        cfg, ImageUnit(image="pytest-llmslo/sim:local", command=("true",), pull=False)
    )


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _left_by(daemon: FakeDaemon, name: str, **labels: str) -> FakeContainer:
    cfg = EngineConfig(kind="sim", name=name)
    all_labels = {**dk.session_labels(cfg, "engine"), **labels}
    c = FakeContainer(daemon, name, all_labels)
    daemon.containers[name] = c
    return c


def test_interrupt_right_after_create_leaves_no_container(daemon: FakeDaemon) -> None:
    daemon.interrupt_after_create = True
    before = lifecycle.tokens()
    spec = _spec()
    with pytest.raises(KeyboardInterrupt):
        dk.start_containers([spec])
    # The container the daemon made was found by its name and removed ...
    assert spec.name in daemon.removed
    assert spec.name not in daemon.containers
    # ... and its stop callback is not left registered.
    assert lifecycle.tokens() == before


def test_stop_callback_is_registered_before_the_container_exists(daemon: FakeDaemon) -> None:
    before = lifecycle.registered()
    (unit,) = dk.start_containers([_spec()])
    try:
        # When the daemon created the container, its teardown was already registered, so
        # a SIGTERM or an exit at that moment removes it (lifecycle.stop_all).
        assert daemon.registered_at_create == [before + 1]
    finally:
        unit.stop()
    assert not daemon.containers
    assert lifecycle.registered() == before


def test_first_start_reaps_containers_of_dead_sessions_once(daemon: FakeDaemon) -> None:
    dead = _left_by(
        daemon, "left-by-crash", **{dk.LABEL_SESSION: "crashed", dk.LABEL_PID: str(_dead_pid())}
    )
    live = _left_by(daemon, "live-session", **{dk.LABEL_SESSION: "other-live"})
    elsewhere = _left_by(
        daemon,
        "other-host",
        **{dk.LABEL_SESSION: "x", dk.LABEL_PID: str(_dead_pid()), dk.LABEL_HOST: "elsewhere"},
    )
    (unit,) = dk.start_containers([_spec()])
    unit.stop()
    assert dead.name in daemon.removed
    # A live session's containers and another host's are never touched.
    assert live.name in daemon.containers and elsewhere.name in daemon.containers
    assert live.labels[dk.LABEL_PID] == str(os.getpid())
    # Later starts in the same process do not list and reap again.
    calls = daemon.list_calls
    again = _left_by(
        daemon, "left-later", **{dk.LABEL_SESSION: "crashed2", dk.LABEL_PID: str(_dead_pid())}
    )
    (unit,) = dk.start_containers([_spec()])
    unit.stop()
    assert daemon.list_calls == calls
    assert again.name in daemon.containers


def test_reaping_failure_does_not_stop_the_engine(
    daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kw: Any) -> list:
        raise RuntimeError("daemon hiccup")

    client = FakeClient(daemon)
    monkeypatch.setattr(client.containers, "list", broken)
    monkeypatch.setattr(dk, "docker_client", lambda: client)
    (unit,) = dk.start_containers([_spec()])
    unit.stop()
    assert not daemon.containers


def test_launch_runs_a_plans_images_in_docker(
    daemon: FakeDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The docker runtime starts the image units (labelled, named for their role); a
    # container that exits before it is ready fails the start and is removed.
    def exits(self: FakeContainer) -> None:
        self.status = "exited"
        self.attrs = {"State": {"Running": False, "ExitCode": 3}}

    monkeypatch.setattr(FakeContainer, "start", exits)
    with pytest.raises(EngineStartError, match=r"engine exited before it was ready"):
        launch(fake_docker_plan(pick_free_port()))
    (name,) = daemon.removed
    assert name.startswith("llmslo-fake-docker-engine-") and not daemon.containers


def test_the_sims_admin_token_reaches_its_container_in_the_environment() -> None:
    # The container runs on this host: the token the harness made for the sim goes to its
    # environment, where the sim reads it; the unit's description masks it.
    from pytest_llmslo.engines import load_engine_configs, plan_engine
    from pytest_llmslo.sim.admintoken import TOKEN_ENV, session_token

    cfg = load_engine_configs({"sim": {"runtime": "docker"}})["sim"]
    plan = plan_engine(cfg)
    (unit,) = plan.images
    assert TOKEN_ENV not in unit.env and unit.secret_env == {TOKEN_ENV: session_token()}
    spec = dk.container_spec(plan.config, unit)
    assert spec.run_kwargs()["environment"][TOKEN_ENV] == session_token()
    assert session_token() not in repr(spec.describe())
