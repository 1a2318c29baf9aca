"""An engine pod's cold start, in the cluster's own timestamps: seconds from the pod's
creation until it was scheduled on a node, its image pulled, its container started and
it was ready (the readiness probe passed). Read from the pod's status and its events;
a phase not reached (or not reported) is None."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

PHASES: tuple[str, ...] = ("scheduled_s", "image_pulled_s", "container_started_s", "ready_s")


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _condition(pod: Mapping[str, Any], kind: str) -> datetime | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return _time(cond.get("lastTransitionTime"))
    return None


def _started(pod: Mapping[str, Any]) -> datetime | None:
    times = [
        _time(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
        for cs in (pod.get("status") or {}).get("containerStatuses") or []
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _pulled(pod: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> datetime | None:
    name = (pod.get("metadata") or {}).get("name")
    times = [
        _time(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp"))
        for e in events
        if e.get("reason") == "Pulled" and (e.get("involvedObject") or {}).get("name") == name
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def stage(pod: Mapping[str, Any] | None) -> str:
    """Where a pod is in its start, for the progress line."""
    if pod is None:
        return "no pod yet"
    if _condition(pod, "Ready"):
        return "pod ready"
    if not _condition(pod, "PodScheduled"):
        return "waiting for a node"
    if _started(pod):
        return "container started, readiness probe not passed yet"
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return f"scheduled, {reason}"
    return "scheduled, pulling the image"


def cold_start(pod: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The pod's phases in seconds from its creation (``PHASES``), and the pod's name."""
    created = _time((pod.get("metadata") or {}).get("creationTimestamp"))
    marks = {
        "scheduled_s": _condition(pod, "PodScheduled"),
        "image_pulled_s": _pulled(pod, events),
        "container_started_s": _started(pod),
        "ready_s": _condition(pod, "Ready"),
    }
    out: dict[str, Any] = {"pod": (pod.get("metadata") or {}).get("name")}
    for phase, mark in marks.items():
        out[phase] = round((mark - created).total_seconds(), 3) if mark and created else None
    return out
