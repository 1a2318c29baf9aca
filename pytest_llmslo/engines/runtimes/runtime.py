"""What a runtime is: the thing that starts an engine's units (local processes, docker
containers, ...) and knows where and how to reach them.

``runtimes.RUNTIMES`` maps ``config.runtime`` to one. A runtime runs one form of a plan's
units (``units(plan)``: ``plan.processes`` or ``plan.images``); ``engines.plan_engine`` hands the
config to ``adapt`` before the kind plans it; ``launch.launch`` calls
``check``, ``start`` and ``endpoint`` in that order, asks ``known_version`` and
``fallback_version`` around the engine's own version probe, checks ``ports_in_use``
before the start and ``ports_still_held`` after the stop; ``reap`` removes what crashed
sessions left behind; ``kill``, ``restart`` and ``stall`` do a fault to one started unit
in the middle of a level (``faults/injector.py``; ``UnitFaults`` is the default of a
runtime that cannot). Nothing here knows an engine kind, and no kind knows a runtime.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ...errors import ConfigError
from ..base import EngineConfig
from ..launchplan import LaunchPlan
from ..ports import port_is_free, probe_host, wait_port_free
from ..units import Unit


class StartedUnit(Protocol):
    """A started unit (a process group, a container)."""

    def alive(self) -> bool: ...
    def returncode(self) -> int | None: ...
    def log_tail(self, lines: int = 40) -> str: ...
    def stop(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...


# What some started units can tell besides: each asked for with isinstance where it is used.


@runtime_checkable
class MarksPhases(Protocol):
    """A started unit that saw phases of its own start (phase -> ``time.monotonic()``:
    ``spawned_s`` of a process group, ``container_started_s`` of a container), read into
    the engine's cold start (``coldstart.unit_marks``)."""

    def marks(self) -> Mapping[str, float]: ...


@runtime_checkable
class ColdStartFigures(Protocol):
    """A started unit whose platform timed its start (a pod's figures, ``k8s/phases.py``:
    ``KubeEngine``), None until it has (``coldstart.StartClock.from_units``)."""

    def cold_start(self) -> Mapping[str, Any] | None: ...


@runtime_checkable
class TellsStage(Protocol):
    """A started unit that says where it is in its start (``pulling the image``:
    ``KubeEngine``), shown while the harness waits for it (``launch.py``)."""

    def waiting_for(self) -> str | None: ...


@runtime_checkable
class ExplainsFailure(Protocol):
    """A started unit that knows why it will not start or serve (a pod's
    ``ImagePullBackOff``: ``KubeEngine``), said instead of its exit status
    (``running.exit_text``)."""

    def failure(self) -> str | None: ...


@runtime_checkable
class LocatesWorkerMetrics(Protocol):
    """A started unit that knows, once running, the ``/metrics`` URLs of its engine's
    workers (a cluster's worker pods: ``KubeEngine``); the engine's ``metrics_urls`` are
    then these rather than its plan's (``running.py``)."""

    def metrics_urls(self) -> Sequence[str]: ...


@runtime_checkable
class PodFaults(Protocol):
    """A started unit that kills or restarts its engine's pods by replica (an index, a pod
    name, None: the first): ``KubeEngine``. The fault injector finds it among a running
    engine's units (``faults/injector.py``)."""

    def kill(self, replica: int | str | None = None) -> dict[str, Any]: ...
    def restart(self, replica: int | str | None = None) -> dict[str, Any]: ...


@runtime_checkable
class Scalable(Protocol):
    """A started unit or a runtime that runs its engine with ``replicas`` copies
    (``KubeEngine``; a ``Runtime``, which raises ``ConfigError`` where it cannot). A
    scale-up finds it among a running engine's units, then its runtime
    (``engines/scaling.py``)."""

    def scale(self, replicas: int) -> object: ...


@dataclass(slots=True)
class Started:
    """A runtime's started units, in start order, and the directory of their full logs
    when they log to files here (named in errors, removed when the engine stops)."""

    units: list[StartedUnit] = field(default_factory=list)
    log_dir: str | None = None


class Runtime(Protocol):
    """One way to run an engine's units."""

    name: str

    def adapt(self, config: EngineConfig) -> EngineConfig:
        """``config`` as this runtime runs it, before the kind plans it (a pod listens
        on every interface at a fixed port); unchanged for most runtimes."""
        ...

    def units(self, plan: LaunchPlan) -> Sequence[Unit]:
        """The plan's units in the form this runtime runs."""
        ...

    def check(self, plan: LaunchPlan) -> None:
        """``EngineUnavailable`` when the units cannot run here (a missing package, GPU,
        daemon), before anything starts."""
        ...

    def start(self, plan: LaunchPlan) -> Started:
        """Start the units in order; if one fails, stop those already started and raise."""
        ...

    def endpoint(self, plan: LaunchPlan, units: Sequence[StartedUnit]) -> str:
        """The base URL where the harness reaches the engine's API (``plan.port`` of its
        first unit), no trailing slash and no ``/v1``."""
        ...

    def known_version(self, plan: LaunchPlan) -> str | None:
        """A version known without asking the engine (an image's tag)."""
        ...

    def fallback_version(self, plan: LaunchPlan) -> str | None:
        """Asked when the engine does not answer its version probe."""
        ...

    def ports_in_use(self, plan: LaunchPlan) -> list[int]:
        """The plan's ports already taken before the start (the start then fails)."""
        ...

    def ports_still_held(self, plan: LaunchPlan, timeout_s: float) -> list[int]:
        """The plan's ports still taken ``timeout_s`` after the stop (warned about)."""
        ...

    def reap(self) -> list[str]:
        """Remove units that sessions now gone left behind; their names."""
        ...

    def scale(self, replicas: int) -> None:
        """Run the engine with ``replicas`` copies (a scale-up in the middle of a level,
        ``engines/scaling.py``): a Deployment's replicas on kubernetes. ``ConfigError``
        where the runtime cannot (one copy per engine on this machine)."""
        ...

    def kill(self, unit: StartedUnit) -> dict[str, Any]:
        """Kill ``unit`` at once (a fault): what it held is lost (``UnitFaults``)."""
        ...

    def restart(self, unit: StartedUnit) -> dict[str, Any]:
        """Kill ``unit``, then start it again as it was (``UnitFaults``)."""
        ...

    def stall(self, unit: StartedUnit, for_s: float) -> dict[str, Any]:
        """Freeze ``unit`` for ``for_s`` seconds, then let it carry on (``UnitFaults``)."""
        ...


class UnitFaults:
    """Faults done to one started unit of a running engine (``faults/injector.py``):
    ``kill`` it at once (what it held is lost), ``restart`` it (killed, then started again
    as it was), ``stall`` it (it runs nothing for ``for_s`` seconds, then carries on). Each
    returns what was done as JSON data. This default is a runtime's that cannot: each
    raises ``ConfigError`` saying so."""

    name: str = "?"

    def _cannot(self, what: str) -> ConfigError:
        return ConfigError(
            f"runtime {self.name} cannot {what} a unit of a running engine: faults on it "
            "are not implemented (the sim's replicas, process and docker units can; drop "
            "and delay work on any engine)"
        )

    def kill(self, unit: StartedUnit) -> dict[str, Any]:
        raise self._cannot("kill")

    def restart(self, unit: StartedUnit) -> dict[str, Any]:
        raise self._cannot("restart")

    def stall(self, unit: StartedUnit, for_s: float) -> dict[str, Any]:
        raise self._cannot("stall")


class HostNetwork(UnitFaults):
    """For runtimes whose units listen on this machine's network (local processes,
    containers with host networking): the engine is reached at ``plan.base_url`` and its
    ports are checked here."""

    def adapt(self, config: EngineConfig) -> EngineConfig:
        return config

    def endpoint(self, plan: LaunchPlan, units: Sequence[StartedUnit]) -> str:
        return plan.base_url

    def ports_in_use(self, plan: LaunchPlan) -> list[int]:
        host = probe_host(plan.host)
        return [p for p in plan.ports if not port_is_free(p, host)]

    def ports_still_held(self, plan: LaunchPlan, timeout_s: float) -> list[int]:
        host = probe_host(plan.host)
        return [p for p in plan.ports if not wait_port_free(p, host, timeout_s=timeout_s)]

    def scale(self, replicas: int) -> None:
        """An engine on this machine runs as its units, once: it grows by a unit of its
        own kind (``engines/scaling.py``), not by the runtime."""
        raise ConfigError(
            "an engine on this machine (process or docker runtime) runs one copy: it cannot "
            f"be scaled to {replicas} replicas by its runtime"
        )
