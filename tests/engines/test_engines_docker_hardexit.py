"""A third stop signal ends the process at once: the session's containers are removed
first, bounded, through a client of its own (``dockerkill.py``). Against a fake docker
client; the real daemon's case is in ``test_engines_docker.py``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_llmslo.engines import lifecycle
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.runtimes import docker as dk
from pytest_llmslo.engines.runtimes.dockerkill import remove_now
from pytest_llmslo.engines.units import ImageUnit


class Box:
    """A fake daemon's containers, by name, with what was asked of it."""

    def __init__(self) -> None:
        self.containers: dict[str, Container] = {}
        self.removed: list[str] = []
        self.lists = 0
        self.connects = 0


class Container:
    def __init__(self, box: Box, name: str, labels: dict[str, str]) -> None:
        self.box, self.name, self.labels, self.id = box, name, labels, f"id-{name}"
        self.hang: threading.Event | None = None

    def start(self) -> None: ...

    def logs(self, tail: int = 40) -> bytes:
        return b""

    def stop(self, timeout: int = 10) -> None: ...

    def remove(self, force: bool = False) -> None:
        assert force
        if self.hang is not None:
            self.hang.wait(30)  # a daemon that does not answer
        self.box.containers.pop(self.name)
        self.box.removed.append(self.name)


class Containers:
    def __init__(self, box: Box) -> None:
        self.box = box

    def create(self, **kw: Any) -> Container:
        c = Container(self.box, kw["name"], dict(kw.get("labels") or {}))
        self.box.containers[c.name] = c
        return c

    def list(self, all: bool = False, filters: dict[str, str] | None = None) -> list[Container]:
        self.box.lists += 1
        key, _, value = (filters or {}).get("label", "").partition("=")
        return [c for c in self.box.containers.values() if c.labels.get(key) == value]


class Client:
    def __init__(self, box: Box) -> None:
        self.box = box
        self.containers = Containers(box)
        self.images = self

    def get(self, image: str) -> object:  # images.get: the image is there
        return object()

    def info(self) -> dict[str, Any]:
        return {}


@pytest.fixture
def box(monkeypatch: pytest.MonkeyPatch) -> Iterator[Box]:
    b = Box()

    def connect() -> Client:
        b.connects += 1
        return Client(b)

    monkeypatch.setattr(dk, "docker_client", lambda: Client(b))
    monkeypatch.setattr(dk, "_connect_for_kill", connect)
    monkeypatch.setattr(dk, "_reaped", True)
    yield b


def _put(box: Box, name: str, session: str) -> Container:
    c = Container(box, name, {dk.LABEL_SESSION: session})
    box.containers[name] = c
    return c


def test_removes_the_containers_of_the_label_only(box: Box) -> None:
    _put(box, "mine-1", "s1")
    _put(box, "mine-2", "s1")
    _put(box, "other", "s2")
    removed = remove_now(f"{dk.LABEL_SESSION}=s1", lambda: Client(box))
    assert sorted(removed) == ["mine-1", "mine-2"]
    assert list(box.containers) == ["other"]


def test_a_daemon_that_does_not_answer_holds_the_exit_no_longer_than_the_bound(
    box: Box,
) -> None:
    stuck = _put(box, "stuck", "s1")
    stuck.hang = threading.Event()
    _put(box, "fine", "s1")
    t0 = time.monotonic()
    try:
        removed = remove_now(f"{dk.LABEL_SESSION}=s1", lambda: Client(box), bound_s=0.5)
        took = time.monotonic() - t0
    finally:
        stuck.hang.set()
    assert removed == ["fine"]  # the others are removed all the same
    assert took < 2.0, took


def test_a_client_that_cannot_connect_is_no_error(box: Box) -> None:
    def broken() -> Client:
        raise OSError("no daemon")

    assert remove_now(f"{dk.LABEL_SESSION}=s1", broken) == []


def test_a_started_container_registers_the_hard_exit_kill(box: Box) -> None:
    """Two containers of the session, then the fast kills of a third signal: both gone,
    by one listing through a client of its own (the kill is registered once per unit and
    run once)."""
    cfg = EngineConfig(kind="sim", name="hard", runtime="docker")
    unit = ImageUnit(image="pytest-llmslo/sim:local", command=("true",), pull=False)
    specs = [dk.container_spec(cfg, unit), dk.container_spec(cfg, unit)]
    before = lifecycle.tokens()
    started = dk.start_containers(specs)
    try:
        assert len(box.containers) == 2
        lifecycle.kill_all_now()
        assert sorted(box.removed) == sorted(s.name for s in specs)
        assert box.connects == 1 and box.lists == 1
    finally:
        for c in started:
            c.stop()
    assert lifecycle.tokens() == before
