"""The least privilege the kubernetes runtime needs in the engines' namespace: every verb
it uses on every resource, and nothing else (a test drives the runtime against kmock and
checks each request it made against these rules). A user's own manifests (kind
``manifests``) need the Role extended with create, patch and delete on their kinds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: (API group, resource or resource/subresource, verbs).
RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # The session's ConfigMap and the files a unit shares; apply falls back to patch;
    # the reaper lists the sessions' ConfigMaps (reap_after_s).
    ("", "configmaps", ("create", "patch", "delete", "list")),
    # Every object is owned by the session's ConfigMap with blockOwnerDeletion: under the
    # OwnerReferencesPermissionEnforcement admission plugin (OpenShift, hardened
    # clusters) that takes update on the owner's finalizers, and delete on the object.
    ("", "configmaps/finalizers", ("update",)),
    # A Service is read for the selector and port of a user's manifests' Service.
    ("", "services", ("create", "patch", "delete", "get")),
    # patch is also the scale of a running engine (spec.replicas).
    ("apps", "deployments", ("create", "patch", "delete")),
    # Multi-node engines; Dynamo, whose Ready condition is read (get).
    ("leaderworkerset.x-k8s.io", "leaderworkersets", ("create", "patch", "delete")),
    ("nvidia.com", "dynamographdeployments", ("create", "patch", "delete", "get")),
    # The remote load workers' Indexed Job (workerjob.py, --worker-image).
    ("batch", "jobs", ("create", "patch", "delete")),
    # The Secrets the runtime makes and deletes: the workers' key, made for their Job
    # (workerjob.py), and a unit's harness-made secrets, e.g. the sim's admin token
    # (deployments.unit_secret).
    ("", "secrets", ("create", "patch", "delete")),
    # Readiness and failures: the engine's pods, their logs, the namespace's events;
    # delete: kill and restart one pod of a running engine.
    ("", "pods", ("list", "delete")),
    ("", "pods/log", ("get",)),
    ("", "events", ("list",)),
    # access = "port-forward": the websocket is a GET upgraded; RBAC asks for create
    # (and get, since Kubernetes 1.30's websocket port-forward).
    ("", "pods/portforward", ("get", "create")),
)


def role(namespace: str, name: str = "pytest-llmslo") -> dict[str, Any]:
    """The Role to bind to whoever runs the harness in ``namespace``."""
    rules: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for group, resource, verbs in RULES:
        rules.setdefault((group, verbs), []).append(resource)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [
            {"apiGroups": [group], "resources": resources, "verbs": list(verbs)}
            for (group, verbs), resources in rules.items()
        ],
    }


def allowed(group: str, resource: str, verb: str, rules: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``rules`` (a Role's) allow ``verb`` on ``group``/``resource``."""
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules
    )
