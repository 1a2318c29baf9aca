"""Engine launchers: one config in, one ready ``EngineHandle`` out.

    start_engine(config)            start the engine of ``config.kind`` and wait until ready
    load_engine_configs(source)     configs by name from TOML / pyproject / a dict
    apply_overrides(config, items)  ``key=value`` overrides (``--engine-opt``)
    resolve_engine(name, configs)   a configured name, or a bare kind with its defaults
    reap_stale_containers()         remove containers that a crashed session left behind

Each kind has a spec module (``sim``, ``external``, ``vllm``, ``sglang``, ``trtllm``,
``dynamo``) with ``plan(config) -> LaunchPlan``, which describes its units in neutral terms
(``quantities.py``: processes and images); ``launch.py`` runs plans in the runtime
``config.runtime`` names (``runtimes/``: ``process``, ``docker``, ``kubernetes``). Missing
docker/GPU/package raises ``EngineUnavailable``; an engine that never becomes ready raises
``EngineStartError`` with its log tail.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import ConfigError
from .base import ENGINE_KINDS, EngineConfig, EngineHandle
from .config import (
    CONFIG_KEYS,
    apply_overrides,
    config_from_table,
    kind_options,
    load_engine_configs,
    resolve_engine,
)
from .launch import launch
from .launchplan import LaunchPlan
from .running import RunningEngine
from .runtimes import RUNTIMES, runtime_of

__all__ = [
    "CONFIG_KEYS",
    "ENGINE_KINDS",
    "EngineConfig",
    "EngineHandle",
    "LaunchPlan",
    "RunningEngine",
    "apply_overrides",
    "config_from_table",
    "kind_options",
    "launch",
    "load_engine_configs",
    "plan_engine",
    "reap_stale_containers",
    "resolve_engine",
    "start_engine",
]


def _spec_module(kind: str) -> ModuleType:
    if kind not in ENGINE_KINDS:
        raise ConfigError(
            f"unknown engine kind {kind!r}. Valid kinds: {', '.join(sorted(ENGINE_KINDS))}"
        )
    return importlib.import_module(f"{__name__}.{kind}")


def plan_engine(config: EngineConfig) -> LaunchPlan:
    """What ``start_engine`` would run for ``config``, without running it."""
    mod = _spec_module(config.kind)
    plan: LaunchPlan = mod.plan(runtime_of(config).adapt(config))
    return plan


def start_engine(config: EngineConfig) -> EngineHandle:
    """Start the engine ``config`` describes and return it once ready.

    Raises ``EngineUnavailable`` when it cannot run here (the caller skips) and
    ``EngineStartError`` when it started but did not become ready (log tail attached).
    The caller owns the handle and must ``stop()`` it; anything left is stopped at exit.
    """
    mod = _spec_module(config.kind)
    config = runtime_of(config).adapt(config)
    start = getattr(mod, "start", None)
    if callable(start):
        handle: EngineHandle = start(config)
        return handle
    return launch(mod.plan(config))


def reap_stale_containers() -> list[str]:
    """Remove what sessions whose process is gone left in every runtime (labelled
    containers); returns their names. Does nothing (returns ``[]``) for a runtime that is
    not available (no docker daemon)."""
    return [name for runtime in RUNTIMES.values() for name in runtime.reap()]
