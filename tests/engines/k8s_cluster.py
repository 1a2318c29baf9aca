"""A Kubernetes API served over real HTTP on loopback (kmock's emulator, in a thread of
its own), and the cluster's controllers played by the test: for each Deployment the
runtime applies, :class:`Controller` makes its pod and then does what the test asks
(marks it ready, or makes it fail with the status and event a real cluster shows).

The emulator stores objects as given; here it also assigns a ``uid`` on creation, as the
API server does (the runtime's owner references need it), and serves pod logs."""

from __future__ import annotations

import asyncio
import copy
import datetime
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

CONTROLLER = "test-controllers"
LOG_LINES = "loading weights\nshard 1/1 loaded\n"

RESOURCES = (
    "v1/configmaps", "v1/pods", "v1/services", "v1/events", "v1/secrets", "apps/v1/deployments",
    "apps/v1/statefulsets",
    "nvidia.com/v1alpha1/dynamographdeployments", "nvidia.com/v1beta1/dynamographdeployments",
    "leaderworkerset.x-k8s.io/v1/leaderworkersets",
)  # fmt: skip


async def _port_forward(raw: Any, target_port: int) -> Any:
    """The API server's side of a port-forward (the ``v4.channel.k8s.io`` websocket
    protocol: two channels per port, each opened with a frame of the port number, data
    frames prefixed with their channel), carried to ``target_port`` on loopback (where
    the test's sim process stands for the pod)."""
    import aiohttp
    import aiohttp.web

    ws = aiohttp.web.WebSocketResponse(protocols=("v4.channel.k8s.io",), compress=False)
    await ws.prepare(raw)
    port = int(raw.query["ports"])
    await ws.send_bytes(b"\x00" + port.to_bytes(2, "little"))
    await ws.send_bytes(b"\x01" + port.to_bytes(2, "little"))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", target_port)
    except OSError as exc:
        # As the kubelet does (kubernetes/kubernetes at 0d1821e, pkg/kubelet/cri/
        # streaming/portforward/websocket.go, portForward): the error on the port's error
        # channel, then the streams and the connection closed; never an HTTP answer on
        # the upgraded socket.
        pod = raw.path.split("/")[-2]
        why = f"error forwarding port {port} to pod {pod}, uid : {exc}"
        await ws.send_bytes(b"\x01" + why.encode())
        await ws.close()
        return ws

    async def upstream() -> None:
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY and msg.data[:1] == b"\x00":
                writer.write(msg.data[1:])
                await writer.drain()
        writer.close()

    async def downstream() -> None:
        while data := await reader.read(65536):
            await ws.send_bytes(b"\x00" + data)
        await ws.close()

    await asyncio.gather(upstream(), downstream(), return_exceptions=True)
    return ws


def _emulator(kmock: Any, box: dict[str, Any]) -> Any:
    class Emulator(kmock.KubernetesEmulator):  # type: ignore[misc, name-defined]
        """Assigns each created object a ``uid`` and a ``creationTimestamp`` (unless the test
        gave one), as the API server does, and serves the
        pods' port-forward to ``box["forward_to"]``."""

        async def _handle(self, request: Any) -> Any:
            raw = request._raw_request
            if raw is not None and raw.path.endswith("/portforward"):
                return await _port_forward(raw, box["forward_to"])
            # A test's own answers for what the emulator does not play (discovery,
            # access reviews, cluster-scoped reads): (status, JSON body) or None.
            answer = box.get("answer")
            said = answer(request.method, str(request.url.path), request.data) if answer else None
            if said is not None:
                import aiohttp.web

                return aiohttp.web.json_response(said[1], status=said[0])
            data = request.data
            if request.action == kmock.action.CREATE and isinstance(data, dict):
                meta = data.setdefault("metadata", {})
                meta["uid"] = str(uuid.uuid4())
                now = datetime.datetime.now(datetime.timezone.utc)
                meta.setdefault("creationTimestamp", now.strftime("%Y-%m-%dT%H:%M:%SZ"))
            return await super()._handle(request)

        async def _serve_list(self, request: Any) -> Any:
            """The listing, filtered by an equality ``labelSelector`` as the API server
            filters it (the emulator lists everything)."""
            payload = await super()._serve_list(request)
            raw = request._raw_request
            wanted = raw.query.get("labelSelector") if raw is not None else None
            if not wanted:
                return payload
            sets = {m[0]: set(v.strip() for v in m[1].split(","))
                    for m in re.findall(r"([\w./-]+) in \(([^)]*)\)", wanted)}  # fmt: skip
            rest = re.sub(r"[\w./-]+ in \([^)]*\)", "", wanted)
            pairs = [p.split("=", 1) for p in rest.split(",") if "=" in p]
            keys = [p for p in rest.split(",") if p and "=" not in p]

            def matches(obj: Mapping[str, Any]) -> bool:
                have = (obj.get("metadata") or {}).get("labels") or {}
                return (
                    all(have.get(k) == v for k, v in pairs)
                    and all(k in have for k in keys)
                    and all(have.get(k) in vs for k, vs in sets.items())
                )

            return {**payload, "items": [o for o in payload["items"] if matches(o)]}

    return Emulator


class FakeCluster:
    """The emulator's URL (``url``), a kubeconfig pointing at it (``kubeconfig``), and
    plain HTTP access to its objects for the test's controllers."""

    def __init__(self, url: str, kubeconfig: Path, handler: Any, box: dict[str, Any]) -> None:
        self.url = url
        self._box = box
        self.kubeconfig = kubeconfig
        self.handler = handler
        # Named, so that the controllers' requests are told from the runtime's.
        self.http = httpx.Client(
            base_url=url, timeout=5.0, trust_env=False, headers={"User-Agent": CONTROLLER}
        )

    def items(self, path: str) -> list[dict[str, Any]]:
        return list(self.http.get(path).json().get("items") or [])

    def deployments(self, ns: str) -> list[dict[str, Any]]:
        return self.items(f"/apis/apps/v1/namespaces/{ns}/deployments")

    def dgds(self, ns: str) -> list[dict[str, Any]]:
        """The DynamoGraphDeployments of ``ns``, in either version the operator serves."""
        return [
            {"apiVersion": f"nvidia.com/{v}", **dgd}
            for v in ("v1alpha1", "v1beta1")
            for dgd in self.items(f"/apis/nvidia.com/{v}/namespaces/{ns}/dynamographdeployments")
        ]

    def pods(self, ns: str) -> list[dict[str, Any]]:
        return self.items(f"/api/v1/namespaces/{ns}/pods")

    def answer_with(self, answer: Callable[[str, str, Any], tuple[int, Any] | None]) -> None:
        """Answer the requests ``answer`` knows (``(status, body)``; None: the emulator's)."""
        self._box["answer"] = answer

    def forward_to(self, port: int) -> None:
        """Serve every pod's port-forward from ``port`` on loopback."""
        self._box["forward_to"] = port

    def requests(self, method: str) -> list[str]:
        """The paths the runtime sent ``method`` to, in order."""
        return [str(r.url.path) for r in self.handler[method.lower()]]


@contextmanager
def fake_cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    """A running emulator and a kubeconfig for it; stopped on exit."""
    kmock = __import__("kmock")
    started = threading.Event()
    stop = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        async with _emulator(kmock, box)() as handler, kmock.Server(handler):
            for res in RESOURCES:
                handler.resources[res] = {}
            handler["get", kmock.resource("v1/pods"), kmock.subresource("log")] << (
                LOG_LINES.encode()
            )
            box["handler"] = handler
            started.set()
            while not stop.is_set():
                await asyncio.sleep(0.02)

    thread = threading.Thread(target=lambda: asyncio.run(serve()), daemon=True)
    thread.start()
    assert started.wait(10), "kmock did not start"
    handler = box["handler"]
    url = str(handler.url).rstrip("/")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: fake, user: {token: fake-token}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: bench}}]\n"
    )
    cluster = FakeCluster(url, kubeconfig, handler, box)
    try:
        yield cluster
    finally:
        cluster.http.close()
        stop.set()
        thread.join(10)


Behaviour = Callable[[FakeCluster, str, dict[str, Any]], None]
_C = TypeVar("_C", bound="Controller")


def pod_of(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a ReplicaSet of ``deployment`` would make (named as Kubernetes names it)."""
    template = deployment["spec"]["template"]
    name = deployment["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-7d4b9c6f5d-x2x9z",
            "namespace": deployment["metadata"]["namespace"],
            "labels": dict(template["metadata"]["labels"]),
        },
        "spec": template["spec"],
        "status": {"phase": "Pending"},
    }


def patch_status(cluster: FakeCluster, ns: str, pod: str, status: dict[str, Any]) -> None:
    cluster.http.patch(
        f"/api/v1/namespaces/{ns}/pods/{pod}/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


def emit_event(cluster: FakeCluster, ns: str, pod: str, reason: str, message: str) -> None:
    cluster.http.post(
        f"/api/v1/namespaces/{ns}/events",
        json={
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{pod}.{uuid.uuid4().hex[:8]}", "namespace": ns},
            "type": "Warning",
            "reason": reason,
            "message": message,
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns},
        },
    ).raise_for_status()


def ready(cluster: FakeCluster, ns: str, pod: dict[str, Any]) -> None:
    """The pod as the scheduler and kubelet leave it once ready, with their timestamps
    (created at :00: scheduled 1 s later, image pulled at 3 s, started at 4 s, ready at
    7 s) and the image's ``Pulled`` event."""
    container = pod["spec"]["containers"][0]["name"]
    name = pod["metadata"]["name"]
    cluster.http.post(
        f"/api/v1/namespaces/{ns}/events",
        json={
            "apiVersion": "v1", "kind": "Event", "type": "Normal", "reason": "Pulled",
            "metadata": {"name": f"{name}.pulled", "namespace": ns},
            "message": "Successfully pulled image", "lastTimestamp": "2026-01-01T00:00:03Z",
            "involvedObject": {"kind": "Pod", "name": name, "namespace": ns},
        },
    ).raise_for_status()  # fmt: skip
    cluster.http.patch(
        f"/api/v1/namespaces/{ns}/pods/{name}",
        json={"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()
    patch_status(
        cluster,
        ns,
        pod["metadata"]["name"],
        {
            "phase": "Running",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2026-01-01T00:00:01Z",
                },
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:07Z"},
            ],
            "containerStatuses": [
                {
                    "name": container,
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:04Z"}},
                }
            ],
        },
    )


class Controller:
    """Makes a pod for each new Deployment in ``ns`` and hands it to ``behaviour``."""

    def __init__(self, cluster: FakeCluster, ns: str, behaviour: Behaviour) -> None:
        self.cluster = cluster
        self.ns = ns
        self.behaviour = behaviour
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for dep in self.cluster.deployments(self.ns):
                    name = dep["metadata"]["name"]
                    if name in self.seen:
                        continue
                    self.seen.add(name)
                    pod = pod_of(dep)
                    self.cluster.http.post(
                        f"/api/v1/namespaces/{self.ns}/pods", json=pod
                    ).raise_for_status()
                    self.behaviour(self.cluster, self.ns, pod)
            except httpx.HTTPError:
                pass
            time.sleep(0.05)

    def __enter__(self: _C) -> _C:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass(frozen=True)
class DgdComponent:
    """One service (v1alpha1) or component (v1beta1) of a DGD, read as the operator
    reads either: its pods' type, replicas, spec (the main container first), metadata."""

    name: str
    type: str
    replicas: int
    pod_spec: dict[str, Any]
    metadata: dict[str, Any]


def dgd_components(dgd: Mapping[str, Any]) -> list[DgdComponent]:
    spec = dgd["spec"]
    if dgd["apiVersion"].endswith("/v1beta1"):
        envs = spec.get("env") or []
        out = []
        for c in spec["components"]:
            pod = copy.deepcopy(c.get("podTemplate") or {})
            main, *rest = pod["spec"]["containers"]
            main["env"] = [*envs, *(main.get("env") or [])]
            pod_spec = {**pod["spec"], "containers": [main, *rest]}
            out.append(DgdComponent(c["name"], c["type"], int(c.get("replicas", 1)), pod_spec,
                                    pod.get("metadata") or {}))  # fmt: skip
        return out
    envs = spec.get("envs") or []
    out = []
    for name, svc in spec["services"].items():
        extra = copy.deepcopy(svc["extraPodSpec"])
        main = extra.pop("mainContainer")
        container = {**main, "name": "main", "env": [*envs, *(main.get("env") or [])]}
        kind = svc.get("subComponentType") or svc["componentType"]
        out.append(DgdComponent(name, kind, int(svc.get("replicas", 1)),
                                {**extra, "containers": [container]},
                                svc.get("extraPodMetadata") or {}))  # fmt: skip
    return out


def set_dgd_ready(
    cluster: FakeCluster, ns: str, name: str, ready: bool, message: str,
    version: str = "nvidia.com/v1alpha1",
) -> None:  # fmt: skip
    """The DGD's ``Ready`` condition, as the Dynamo operator sets it."""
    cond = {"type": "Ready", "status": "True" if ready else "False",
            "reason": "AllReady" if ready else "NotReady", "message": message,
            "lastTransitionTime": "2026-01-01T00:00:09Z"}  # fmt: skip
    cluster.http.patch(
        f"/apis/{version}/namespaces/{ns}/dynamographdeployments/{name}/status",
        json={"status": {"conditions": [cond]}},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


class DynamoOperator(Controller):
    """Plays the Dynamo operator: for each new DynamoGraphDeployment, the frontend's
    Service (``<name>-frontend``, port 8000) and a ready pod per replica of each service,
    labelled as the operator labels them; the DGD not Ready until ``ready_after_s``."""

    def __init__(self, cluster: FakeCluster, ns: str, ready_after_s: float = 0.5) -> None:
        super().__init__(cluster, ns, lambda c, n, p: None)
        self.ready_after_s = ready_after_s

    def _pods_of(self, dgd: Mapping[str, Any]) -> list[dict[str, Any]]:
        name, out = dgd["metadata"]["name"], []
        for c in dgd_components(dgd):
            main = c.pod_spec["containers"][0]
            for i in range(c.replicas):
                out.append({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{c.name.lower()}-{i}", "namespace": self.ns,
                                 "labels": {"nvidia.com/dynamo-graph-deployment-name": name,
                                            "nvidia.com/dynamo-component-type": c.type}},
                    "spec": {"containers": [{"name": "main", "image": main["image"]}]},
                    "status": {"phase": "Pending"},
                })  # fmt: skip
        return out

    def start_pod(self, pod: dict[str, Any]) -> None:
        """The pod's container starts and becomes ready."""
        ready(self.cluster, self.ns, pod)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for dgd in self.cluster.dgds(self.ns):
                    name = dgd["metadata"]["name"]
                    if name in self.seen:
                        continue
                    self.seen.add(name)
                    version = dgd["apiVersion"]
                    set_dgd_ready(
                        self.cluster, self.ns, name, False, "Frontend: 0/1 ready", version
                    )
                    svc = {"apiVersion": "v1", "kind": "Service",
                           "metadata": {"name": f"{name}-frontend", "namespace": self.ns},
                           "spec": {"ports": [{"port": 8000}], "selector": {
                               "nvidia.com/dynamo-graph-deployment-name": name,
                               "nvidia.com/dynamo-component-type": "frontend"}}}  # fmt: skip
                    self.cluster.http.post(
                        f"/api/v1/namespaces/{self.ns}/services", json=svc
                    ).raise_for_status()
                    for pod in self._pods_of(dgd):
                        self.cluster.http.post(
                            f"/api/v1/namespaces/{self.ns}/pods", json=pod
                        ).raise_for_status()
                        self.start_pod(pod)
                    time.sleep(self.ready_after_s)
                    set_dgd_ready(self.cluster, self.ns, name, True, "", version)
            except httpx.HTTPError:
                pass
            time.sleep(0.05)


_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def rbac_of(method: str, path: str, query: Mapping[str, str]) -> tuple[str, str, str]:
    """(API group, resource[/subresource], verb) of one request, as RBAC reads it."""
    m = _PATH.match(path)
    assert m, f"not a namespaced request: {method} {path}"
    group = m.group("group") or ""
    resource = m.group("resource") + (f"/{m.group('sub')}" if m.group("sub") else "")
    named = m.group("name") is not None
    verb = {
        "GET": "get" if named else ("watch" if query.get("watch") else "list"),
        "POST": "create",
        "PATCH": "patch",
        "PUT": "update",
        "DELETE": "delete" if named else "deletecollection",
    }[method]
    return group, resource, verb


#: API discovery (``/apis/<group>/<version>``): the ``system:discovery`` role's, open to
#: every authenticated user, no rule of the runtime's Role.
_DISCOVERY = re.compile(r"^/apis/[^/]+/[^/]+$")


def used(cluster: FakeCluster) -> set[tuple[str, str, str]]:
    """What the runtime (not the test's controllers) asked of the API, as RBAC reads it."""
    seen = set()
    for request in cluster.handler:
        path = str(request.url.path)
        if not path.startswith(("/api/", "/apis/")) or _DISCOVERY.match(path):
            continue
        if request.headers.get("User-Agent") == CONTROLLER:
            continue
        seen.add(rbac_of(request.method, path, dict(request.url.query)))
    return seen


class LwsController(Controller):
    """Plays the LeaderWorkerSet controller: for each new LeaderWorkerSet, ``size`` ready
    pods per group, the leader (``worker-index`` 0) from the leader template, the others
    from the worker template, labelled as LWS labels them."""

    def _run(self) -> None:
        path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{self.ns}/leaderworkersets"
        while not self._stop.is_set():
            try:
                for lws in self.cluster.items(path):
                    name = lws["metadata"]["name"]
                    if name in self.seen:
                        continue
                    self.seen.add(name)
                    tmpl = lws["spec"]["leaderWorkerTemplate"]
                    for i in range(int(tmpl["size"])):
                        part = tmpl["leaderTemplate" if i == 0 else "workerTemplate"]
                        labels = {**part["metadata"]["labels"],
                                  "leaderworkerset.sigs.k8s.io/name": name,
                                  "leaderworkerset.sigs.k8s.io/worker-index": str(i)}  # fmt: skip
                        pod = {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": f"{name}-0" + (f"-{i}" if i else ""),
                                            "namespace": self.ns, "labels": labels},
                               "spec": part["spec"], "status": {"phase": "Pending"}}  # fmt: skip
                        self.cluster.http.post(
                            f"/api/v1/namespaces/{self.ns}/pods", json=pod
                        ).raise_for_status()
                        ready(self.cluster, self.ns, pod)
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
