"""Remote load workers in a cluster: one Indexed Job (``completionMode: Indexed``, batch/v1,
Kubernetes 1.37 schemas), one pod a worker, each running ``llmslo worker --connect ADDRESS``
to the session that listens there (``--worker-listen``; docs/load.md, 'Remote workers').

The Job is created for the session and deleted with it: it is owned by the session's
ConfigMap (``ownership.SESSION_OWNERS``), like the engines' objects, so a session that crashed
leaves nothing the reaper does not remove. Its pods:

- are spread over the nodes (a topology spread on ``kubernetes.io/hostname``, best
  effort): load from several hosts is what the workers are for;
- are not restarted (``backoffLimitPerIndex: 0``, ``restartPolicy: Never``): a worker
  that dies is named by the session and its level kept as invalid, and a new one could not
  join a level that runs;
- get no API token (``automountServiceAccountToken: false``): a worker talks to the
  session and the engine only;
- read the shared key (``LLMSLO_WORKER_KEY``) from a Secret: the one named
  (``key_secret``), or one the launcher creates from the session's key (``key``) before
  the Job, owned by the same ConfigMap and deleted with the Job, so nobody has to make
  one. The key is in the Secret alone, never in the Job's manifest or a log.

The image must hold the same version of pytest-llmslo as the session (``llmslo`` on its
``PATH``): the protocol versions are checked at the handshake.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .apply import apply, delete
from .deployments import LABEL_ROLE, SESSION_ID, dns_label, labels, owner_reference
from .kubeclient import Cluster
from .ownership import SESSION_OWNERS

__all__ = ["WORKER_ROLE", "WorkerJob", "WorkerJobSpec", "key_secret", "worker_job"]

WORKER_ROLE = "load-worker"
#: How long a worker keeps trying to reach the session: pods may start before it listens.
CONNECT_TIMEOUT_S = 600
KEY_ENV = "LLMSLO_WORKER_KEY"


@dataclass(frozen=True, slots=True)
class WorkerJobSpec:
    """What the workers' Job is made of: how many, the image, where they connect, their
    resources and nodes, the Secret (``name``, ``key``) of the shared key or the key
    itself (``key``: a Secret of it is made), and the Job's bounds (``deadline_s`` over
    its whole life, ``ttl_s`` kept after it ends)."""

    workers: int
    image: str
    address: str
    namespace: str
    cpu: str = "2"
    memory: str = "2Gi"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    key_secret: tuple[str, str] | None = None
    key: bytes | None = field(default=None, repr=False)
    deadline_s: int = 86_400
    ttl_s: int = 300
    session: str = SESSION_ID

    @property
    def name(self) -> str:
        return dns_label(f"llmslo-workers-{self.session}")

    @property
    def secret_ref(self) -> tuple[str, str] | None:
        """The Secret and the entry the pods read the key from (None: no key)."""
        if self.key_secret is not None:
            return self.key_secret
        if self.key is not None:
            return dns_label(f"llmslo-worker-key-{self.session}"), "key"
        return None


def key_secret(spec: WorkerJobSpec) -> dict[str, Any] | None:
    """The Secret of the session's key the launcher makes (None when one is named, or
    there is no key)."""
    ref = spec.secret_ref
    if spec.key_secret is not None or spec.key is None or ref is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": ref[0],
            "namespace": spec.namespace,
            "labels": {**labels(session=spec.session), LABEL_ROLE: WORKER_ROLE},
        },
        "data": {ref[1]: base64.b64encode(spec.key).decode()},
    }


def _args(spec: WorkerJobSpec) -> list[str]:
    return [
        "worker", "--connect", spec.address, "--name", "$(POD_NAME)",
        "--connect-timeout", str(CONNECT_TIMEOUT_S),
    ]  # fmt: skip


def _container(spec: WorkerJobSpec) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        # The pod's name names the worker in the session's reports.
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    if spec.secret_ref is not None:
        name, key = spec.secret_ref
        env.append({"name": KEY_ENV, "valueFrom": {"secretKeyRef": {"name": name, "key": key}}})
    return {
        "name": "worker",
        "image": spec.image,
        "command": ["llmslo"],
        "args": _args(spec),
        "env": env,
        "resources": {
            "requests": {"cpu": spec.cpu, "memory": spec.memory},
            "limits": {"memory": spec.memory},
        },
    }


def worker_job(spec: WorkerJobSpec) -> dict[str, Any]:
    """The Indexed Job of ``spec``'s workers (see the module docstring)."""
    if spec.workers < 1:
        raise ValueError(f"a worker Job needs at least one worker, got {spec.workers}")
    pod_labels = {**labels(session=spec.session), LABEL_ROLE: WORKER_ROLE}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [_container(spec)],
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": dict(pod_labels)},
            }
        ],
    }
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": pod_labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.workers,
            "parallelism": spec.workers,
            "backoffLimitPerIndex": 0,
            "activeDeadlineSeconds": spec.deadline_s,
            "ttlSecondsAfterFinished": spec.ttl_s,
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        },
    }


class WorkerJob:
    """The workers' Job of one session in ``where``: ``start`` creates it (owned by the
    session's ConfigMap), after the Secret of its key when it makes one; ``stop``
    deletes it, its pods and that Secret."""

    def __init__(self, where: Cluster, spec: WorkerJobSpec) -> None:
        self.where = where
        self.spec = spec
        self.obj: dict[str, Any] | None = None
        self.secret: dict[str, Any] | None = None

    def start(self) -> dict[str, Any]:
        owner = SESSION_OWNERS.acquire(self.where)
        secret = key_secret(self.spec)
        obj = worker_job(self.spec)
        try:
            if secret is not None:
                secret["metadata"]["ownerReferences"] = [owner_reference(owner)]
                apply(self.where, secret)
                self.secret = secret
            obj["metadata"]["ownerReferences"] = [owner_reference(owner)]
            apply(self.where, obj)
        except Exception:
            self._delete_secret()
            SESSION_OWNERS.release(self.where)
            raise
        self.obj = obj
        return obj

    def _delete_secret(self) -> None:
        secret, self.secret = self.secret, None
        if secret is not None:
            with contextlib.suppress(Exception):
                delete(self.where, secret)

    def stop(self) -> None:
        obj, self.obj = self.obj, None
        if obj is None:
            return
        try:
            with contextlib.suppress(Exception):
                delete(self.where, obj)
            self._delete_secret()
        finally:
            SESSION_OWNERS.release(self.where)
