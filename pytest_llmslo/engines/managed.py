"""What an engine the harness started itself offers beyond ``EngineHandle``: its runtime
and started units, its prefix-cache reset, how it ended, the ``/metrics`` URLs of its
workers. ``ManagedEngine`` is all of them (``RunningEngine``, ``running.py``).

Each capability is its own runtime-checkable Protocol, and the code that uses one asks
for that one (``isinstance(handle, ResetsCache)``) before it calls it, so a handle that
has some and not others (an external engine's, a plugin's own, a test's) is served as
far as it goes: an engine the harness did not start has no units to kill, no cache to
empty unless it says how, no exit to explain. These live apart from ``base.py`` because
they name the runtime's types (``runtimes/runtime.py``), which import ``base``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .base import EngineHandle
from .runtimes.runtime import Runtime, StartedUnit

__all__ = ["ExplainsExit", "ManagedEngine", "ResetsCache", "StartedHere", "WorkerMetrics"]


@runtime_checkable
class StartedHere(Protocol):
    """An engine started by one of the harness's runtimes: the runtime and the units it
    started, in start order (the fault injector kills one, a scale-up grows them)."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def units(self) -> Sequence[StartedUnit]: ...


@runtime_checkable
class ResetsCache(Protocol):
    """An engine that can empty its prefix cache before a level (``--reset-cache``)."""

    def reset_cache(self) -> dict[str, Any]:
        """``{"reset": bool, "how": "POST /path"}``, with ``"why"`` when it was not reset.
        Never raises."""
        ...


@runtime_checkable
class ExplainsExit(Protocol):
    """An engine that can say how it ended (``vllm exited with exit status -9 (killed by
    SIGKILL)``), for the message of a test whose engine died."""

    def exit_reason(self) -> str: ...


@runtime_checkable
class WorkerMetrics(Protocol):
    """An engine whose workers serve ``/metrics`` at URLs of their own (a Dynamo
    deployment's), scraped for its signals besides its own ``/metrics``."""

    @property
    def metrics_urls(self) -> Sequence[str]: ...


class ManagedEngine(EngineHandle, StartedHere, ResetsCache, ExplainsExit, WorkerMetrics, Protocol):
    """A ready engine the harness started itself: every capability above
    (``RunningEngine``)."""
