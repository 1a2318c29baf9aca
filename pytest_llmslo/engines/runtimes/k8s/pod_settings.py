"""The pod settings a production cluster asks of an engine's pods, as keys of the
``kubernetes`` table, read and checked here (a ``ConfigError`` naming the key and what
it takes) and written into every pod the runtime makes (a Deployment's, a
LeaderWorkerSet's leader and workers, a DynamoGraphDeployment's services):

- ``image_pull_secrets``: names of Secrets holding registry credentials
  (``imagePullSecrets``);
- ``runtime_class_name``: the RuntimeClass the pods run under (``runtimeClassName``,
  e.g. ``nvidia`` where the NVIDIA runtime is not the node's default);
- ``resources``: ``{requests = {cpu, memory, ...}, limits = {...}}`` of the engine's
  container, besides the GPUs the runtime sets itself (an extended resource such as an
  RDMA device, e.g. ``rdma/ib``, is given in both with the same value, as Kubernetes
  wants);
- ``shm_size``: the size of ``/dev/shm`` (NCCL's shared-memory transport wants several
  GiB; a quantity ``16Gi`` or a docker size ``16g``);
- ``security_context``: the pod's ``securityContext``, keys as in the PodSpec
  (``runAsUser``, ``runAsGroup``, ``runAsNonRoot``, ``fsGroup``, ``fsGroupChangePolicy``,
  ``supplementalGroups``, ``seccompProfile``);
- ``capabilities``: Linux capabilities added to the engine's container (``IPC_LOCK`` to
  pin memory for RDMA across nodes);
- ``affinity``: the pod's ``affinity`` as in the PodSpec (``nodeAffinity``,
  ``podAffinity``, ``podAntiAffinity``);
- ``exclusive_topology`` (``nodes`` > 1): a topology key (e.g.
  ``cloud.google.com/gke-nodepool``, a rack or NVLink domain label): each LeaderWorkerSet
  group gets a domain of its own, through LWS's
  ``leaderworkerset.sigs.k8s.io/exclusive-topology`` annotation;
- ``queue_name``: the Kueue LocalQueue that admits the engine, as the label
  ``kueue.x-k8s.io/queue-name`` on its workload object (Kueue admits a Deployment's pods,
  and each LeaderWorkerSet group as a whole with its ``LeaderWorkerSet`` integration);
- ``scheduler_name``, ``pod_labels``, ``pod_annotations``: the pods' ``schedulerName``
  and extra labels and annotations, for a gang scheduler that reads its own (Volcano's
  queue annotation, KAI's queue label); the runtime's own labels cannot be overridden.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ....errors import ConfigError

#: The keys of the ``kubernetes`` table this module reads, with their help.
POD_KEYS: Mapping[str, str] = {
    "image_pull_secrets": "list of Secret names holding registry credentials (imagePullSecrets)",
    "runtime_class_name": "RuntimeClass of the pods (runtimeClassName), e.g. 'nvidia'",
    "resources": "requests and limits of the engine's container besides its GPUs: "
    "{requests = {cpu = '8', memory = '64Gi'}, limits = {memory = '64Gi'}}",
    "shm_size": "size of /dev/shm (a memory-backed emptyDir), e.g. '16Gi'",
    "security_context": "the pod's securityContext, keys as in the PodSpec "
    "(runAsUser, runAsGroup, runAsNonRoot, fsGroup, fsGroupChangePolicy, "
    "supplementalGroups, seccompProfile)",
    "capabilities": "Linux capabilities added to the engine's container, e.g. ['IPC_LOCK']",
    "affinity": "the pod's affinity as in the PodSpec (nodeAffinity, podAffinity, podAntiAffinity)",
    "exclusive_topology": "nodes > 1: a node label key; each LeaderWorkerSet group gets a "
    "domain of that label of its own (LWS's exclusive-topology annotation)",
    "queue_name": "Kueue LocalQueue admitting the engine (label kueue.x-k8s.io/queue-name)",
    "scheduler_name": "the pods' schedulerName (a gang scheduler: volcano, kai-scheduler, ...)",
    "pod_labels": "table of extra labels of the pods (a scheduler's queue label, ...)",
    "pod_annotations": "table of extra annotations of the pods",
}

EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Label prefixes that are the runtime's (or LWS's, or the Dynamo operator's, which its
#: selectors read) and may not be set by pod_labels.
OWN_LABELS = (
    "llmslo.io/", "app.kubernetes.io/", "leaderworkerset.sigs.k8s.io/", "nvidia.com/dynamo-",
)  # fmt: skip
GPU_RESOURCE = "nvidia.com/gpu"
SECURITY_KEYS: Mapping[str, type] = {
    "runAsUser": int, "runAsGroup": int, "runAsNonRoot": bool, "fsGroup": int,
    "fsGroupChangePolicy": str, "supplementalGroups": list, "seccompProfile": dict,
}  # fmt: skip
FS_GROUP_POLICIES = ("Always", "OnRootMismatch")
AFFINITY_KEYS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
#: A qualified name (``[prefix/]name``): a resource name, a label key.
_QUALIFIED = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_CAPABILITY = re.compile(r"^[A-Z][A-Z_]*$")
_STANDARD = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class PodSettings:
    """The checked pod settings (module docstring); empty ones add nothing."""

    image_pull_secrets: tuple[str, ...] = ()
    runtime_class_name: str | None = None
    requests: Mapping[str, str] = field(default_factory=dict)
    limits: Mapping[str, str] = field(default_factory=dict)
    shm_size: str | None = None
    security_context: Mapping[str, Any] = field(default_factory=dict)
    capabilities: tuple[str, ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    exclusive_topology: str | None = None
    queue_name: str | None = None
    scheduler_name: str | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)

    def workload_labels(self) -> dict[str, str]:
        """Labels of the workload object (the Deployment, the LeaderWorkerSet, the DGD)."""
        return {QUEUE_LABEL: self.queue_name} if self.queue_name else {}


def _bad(where: str, key: str, value: Any, expected: str) -> ConfigError:
    return ConfigError(f"{where}: kubernetes.{key}={value!r} is not valid: expected {expected}")


def _names(
    table: Mapping[str, Any], key: str, where: str, pattern: re.Pattern[str]
) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, str) and pattern.match(v) for v in value
    ):
        what = "Secret names" if key == "image_pull_secrets" else "capability names like IPC_LOCK"
        raise _bad(where, key, value, f"a list of {what}")
    return tuple(value)


def _quantities(value: Any, key: str, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _bad(where, key, value, "a table of resource = quantity, e.g. {cpu = '8'}")
    out: dict[str, str] = {}
    for name, qty in value.items():
        text = str(qty) if isinstance(qty, (int, float)) and not isinstance(qty, bool) else qty
        if not isinstance(name, str) or not _QUALIFIED.match(name):
            raise _bad(where, f"{key}.{name}", qty, "a resource name (cpu, memory, rdma/ib)")
        if name == GPU_RESOURCE:
            raise ConfigError(
                f"{where}: kubernetes.{key}.{GPU_RESOURCE} is set by the runtime from "
                "tensor_parallel_size (or gpus): set those instead"
            )
        if not isinstance(text, str) or not _QUANTITY.match(text):
            raise _bad(where, f"{key}.{name}", qty, "a quantity like 8, 500m, 64Gi")
        out[name] = text
    return out


def _resources(table: Mapping[str, Any], where: str) -> tuple[dict[str, str], dict[str, str]]:
    value = table.get("resources", {})
    if not isinstance(value, Mapping) or set(value) - {"requests", "limits"}:
        raise _bad(where, "resources", value, "a table with requests and/or limits")
    requests = _quantities(value.get("requests", {}), "resources.requests", where)
    limits = _quantities(value.get("limits", {}), "resources.limits", where)
    for name in set(requests) | set(limits):
        extended = name not in _STANDARD and not name.startswith("hugepages-")
        if extended and requests.get(name, limits.get(name)) != limits.get(
            name, requests.get(name)
        ):
            raise ConfigError(
                f"{where}: kubernetes.resources: {name} is an extended resource, whose "
                "request must equal its limit: give the same value in both"
            )
    return requests, limits


def _security(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    value = table.get("security_context", {})
    if not isinstance(value, Mapping):
        raise _bad(where, "security_context", value, "a table")
    for key, item in value.items():
        kind = SECURITY_KEYS.get(key)
        if kind is None:
            raise ConfigError(
                f"{where}: kubernetes.security_context: unknown key {key!r}. "
                f"Valid keys: {', '.join(SECURITY_KEYS)}"
            )
        if not isinstance(item, kind) or (kind is int and isinstance(item, bool)):
            raise _bad(where, f"security_context.{key}", item, kind.__name__)
    policy = value.get("fsGroupChangePolicy")
    if policy is not None and policy not in FS_GROUP_POLICIES:
        raise _bad(where, "security_context.fsGroupChangePolicy", policy,
                   " or ".join(FS_GROUP_POLICIES))  # fmt: skip
    return dict(value)


def _affinity(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    value = table.get("affinity", {})
    if not isinstance(value, Mapping) or not all(
        k in AFFINITY_KEYS and isinstance(v, Mapping) for k, v in value.items()
    ):
        raise _bad(where, "affinity", value, f"a table of {', '.join(AFFINITY_KEYS)} tables")
    return dict(value)


def _optional(
    table: Mapping[str, Any], key: str, where: str, pattern: re.Pattern[str]
) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not pattern.match(value)):
        raise _bad(where, key, value, "a label key" if key == "exclusive_topology" else "a name")
    return value


def quantity(size: str) -> str:
    """A docker size (``16g``, ``512m``) as a Kubernetes quantity (``16Gi``, ``512Mi``)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", size.lower())
    if not m:
        raise ConfigError(f"shared memory size {size!r} is not a size like 16g or 512m")
    unit = {"": "", "k": "Ki", "m": "Mi", "g": "Gi", "t": "Ti"}[m.group(2)]
    return f"{m.group(1)}{unit}"


def _table(table: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = table.get(key, {})
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and _QUALIFIED.match(k) and isinstance(v, str) for k, v in value.items()
    ):
        raise _bad(where, key, value, "a table of key = 'string' (keys like example.com/name)")
    own = sorted(k for k in value if k.startswith(OWN_LABELS))
    if key == "pod_labels" and own:
        raise ConfigError(
            f"{where}: kubernetes.pod_labels: {', '.join(own)} are the runtime's own labels "
            f"({', '.join(OWN_LABELS)}...): choose other keys"
        )
    return dict(value)


def pod_settings(table: Mapping[str, Any], where: str, nodes: int = 1) -> PodSettings:
    """The checked pod settings of a ``kubernetes`` table."""
    requests, limits = _resources(table, where)
    shm = table.get("shm_size")
    if shm is not None:
        if not isinstance(shm, str):
            raise _bad(where, "shm_size", shm, "a size like 16Gi")
        shm = shm if _QUANTITY.match(shm) else quantity(shm)
    topology = _optional(table, "exclusive_topology", where, _QUALIFIED)
    if topology and nodes < 2:
        raise ConfigError(
            f"{where}: kubernetes.exclusive_topology places LeaderWorkerSet groups: it "
            "needs kubernetes.nodes > 1"
        )
    return PodSettings(
        image_pull_secrets=_names(table, "image_pull_secrets", where, _NAME),
        runtime_class_name=_optional(table, "runtime_class_name", where, _NAME),
        requests=requests,
        limits=limits,
        shm_size=shm,
        security_context=_security(table, where),
        capabilities=_names(table, "capabilities", where, _CAPABILITY),
        affinity=_affinity(table, where),
        exclusive_topology=topology,
        queue_name=_optional(table, "queue_name", where, _NAME),
        scheduler_name=_optional(table, "scheduler_name", where, _NAME),
        pod_labels=_table(table, "pod_labels", where),
        pod_annotations=_table(table, "pod_annotations", where),
    )


def apply_to_pod(spec: dict[str, Any], pod: PodSettings) -> None:
    """Write the pod-level settings into a PodSpec (or Dynamo's ``extraPodSpec``)."""
    if pod.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in pod.image_pull_secrets]
    if pod.runtime_class_name:
        spec["runtimeClassName"] = pod.runtime_class_name
    if pod.security_context:
        spec["securityContext"] = {**spec.get("securityContext", {}), **pod.security_context}
    if pod.affinity:
        spec["affinity"] = dict(pod.affinity)
    if pod.scheduler_name:
        spec["schedulerName"] = pod.scheduler_name


def apply_to_container(container: dict[str, Any], pod: PodSettings) -> None:
    """Write the container-level settings (resources, capabilities) into a Container."""
    resources = container.setdefault("resources", {})
    if pod.requests:
        resources["requests"] = {**resources.get("requests", {}), **pod.requests}
    if pod.limits:
        resources["limits"] = {**pod.limits, **resources.get("limits", {})}
    if not resources:
        del container["resources"]
    if pod.capabilities:
        context = container.setdefault("securityContext", {})
        context["capabilities"] = {"add": list(pod.capabilities)}


def template_metadata(labels: Mapping[str, str], pod: PodSettings) -> dict[str, Any]:
    """A pod template's metadata: the runtime's ``labels`` over ``pod_labels``, and the
    ``pod_annotations``."""
    out: dict[str, Any] = {"labels": {**pod.pod_labels, **labels}}
    if pod.pod_annotations:
        out["annotations"] = dict(pod.pod_annotations)
    return out
