"""A session core driven without pytest's machinery: a ``Session`` made from settings as the
command line would give them, its tests registered as ``llmslo run`` registers them, its
engine the fixed-timing server (``tests/conftest.py``'s ``fixed_server``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo import session as core
from pytest_llmslo import settings as S

# A tiny level on a loaded, shared machine: client health must not flip these tests.
TINY = {
    "LLMSLO_ENGINE": "external",
    "LLMSLO_WARMUP": "1",
    "LLMSLO_REQUESTS": "12",
    "LLMSLO_ISL": "16",
    "LLMSLO_OSL": "8",
    "LLMSLO_CONCURRENCY": "2",
    "LLMSLO_CLIENT_MAX_LAG": "2000",
    "LLMSLO_CLIENT_MAX_CPU": "1.5",
    "LLMSLO_CLIENT_MIN_LOAD": "0.5",
}


@dataclasses.dataclass
class Heard:
    """What a session said: its lines, the final line of each level's progress, warnings."""

    said: list[str] = dataclasses.field(default_factory=list)
    closed: list[str] = dataclasses.field(default_factory=list)
    warned: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def voice(self) -> core.Voice:
        return core.Voice(
            say=self.said.append,
            progress=lambda label, _n, _w: _Line(label, self.closed),
            warn=lambda node, msg: self.warned.append((node, msg)),
        )


class _Line:
    def __init__(self, label: str, closed: list[str]) -> None:
        self.label = label
        self.closed = closed

    def __call__(self, p: Any) -> None:
        return None

    def close(self, text: str) -> None:
        self.closed.append(f"{self.label}: {text}")


@dataclasses.dataclass
class Harness:
    """One session and its tests, one per engine and level (``node``, ``TestContext``)."""

    state: core.Session
    heard: Heard
    tests: list[tuple[str, core.TestContext]]

    def handle(self, engine: str = "external") -> Any:
        return core.engine_factory(self.state).get(engine)


@pytest.fixture
def harness(tmp_path: Path, fixed_server: str) -> Iterator[Callable[..., Harness]]:
    """``harness(url=fixed_server, **env)``: a prepared session with the tiny settings and
    ``env`` (``LLMSLO_*`` values), its test ``t.py::test_chat`` registered; every engine
    it started is stopped at teardown."""
    made: list[core.Session] = []

    def make(url: str = fixed_server, **env: str) -> Harness:
        sources = S.Sources(env={**TINY, "LLMSLO_ENGINE_URL": url, **env})
        heard = Heard()
        state = core.Session(
            S.resolve_session(sources),
            sources,
            rootpath=tmp_path,
            invocation_dir=tmp_path,
            voice=heard.voice(),
        )
        made.append(state)
        core.prepare(state)
        tests = []
        ts = state.defaults
        for i, level in enumerate(ts.levels):
            node = f"t.py::test_chat[external-{level.label}]"
            ctx = core.TestContext(
                test="t.py::test_chat",
                engine="external",
                level=level,
                settings=ts,
                last_level=i == len(ts.levels) - 1,
            )
            core.add_test(state, node, ctx)
            tests.append((node, ctx))
        return Harness(state, heard, tests)

    try:
        yield make
    finally:
        for state in made:
            if state.roster.factory is not None:
                state.roster.factory.stop_all()
