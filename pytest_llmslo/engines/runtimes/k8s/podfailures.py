"""What tells, from a pod's status and the namespace's events, that an engine will not
start, so that the start ends at once with the cluster's own words instead of waiting
out ``startup_timeout_s``: an image that cannot be pulled, a pod no node can take (not
enough ``nvidia.com/gpu``), a container in a crash loop or killed for memory, a
container whose start script said what it lacks (a line with ``llmslo:``, read from the
termination message: every container has ``terminationMessagePolicy:
FallbackToLogsOnError``). The last matters for a LeaderWorkerSet: its
``RecreateGroupOnPodRestart`` deletes and recreates the whole group when one container
exits, so the pods never reach ``CrashLoopBackOff`` and the group restarts for ever.

Everything here reads plain dicts (the API's JSON); nothing calls the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: A container waiting for one of these reasons will not start without a change.
FATAL_WAITING: frozenset[str] = frozenset(
    {
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
    }
)


_FATAL_PULL = ("ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName")

#: What the runtime's own start scripts print before they exit on a missing prerequisite
#: (no ``sshd`` in the image, a Ray head that never answered, ...).
SCRIPT_MARK = "llmslo:"


def _message(reason: str, message: str | None) -> str:
    return f"{reason}: {message}" if message else reason


def _statuses(pod: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    status = pod.get("status") or {}
    yield from status.get("initContainerStatuses") or []
    yield from status.get("containerStatuses") or []


def _script_line(term: Mapping[str, Any] | None) -> str | None:
    """The last ``llmslo:`` line of a failed container's termination message, if any."""
    if not term or term.get("exitCode") in (None, 0):
        return None
    lines = [ln.strip() for ln in str(term.get("message") or "")[-4096:].splitlines()]
    said = [ln for ln in lines if SCRIPT_MARK in ln]
    return said[-1][:500] if said else None


def _last_line(term: Mapping[str, Any] | None) -> str | None:
    """The last line of a terminated container's message (its log's, with
    ``FallbackToLogsOnError``), if any."""
    lines = [ln.strip() for ln in str((term or {}).get("message") or "")[-4096:].splitlines()]
    said = [ln for ln in lines if ln]
    return said[-1][:500] if said else None


def pod_failure(pod: Mapping[str, Any]) -> str | None:
    """Why ``pod`` will not become ready, or None while it may."""
    name = (pod.get("metadata") or {}).get("name", "?")
    for cs in _statuses(pod):
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            why = _message(waiting["reason"], waiting.get("message"))
            last = _last_line((cs.get("lastState") or {}).get("terminated"))
            return f"pod {name}, container {cs.get('name')}: {why}" + (
                f"; it said: {last}" if last else ""
            )
        for term in (state.get("terminated") or {}, (cs.get("lastState") or {}).get("terminated")):
            if term and term.get("reason") == "OOMKilled":
                return (
                    f"pod {name}, container {cs.get('name')}: OOMKilled (exit code "
                    f"{term.get('exitCode')}): the container ran out of memory"
                )
            said = _script_line(term)
            if said:
                return f"pod {name}, container {cs.get('name')} exited ({said})"
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
            and "PersistentVolumeClaim" not in (cond.get("message") or "")
        ):
            return f"pod {name}: FailedScheduling: {cond.get('message') or 'no node fits'}"
    if status.get("phase") == "Failed":
        why = _message(status.get("reason") or "Failed", status.get("message"))
        return f"pod {name} failed: {why}"
    return None


def event_failure(event: Mapping[str, Any]) -> str | None:
    """Why the engine will not start, when ``event`` says so; None for other events."""
    if event.get("type") != "Warning":
        return None
    reason = event.get("reason") or ""
    message = event.get("message") or ""
    fatal = (
        (reason == "FailedScheduling" and "PersistentVolumeClaim" not in message)
        or (reason == "BackOff" and ("pulling image" in message or "restarting" in message))
        or (reason == "Failed" and any(w in message for w in _FATAL_PULL))
        or reason == "OOMKilling"
    )
    if not fatal:
        return None
    obj = event.get("involvedObject") or {}
    return f"{(obj.get('kind') or 'object').lower()} {obj.get('name')}: {reason}: {message}"


def exit_code(pod: Mapping[str, Any]) -> int | None:
    """The exit code of the pod's last terminated container, if one terminated."""
    for cs in _statuses(pod):
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        for term in (state.get("terminated"), last.get("terminated")):
            if term and term.get("exitCode") is not None:
                return int(term["exitCode"])
    return None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """True when the pod's ``Ready`` condition is true."""
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def event_line(event: Mapping[str, Any]) -> str:
    """One event as a log line: ``Warning FailedScheduling pod/x: message``."""
    obj = event.get("involvedObject") or {}
    return (
        f"{event.get('type')} {event.get('reason')} {(obj.get('kind') or '').lower()}/"
        f"{obj.get('name')}: {event.get('message')}"
    )
