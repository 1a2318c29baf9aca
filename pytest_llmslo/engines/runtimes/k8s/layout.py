"""What the runtime needs to know of an engine's objects, whatever they are (Deployments
and a Service, a DynamoGraphDeployment, a LeaderWorkerSet, a user's own manifests): the
objects in the order they are applied, the Service the harness reaches, which pods serve
the API and which are the engine's, the ports of the workers whose ``/metrics`` are the
engine's signals, the object whose ``Ready`` condition gates readiness, and how to scale
it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A scale: the object to patch, and the merge patch that sets ``replicas`` copies.
ScalePatch = Callable[[int], dict[str, Any]]


def selector_text(labels: Mapping[str, str]) -> str:
    """``labels`` as a label selector (``a=1,b=2``)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@dataclass(frozen=True, slots=True)
class Metrics:
    """Workers whose ``/metrics`` (on ``port``) are the engine's signals: every pod
    ``selector`` picks."""

    selector: str
    port: int
    path: str = "/metrics"


@dataclass(slots=True)
class Layout:
    """An engine's objects and how to read them (module docstring). ``service`` and
    ``port``: the Service the harness reaches and its port (``port`` None: the Service's
    first, read once applied); ``api_selector``: the pods behind it; ``pod_selectors``:
    every pod of the engine (failures, logs); ``ready_object``: a custom object whose
    ``Ready`` condition must be true before the API is reached; ``scale_object`` and
    ``scale_patch``: what ``scale(replicas)`` patches; ``replicas``: how many copies run."""

    objects: list[dict[str, Any]]
    service: str
    port: int | None
    api_selector: str
    pod_selectors: Sequence[str]
    metrics: Sequence[Metrics] = ()
    ready_object: dict[str, Any] | None = None
    scale_object: dict[str, Any] | None = None
    scale_patch: ScalePatch | None = None
    replicas: int = 1
    facts: dict[str, Any] = field(default_factory=dict)


def deployment_scale(replicas: int) -> dict[str, Any]:
    return {"spec": {"replicas": replicas}}
