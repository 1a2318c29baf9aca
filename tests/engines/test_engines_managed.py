"""An engine's optional capabilities (``engines/managed.py``): a ``RunningEngine`` has each,
the test's ``EngineRef`` and a handle the harness did not start have none, and the code
that uses one serves a handle with some and not others as far as it goes."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_llmslo import settings as S
from pytest_llmslo.engines import external
from pytest_llmslo.engines.base import EngineConfig, EngineHandle
from pytest_llmslo.engines.managed import ExplainsExit, ResetsCache, StartedHere, WorkerMetrics
from pytest_llmslo.engines.running import RunningEngine
from pytest_llmslo.session.factory import EngineFactory, EngineRef, exit_reason
from pytest_llmslo.session.level import reset_engine_cache

CAPABILITIES = (StartedHere, ResetsCache, ExplainsExit, WorkerMetrics)


class Bare:
    """An ``EngineHandle`` and nothing more (a plugin's own handle)."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.base_url = "http://127.0.0.1:9"
        self.model = "m"

    def version(self) -> str | None:
        return None

    def metadata(self) -> dict[str, Any]:
        return {}

    def alive(self) -> bool:
        return True

    def log_tail(self, lines: int = 40) -> str:
        return ""

    def stop(self) -> None:
        pass


def _running() -> RunningEngine:
    cfg = EngineConfig(kind="external", name="e", url="http://127.0.0.1:9")
    return RunningEngine(external.plan(cfg), [], base_url="http://127.0.0.1:9")


def test_a_running_engine_has_every_capability() -> None:
    handle = _running()
    assert isinstance(handle, EngineHandle)
    assert all(isinstance(handle, c) for c in CAPABILITIES)
    assert handle.units == () and handle.metrics_urls == ()
    assert exit_reason(handle) == "exited: is running"  # no unit has exited


def test_a_bare_handle_and_the_tests_engine_ref_have_none() -> None:
    bare = Bare(EngineConfig(kind="sim", name="a"))
    factory = EngineFactory({"a": bare.config}, starter=lambda _cfg: bare)
    ref = EngineRef(factory, "a")
    for handle in (bare, ref):
        assert not any(isinstance(handle, c) for c in CAPABILITIES), handle
        assert exit_reason(handle) == "exited"
    on = S.TestSettings(reset_cache="on")
    assert reset_engine_cache(bare, on) == {
        "mode": "on",
        "reset": False,
        "why": "this engine cannot empty its cache",
    }


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_each_capability_is_asked_for_alone(mode: str) -> None:
    class Resets(Bare):
        def reset_cache(self) -> dict[str, Any]:
            return {"reset": True, "how": "POST /reset_prefix_cache"}

    class Explains(Bare):
        def exit_reason(self) -> str:
            return "vllm exit status -9 (killed by SIGKILL)"

    resets = Resets(EngineConfig(kind="vllm", name="v"))
    assert isinstance(resets, ResetsCache) and not isinstance(resets, StartedHere)
    ts = S.TestSettings(reset_cache=mode)
    assert reset_engine_cache(resets, ts) == {
        "mode": mode,
        "reset": True,
        "how": "POST /reset_prefix_cache",
    }
    explains = Explains(EngineConfig(kind="vllm", name="v"))
    assert exit_reason(explains) == "exited: vllm exit status -9 (killed by SIGKILL)"


class Unit:
    """A started unit that can tell nothing more than ``StartedUnit`` asks."""

    def alive(self) -> bool:
        return False

    def returncode(self) -> int | None:
        return -9

    def log_tail(self, lines: int = 40) -> str:
        return ""

    def stop(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"role": "worker"}


class Pod(Unit):
    """One that can tell why it failed, where it is in its start, where its workers'
    metrics are (what ``KubeEngine`` tells)."""

    def failure(self) -> str | None:
        return "ImagePullBackOff"

    def waiting_for(self) -> str | None:
        return "pulling the image"

    def metrics_urls(self) -> list[str]:
        return ["http://127.0.0.1:1/metrics"]


def test_a_started_unit_tells_what_it_can() -> None:
    from pytest_llmslo.engines.launch import _stage
    from pytest_llmslo.engines.running import exit_text

    assert exit_text(Unit()) == "exit status -9 (killed by SIGKILL)"
    assert exit_text(Pod()) == "ImagePullBackOff"
    assert _stage([Unit(), Pod()]) == " (pulling the image)" and _stage([Unit()]) == ""
    plan = external.plan(EngineConfig(kind="external", name="e", url="http://127.0.0.1:9"))
    assert RunningEngine(plan, [Unit(), Pod()]).metrics_urls == ("http://127.0.0.1:1/metrics",)
    assert RunningEngine(plan, [Unit()]).metrics_urls == plan.metrics_urls
    assert (
        exit_reason(RunningEngine(plan, [Unit()]))
        == "exited: worker exit status -9 (killed by SIGKILL)"
    )
