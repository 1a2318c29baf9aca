"""The fake cluster's controllers as the real ones behave, not only an API that stores
objects (``k8s_cluster`` serves the API; this module plays what a real cluster adds):

- the LeaderWorkerSet controller (kubernetes-sigs/lws
  ``pkg/controllers/leaderworkerset_controller.go`` at commit 01ebf9bc69b6): the leader
  StatefulSet ``<lws>`` and a worker StatefulSet per group ``<lws>-<g>``, both with
  ``serviceName: <lws>``; the headless Service ``<lws>`` created only if no Service of
  that name exists (``createHeadlessServiceIfNotExists``); pods ``<lws>-<g>`` and
  ``<lws>-<g>-<i>`` with ``LWS_LEADER_ADDRESS=<lws>-<g>.<lws>.<ns>``, ``LWS_GROUP_SIZE``
  and ``LWS_WORKER_INDEX``; ``RecreateGroupOnPodRestart``: a container that exits makes
  the whole group be deleted and made again;
- the Dynamo operator: a pod per replica of each service of a DynamoGraphDeployment,
  with the service's container, volumes and security context, labelled
  ``nvidia.com/dynamo-component-type`` with its type (``prefill`` and ``decode`` for a
  disaggregated graph's workers, as later operators label them: ``ComponentTypePrefill``
  and ``ComponentTypeDecode`` of ai-dynamo/dynamo ``deploy/operator/internal/consts``);
- pods that run as their image's user (:data:`IMAGE_USERS`): a cache the user cannot
  write makes the container exit with Python's ``PermissionError``;
- DNS: ``<pod>.<svc>.<ns>`` resolves only through a headless Service ``<svc>`` that
  selects the pod (and whose name is the pod's StatefulSet's ``serviceName``);
- containers that exit when what their command needs is missing: the start scripts of
  the multi-node layouts are run by ``sh``, with ``ray``, ``sshd``, ``ssh`` and
  ``mpirun`` as stubs that behave as the image and the cluster allow (a Ray head that
  is not up yet, an image without ``sshd``, a host that does not resolve).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from k8s_cluster import (
    CONTROLLER,
    Controller,
    DynamoOperator,
    FakeCluster,
    dgd_components,
    ready,
)

LWS_PATH = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets"
LABEL_LWS = "leaderworkerset.sigs.k8s.io/name"
LABEL_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LABEL_GROUP = "leaderworkerset.sigs.k8s.io/group-index"
#: Kubernetes keeps the last 80 lines (2048 bytes) of the log as the termination message
#: of a container with ``terminationMessagePolicy: FallbackToLogsOnError``.
MESSAGE_BYTES = 2048


@dataclass(frozen=True, slots=True)
class ImageUser:
    """Who an image's processes run as, and what its image has."""

    prefix: str
    uid: int
    home: str
    source: str
    has_sshd: bool = True


#: The default images' users and homes, each from its upstream Dockerfile.
IMAGE_USERS: tuple[ImageUser, ...] = (
    ImageUser(
        "nvcr.io/nvidia/ai-dynamo/", 1000, "/home/dynamo",
        "ai-dynamo/dynamo container/templates/dynamo_runtime.Dockerfile (1.x runtime "
        "images): useradd -m -s /bin/bash -g 0 dynamo; [ `id -u dynamo` -eq 1000 ]; "
        "USER dynamo",
    ),
    ImageUser(
        "vllm/vllm-openai:", 0, "/root",
        "vllm-project/vllm docker/Dockerfile @ dead20ba: the stages vllm-base (FROM "
        "nvidia/cuda:*-devel), vllm-openai-base and vllm-openai set no USER (root); no "
        "step installs openssh-server (its multi-node path is Ray, not SSH)",
        has_sshd=False,
    ),
    ImageUser(
        "lmsysorg/sglang:", 0, "/root",
        "sgl-project/sglang docker/Dockerfile @ 004740a9: FROM nvidia/cuda:*-cudnn-devel, "
        "sets no USER (root; its configs are copied to /root); apt installs openssh-server",
    ),
    ImageUser(
        "nvcr.io/nvidia/tensorrt-llm/release:", 0, "/root",
        "NVIDIA/TensorRT-LLM docker/Dockerfile.multi @ 00f74add: the release stage (FROM "
        "devel, FROM nvcr.io/nvidia/pytorch:25.08-py3) sets no USER (root); "
        "docker/common/install_base.sh @ 000a01de installs openmpi-bin (when the base has "
        "no mpirun) but no openssh-server, and no step of the release stage adds one. The "
        "NGC PyTorch base has no public Dockerfile, so what it ships is not checked: "
        "played as an image without sshd",
        has_sshd=False,
    ),
)  # fmt: skip
ROOT = ImageUser("", 0, "/root", "an image of its own: played as root")


def image_user(image: str) -> ImageUser:
    return next((u for u in IMAGE_USERS if image.startswith(u.prefix)), ROOT)


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def cache_error(spec: Mapping[str, Any], container: Mapping[str, Any], user: ImageUser) -> str:
    """What the container's first model download says when its ``HF_HOME`` is not the
    user's to write; "" when it is. A path under another user's home is closed (homes are
    0700); a mounted volume is writable to root, an ``emptyDir`` to anyone (0777), a
    PersistentVolumeClaim to a non-root user only with the pod's ``fsGroup``, a
    ``hostPath`` (root's) to root only; elsewhere only the user's own home is."""
    home = _env(container).get("HF_HOME") or f"{user.home}/.cache/huggingface"
    denied = f"PermissionError: [Errno 13] Permission denied: '{home}'"
    others = [u.home for u in (*IMAGE_USERS, ROOT) if u.home != user.home]
    if user.uid != 0 and any(_under(home, h) for h in others):
        return denied
    mounts = [m for m in container.get("volumeMounts") or [] if _under(home, m["mountPath"])]
    if not mounts:
        return "" if user.uid == 0 or _under(home, user.home) else denied
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    volume = next(v for v in spec.get("volumes") or [] if v["name"] == mount["name"])
    if user.uid == 0 or "emptyDir" in volume:
        return ""
    if "persistentVolumeClaim" in volume and (spec.get("securityContext") or {}).get("fsGroup"):
        return ""
    return denied


def resolves(cluster: FakeCluster, ns: str, host: str) -> bool:
    """Whether ``<pod>.<svc>.<ns>`` resolves: ``svc`` a headless Service selecting the
    pod, the pod's subdomain (its StatefulSet's ``serviceName``) ``svc``."""
    parts = host.split(".")
    if len(parts) < 3 or parts[2] != ns:
        return False
    pod_name, svc_name = parts[0], parts[1]
    svc = cluster.http.get(f"/api/v1/namespaces/{ns}/services/{svc_name}")
    pod = cluster.http.get(f"/api/v1/namespaces/{ns}/pods/{pod_name}")
    if svc.status_code != 200 or pod.status_code != 200:
        return False
    spec, pod_obj = svc.json().get("spec") or {}, pod.json()
    labels = pod_obj["metadata"].get("labels") or {}
    selector = spec.get("selector") or {}
    return (
        spec.get("clusterIP") == "None"
        and bool(selector)
        and all(labels.get(k) == v for k, v in selector.items())
        and (pod_obj.get("spec") or {}).get("subdomain") == svc_name
    )


def _stub(folder: Path, name: str, body: str) -> None:
    tool = folder / name
    tool.write_text("#!/bin/sh\n" + body + "\n")
    tool.chmod(0o755)


def run_script(
    cluster: FakeCluster, ns: str, pod: Mapping[str, Any], user: ImageUser, secret_dir: Path
) -> tuple[int, str]:
    """Run the pod's ``sh -c`` script with the image's and the cluster's behaviour as
    stubs: ``ray start --address`` fails the first time (the head is not up yet), then
    joins when the address resolves; ``sshd`` exists only if the image has it; ``ssh``
    reaches a host that resolves; ``mpirun`` and ``sleep`` return at once."""
    container = pod["spec"]["containers"][0]
    script = container["args"][0].replace("/ssh-pk", str(secret_dir))
    with tempfile.TemporaryDirectory() as tmp:
        stubs, home = Path(tmp, "bin"), Path(tmp, "home")
        stubs.mkdir()
        home.mkdir()
        known = Path(tmp, "resolves")
        env = _env(container)
        hosts = [env.get("LWS_LEADER_ADDRESS", "")]
        hosts += [hosts[0].replace(".", f"-{i}.", 1) for i in range(1, 8)]
        known.write_text("".join(f"{h}\n" for h in hosts if h and resolves(cluster, ns, h)))
        _stub(stubs, "sleep", "exit 0")
        _stub(stubs, "mpirun", "exit 0")
        _stub(stubs, "ssh-keygen", "exit 0")
        unknown_host = 'echo "ssh: Could not resolve hostname" >&2; exit 255'
        _stub(stubs, "ssh", f'h=$(printf "%s\\n" "$@" | grep -Fx -f {known} | head -1)\n'
              f'[ -n "$h" ] || {{ {unknown_host}; }}')  # fmt: skip
        _stub(stubs, "python3", 'echo "$LWS_GROUP_SIZE"')
        _stub(stubs, "vllm", "exit 0")
        _stub(stubs, "ray", f'case "$*" in *--head*) exit 0;; esac\n'
              f'if [ ! -e {tmp}/tried ]; then touch {tmp}/tried; echo "ConnectionError: '
              'could not reach the GCS of the head" >&2; exit 1; fi\n'
              f'addr=$(echo "$*" | sed "s/.*--address=\\([^: ]*\\).*/\\1/")\n'
              f'grep -Fxq "$addr" {known} || '
              '{ echo "ConnectionError: $addr" >&2; exit 1; }')  # fmt: skip
        if user.has_sshd:
            _stub(stubs, "sshd", "exit 0")
        run_env = {**env, "HOME": str(home), "PATH": f"{stubs}:/usr/bin:/bin"}
        done = subprocess.run(
            ["sh", "-c", script], env=run_env, capture_output=True, text=True, timeout=60
        )
    return done.returncode, (done.stdout + done.stderr)[-MESSAGE_BYTES:]


def fail(cluster: FakeCluster, ns: str, pod: Mapping[str, Any], code: int, log: str) -> None:
    """The pod's container exited with ``code``; its termination message the log's tail
    when the container asks for it (``FallbackToLogsOnError``), as the kubelet does."""
    container = pod["spec"]["containers"][0]
    policy = container.get("terminationMessagePolicy")
    term = {"exitCode": code, "reason": "Error",
            "message": log if policy == "FallbackToLogsOnError" else ""}  # fmt: skip
    status = {"phase": "Running", "containerStatuses": [{
        "name": container["name"], "ready": False, "restartCount": 1,
        "state": {"waiting": {"reason": "ContainerCreating"}},
        "lastState": {"terminated": term}}]}  # fmt: skip
    cluster.http.patch(
        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


@dataclass
class Outcome:
    """What a behaving controller saw: the groups it started, and the containers that
    exited with their logs."""

    groups: int = 0
    exits: list[str] = field(default_factory=list)


class BehavingLws(Controller):
    """The LeaderWorkerSet controller (module docstring), with group restarts bounded by
    ``max_groups`` (a real one restarts for ever)."""

    def __init__(
        self, cluster: FakeCluster, ns: str, secret_dir: Path, max_groups: int = 4
    ) -> None:
        super().__init__(cluster, ns, lambda c, n, p: None)
        self.secret_dir = secret_dir
        self.max_groups = max_groups
        self.outcome = Outcome()

    def _post(self, path: str, obj: dict[str, Any]) -> None:
        self.cluster.http.post(f"/apis/apps/v1/namespaces/{self.ns}/{path}", json=obj)

    def _reconcile(self, lws: dict[str, Any]) -> None:
        name, ns = lws["metadata"]["name"], self.ns
        time.sleep(0.3)  # a watch's latency: what is applied with the LWS is there
        tmpl = lws["spec"]["leaderWorkerTemplate"]
        for sts, size in ((name, 1), (f"{name}-0", int(tmpl["size"]) - 1)):
            self._post("statefulsets", {
                "apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": sts, "namespace": ns, "labels": {LABEL_LWS: name}},
                "spec": {"serviceName": name, "replicas": size}})  # fmt: skip
        # createHeadlessServiceIfNotExists: only when no Service of the LWS's name exists.
        if self.cluster.http.get(f"/api/v1/namespaces/{ns}/services/{name}").status_code != 200:
            self.cluster.http.post(f"/api/v1/namespaces/{ns}/services", json={
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterIP": "None", "selector": {LABEL_LWS: name}}},
            ).raise_for_status()  # fmt: skip
        while self.outcome.groups < self.max_groups and not self._stop.is_set():
            self.outcome.groups += 1
            if self._start_group(lws):
                return
            if tmpl.get("restartPolicy") != "RecreateGroupOnPodRestart":
                return
            time.sleep(0.5)  # the failed pod's status is seen before the group goes
            for pod in self.group(name):
                self.cluster.http.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")

    def group(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self.cluster.pods(self.ns)
                if (p["metadata"].get("labels") or {}).get(LABEL_LWS) == name]  # fmt: skip

    def _pod(self, lws: dict[str, Any], i: int) -> dict[str, Any]:
        name, ns = lws["metadata"]["name"], self.ns
        tmpl = lws["spec"]["leaderWorkerTemplate"]
        part = tmpl["leaderTemplate" if i == 0 else "workerTemplate"]
        spec = {**part["spec"], "hostname": f"{name}-0" + (f"-{i}" if i else ""),
                "subdomain": name}  # fmt: skip
        lws_env = [{"name": "LWS_LEADER_ADDRESS", "value": f"{name}-0.{name}.{ns}"},
                   {"name": "LWS_GROUP_SIZE", "value": str(tmpl["size"])},
                   {"name": "LWS_WORKER_INDEX", "value": str(i)}]  # fmt: skip
        spec["containers"] = [
            {**c, "env": [*lws_env, *(c.get("env") or [])]} for c in spec["containers"]
        ]
        labels = {**part["metadata"]["labels"], LABEL_LWS: name, LABEL_INDEX: str(i),
                  LABEL_GROUP: "0"}  # fmt: skip
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": spec["hostname"], "namespace": ns, "labels": labels},
                "spec": spec, "status": {"phase": "Pending"}}  # fmt: skip

    def _start_group(self, lws: dict[str, Any]) -> bool:
        """Make and run the group's pods, the workers first (they may start before the
        leader); False when a container exited."""
        pods = [self._pod(lws, i) for i in range(int(lws["spec"]["leaderWorkerTemplate"]["size"]))]
        for pod in pods:
            self.cluster.http.post(
                f"/api/v1/namespaces/{self.ns}/pods", json=pod
            ).raise_for_status()
        for pod in [*pods[1:], pods[0]]:
            code, log = self._run_container(pod)
            if code != 0:
                self.outcome.exits.append(f"{pod['metadata']['name']}: {log.strip()}")
                fail(self.cluster, self.ns, pod, code, log)
                return False
        for pod in pods:
            ready(self.cluster, self.ns, pod)
        return True

    def _run_container(self, pod: dict[str, Any]) -> tuple[int, str]:
        container = pod["spec"]["containers"][0]
        user = image_user(container["image"])
        denied = cache_error(pod["spec"], container, user)
        if denied:
            return 1, f"Traceback (most recent call last):\n{denied}\n"
        if container.get("command") == ["sh", "-c"]:
            return run_script(self.cluster, self.ns, pod, user, self.secret_dir)
        # A server on every pod (SGLang): the workers dial --dist-init-addr, the leader.
        leader = _env(container)["LWS_LEADER_ADDRESS"]
        if pod["metadata"]["labels"][LABEL_INDEX] != "0" and not resolves(
            self.cluster, self.ns, leader
        ):
            return 1, f"socket.gaierror: [Errno -2] Name or service not known: '{leader}'\n"
        return 0, ""

    def _run(self) -> None:
        path = LWS_PATH.format(ns=self.ns)
        while not self._stop.is_set():
            try:
                for lws in self.cluster.items(path):
                    if lws["metadata"]["name"] not in self.seen:
                        self.seen.add(lws["metadata"]["name"])
                        self._reconcile(lws)
            except httpx.HTTPError:
                pass
            time.sleep(0.05)


def crash_loop(cluster: FakeCluster, ns: str, pod: Mapping[str, Any], said: str) -> None:
    """The pod's container exits at each start, the kubelet backing off (its last
    words the termination message)."""
    container = pod["spec"]["containers"][0]["name"]
    status = {"phase": "Running", "containerStatuses": [{
        "name": container, "ready": False, "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
                              "message": "back-off 40s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": 1, "message": said}}}]}  # fmt: skip
    cluster.http.patch(
        f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status",
        json={"status": status},
        headers={"Content-Type": "application/merge-patch+json"},
    ).raise_for_status()


def run_as_image_user(cluster: FakeCluster, ns: str, pod: dict[str, Any]) -> None:
    """A Deployment's pod (``Controller``'s behaviour): ready when its image's user can
    write its cache, else in a crash loop with Python's ``PermissionError``."""
    container = pod["spec"]["containers"][0]
    denied = cache_error(pod["spec"], container, image_user(container["image"]))
    if denied:
        crash_loop(cluster, ns, pod, denied)
    else:
        ready(cluster, ns, pod)


class BehavingDynamo(DynamoOperator):
    """The Dynamo operator (module docstring): pods with the services' containers, run
    as their image's user, labelled with their component type."""

    def __init__(self, cluster: FakeCluster, ns: str, ready_after_s: float = 0.2) -> None:
        super().__init__(cluster, ns, ready_after_s)
        self.exits: list[str] = []

    def _pods_of(self, dgd: Mapping[str, Any]) -> list[dict[str, Any]]:
        name, out = dgd["metadata"]["name"], []
        for c in dgd_components(dgd):
            own = {"nvidia.com/dynamo-graph-deployment-name": name,
                   "nvidia.com/dynamo-component-type": c.type}  # fmt: skip
            for i in range(c.replicas):
                out.append({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{c.name.lower()}-{i}", "namespace": self.ns,
                                 "labels": {**(c.metadata.get("labels") or {}), **own},
                                 "annotations": dict(c.metadata.get("annotations") or {})},
                    "spec": c.pod_spec,
                    "status": {"phase": "Pending"},
                })  # fmt: skip
        return out

    def start_pod(self, pod: dict[str, Any]) -> None:
        container = pod["spec"]["containers"][0]
        denied = cache_error(pod["spec"], container, image_user(container["image"]))
        if not denied:
            ready(self.cluster, self.ns, pod)
            return
        self.exits.append(f"{pod['metadata']['name']}: {denied}")
        crash_loop(self.cluster, self.ns, pod, denied)


def owner_reference_denials(cluster: FakeCluster, rules: list[dict[str, Any]]) -> list[str]:
    """What the OwnerReferencesPermissionEnforcement admission plugin would refuse of the
    runtime's creations: setting ``ownerReferences`` takes delete on the object, and
    ``blockOwnerDeletion`` update on the owner's ``finalizers`` subresource."""
    from k8s_cluster import rbac_of

    from pytest_llmslo.engines.runtimes.k8s.role import allowed

    owners = {"ConfigMap": ("", "configmaps")}
    out: list[str] = []
    for request in cluster.handler:
        data = request.data
        if request.method not in ("POST", "PATCH") or not isinstance(data, dict):
            continue
        if request.headers.get("User-Agent") == CONTROLLER:
            continue
        refs = (data.get("metadata") or {}).get("ownerReferences") or []
        if not refs:
            continue
        group, resource, _ = rbac_of("DELETE", str(request.url.path).rsplit("/", 1)[0]
                                     if request.method == "PATCH" else str(request.url.path),
                                     {})  # fmt: skip
        resource = resource.split("/")[0]
        if not allowed(group, resource, "delete", rules):
            out.append(f"delete {group}/{resource}")
        for ref in refs:
            og, ores = owners[ref["kind"]]
            finalizers = f"{ores}/finalizers"
            if ref.get("blockOwnerDeletion") and not allowed(og, finalizers, "update", rules):
                out.append(f"update {og}/{ores}/finalizers")
    return sorted(set(out))
