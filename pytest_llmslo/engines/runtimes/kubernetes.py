"""The kubernetes runtime: an engine's image units run as Deployments behind a Service in
a cluster, across nodes as a LeaderWorkerSet, Dynamo as a DynamoGraphDeployment, a
user's manifests as they are (``k8s/``: the settings, the objects and their
``layout``, the connection, the failure signs).

``start`` applies the session's ConfigMap once per namespace, then the engine's objects,
each owned by it; the started unit watches the engine's pods and the namespace's events,
so that a pod that cannot start ends the start at once (``alive()`` is False and
``failure()`` says why, with the events and the containers' last log lines in
``log_tail``). ``stop`` deletes the engine's objects, and the session's ConfigMap with
the last engine of the session in that namespace (what it still owns goes with it);
``kubernetes.keep_engines`` leaves everything for debugging. The harness reaches the
engine at its Service's cluster DNS name (``access = "service"``, from a pod of the
cluster) or through a port-forward of the API server to its pods, a ready one per
connection in turn (``"port-forward"``, ``k8s/forward.py``); the workers' ``/metrics``
(every worker pod of a Dynamo deployment) the same way.

While it runs, an engine can be scaled (``scale(replicas)``: its Deployment's, its
LeaderWorkerSet's groups, its DGD's worker replicas), and one of its pods killed
(``kill``: deleted at once, no grace period) or restarted (``restart``: deleted with its
grace period); its controller makes a new pod either way.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...errors import ConfigError, EngineStartError
from ...redact import redact_text, secret_values
from .. import lifecycle
from .._common import image_tag
from ..base import EngineConfig
from ..launchplan import LaunchPlan
from ..units import ImageUnit
from .k8s import dgd, dgd_versions, ownership, phases, podfailures
from .k8s.apply import apply, delete, get, merge_patch, reason_of, request
from .k8s.deployments import Names, names_for, owner_reference, service_url
from .k8s.forward import PortForwarder
from .k8s.kubeclient import Cluster, cluster, json_of, kubernetes_module
from .k8s.layout import Layout, selector_text
from .k8s.objects import layout_of
from .k8s.settings import KubeSettings, settings_of
from .runtime import (
    ColdStartFigures,
    ExplainsFailure,
    LocatesWorkerMetrics,
    PodFaults,
    Scalable,
    Started,
    StartedUnit,
    TellsStage,
)

#: The port an engine listens on in its pod when ``port`` is not set.
DEFAULT_PORT = 8000


_starts_lock = threading.Lock()
_starts: dict[str, int] = {}


def _next_names(config: EngineConfig) -> Names:
    with _starts_lock:
        _starts[config.display_name] = _starts.get(config.display_name, 0) + 1
        return names_for(config, _starts[config.display_name])


def condition(obj: Mapping[str, Any] | None, kind: str = "Ready") -> Mapping[str, Any] | None:
    """The ``kind`` condition of ``obj``'s status, or None."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


class KubeEngine:
    """An engine's objects in a cluster, as one started unit; ``stop()`` deletes them
    (idempotent)."""

    def __init__(
        self, where: Cluster, plan: LaunchPlan, layout: Layout, names: Names,
        settings: KubeSettings,
    ) -> None:  # fmt: skip
        self.where = where
        self.names = names
        self.layout = layout
        self.objects = layout.objects
        self.settings = settings
        self.config = plan.config
        self.unit = plan.images[0] if plan.images else None
        self.replicas = layout.replicas
        self._secrets = secret_values(
            {**plan.config.env, **(self.unit.secret_env if self.unit else {})},
            self.unit.command if self.unit else (),
        )
        self._lock = threading.Lock()
        self._stopped = False
        self._failure: str | None = None
        self._last_tail = ""
        self._gate_open = layout.ready_object is None
        self._gate_text = ""
        self._turn = itertools.count()
        self.forwarder: PortForwarder | None = None
        self._metric_forwarders: dict[str, PortForwarder] = {}
        self._cold_start: dict[str, Any] | None = None
        self._forward_lock = threading.Lock()
        self._forward_api: Any = None
        self.operations: list[dict[str, Any]] = []
        self._token = lifecycle.register(self.stop)

    # -- what the cluster says ----------------------------------------------------------

    def _list_pods(self, selector: str) -> list[dict[str, Any]]:
        found = json_of(
            self.where.core.list_namespaced_pod(
                self.where.namespace, label_selector=selector, _preload_content=False
            )
        )
        return list(found.get("items") or [])

    def pods(self) -> list[dict[str, Any]]:
        """Every pod of the engine (each once)."""
        out: dict[str, dict[str, Any]] = {}
        for selector in self.layout.pod_selectors:
            for pod in self._list_pods(selector):
                out.setdefault(pod["metadata"]["name"], pod)
        return list(out.values())

    def api_pods(self) -> list[dict[str, Any]]:
        """The pods behind the Service the harness reaches."""
        return self._list_pods(self.layout.api_selector) if self.layout.api_selector else []

    def events(self) -> list[dict[str, Any]]:
        """The namespace's events about this engine's objects (their pods, ReplicaSets and
        children are named after them)."""
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
        """Why the engine will not start or serve (the first pod or event that says so)."""
        if self._failure is None and not self._stopped:
            with contextlib.suppress(Exception):
                pods = self.pods()
                why = next((w for p in pods if (w := podfailures.pod_failure(p))), None)
                if why is None:
                    why = next(
                        (w for e in self.events() if (w := podfailures.event_failure(e))), None
                    )
                self._failure = why
        return self._failure

    def gate(self) -> bool:
        """Whether the object whose ``Ready`` condition gates the engine (a
        DynamoGraphDeployment) says ready; True when there is none. Once true, stays."""
        if not self._gate_open and self.layout.ready_object is not None:
            with contextlib.suppress(Exception):
                cond = condition(get(self.where, self.layout.ready_object))
                if cond and cond.get("status") == "True":
                    self._gate_open = True
                else:
                    why = (cond or {}).get("message") or (cond or {}).get("reason") or ""
                    kind = self.layout.ready_object["kind"]
                    self._gate_text = f"{kind} not Ready" + (f": {why}" if why else "")
        return self._gate_open

    def running_pod(self) -> str | None:
        """A running pod behind the Service, the ready ones in turn (connections spread
        over the copies of a scaled engine); None while none runs or the gate is shut."""
        if not self.gate():
            return None
        pods = [
            p
            for p in self.api_pods()
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        ready = [p for p in pods if podfailures.pod_ready(p)] or pods
        if not ready:
            return None
        ready.sort(key=lambda p: p["metadata"]["name"])
        return str(ready[next(self._turn) % len(ready)]["metadata"]["name"])

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
        """The local URL of a port-forward to ``port`` of the engine's pods (one per engine)."""
        if self.forwarder is None:
            self.forwarder = PortForwarder(
                self._open_forward, self.running_pod, port, self.waiting_for
            )
        return self.forwarder.url

    def resolve_service(self) -> None:
        """The Service's selector and port, read from the cluster (a user's manifests)."""
        if self.layout.api_selector and self.layout.port:
            return
        svc = request(
            self.where, "GET",
            f"/api/v1/namespaces/{self.where.namespace}/services/{self.layout.service}",
        )  # fmt: skip
        spec = svc.get("spec") or {}
        selector = spec.get("selector") or {}
        if not selector:
            raise EngineStartError(
                f"{self.config.display_name}: Service {self.layout.service} selects no pods "
                "(it has no selector): name a Service in front of the engine's pods"
            )
        self.layout.api_selector = selector_text(selector)
        self.layout.pod_selectors = [self.layout.api_selector]
        if not self.layout.port:
            self.layout.port = int((spec.get("ports") or [{}])[0].get("port") or DEFAULT_PORT)

    def endpoint(self) -> str:
        self.resolve_service()
        port = int(self.layout.port or DEFAULT_PORT)
        if self.settings.access_path() == "port-forward":
            return self.forward(port)
        return service_url(self.layout.service, self.where.namespace, port)

    def metrics_urls(self) -> list[str]:
        """The ``/metrics`` URLs of every worker pod (``layout.metrics``), reached the way
        the API is: a port-forward pinned to each pod, or the pod's address in the cluster."""
        urls: list[str] = []
        with contextlib.suppress(Exception):
            for m in self.layout.metrics:
                for pod in self._list_pods(m.selector):
                    name = pod["metadata"]["name"]
                    if self.settings.access_path() == "port-forward":
                        if name not in self._metric_forwarders:
                            self._metric_forwarders[name] = PortForwarder(
                                self._open_forward, _fixed_pod(name), m.port
                            )
                        urls.append(self._metric_forwarders[name].url + m.path)
                    elif ip := (pod.get("status") or {}).get("podIP"):
                        urls.append(f"http://{ip}:{m.port}{m.path}")
        return urls

    def ready(self) -> bool:
        """True when a pod behind the Service is ready (and the gate open)."""
        return self.gate() and any(podfailures.pod_ready(p) for p in self.api_pods())

    # -- operations while it runs ------------------------------------------------------

    def scale(self, replicas: int) -> dict[str, Any]:
        """Run ``replicas`` copies: the Deployment's replicas, the LeaderWorkerSet's groups,
        the DynamoGraphDeployment's (aggregated) worker replicas."""
        if replicas < 1:
            raise ConfigError(f"scale: replicas must be >= 1, got {replicas}")
        obj, patch = self.layout.scale_object, self.layout.scale_patch
        if obj is None or patch is None:
            raise ConfigError(
                f"engine {self.config.display_name!r}: its objects have no one workload "
                "to scale (a user's manifests scale when they hold exactly one Deployment)"
            )
        merge_patch(self.where, obj, patch(replicas))
        self.replicas = replicas
        return self._record("scale", f"{obj['kind']} {obj['metadata']['name']}", replicas)

    def _pick(self, replica: int | str | None) -> str:
        pods: list[str] = sorted(p["metadata"]["name"] for p in self.api_pods() or self.pods())
        if isinstance(replica, str):
            if replica not in pods:
                raise ConfigError(
                    f"engine {self.config.display_name!r}: no pod {replica!r}. "
                    f"Its pods: {', '.join(pods) or '(none)'}"
                )
            return replica
        index = replica or 0
        if not pods:
            raise ConfigError(f"engine {self.config.display_name!r} has no pod now")
        if not 0 <= index < len(pods):
            raise ConfigError(
                f"engine {self.config.display_name!r}: replica {index} is not one of its "
                f"{len(pods)} pod(s) (0 to {len(pods) - 1})"
            )
        return pods[index]

    def _delete_pod(self, pod: str, grace_s: int | None) -> None:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_s is not None:
            body["gracePeriodSeconds"] = grace_s
        request(self.where, "DELETE",
                f"/api/v1/namespaces/{self.where.namespace}/pods/{pod}", body)  # fmt: skip

    def kill(self, replica: int | str | None = None) -> dict[str, Any]:
        """Kill one pod of the engine at once (deleted with no grace period: its
        containers get SIGKILL); ``replica`` is its index among the pods behind the
        Service (by name) or its name. Its controller makes a new one."""
        pod = self._pick(replica)
        self._delete_pod(pod, 0)
        return self._record("kill", f"pod {pod}", self.replicas)

    def restart(self, replica: int | str | None = None) -> dict[str, Any]:
        """Restart one pod of the engine: deleted with its grace period (SIGTERM first), its
        controller makes a new one, which serves once ready."""
        pod = self._pick(replica)
        self._delete_pod(pod, None)
        return self._record("restart", f"pod {pod}", self.replicas)

    def _record(self, what: str, target: str, replicas: int) -> dict[str, Any]:
        import time

        done = {"how": f"kubernetes {what}", "target": target, "replicas": replicas,
                "at_unix": round(time.time(), 3)}  # fmt: skip
        self.operations.append(done)
        return done

    # -- StartedUnit --------------------------------------------------------------------

    def alive(self) -> bool:
        return not self._stopped and self.failure() is None

    def returncode(self) -> int | None:
        with contextlib.suppress(Exception):
            return next(
                (c for p in self.pods() if (c := podfailures.exit_code(p)) is not None), None
            )
        return None

    def log_tail(self, lines: int = 40) -> str:
        """The engine's warning events, then the last ``lines`` of each container's log
        (its previous run's too when it restarted)."""
        if self._stopped:
            return self._last_tail
        parts: list[str] = []
        with contextlib.suppress(Exception):
            warnings = [
                podfailures.event_line(e) for e in self.events() if e.get("type") == "Warning"
            ]
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
        if not self.gate():
            return self._gate_text or "waiting for the Ready condition"
        pods = self.api_pods() or self.pods()
        return phases.stage(pods[0] if pods else None)

    def cold_start(self) -> dict[str, Any] | None:
        """The cold start of the engine's ready pod (``k8s/phases.py``), once it is ready;
        kept after the stop."""
        if self._cold_start is None and not self._stopped:
            with contextlib.suppress(Exception):
                ready = [p for p in self.api_pods() if podfailures.pod_ready(p)]
                if ready:
                    self._cold_start = phases.cold_start(ready[0], self.events())
        return self._cold_start

    def describe(self) -> dict[str, Any]:
        out = {
            "role": self.unit.role if self.unit else self.config.kind,
            "name": self.names.base,
            "namespace": self.where.namespace,
            "image": self.unit.image if self.unit else None,
            "objects": [f"{o['kind'].lower()}/{o['metadata']['name']}" for o in self.objects],
            "service": self.layout.service,
            "kept": self.settings.keep_engines,
            "access": self.settings.access_path(),
            "cold_start": self.cold_start(),
            **self.layout.facts,
        }
        if self.operations:
            out["operations"] = list(self.operations)
        return out

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
            for fwd in [self.forwarder, *self._metric_forwarders.values()]:
                if fwd is not None:
                    fwd.close()
            if not self.settings.keep_engines:
                for obj in reversed(self.objects):
                    with contextlib.suppress(Exception):
                        delete(self.where, obj)
        finally:
            ownership.SESSION_OWNERS.release(self.where, keep=self.settings.keep_engines)
            lifecycle.unregister(self._token)


def start_engine_objects(plan: LaunchPlan) -> KubeEngine:
    """Apply the session's ConfigMap (once per namespace) and the engine's objects, owned
    by it; on a failure delete what was applied and raise ``EngineStartError``."""
    settings = settings_of(plan.config)
    where = cluster(settings)
    if plan.config.kind == "dynamo":
        settings = dgd_versions.resolved(settings, where)
    names = _next_names(plan.config)
    layout = layout_of(plan, settings, names, where.namespace)
    try:
        session_cm = ownership.SESSION_OWNERS.acquire(where, settings.reap_after_s)
    except Exception as exc:
        raise EngineStartError(
            f"{plan.config.display_name}: cannot create the session's ConfigMap in namespace "
            f"{where.namespace!r}: {reason_of(exc)}"
        ) from None
    owner = owner_reference(session_cm)
    for obj in layout.objects:
        obj["metadata"]["ownerReferences"] = [owner]
    engine = KubeEngine(where, plan, layout, names, settings)
    try:
        for obj in layout.objects:
            apply(where, obj)
    except BaseException as exc:
        engine.stop()
        if isinstance(exc, Exception):
            raise EngineStartError(
                f"{plan.config.display_name}: cannot apply {obj['kind']} "
                f"{obj['metadata']['name']}{_unserved(obj, exc)}: {reason_of(exc)}"
            ) from None
        raise
    return engine


def _unserved(obj: dict[str, Any], exc: BaseException) -> str:
    """What a 404 on creating a custom resource means: its API is not served."""
    version = str(obj.get("apiVersion", ""))
    if getattr(exc, "status", None) != 404 or "." not in version.split("/")[0]:
        return ""
    return (
        f" (the cluster does not serve {version} {obj['kind']}: is its controller "
        "installed, in that version? `llmslo check --engine NAME` lists what is missing)"
    )


# What a KubeEngine tells and does besides StartedUnit (mypy checks it against each).
_KUBE_ENGINE: tuple[
    type[StartedUnit],
    type[TellsStage],
    type[ExplainsFailure],
    type[ColdStartFigures],
    type[LocatesWorkerMetrics],
    type[PodFaults],
    type[Scalable],
] = (KubeEngine,) * 7


class KubernetesRuntime:
    """Runs ``plan.images`` as Deployments and a Service in a cluster."""

    name = "kubernetes"

    def adapt(self, config: EngineConfig) -> EngineConfig:
        """In a pod the engine listens on every interface, on ``port`` (8000 unless set;
        a user's manifests: the Service's port unless set); Dynamo with its cluster
        defaults (``k8s/dgd.py``)."""
        if config.kind == "manifests":
            return replace(config, host="0.0.0.0")
        if config.kind == "dynamo":
            config = dgd.adapt(config)
        return replace(config, host="0.0.0.0", port=config.port or DEFAULT_PORT)

    def units(self, plan: LaunchPlan) -> Sequence[ImageUnit]:
        return plan.images

    def check(self, plan: LaunchPlan) -> None:
        """The client library is installed (``EngineUnavailable`` naming the extra)."""
        kubernetes_module()

    def start(self, plan: LaunchPlan) -> Started:
        if not plan.images and plan.config.kind != "manifests":
            return Started()
        return Started([start_engine_objects(plan)])

    def endpoint(self, plan: LaunchPlan, units: Sequence[StartedUnit]) -> str:
        engine = units[0]
        assert isinstance(engine, KubeEngine)
        try:
            return engine.endpoint()
        except EngineStartError:
            raise
        except Exception as exc:
            raise EngineStartError(
                f"{plan.config.display_name}: cannot read Service {engine.layout.service}: "
                f"{reason_of(exc)}"
            ) from None

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
        namespace before its first engine (``k8s/ownership.py``)."""
        return []

    # One runtime serves every engine: a running engine is scaled, and its pods killed or
    # restarted, by its started unit (``KubeEngine``), which callers find among the
    # handle's units before the runtime (``engines/scaling.py``).

    def scale(self, replicas: int) -> None:
        raise ConfigError(_BY_UNIT.format(what=f"scale to {replicas}"))

    def kill(self, unit: StartedUnit) -> dict[str, Any]:
        raise ConfigError(_BY_UNIT.format(what="kill"))

    def restart(self, unit: StartedUnit) -> dict[str, Any]:
        raise ConfigError(_BY_UNIT.format(what="restart"))

    def stall(self, unit: StartedUnit, for_s: float) -> dict[str, Any]:
        raise ConfigError(_BY_UNIT.format(what="stall"))


def _fixed_pod(name: str) -> Callable[[], str | None]:
    """A pod picker that always picks ``name`` (one metrics forwarder per pod)."""
    return lambda: name


_BY_UNIT = (
    "{what}: the kubernetes runtime acts on a running engine through its started unit "
    "(KubeEngine.scale, kill, restart: the handle's units), not the runtime"
)
