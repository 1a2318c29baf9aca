"""What a scale-up asks (the ``scale_up`` setting), and the engines that cannot grow saying
so; Dynamo with a second worker under the ``dynamo`` marker (``test_engines_dynamo.py``'s
set-up: CI runs it, elsewhere it skips)."""

from __future__ import annotations

import time

import httpx
import pytest

from pytest_llmslo.engines import EngineConfig
from pytest_llmslo.engines.scaling import ScaleUp, add_capacity, parse_scale_up
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.levelpoint import LevelPoint


def test_the_setting_reads_text_and_dicts() -> None:
    assert parse_scale_up("50%") == ScaleUp(LevelPoint(fraction=0.5))
    assert parse_scale_up("at=20s,replicas=3,startup_s=1.5,window=4s,share=80%") == ScaleUp(
        LevelPoint(seconds=20.0), replicas=3, startup_s=1.5, window_s=4.0, share=0.8
    )
    assert parse_scale_up({"at": "30%", "replicas": 2}) == ScaleUp(LevelPoint(fraction=0.3), 2)
    assert parse_scale_up("off") is None and parse_scale_up(None) is None
    assert parse_scale_up("at=10s").label == "scale-up at 10s, one replica more"


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("replicas=2", "at= missing"),
        ("at=10s,when=now", "unknown key(s) when"),
        ("at=10s,replicas=1", "replicas is the total after the scale-up: >= 2"),
        ("at=10s,window=0.5s", "window must be at least 1 s"),
        ("at=10s,share=0", "share must be in"),
        ("at=later", "is not a point of a level"),
    ],
)
def test_a_bad_setting_says_what_is_wrong(bad: str, says: str) -> None:
    with pytest.raises(ValueError, match="scale_up") as info:
        parse_scale_up(bad)
    assert says in str(info.value)


class _Handle:
    def __init__(self, config: EngineConfig) -> None:
        from pytest_llmslo.engines.runtimes import runtime_of

        self.config = config
        self.units: tuple[object, ...] = ()
        self.runtime = runtime_of(config)
        self.base_url = "http://127.0.0.1:9"


def test_an_engine_that_cannot_grow_says_which_can() -> None:
    handle = _Handle(EngineConfig(kind="vllm", name="v", model="m"))
    with pytest.raises(ConfigError, match="cannot be scaled to 2 replicas by its runtime"):
        add_capacity(handle, ScaleUp(LevelPoint(seconds=1.0)))


def test_a_started_unit_that_scales_is_asked_before_the_runtime() -> None:
    asked: list[int] = []

    class Deployment:  # what KubeEngine offers: scale(replicas) and its replicas now
        replicas = 2

        def scale(self, replicas: int) -> dict[str, int]:
            asked.append(replicas)
            return {"replicas": replicas}

    handle = _Handle(EngineConfig(kind="vllm", name="v", model="m"))
    handle.units = (object(), Deployment())
    done = add_capacity(handle, ScaleUp(LevelPoint(seconds=1.0)))
    assert done == {"how": "process scale", "replicas": 3}
    assert asked == [3]


@pytest.mark.dynamo
def test_dynamo_with_a_second_worker_serves_through_both(dynamo_config: EngineConfig) -> None:
    from engines_helpers import stream_chat

    from pytest_llmslo.engines import start_engine
    from pytest_llmslo.engines.runtimes.process import ManagedProcess

    handle = start_engine(dynamo_config)
    units: list[ManagedProcess] = []
    try:
        before = _worker_instances(handle.base_url)
        assert before, "the frontend's /health lists no worker instance"
        done = add_capacity(handle, ScaleUp(LevelPoint(seconds=0.0)))
        assert done["replicas"] == 2 and done["worker"] == "mocker-agg-1"
        units = [u for u in handle.units if isinstance(u, ManagedProcess)]
        assert [u.spec.role for u in units][-1] == "mocker-agg-1"
        # The new worker registers: the frontend lists more instances within a minute.
        deadline = time.monotonic() + 60
        after = before
        while time.monotonic() < deadline and len(after) <= len(before):
            time.sleep(0.5)
            after = _worker_instances(handle.base_url)
        assert len(after) > len(before), f"no new worker instance in /health: {after}"
        assert handle.alive()
        pieces, _usage = stream_chat(handle.base_url, handle.model, max_tokens=8)
        assert "".join(pieces).strip()
    finally:
        handle.stop()
    assert units and all(not u.alive() for u in units)


def _worker_instances(base_url: str) -> set[str]:
    """The instance ids the frontend's ``/health`` lists (``instances``: every registered
    worker endpoint; Dynamo's lib/llm/src/http/service/health.rs)."""
    body = httpx.get(base_url + "/health", timeout=5).json()
    return {
        str(i.get("instance_id"))
        for i in body.get("instances") or []
        if isinstance(i, dict) and i.get("instance_id") is not None
    }
