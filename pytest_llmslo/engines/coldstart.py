"""An engine's cold start: the phases of its start, each timed, whatever runs it.

A start is ready only when it answers a real request (issue 23: a probe that passes is not
an inference that succeeds), so every start the harness makes ends with the same three
phases, after the runtime's own:

=======================  ==================================================================
``image_pulled_s``       docker: the image is on the host (pulled when it was not); k8s:
                         the kubelet's ``Pulled`` event
``scheduled_s``          k8s: the pod is bound to a node (its ``PodScheduled`` condition)
``container_created_s``  docker: the container exists
``spawned_s``            process: the last process of the engine is running
``container_started_s``  docker: the last container is started; k8s: the pod's
                         containers are running
``port_open_s``          process, docker: the engine's port accepts a connection
``pod_ready_s``          k8s: the pod's ``Ready`` condition (its probes passed)
``ready_s``              the engine's readiness checks passed (``plan.ready``: the health
                         endpoint, conditions and probes)
``model_listed_s``       ``GET /v1/models`` lists the model the load will ask for
``first_token_s``        the first token of one real streamed completion arrived
=======================  ==================================================================

Each figure is in seconds from when the harness began the start, on its monotonic clock,
except the cluster's (``scheduled_s``, ``image_pulled_s``, ``container_started_s`` and
``pod_ready_s`` of the kubernetes runtime: ``k8s/phases.py``), which are the cluster's own
timestamps counted from the pod's creation (1 s resolution; the pod is created once its
objects are applied, so they trail the harness's clock by that much). A phase a runtime
does not have is left out; one it has but did not see is None. An engine the harness did
not start (``external``) has no cold start.

``StartClock`` takes the marks while a start runs; ``ColdStart`` is the record kept in the
engine's metadata, the results document (``engines.NAME.cold_start``) and JUnit.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .runtimes.runtime import ColdStartFigures, MarksPhases

__all__ = ["PHASES", "PHASE_TEXT", "ColdStart", "StartClock", "unit_marks"]

#: Every phase, in the order a start goes through them.
PHASES: tuple[str, ...] = (
    "image_pulled_s",
    "scheduled_s",
    "container_created_s",
    "spawned_s",
    "container_started_s",
    "port_open_s",
    "pod_ready_s",
    "ready_s",
    "model_listed_s",
    "first_token_s",
)

#: What the progress line says while a start waits for a phase.
PHASE_TEXT: Mapping[str, str] = {
    "image_pulled_s": "pulling the image",
    "scheduled_s": "waiting for a node",
    "container_created_s": "creating the container",
    "spawned_s": "starting the processes",
    "container_started_s": "starting the container",
    "port_open_s": "waiting for the port to open",
    "pod_ready_s": "waiting for the pod to be ready",
    "ready_s": "waiting for readiness",
    "model_listed_s": "waiting for the model to be listed",
    "first_token_s": "waiting for the first token",
}

#: The cluster's phases (``k8s/phases.py``'s names) and the names they have here.
_CLUSTER = {
    "scheduled_s": "scheduled_s",
    "image_pulled_s": "image_pulled_s",
    "container_started_s": "container_started_s",
    "ready_s": "pod_ready_s",
}


def _order(name: str) -> int:
    return PHASES.index(name) if name in PHASES else len(PHASES)


@dataclass(frozen=True, slots=True)
class ColdStart:
    """The phases of one start (module docstring), in start order, and where they come
    from: ``runtime``; ``cluster`` holds the pod's own figures on kubernetes;
    ``first_token`` how the first token was asked (endpoint, tokens)."""

    runtime: str
    phases: Mapping[str, float | None]
    cluster: Mapping[str, Any] | None = None
    first_token: Mapping[str, Any] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        """A phase's seconds (``ready_s``, ``first_token_s``), None when not there."""
        return self.phases.get(name)

    @property
    def total_s(self) -> float | None:
        """The whole cold start: until the first token."""
        return self.phases.get("first_token_s")

    def ordered(self) -> list[tuple[str, float | None]]:
        return sorted(self.phases.items(), key=lambda kv: _order(kv[0]))

    def text(self) -> str:
        """``spawned 0.02 s, port open 0.41 s, ready 0.45 s, ..., first token 0.52 s``."""
        parts = []
        for name, value in self.ordered():
            label = name.removesuffix("_s").replace("_", " ")
            parts.append(f"{label} {'n/a' if value is None else f'{value:.2f} s'}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "runtime": self.runtime,
            "phases": {k: None if v is None else round(v, 3) for k, v in self.ordered()},
        }
        if self.cluster is not None:
            out["cluster"] = dict(self.cluster)
        if self.first_token:
            out["first_token"] = dict(self.first_token)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> ColdStart | None:
        if not isinstance(d, Mapping) or not isinstance(d.get("phases"), Mapping):
            return None
        phases = {
            str(k): (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
            for k, v in d["phases"].items()
        }
        cluster = d.get("cluster")
        return cls(
            runtime=str(d.get("runtime") or ""),
            phases=phases,
            cluster=dict(cluster) if isinstance(cluster, Mapping) else None,
            first_token=dict(d.get("first_token") or {}),
        )


class StartClock:
    """The marks of one start, in seconds from ``t0`` (``time.monotonic()`` when the
    start began). ``mark`` keeps the first time a phase was reached."""

    def __init__(self, runtime: str, t0: float | None = None) -> None:
        self.runtime = runtime
        self.t0 = time.monotonic() if t0 is None else t0
        self._marks: dict[str, float | None] = {}
        self._cluster: Mapping[str, Any] | None = None
        self.first_token: dict[str, Any] = {}

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def mark(self, phase: str, at: float | None = None) -> float:
        """Phase ``phase`` reached at monotonic time ``at`` (now by default); the first
        mark of a phase stays. Returns its seconds from the start."""
        if phase not in PHASES:
            raise ValueError(f"unknown start phase {phase!r}; phases: {', '.join(PHASES)}")
        seconds = (time.monotonic() if at is None else at) - self.t0
        current = self._marks.get(phase)
        if current is None:
            self._marks[phase] = max(seconds, 0.0)
        return self._marks[phase] or 0.0

    def has(self, phase: str) -> bool:
        return self._marks.get(phase) is not None

    def expect(self, *phases: str) -> None:
        """Phases this runtime has: reported as None when never reached."""
        for p in phases:
            self._marks.setdefault(p, None)

    def from_units(self, units: Sequence[object]) -> None:
        """The marks the started units took themselves (``unit_marks``) and, for a pod,
        the cluster's figures (``cold_start()``)."""
        for phase, at in unit_marks(units).items():
            self.mark(phase, at)
        for unit in units:
            if not isinstance(unit, ColdStartFigures):
                continue
            try:
                figures = unit.cold_start()
            except Exception:  # a report detail, never a reason to fail the start
                figures = None
            if isinstance(figures, Mapping):
                self._cluster = dict(figures)
                for theirs, ours in _CLUSTER.items():
                    value = figures.get(theirs)
                    self._marks[ours] = float(value) if isinstance(value, (int, float)) else None
                return

    def record(self) -> ColdStart:
        return ColdStart(
            runtime=self.runtime,
            phases=dict(self._marks),
            cluster=self._cluster,
            first_token=dict(self.first_token),
        )


def unit_marks(units: Iterable[object]) -> dict[str, float]:
    """The phases the units saw (``marks()``: phase -> monotonic time), the latest of each
    over the units: an engine of several units has started when its last one has."""
    out: dict[str, float] = {}
    for unit in units:
        if not isinstance(unit, MarksPhases):
            continue
        try:
            seen = unit.marks()
        except Exception:
            continue
        for phase, at in (seen or {}).items():
            if phase in PHASES and isinstance(at, (int, float)):
                out[phase] = max(out.get(phase, at), float(at))
    return out
