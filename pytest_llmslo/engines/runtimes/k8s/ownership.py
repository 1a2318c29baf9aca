"""The owner of every object a session makes in a namespace: the session's ConfigMap,
applied with the first engine there, deleted with the last (what it still owns goes with
it), and the reaper of the ConfigMaps that crashed sessions left (by label and age)."""

from __future__ import annotations

import contextlib
import logging
import threading
from datetime import datetime, timezone
from typing import Any

from .deployments import LABEL_SESSION, MANAGED_BY, MANAGER, SESSION_ID, session_object
from .kubeclient import Cluster, json_of

log = logging.getLogger(__name__)


def reap_stale_owners(where: Cluster, older_than_s: float) -> list[str]:
    """Delete the ConfigMaps of other sessions in ``where.namespace`` created more than
    ``older_than_s`` ago (a crashed session's: what they own goes with them); their
    names. A session still running longer than that loses its engines: choose an age
    longer than any run."""
    found = json_of(
        where.core.list_namespaced_config_map(
            where.namespace,
            label_selector=f"{MANAGED_BY}={MANAGER},{LABEL_SESSION}",
            _preload_content=False,
        )
    )
    now = datetime.now(timezone.utc)
    removed: list[str] = []
    for cm in found.get("items") or []:
        meta = cm.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(LABEL_SESSION) == SESSION_ID or cm.get("data", {}).get("session") is None:
            continue
        created = str(meta.get("creationTimestamp") or "")
        try:
            age = (now - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()
        except ValueError:
            continue
        if age < older_than_s:
            continue
        with contextlib.suppress(Exception):
            where.core.delete_namespaced_config_map(
                meta["name"], where.namespace, propagation_policy="Background"
            )
            removed.append(meta["name"])
    if removed:
        log.warning(
            "removed %d session(s) older than %.0f s from namespace %s: %s",
            len(removed), older_than_s, where.namespace, ", ".join(removed),
        )  # fmt: skip
    return removed


class SessionOwners:
    """The session's ConfigMap in each namespace: applied with the first engine there,
    deleted with the last (counted per namespace)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Any]] = {}
        self._users: dict[str, int] = {}

    def acquire(self, where: Cluster, reap_after_s: float | None = None) -> dict[str, Any]:
        """The applied session ConfigMap of ``where.namespace`` (its uid for owners); the
        first time, after reaping sessions older than ``reap_after_s`` there."""
        with self._lock:
            ns = where.namespace
            if ns not in self._objects:
                if reap_after_s is not None:
                    with contextlib.suppress(Exception):  # best effort, never fatal
                        reap_stale_owners(where, reap_after_s)
                body = session_object(ns)
                self._objects[ns] = json_of(
                    where.core.create_namespaced_config_map(ns, body, _preload_content=False)
                )
                self._users[ns] = 0
            self._users[ns] += 1
            return self._objects[ns]

    def release(self, where: Cluster, keep: bool = False) -> None:
        """One engine fewer in ``where.namespace``; the last one deletes the ConfigMap
        (and, through the owner references, anything of the session still there)."""
        with self._lock:
            ns = where.namespace
            self._users[ns] = self._users.get(ns, 1) - 1
            if self._users[ns] > 0 or ns not in self._objects:
                return
            obj = self._objects.pop(ns)
            del self._users[ns]
        if keep:
            return
        with contextlib.suppress(Exception):
            where.core.delete_namespaced_config_map(
                obj["metadata"]["name"], ns, propagation_policy="Background"
            )


SESSION_OWNERS = SessionOwners()
