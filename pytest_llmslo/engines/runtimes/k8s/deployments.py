"""The objects an engine's image units become in a cluster, as plain dicts (what the API
takes, what ``llmslo render`` prints, what the schema tests check).

One image unit is one Deployment (one replica, ``Recreate``: a rolling update would need
twice the GPUs); the first unit, which serves the API, also gets a Service. Each pod
asks for the unit's GPUs as ``nvidia.com/gpu`` limits, runs on the configured nodes
(``node_selector``, ``tolerations``), has ``/dev/shm`` as a memory-backed ``emptyDir``
(PyTorch's shared-memory tensors between workers), keeps the Hugging Face cache on the
configured volume (a PersistentVolumeClaim or a node directory; an ``emptyDir`` without
one), reads secrets from Secrets (``secretKeyRef``; a literal secret is refused) and has
a startup probe as long as ``startup_timeout_s`` (loading a model takes minutes; a short
probe kills the engine during its warm-up). Files a unit shares with the harness (a
generated config) travel in a ConfigMap of their own; the secrets the harness made for a
unit (``ImageUnit.secret_env``: the sim's admin token) in a Secret of its own
(:func:`unit_secret`), applied, owned and deleted like the unit's other objects.

Every object carries :func:`labels` (``app.kubernetes.io/managed-by: pytest-llmslo`` and
the session's id); when applied, each also gets an ``ownerReference`` to the session's
ConfigMap (:func:`session_object`), so deleting that one deletes the rest.
"""

from __future__ import annotations

import base64
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ....errors import ConfigError
from ....redact import is_secret_name, secret_values
from ...base import EngineConfig
from ...launchplan import LaunchPlan
from ...units import ImageUnit
from .pod_settings import apply_to_container, apply_to_pod, quantity, template_metadata
from .settings import KubeSettings

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "pytest-llmslo"
LABEL_SESSION = "llmslo.io/session"
LABEL_ENGINE = "llmslo.io/engine"
LABEL_KIND = "llmslo.io/kind"
LABEL_ROLE = "llmslo.io/role"
LABEL_INSTANCE = "app.kubernetes.io/instance"
GPU_RESOURCE = "nvidia.com/gpu"
#: Where the pod keeps the Hugging Face cache (``HF_HOME``): a path of its own, under no
#: user's home, so that it is reachable whatever user the image runs as (Dynamo's runtime
#: images run as uid 1000 with ``HOME=/home/dynamo``; ``/root`` is closed to that user).
HF_HOME = "/llmslo/hf-cache"
#: The path every kind the runtime runs answers 200 on once it serves.
HEALTH_PATH = "/health"
PROBE_PERIOD_S = 10
#: A ConfigMap holds at most 1 MiB; the files a unit shares are small generated configs.
MAX_FILES_BYTES = 900_000

# One id per harness process: it names and labels every object of this session.
SESSION_ID = uuid.uuid4().hex[:12]


@dataclass(frozen=True, slots=True)
class Names:
    """The names of one start of an engine: ``base`` (the Deployment and Service of its
    first unit) and the session's ConfigMap."""

    base: str
    session: str

    def unit(self, index: int) -> str:
        return self.base if index == 0 else f"{self.base}-{index}"


def dns_label(text: str, limit: int = 63) -> str:
    """``text`` as a DNS-1035 label: lowercase letters, digits and ``-``, starting with a
    letter, at most ``limit`` characters."""
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if not out or not out[0].isalpha():
        out = f"x-{out}"
    return out[:limit].rstrip("-")


def label_value(text: str) -> str:
    """``text`` as a label value (63 characters of ``[A-Za-z0-9._-]``, alphanumeric ends)."""
    out = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return out.strip("-._")


def names_for(config: EngineConfig, start: int = 1, session: str = SESSION_ID) -> Names:
    """The names of the ``start``-th start of ``config``'s engine in this session."""
    engine = dns_label(config.display_name, 30)
    return Names(base=f"llmslo-{engine}-{session[:8]}-{start}", session=f"llmslo-{session}")


def labels(config: EngineConfig | None = None, session: str = SESSION_ID) -> dict[str, str]:
    """The labels of every object of the session (and of ``config``'s engine)."""
    out = {MANAGED_BY: MANAGER, LABEL_SESSION: session}
    if config is not None:
        out[LABEL_ENGINE] = label_value(config.display_name)
        out[LABEL_KIND] = config.kind
    return out


def session_object(namespace: str, session: str = SESSION_ID) -> dict[str, Any]:
    """The session's ConfigMap: the owner of every other object of the session."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"llmslo-{session}",
            "namespace": namespace,
            "labels": labels(session=session),
        },
        "data": {"session": session},
    }


def owner_reference(session_cm: Mapping[str, Any]) -> dict[str, Any]:
    """The reference that makes an object owned by the applied session ConfigMap."""
    meta = session_cm["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }


def gpu_count(gpus: str | None, tensor_parallel_size: int) -> int:
    """The ``nvidia.com/gpu`` limit of a unit's ``gpus`` value: none for None or ``none``,
    the tensor-parallel size for ``all`` (a pod gets whole GPUs, never "every GPU of the
    node"), the count, or the number of device ids (a pod cannot pick devices)."""
    value = (gpus or "").strip().lower()
    if not value or value == "none":
        return 0
    if value == "all":
        return tensor_parallel_size
    if value.isdigit():
        return int(value)
    return len([g for g in value.removeprefix("device=").split(",") if g.strip()])


def _check_unit(config: EngineConfig, unit: ImageUnit) -> None:
    where = f"engine {config.display_name!r} (runtime kubernetes)"
    literal = sorted(k for k, v in unit.env.items() if is_secret_name(k) and v)
    if literal or secret_values({}, unit.command):
        what = ", ".join(literal) if literal else "a secret flag on the command line"
        raise ConfigError(
            f"{where}: {what} would be written into the Deployment as a literal value; "
            "give it as kubernetes.secret_env.NAME = 'SECRET/KEY' (a Secret reference)"
        )
    if unit.read_only:
        raise ConfigError(
            f"{where}: model={unit.read_only[0]!r} is a path on this machine, which a pod "
            "does not see: use a Hugging Face id, or a path on the cache volume "
            "(kubernetes.cache_pvc / cache_host_path)"
        )


def secret_name(unit_name: str) -> str:
    """The name of the Secret of the unit whose Deployment is ``unit_name``."""
    return f"{unit_name}-secrets"


def unit_secret(
    unit: ImageUnit, name: str, namespace: str, labels: Mapping[str, str]
) -> dict[str, Any] | None:
    """The Secret of the secrets the harness made for ``unit`` (``secret_env``, one entry
    per variable, named after it); None when it has none."""
    values = {k: v for k, v in unit.secret_env.items() if k not in unit.env}
    if not values:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": secret_name(name), "namespace": namespace, "labels": dict(labels)},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(values.items())},
    }


def _env(unit: ImageUnit, settings: KubeSettings, name: str) -> list[dict[str, Any]]:
    env: dict[str, dict[str, Any]] = {}
    if unit.hf_cache:
        env["HF_HOME"] = {"name": "HF_HOME", "value": HF_HOME}
    for var in sorted(unit.secret_env):
        ref = {"name": secret_name(name), "key": var}
        env[var] = {"name": var, "valueFrom": {"secretKeyRef": ref}}
    for var, value in unit.env.items():
        env[var] = {"name": var, "value": value}
    for var, (secret, key) in settings.secret_env.items():
        env[var] = {"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
    return list(env.values())


def _cache_volume(settings: KubeSettings) -> dict[str, Any]:
    if settings.cache_pvc:
        return {"name": "hf-cache", "persistentVolumeClaim": {"claimName": settings.cache_pvc}}
    if settings.cache_host_path:
        return {
            "name": "hf-cache",
            "hostPath": {"path": settings.cache_host_path, "type": "DirectoryOrCreate"},
        }
    return {"name": "hf-cache", "emptyDir": {}}


def files_config_map(
    name: str, namespace: str, folder: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The files of ``folder`` (a unit's shared directory) as a ConfigMap."""
    data: dict[str, str] = {}
    for path in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else []:
        if path.is_file():
            data[path.name] = path.read_text(encoding="utf-8")
    if sum(len(v) for v in data.values()) > MAX_FILES_BYTES:
        raise ConfigError(f"the files in {folder} are too large for a ConfigMap (1 MiB)")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "data": data,
    }


def _probe(port: int, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": HEALTH_PATH, "port": port},
        "periodSeconds": period_s,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _container(
    config: EngineConfig, unit: ImageUnit, settings: KubeSettings, mounts: list[dict[str, Any]],
    name: str,
) -> dict[str, Any]:  # fmt: skip
    port = unit.ports[0] if unit.ports else None
    container: dict[str, Any] = {
        "name": dns_label(unit.role),
        "image": unit.image,
        "imagePullPolicy": "IfNotPresent",
        "args": list(unit.command),
        "env": _env(unit, settings, name),
        "ports": [
            {"containerPort": p, **({"name": "http"} if i == 0 else {})}
            for i, p in enumerate(unit.ports)
        ],
        "volumeMounts": mounts,
        # The log's last lines become the termination message: what a start script said
        # before it exited reaches the pod's status (failures.py reads it).
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if unit.entrypoint is not None:
        container["command"] = list(unit.entrypoint)
    gpus = gpu_count(unit.gpus, config.tensor_parallel_size)
    if gpus:
        # A quantity: the API takes a number or a string, the client library a string.
        container["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    if port is not None:
        # Loading weights and compiling take minutes: the startup probe allows all of
        # startup_timeout_s before the kubelet restarts the container.
        failures = max(1, math.ceil(config.startup_timeout_s / PROBE_PERIOD_S))
        container["startupProbe"] = _probe(port, PROBE_PERIOD_S, failures)
        container["readinessProbe"] = _probe(port, 5, 3)
    return container


@dataclass(frozen=True, slots=True)
class PodParts:
    """What a unit's pods are made of: their spec, their labels, the labels that select
    them, the ConfigMaps of the files they share and the Secret of the secrets the harness
    made for them (none or one)."""

    spec: dict[str, Any]
    labels: dict[str, str]
    selector: dict[str, str]
    config_maps: list[dict[str, Any]]
    secrets: list[dict[str, Any]] = field(default_factory=list)

    def companions(self) -> list[dict[str, Any]]:
        """What the pods read, applied before the workload that makes them."""
        return [*self.secrets, *self.config_maps]


def pod_parts(
    plan: LaunchPlan, index: int, settings: KubeSettings, name: str, namespace: str
) -> PodParts:
    """The pod of the ``index``-th image unit of ``plan``, named ``name`` in its labels."""
    config = plan.config
    unit = plan.images[index]
    _check_unit(config, unit)
    common = {**labels(config), LABEL_ROLE: label_value(unit.role)}
    selector = {LABEL_SESSION: SESSION_ID, LABEL_INSTANCE: name}
    all_labels = {**common, LABEL_INSTANCE: name}
    config_maps: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    shm: dict[str, Any] = {"medium": "Memory"}
    if settings.pod.shm_size or unit.shm:
        shm["sizeLimit"] = settings.pod.shm_size or quantity(unit.shm or "")
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": shm}]
    if unit.hf_cache:
        mounts.append({"name": "hf-cache", "mountPath": HF_HOME})
        volumes.append(_cache_volume(settings))
    for i, (host, inside) in enumerate(sorted(unit.mounts.items())):
        cm_name = f"{name}-files-{i}"
        config_maps.append(files_config_map(cm_name, namespace, host, all_labels))
        mounts.append({"name": f"files-{i}", "mountPath": inside, "readOnly": True})
        volumes.append({"name": f"files-{i}", "configMap": {"name": cm_name}})
    spec: dict[str, Any] = {
        "containers": [_container(config, unit, settings, mounts, name)],
        "volumes": volumes,
        # No *_SERVICE_HOST/*_PORT variables: a Service named vllm would set VLLM_PORT,
        # which vLLM reads as its own setting.
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
    }
    spec.update(placement(settings))
    apply_to_pod(spec, settings.pod)
    apply_to_container(spec["containers"][0], settings.pod)
    secret = unit_secret(unit, name, namespace, all_labels)
    return PodParts(spec, all_labels, selector, config_maps, [secret] if secret else [])


def placement(settings: KubeSettings) -> dict[str, Any]:
    """Where the pods run and as whom: node selector, tolerations, service account."""
    out: dict[str, Any] = {}
    if settings.node_selector:
        out["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        out["tolerations"] = [dict(t) for t in settings.tolerations]
    if settings.service_account:
        out["serviceAccountName"] = settings.service_account
    return out


def service_object(
    name: str, namespace: str, labels: Mapping[str, str], selector: Mapping[str, str],
    port: int, target: int,
) -> dict[str, Any]:  # fmt: skip
    """A ClusterIP Service ``name`` in front of the pods ``selector`` picks."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "type": "ClusterIP",
            "selector": dict(selector),
            "ports": [{"name": "http", "port": port, "targetPort": target}],
        },
    }


def unit_objects(
    plan: LaunchPlan,
    index: int,
    settings: KubeSettings,
    names: Names,
    namespace: str,
) -> list[dict[str, Any]]:
    """The Deployment of the ``index``-th image unit of ``plan`` (its Service too for the
    first), a ConfigMap for each directory of files it shares, and the Secret of the
    secrets the harness made for it."""
    unit = plan.images[index]
    name = names.unit(index)
    pod = pod_parts(plan, index, settings, name, namespace)
    objects = pod.companions()
    objects.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {**settings.pod.workload_labels(), **pod.labels},
            },
            "spec": {
                "replicas": 1,
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": dict(pod.selector)},
                "template": {
                    "metadata": template_metadata({**pod.labels, **pod.selector}, settings.pod),
                    "spec": pod.spec,
                },
            },
        }
    )
    if index == 0 and unit.ports:
        objects.append(
            service_object(name, namespace, pod.labels, pod.selector, plan.port, unit.ports[0])
        )
    return objects


def engine_objects(
    plan: LaunchPlan, settings: KubeSettings, names: Names, namespace: str
) -> list[dict[str, Any]]:
    """Every object of ``plan``'s engine, in the order they are applied (each unit's
    Secret and shared files, then its Deployment; the API's Service)."""
    if not plan.images:
        raise ConfigError(
            f"engine {plan.config.display_name!r}: kind {plan.config.kind} has no image to "
            "run in the kubernetes runtime"
        )
    out: list[dict[str, Any]] = []
    for index in range(len(plan.images)):
        out.extend(unit_objects(plan, index, settings, names, namespace))
    return out


def service_url(service: str, namespace: str, port: int) -> str:
    """The engine's URL from a pod of the cluster: its Service's DNS name."""
    return f"http://{service}.{namespace}.svc:{port}"


def selector_of(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The label selectors of the pods of each Deployment in ``objects``."""
    out = []
    for obj in objects:
        if obj["kind"] == "Deployment":
            match = obj["spec"]["selector"]["matchLabels"]
            out.append(",".join(f"{k}={v}" for k, v in sorted(match.items())))
    return out
