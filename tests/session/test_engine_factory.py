"""The session's engine factory: one start per engine, failures remembered, all stopped."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.errors import EngineStartError, EngineUnavailable
from pytest_llmslo.session.factory import EngineFactory


class FakeHandle:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.base_url = "http://127.0.0.1:1"
        self.model = "m"
        self.stopped = 0

    def version(self) -> str | None:
        return "1"

    def metadata(self) -> dict[str, Any]:
        return {}

    def alive(self) -> bool:
        return not self.stopped

    def log_tail(self, lines: int = 40) -> str:
        return ""

    def stop(self) -> None:
        self.stopped += 1


def test_starts_once_and_stops_all() -> None:
    started: list[str] = []
    handles: list[FakeHandle] = []

    def starter(cfg: EngineConfig) -> FakeHandle:
        started.append(cfg.name)
        handles.append(FakeHandle(cfg))
        return handles[-1]

    seen: list[str] = []
    f = EngineFactory(
        {"a": EngineConfig(kind="sim", name="a"), "b": EngineConfig(kind="sim", name="b")},
        starter=starter,  # type: ignore[arg-type]
        on_start=lambda name, _h: seen.append(name),
    )
    assert f.get("a") is f.get("a")
    f.get("b")
    assert started == ["a", "b"] and seen == ["a", "b"]
    f.stop_all()
    assert [h.stopped for h in handles] == [1, 1]
    assert f.running() == {}


@pytest.mark.parametrize("exc", [EngineUnavailable("no gpu"), EngineStartError("x", "tail")])
def test_failure_is_remembered(exc: Exception) -> None:
    calls = []

    def starter(cfg: EngineConfig) -> FakeHandle:
        calls.append(cfg)
        raise exc

    f = EngineFactory({"a": EngineConfig(kind="sim", name="a")}, starter=starter)  # type: ignore[arg-type]
    for _ in range(2):
        with pytest.raises(type(exc)):
            f.get("a")
    assert len(calls) == 1


def test_a_launcher_bug_becomes_a_start_error() -> None:
    def starter(cfg: EngineConfig) -> FakeHandle:
        raise RuntimeError("boom")

    f = EngineFactory({"a": EngineConfig(kind="sim", name="a")}, starter=starter)  # type: ignore[arg-type]
    with pytest.raises(EngineStartError, match="boom"):
        f.get("a")


def test_a_start_shows_what_it_waits_for_on_a_line_of_its_own() -> None:
    from pytest_llmslo.engines import startup
    from pytest_llmslo.report.progress import LevelProgress

    out: list[str] = []
    lines: list[LevelProgress] = []

    def progress(label: str, _requests: int, _warmup: int) -> LevelProgress:
        lines.append(LevelProgress(label, write=out.append, tty=True))
        return lines[-1]

    def starter(cfg: EngineConfig) -> FakeHandle:
        startup.report(startup.StartupPhase("a", "waiting for readiness: GET /health: 503", 3, 900))
        return FakeHandle(cfg)

    f = EngineFactory({"a": EngineConfig(kind="sim", name="a")}, starter=starter, progress=progress)  # type: ignore[arg-type]
    f.get("a")
    assert [p.label for p in lines] == ["engine a"]
    shown = "".join(out)
    assert "llmslo engine a: waiting for readiness: GET /health: 503; 3 s of 900 s" in shown
    assert shown.endswith("\r")  # the live line is cleared once the engine is ready
    f.stop_all()


def test_a_long_start_writes_a_line_now_and_then_in_a_log() -> None:
    from pytest_llmslo.engines.startup import StartupPhase
    from pytest_llmslo.report.progress import LevelProgress

    out: list[str] = []
    line = LevelProgress("engine vllm", write=out.append, tty=False)
    phase = StartupPhase("vllm", "pulling image vllm/vllm-openai", 1, 900, log_every_s=0.0)
    line(phase)  # the first one starts the clock: a quick start logs nothing
    assert out == []
    line(phase)
    assert out == ["  llmslo engine vllm: pulling image vllm/vllm-openai; 1 s of 900 s "
                   "(startup_timeout_s)\n"]  # fmt: skip
    quiet = LevelProgress("engine sim", write=out.append, tty=False)
    quiet(StartupPhase("sim", "waiting", 1, 900))  # every 30 s by default
    quiet(StartupPhase("sim", "waiting", 2, 900))
    quiet.done()
    assert len(out) == 1
