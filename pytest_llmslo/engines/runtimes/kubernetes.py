"""The kubernetes runtime: an engine's image units run as Deployments behind a Service in
a cluster (``k8s/``: the settings, the objects, the connection, the failure signs).

``start`` applies the session's ConfigMap once per namespace, then the engine's objects,
each owned by it; the started unit watches the engine's pods and the namespace's events,
so that a pod that cannot start ends the start at once (``alive()`` is False and
``failure()`` says why, with the events and the containers' last log lines in
``log_tail``). ``stop`` deletes the engine's objects, and the session's ConfigMap with
the last engine of the session in that namespace (what it still owns goes with it);
``kubernetes.keep_engines`` leaves everything for debugging. The harness reaches the
engine at its Service's cluster DNS name (``access = "service"``, from a pod of the
cluster) or through a port-forward of the API server to one of its pods
(``"port-forward"``, ``k8s/forward.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...errors import EngineStartError
from ...redact import redact_text, secret_values
from .. import lifecycle
from .._common import image_tag
from ..base import EngineConfig
from ..plan import LaunchPlan
from ..units import ImageUnit
from .base import Started, StartedUnit
from .k8s import failures, phases
from .k8s import session as k8s_session
from .k8s.apply import apply, delete, reason_of
from .k8s.client import Cluster, cluster, json_of, kubernetes_module
from .k8s.forward import PortForwarder
from .k8s.manifests import (
    Names,
    engine_objects,
    names_for,
    owner_reference,
    selector_of,
    service_url,
)
from .k8s.settings import KubeSettings, settings_of

#: The port an engine listens on in its pod when ``port`` is not set.
DEFAULT_PORT = 8000


_starts_lock = threading.Lock()
_starts: dict[str, int] = {}


def _next_names(config: EngineConfig) -> Names:
    with _starts_lock:
        _starts[config.display_name] = _starts.get(config.display_name, 0) + 1
        return names_for(config, _starts[config.display_name])


class KubeEngine:
    """An engine's objects in a cluster, as one started unit; ``stop()`` deletes them
    (idempotent)."""

    def __init__(
        self,
        where: Cluster,
        plan: LaunchPlan,
        objects: list[dict[str, Any]],
        names: Names,
        settings: KubeSettings,
    ) -> None:
        self.where = where
        self.names = names
        self.objects = objects
        self.settings = settings
        self.unit: ImageUnit = plan.images[0]
        self._selectors = selector_of(objects)
        self._secrets = secret_values(plan.config.env, plan.images[0].command)
        self._lock = threading.Lock()
        self._stopped = False
        self._failure: str | None = None
        self._last_tail = ""
        self.forwarder: PortForwarder | None = None
        self._cold_start: dict[str, Any] | None = None
        self._forward_lock = threading.Lock()
        self._forward_api: Any = None
        self._token = lifecycle.register(self.stop)

    # -- what the cluster says ----------------------------------------------------------

    def pods(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for selector in self._selectors:
            found = json_of(
                self.where.core.list_namespaced_pod(
                    self.where.namespace, label_selector=selector, _preload_content=False
                )
            )
            out.extend(found.get("items") or [])
        return out

    def events(self) -> list[dict[str, Any]]:
        """The namespace's events about this engine's objects (its ReplicaSets and pods
        are named after its Deployments)."""
        found = json_of(
            self.where.core.list_namespaced_event(self.where.namespace, _preload_content=False)
        )
        mine = {o["metadata"]["name"] for o in self.objects}
        return [
            e
            for e in found.get("items") or []
            if any(((e.get("involvedObject") or {}).get("name") or "").startswith(m) for m in mine)
        ]

    def failure(self) -> str | None:
        """Why the engine will not start (the first pod or event that says so), or None."""
        if self._failure is None and not self._stopped:
            with contextlib.suppress(Exception):
                pods = self.pods()
                why = next((w for p in pods if (w := failures.pod_failure(p))), None)
                if why is None:
                    why = next((w for e in self.events() if (w := failures.event_failure(e))), None)
                self._failure = why
        return self._failure

    def running_pod(self) -> str | None:
        """A running pod of the engine (a ready one first), or None."""
        pods = [
            p
            for p in self.pods()
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        pods.sort(key=lambda p: not failures.pod_ready(p))
        return pods[0]["metadata"]["name"] if pods else None

    def _open_forward(self, pod: str, port: int) -> Any:
        """A socket to ``port`` of ``pod`` through the API server's port-forward."""
        k8s = kubernetes_module()
        from kubernetes.stream import portforward

        # Its own client: the stream helper swaps the client's call_api while it runs.
        with self._forward_lock:
            if self._forward_api is None:
                self._forward_api = k8s.client.ApiClient(self.where.api.configuration)
            api = k8s.client.CoreV1Api(self._forward_api)
            forward = portforward(
                api.connect_get_namespaced_pod_portforward, pod, self.where.namespace,
                ports=str(port),
            )  # fmt: skip
        sock = forward.socket(port)
        sock.setblocking(True)
        return sock

    def forward(self, port: int) -> str:
        """The local URL of a port-forward to ``port`` of the engine's pod (one per engine)."""
        if self.forwarder is None:
            self.forwarder = PortForwarder(self._open_forward, self.running_pod, port)
        return self.forwarder.url

    def ready(self) -> bool:
        """True when a pod of the engine's first Deployment is ready."""
        return any(failures.pod_ready(p) for p in self.pods())

    # -- StartedUnit --------------------------------------------------------------------

    def alive(self) -> bool:
        return not self._stopped and self.failure() is None

    def returncode(self) -> int | None:
        with contextlib.suppress(Exception):
            return next((c for p in self.pods() if (c := failures.exit_code(p)) is not None), None)
        return None

    def log_tail(self, lines: int = 40) -> str:
        """The engine's warning events, then the last ``lines`` of each container's log
        (its previous run's too when it restarted)."""
        if self._stopped:
            return self._last_tail
        parts: list[str] = []
        with contextlib.suppress(Exception):
            warnings = [failures.event_line(e) for e in self.events() if e.get("type") == "Warning"]
            if warnings:
                parts.append("--- events ---\n" + "\n".join(warnings[-lines:]))
        with contextlib.suppress(Exception):
            for pod in self.pods():
                parts.extend(self._pod_logs(pod, lines))
        self._last_tail = redact_text("\n".join(parts), self._secrets)
        return self._last_tail

    def _pod_logs(self, pod: Mapping[str, Any], lines: int) -> list[str]:
        name = pod["metadata"]["name"]
        out = []
        for container in (pod.get("spec") or {}).get("containers") or []:
            with contextlib.suppress(Exception):
                raw = self.where.core.read_namespaced_pod_log(
                    name, self.where.namespace, container=container["name"],
                    tail_lines=lines, _preload_content=False,
                ).data.decode("utf-8", errors="replace")  # fmt: skip
                out.append(f"--- pod {name}, container {container['name']} ---\n{raw.rstrip()}")
        return out

    def waiting_for(self) -> str | None:
        """Where the engine's pod is in its start (the progress line names it)."""
        if self._stopped:
            return None
        pods = self.pods()
        return phases.stage(pods[0] if pods else None)

    def cold_start(self) -> dict[str, Any] | None:
        """The cold start of the engine's ready pod (``k8s/phases.py``), once it is ready;
        kept after the stop."""
        if self._cold_start is None and not self._stopped:
            with contextlib.suppress(Exception):
                ready = [p for p in self.pods() if failures.pod_ready(p)]
                if ready:
                    self._cold_start = phases.cold_start(ready[0], self.events())
        return self._cold_start

    def describe(self) -> dict[str, Any]:
        return {
            "role": self.unit.role,
            "name": self.names.base,
            "namespace": self.where.namespace,
            "image": self.unit.image,
            "objects": [f"{o['kind'].lower()}/{o['metadata']['name']}" for o in self.objects],
            "kept": self.settings.keep_engines,
            "access": self.settings.access_path(),
            "cold_start": self.cold_start(),
        }

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            # The last words of the engine before its pods go, and its cold start.
            with contextlib.suppress(Exception):
                self.log_tail(200)
                self.cold_start()
            self._stopped = True
        try:
            if self.forwarder is not None:
                self.forwarder.close()
            if not self.settings.keep_engines:
                for obj in reversed(self.objects):
                    with contextlib.suppress(Exception):
                        delete(self.where, obj)
        finally:
            k8s_session.SESSIONS.release(self.where, keep=self.settings.keep_engines)
            lifecycle.unregister(self._token)


def start_engine_objects(plan: LaunchPlan) -> KubeEngine:
    """Apply the session's ConfigMap (once per namespace) and the engine's objects, owned
    by it; on a failure delete what was applied and raise ``EngineStartError``."""
    settings = settings_of(plan.config)
    where = cluster(settings)
    names = _next_names(plan.config)
    objects = engine_objects(plan, settings, names, where.namespace)
    try:
        session_cm = k8s_session.SESSIONS.acquire(where, settings.reap_after_s)
    except Exception as exc:
        raise EngineStartError(
            f"{plan.config.display_name}: cannot create the session's ConfigMap in namespace "
            f"{where.namespace!r}: {reason_of(exc)}"
        ) from None
    owner = owner_reference(session_cm)
    for obj in objects:
        obj["metadata"]["ownerReferences"] = [owner]
    engine = KubeEngine(where, plan, objects, names, settings)
    try:
        for obj in objects:
            apply(where, obj)
    except BaseException as exc:
        engine.stop()
        if isinstance(exc, Exception):
            raise EngineStartError(
                f"{plan.config.display_name}: cannot apply {obj['kind']} "
                f"{obj['metadata']['name']}: {reason_of(exc)}"
            ) from None
        raise
    return engine


class KubernetesRuntime:
    """Runs ``plan.images`` as Deployments and a Service in a cluster."""

    name = "kubernetes"

    def adapt(self, config: EngineConfig) -> EngineConfig:
        """In a pod the engine listens on every interface, on ``port`` (8000 unless set)."""
        return replace(config, host="0.0.0.0", port=config.port or DEFAULT_PORT)

    def units(self, plan: LaunchPlan) -> Sequence[ImageUnit]:
        return plan.images

    def check(self, plan: LaunchPlan) -> None:
        """The client library is installed (``EngineUnavailable`` naming the extra)."""
        kubernetes_module()

    def start(self, plan: LaunchPlan) -> Started:
        if not plan.images:
            return Started()
        return Started([start_engine_objects(plan)])

    def endpoint(self, plan: LaunchPlan, units: Sequence[StartedUnit]) -> str:
        engine = units[0]
        assert isinstance(engine, KubeEngine)
        if engine.settings.access_path() == "port-forward":
            return engine.forward(plan.port)
        return service_url(engine.names, engine.where.namespace, plan.port)

    def known_version(self, plan: LaunchPlan) -> str | None:
        return image_tag(plan.images[0].image) if plan.images else None

    def fallback_version(self, plan: LaunchPlan) -> str | None:
        return None

    def ports_in_use(self, plan: LaunchPlan) -> list[int]:
        return []

    def ports_still_held(self, plan: LaunchPlan, timeout_s: float) -> list[int]:
        return []

    def reap(self) -> list[str]:
        """Nothing without a cluster to look in: ``kubernetes.reap_after_s`` reaps a
        namespace before its first engine (``k8s/session.py``)."""
        return []
