"""The connection to a cluster: the Kubernetes client library (the ``k8s`` extra, imported
here only, and only when an engine uses the kubernetes runtime), the kubeconfig or the
in-cluster service account, and the namespace.

The library is the official ``kubernetes`` client: synchronous like the session, with
the port-forward and watch of the API itself, server-side apply as a PATCH of type
``application/apply-patch+yaml`` on the typed APIs, and custom resources as plain dicts
(``CustomObjectsApi``).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....errors import EngineUnavailable
from .settings import KubeSettings

INSTALL_HINT = "pip install 'pytest-llmslo[k8s]'"


def json_of(response: Any) -> Any:
    """The JSON of a response read with ``_preload_content=False`` (plain dicts: the
    runtime reads the API's objects as the API writes them)."""
    return json.loads(response.data or b"null")


def kubernetes_module() -> Any:
    """The ``kubernetes`` package, or ``EngineUnavailable`` saying how to install it."""
    try:
        import kubernetes
    except ImportError:
        raise EngineUnavailable(
            "runtime 'kubernetes' needs the Kubernetes client library, which is not "
            f"installed: {INSTALL_HINT}"
        ) from None
    return kubernetes


@dataclass(frozen=True, slots=True)
class Cluster:
    """A connected client and the namespace the engine's objects go to."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str

    @property
    def core(self) -> Any:
        return kubernetes_module().client.CoreV1Api(self.api)

    @property
    def apps(self) -> Any:
        return kubernetes_module().client.AppsV1Api(self.api)

    @property
    def batch(self) -> Any:
        return kubernetes_module().client.BatchV1Api(self.api)


_lock = threading.Lock()
_clients: dict[tuple[str | None, str | None], tuple[Any, str | None]] = {}


def _kubeconfig(settings: KubeSettings) -> str | None:
    if settings.kubeconfig:
        return os.path.expanduser(settings.kubeconfig)
    if os.environ.get("KUBECONFIG"):
        return os.environ["KUBECONFIG"]
    default = Path.home() / ".kube" / "config"
    return str(default) if default.exists() else None


def _connect(settings: KubeSettings) -> tuple[Any, str | None]:
    """A client for the settings' kubeconfig and context (or the in-cluster account) and
    the namespace the context names."""
    k8s = kubernetes_module()
    cfg = k8s.client.Configuration()
    path = _kubeconfig(settings)
    namespace: str | None = None
    try:
        if path:
            k8s.config.load_kube_config(
                config_file=path, context=settings.context, client_configuration=cfg
            )
            _all, active = k8s.config.list_kube_config_contexts(config_file=path)
            if settings.context:
                active = next((c for c in _all if c.get("name") == settings.context), active)
            namespace = (active or {}).get("context", {}).get("namespace")
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s.config.load_incluster_config(client_configuration=cfg)
            ns_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            namespace = ns_file.read_text().strip() if ns_file.exists() else None
        else:
            raise EngineUnavailable(
                "runtime 'kubernetes': no cluster configured (set KUBECONFIG, or "
                "kubernetes.kubeconfig in the engine's config, or run in a pod)"
            )
    except EngineUnavailable:
        raise
    except Exception as exc:
        raise EngineUnavailable(
            f"runtime 'kubernetes': cannot load the cluster's configuration from "
            f"{path or 'the in-cluster service account'}: {type(exc).__name__}: {exc}"
        ) from None
    return k8s.client.ApiClient(cfg), namespace


def cluster(settings: KubeSettings) -> Cluster:
    """The cluster of ``settings`` (one client per kubeconfig and context per process)."""
    key = (_kubeconfig(settings), settings.context)
    with _lock:
        if key not in _clients:
            _clients[key] = _connect(settings)
        api, namespace = _clients[key]
    return Cluster(api=api, namespace=settings.namespace or namespace or "default")


def forget_clients() -> None:
    """Drop the cached clients (tests point KUBECONFIG at a new server)."""
    with _lock:
        _clients.clear()
