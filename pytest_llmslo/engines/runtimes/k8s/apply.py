"""Applying and deleting the engine's objects: create, or, when the object exists
already, a server-side apply (field manager ``pytest-llmslo``); delete with its
dependents, gone already being fine. The error text the API server gave, for messages."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from .client import Cluster
from .manifests import MANAGER


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None)


_CREATE = {
    "ConfigMap": ("core", "create_namespaced_config_map", "patch_namespaced_config_map"),
    "Service": ("core", "create_namespaced_service", "patch_namespaced_service"),
    "Deployment": ("apps", "create_namespaced_deployment", "patch_namespaced_deployment"),
    "Job": ("batch", "create_namespaced_job", "patch_namespaced_job"),
}
_DELETE = {
    "ConfigMap": ("core", "delete_namespaced_config_map"),
    "Service": ("core", "delete_namespaced_service"),
    "Deployment": ("apps", "delete_namespaced_deployment"),
    "Job": ("batch", "delete_namespaced_job"),
}


def apply(where: Cluster, obj: Mapping[str, Any]) -> None:
    """Create ``obj``; when it exists already, apply it server-side (field manager
    ``pytest-llmslo``, taking over its fields)."""
    api_name, create, patch = _CREATE[obj["kind"]]
    api = getattr(where, api_name)
    ns = obj["metadata"]["namespace"]
    try:
        getattr(api, create)(ns, obj, _preload_content=False)
    except Exception as exc:
        if _status(exc) != 409:
            raise
        getattr(api, patch)(
            obj["metadata"]["name"], ns, obj, field_manager=MANAGER, force=True,
            _content_type="application/apply-patch+yaml", _preload_content=False,
        )  # fmt: skip


def delete(where: Cluster, obj: Mapping[str, Any]) -> None:
    """Delete ``obj`` and what it owns (its ReplicaSets and pods); gone already is fine."""
    api_name, method = _DELETE[obj["kind"]]
    try:
        getattr(getattr(where, api_name), method)(
            obj["metadata"]["name"], obj["metadata"]["namespace"], propagation_policy="Background"
        )
    except Exception as exc:
        if _status(exc) != 404:
            raise


def reason_of(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    with contextlib.suppress(Exception):
        return str(json.loads(body)["message"])[:500]
    return f"{type(exc).__name__}: {str(exc)[:300]}"
