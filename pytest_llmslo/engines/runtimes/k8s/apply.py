"""Requests on any object of the API, by its ``apiVersion`` and ``kind``: create, or, when
the object exists already, a server-side apply (field manager ``pytest-llmslo``); read;
a merge patch (a scale); delete with its dependents, gone already being fine. Built-in
kinds and custom resources (a ``DynamoGraphDeployment``, a ``LeaderWorkerSet``, a user's
own) go the same way: the REST path is made from the group, version and plural, as the
API server serves them. The error text the API server gave, for messages."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from .deployments import MANAGER
from .kubeclient import Cluster, kubernetes_module

#: Plurals that are not the lowercase kind plus ``s``.
_PLURALS: Mapping[str, str] = {
    "Ingress": "ingresses",
    "NetworkPolicy": "networkpolicies",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Endpoints": "endpoints",
    "PriorityClass": "priorityclasses",
    "StorageClass": "storageclasses",
}


def plural(kind: str) -> str:
    """The resource name of ``kind`` (``Deployment`` -> ``deployments``)."""
    if kind in _PLURALS:
        return _PLURALS[kind]
    low = kind.lower()
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + ("es" if low.endswith(("s", "x", "ch", "sh")) else "s")


def path_of(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """The REST path of the collection of ``kind`` in ``namespace`` (of the object
    ``name`` when given): ``/api/v1/...`` for the core group, ``/apis/GROUP/VERSION/...``
    otherwise."""
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{root}/namespaces/{namespace}/{plural(kind)}"
    return f"{path}/{name}" if name else path


def where_of(obj: Mapping[str, Any], name: bool = True) -> str:
    meta = obj["metadata"]
    return path_of(
        obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"] if name else None
    )


def request(
    where: Cluster,
    method: str,
    path: str,
    body: Any = None,
    query: Mapping[str, str] | None = None,
    content_type: str = "application/json",
) -> Any:
    """One request to the API server; its JSON answer. ``ApiException`` (its ``status``
    and ``body``) when the answer is not a success."""
    api = where.api
    params = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=list((query or {}).items()),
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*params)
    response.read()
    if not 200 <= response.status < 300:
        raise kubernetes_module().client.ApiException(http_resp=response)
    return json.loads(response.data or b"null")


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None)


def apply(where: Cluster, obj: Mapping[str, Any]) -> Any:
    """Create ``obj``; when it exists already, apply it server-side (field manager
    ``pytest-llmslo``, taking over its fields). The object as the API server keeps it."""
    try:
        return request(where, "POST", where_of(obj, name=False), obj)
    except Exception as exc:
        if _status(exc) != 409:
            raise
    return request(
        where, "PATCH", where_of(obj), obj, {"fieldManager": MANAGER, "force": "true"},
        "application/apply-patch+yaml",
    )  # fmt: skip


def get(where: Cluster, obj: Mapping[str, Any]) -> Any:
    """The object as the API server keeps it now (its status), or None when gone."""
    try:
        return request(where, "GET", where_of(obj))
    except Exception as exc:
        if _status(exc) == 404:
            return None
        raise


def merge_patch(where: Cluster, obj: Mapping[str, Any], patch: Mapping[str, Any]) -> Any:
    """A JSON merge patch of ``obj`` (``spec.replicas`` for a scale)."""
    return request(where, "PATCH", where_of(obj), patch, None, "application/merge-patch+json")


def delete(where: Cluster, obj: Mapping[str, Any]) -> None:
    """Delete ``obj`` and what it owns (its ReplicaSets and pods); gone already is fine."""
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    try:
        request(where, "DELETE", where_of(obj), body)
    except Exception as exc:
        if _status(exc) != 404:
            raise


def reason_of(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    with contextlib.suppress(Exception):
        return str(json.loads(body or "")["message"])[:500]
    return f"{type(exc).__name__}: {str(exc)[:300]}"
