"""The ``kubernetes`` table of an engine's config: where and how the kubernetes runtime
puts the engine (namespace, cluster, nodes, cache, secrets, access, teardown).

Read and checked here without the Kubernetes client library, so that a bad table is a
``ConfigError`` when the config is read, on a machine without the ``k8s`` extra too::

    [engines.vllm-k8s]
    kind = "vllm"
    runtime = "kubernetes"
    model = "meta-llama/Llama-3.1-8B-Instruct"
    kubernetes = { namespace = "bench", cache_pvc = "hf-cache",
                   secret_env = { HF_TOKEN = "hf-token/token" } }
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ....errors import ConfigError
from ...base import EngineConfig
from .pod_settings import POD_KEYS, PodSettings, pod_settings

#: The kinds the kubernetes runtime runs: an image unit as a Deployment and a Service (a
#: LeaderWorkerSet across ``nodes``), Dynamo as a DynamoGraphDeployment, a user's own
#: manifests as they are.
KUBERNETES_KINDS: tuple[str, ...] = ("sim", "vllm", "sglang", "trtllm", "dynamo", "manifests")

#: The kinds that run across several nodes (``nodes`` > 1) as a LeaderWorkerSet.
MULTI_NODE_KINDS: tuple[str, ...] = ("vllm", "sglang", "trtllm")

#: How the harness reaches the engine: ``service`` (the Service's cluster DNS name, from a
#: pod in the cluster) or ``port-forward`` (through the API server, from anywhere).
ACCESS_PATHS: tuple[str, ...] = ("service", "port-forward")

TOLERATION_KEYS: tuple[str, ...] = ("key", "operator", "value", "effect", "tolerationSeconds")
TOLERATION_OPERATORS: tuple[str, ...] = ("Exists", "Equal")
#: The DynamoGraphDeployment versions the runtime writes (``dgd_versions``).
DYNAMO_APIS: tuple[str, ...] = ("v1alpha1", "v1beta1")
TOLERATION_EFFECTS: tuple[str, ...] = ("NoSchedule", "PreferNoSchedule", "NoExecute")

#: The keys of the ``kubernetes`` table, with their help.
KUBERNETES_KEYS: Mapping[str, str] = {
    "namespace": "namespace of the engine's objects (default: the context's, else 'default')",
    "kubeconfig": "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)",
    "context": "kubeconfig context (default: the current one)",
    "node_selector": "table of node labels the engine's pod must run on",
    "tolerations": "list of tolerations {key, operator, value, effect, tolerationSeconds}",
    "cache_pvc": "PersistentVolumeClaim holding the Hugging Face cache (shared across runs)",
    "cache_host_path": "node directory holding the Hugging Face cache (instead of cache_pvc)",
    "secret_env": "table NAME = 'secret/key': environment variables read from Secrets "
    "(a secretKeyRef, never a literal value), e.g. HF_TOKEN = 'hf-token/token'",
    "keep_engines": "true: leave the engine's objects in the cluster after the run (debugging)",
    "access": "how the harness reaches the engine: 'service' (the Service's cluster DNS "
    "name, from a pod in the cluster; the default there) or 'port-forward' (through the "
    "API server; the default outside a cluster)",
    "service_account": "service account of the engine's pod (default: the namespace's)",
    "nodes": "nodes one copy of the engine spans (vllm, sglang, trtllm): more than 1 runs it "
    "as a LeaderWorkerSet, tensor parallel within a node and pipeline (vLLM) or tensor "
    "(SGLang, TRT-LLM under MPI) parallel across nodes",
    "ssh_secret": "kind trtllm with nodes > 1: the Secret holding the SSH keypair (keys "
    "private.key, private.key.pub) mpirun reaches the workers with (a reference, never the key)",
    "manifests": "kind manifests: a YAML file or a directory of YAML files to apply as they are",
    "service": "kind manifests: the Service (one of the manifests, or one already there) "
    "whose port the harness reaches the engine at",
    "reap_after_s": "seconds: before the first engine in a namespace, delete what sessions "
    "older than this left there (their ConfigMap, and all it owns); unset: never",
    "dynamo_api": "kind dynamo: the DynamoGraphDeployment's version, 'v1alpha1' or 'v1beta1' "
    "(default: v1alpha1 where the cluster serves it, else v1beta1; llmslo render: v1alpha1)",
    **POD_KEYS,
}


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """The ``kubernetes`` table, checked. ``secret_env`` maps a variable to its Secret's
    ``(name, key)``."""

    namespace: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    cache_pvc: str | None = None
    cache_host_path: str | None = None
    secret_env: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    keep_engines: bool = False
    access: str | None = None
    service_account: str | None = None
    reap_after_s: float | None = None
    nodes: int = 1
    manifests: str | None = None
    service: str | None = None
    ssh_secret: str | None = None
    dynamo_api: str | None = None
    pod: PodSettings = field(default_factory=PodSettings)

    def access_path(self) -> str:
        """``access``, or by default ``service`` in a pod of a cluster and
        ``port-forward`` elsewhere."""
        if self.access:
            return self.access
        return "service" if os.environ.get("KUBERNETES_SERVICE_HOST") else "port-forward"


def _str(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: kubernetes.{key}={value!r} is not valid: expected a string")
    return value


def _str_table(table: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = table.get(key, {})
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(
            f"{where}: kubernetes.{key}={value!r} is not valid: expected a table of strings"
        )
    return dict(value)


def _toleration(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise ConfigError(f"{where}: kubernetes.tolerations: {item!r} is not a table")
    unknown = sorted(set(item) - set(TOLERATION_KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: kubernetes.tolerations: unknown key(s) {', '.join(unknown)}. "
            f"Valid keys: {', '.join(TOLERATION_KEYS)}"
        )
    op = item.get("operator", "Equal")
    if op not in TOLERATION_OPERATORS:
        raise ConfigError(
            f"{where}: kubernetes.tolerations: operator={op!r} is not valid. "
            f"Valid operators: {', '.join(TOLERATION_OPERATORS)}"
        )
    effect = item.get("effect")
    if effect is not None and effect not in TOLERATION_EFFECTS:
        raise ConfigError(
            f"{where}: kubernetes.tolerations: effect={effect!r} is not valid. "
            f"Valid effects: {', '.join(TOLERATION_EFFECTS)}"
        )
    seconds = item.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        raise ConfigError(f"{where}: kubernetes.tolerations: tolerationSeconds must be an integer")
    return dict(item)


def _secret_env(table: Mapping[str, Any], where: str) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for var, ref in _str_table(table, "secret_env", where).items():
        name, slash, key = ref.partition("/")
        if not slash or not name or not key:
            raise ConfigError(
                f"{where}: kubernetes.secret_env.{var}={ref!r} is not valid: expected "
                "'SECRET/KEY' (the Secret's name and the key holding the value)"
            )
        out[var] = (name, key)
    return out


def kube_settings(table: Mapping[str, Any], where: str = "config") -> KubeSettings:
    """The checked settings of a ``kubernetes`` table; ``ConfigError`` naming the key and
    the valid choices for anything wrong."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: kubernetes must be a table")
    unknown = sorted(set(table) - set(KUBERNETES_KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown kubernetes key(s) {', '.join(unknown)}. "
            f"Valid keys: {', '.join(sorted(KUBERNETES_KEYS))}"
        )
    tolerations = table.get("tolerations", [])
    if not isinstance(tolerations, (list, tuple)):
        raise ConfigError(f"{where}: kubernetes.tolerations must be a list of tables")
    access = _str(table, "access", where)
    if access is not None and access not in ACCESS_PATHS:
        raise ConfigError(
            f"{where}: kubernetes.access={access!r} is not valid. "
            f"Valid access paths: {', '.join(ACCESS_PATHS)}"
        )
    keep = table.get("keep_engines", False)
    if not isinstance(keep, bool):
        raise ConfigError(f"{where}: kubernetes.keep_engines={keep!r} is not valid: true or false")
    reap = table.get("reap_after_s")
    if reap is not None and (isinstance(reap, bool) or not isinstance(reap, (int, float))):
        raise ConfigError(f"{where}: kubernetes.reap_after_s={reap!r} is not valid: seconds")
    if reap is not None and reap <= 0:
        raise ConfigError(f"{where}: kubernetes.reap_after_s={reap!r} is not valid: must be > 0")
    dynamo_api = _str(table, "dynamo_api", where)
    if dynamo_api is not None and dynamo_api not in DYNAMO_APIS:
        raise ConfigError(
            f"{where}: kubernetes.dynamo_api={dynamo_api!r} is not valid. "
            f"Valid versions: {', '.join(DYNAMO_APIS)} (unset: the one the cluster serves)"
        )
    nodes = table.get("nodes", 1)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"{where}: kubernetes.nodes={nodes!r} is not valid: an integer >= 1")
    settings = KubeSettings(
        nodes=nodes,
        manifests=_str(table, "manifests", where),
        service=_str(table, "service", where),
        ssh_secret=_str(table, "ssh_secret", where),
        dynamo_api=dynamo_api,
        namespace=_str(table, "namespace", where),
        kubeconfig=_str(table, "kubeconfig", where),
        context=_str(table, "context", where),
        node_selector=_str_table(table, "node_selector", where),
        tolerations=tuple(_toleration(t, where) for t in tolerations),
        cache_pvc=_str(table, "cache_pvc", where),
        cache_host_path=_str(table, "cache_host_path", where),
        secret_env=_secret_env(table, where),
        keep_engines=keep,
        access=access,
        service_account=_str(table, "service_account", where),
        reap_after_s=float(reap) if reap is not None else None,
        pod=pod_settings(table, where, nodes),
    )
    if settings.cache_pvc and settings.cache_host_path:
        raise ConfigError(
            f"{where}: kubernetes.cache_pvc and kubernetes.cache_host_path are both set: "
            "choose one cache volume"
        )
    if settings.cache_host_path and not settings.cache_host_path.startswith("/"):
        raise ConfigError(
            f"{where}: kubernetes.cache_host_path={settings.cache_host_path!r} must be an "
            "absolute path on the node"
        )
    return settings


def missing_secret(nodes: int) -> str:
    """What to do when TRT-LLM across nodes has no SSH Secret."""
    return (
        f"kind 'trtllm' with kubernetes.nodes={nodes} needs kubernetes.ssh_secret: it runs "
        "under MPI, whose leader reaches the workers over SSH. Set kubernetes.ssh_secret = "
        '"NAME", a Secret holding an SSH keypair as keys private.key and private.key.pub, '
        "made once per namespace with: "
        "ssh-keygen -t ed25519 -N '' -f llmslo-ssh && kubectl -n NAMESPACE create secret "
        "generic NAME --from-file=private.key=llmslo-ssh "
        "--from-file=private.key.pub=llmslo-ssh.pub"
    )


def settings_of(config: EngineConfig) -> KubeSettings:
    """The checked ``kubernetes`` table of ``config``."""
    return kube_settings(config.kubernetes, f"engine {config.display_name!r}")


def check_kind(kind: str, where: str, table: Mapping[str, Any] | None = None) -> None:
    """``ConfigError`` when the kubernetes runtime does not run ``kind`` (yet), or not as
    the ``kubernetes`` table asks (several nodes, manifests)."""
    if kind not in KUBERNETES_KINDS:
        raise ConfigError(
            f"{where}: runtime='kubernetes' does not run kind {kind!r} yet. "
            f"Kinds it runs: {', '.join(KUBERNETES_KINDS)}"
        )
    settings = kube_settings(table or {}, where)
    if settings.nodes > 1 and kind not in MULTI_NODE_KINDS:
        raise ConfigError(
            f"{where}: kubernetes.nodes={settings.nodes}: kind {kind!r} does not run across "
            f"nodes here. Kinds that do (as a LeaderWorkerSet): {', '.join(MULTI_NODE_KINDS)}"
        )
    if kind == "trtllm" and settings.nodes > 1 and not settings.ssh_secret:
        raise ConfigError(f"{where}: {missing_secret(settings.nodes)}")
    if (kind == "manifests") != bool(settings.manifests):
        raise ConfigError(
            f"{where}: kubernetes.manifests is the YAML of kind 'manifests' (and only of it): "
            'set kind = "manifests" with kubernetes.manifests = "PATH" and '
            'kubernetes.service = "SERVICE"'
        )
    if kind == "manifests" and not settings.service:
        raise ConfigError(
            f"{where}: kind 'manifests' needs kubernetes.service, the Service the harness "
            "reaches the engine at"
        )
