"""The two API versions of the ``DynamoGraphDeployment`` and which one a cluster gets.

Dynamo's operator serves ``nvidia.com/v1alpha1`` and ``nvidia.com/v1beta1``; ``v1beta1``
is its storage and conversion hub version, ``v1alpha1`` is converted by its webhook and
deprecated (ai-dynamo/dynamo ``deploy/operator/api/v1beta1/hub.go`` @ ``47b9122b``,
``dynamographdeployment_types.go`` @ ``0fddc01b`` (``+kubebuilder:storageversion``), and
``config/crd/bases/nvidia.com_dynamographdeployments.yaml`` @ ``01cc1c3b``, whose
``v1alpha1`` block says ``deprecated: true``). Older operators serve ``v1alpha1`` alone.

The runtime renders ``v1alpha1`` (``dgd.dgd_object``) and converts it here into the
``v1beta1`` shape, as the operator's webhook converts it the other way
(``dynamocomponentdeployment_types.go`` @ ``006b6e10``):

- ``spec.envs`` becomes ``spec.env``;
- the ``services`` map becomes the ``components`` list, each with its ``name`` and its
  ``type`` (``frontend``, ``worker``, or ``prefill`` / ``decode``, first-class in
  ``v1beta1``, where ``v1alpha1`` has ``subComponentType``);
- ``extraPodMetadata`` and ``extraPodSpec`` become one ``podTemplate`` (a core
  ``PodTemplateSpec``) whose container ``main`` is ``extraPodSpec.mainContainer``;
- ``resources.limits.gpu`` becomes the main container's ``nvidia.com/gpu`` limit.

Which one: ``kubernetes.dynamo_api`` when set; else, with a cluster, by its discovery
(``served_version``); ``llmslo render``, without a cluster, writes ``v1alpha1``.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from .kubeclient import Cluster, json_of, kubernetes_module
from .pod_settings import GPU_RESOURCE
from .settings import DYNAMO_APIS, KubeSettings

GROUP = "nvidia.com"
#: The versions the runtime renders, the default (served by every operator) first.
V1ALPHA1, V1BETA1 = DYNAMO_APIS
KIND = "DynamoGraphDeployment"


def _serves(where: Cluster, version: str) -> bool:
    """Whether the cluster's discovery of ``nvidia.com/<version>`` lists the DGD (False
    whatever went wrong asking: the preflight and the apply say what is missing)."""
    custom = kubernetes_module().client.CustomObjectsApi(where.api)
    try:
        doc = json_of(
            custom.get_api_resources(GROUP, version, _preload_content=False, _request_timeout=10)
        )
    except Exception:
        return False
    kinds = {r.get("kind") for r in (doc or {}).get("resources") or [] if isinstance(r, dict)}
    return KIND in kinds


def served_version(where: Cluster) -> str:
    """``v1alpha1`` where the cluster serves it, else ``v1beta1`` where it serves that,
    else ``v1alpha1`` (the preflight and the apply say it is missing).

    ``v1alpha1`` first: every operator that serves it takes its one shape (converting
    it into its hub version), while the shape of ``v1beta1`` changed while it was
    served (``dynamocomponentdeployment_types.go`` @ ``50820f5b`` has ``extraPodSpec``
    under ``v1beta1``, @ ``006b6e10`` ``podTemplate``; an API server prunes the fields of
    the other shape). ``v1beta1`` is chosen
    where ``v1alpha1`` is gone."""
    if _serves(where, V1ALPHA1):
        return V1ALPHA1
    return V1BETA1 if _serves(where, V1BETA1) else V1ALPHA1


def resolved(settings: KubeSettings, where: Cluster) -> KubeSettings:
    """``settings`` with ``dynamo_api`` chosen by the cluster when it was not set."""
    if settings.dynamo_api:
        return settings
    return replace(settings, dynamo_api=served_version(where))


def _pod_template(service: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(service.get("extraPodSpec") or {})
    main = {"name": "main", **spec.pop("mainContainer", {})}
    gpus = ((service.get("resources") or {}).get("limits") or {}).get("gpu")
    if gpus:
        resources = main.setdefault("resources", {})
        resources["limits"] = {**resources.get("limits", {}), GPU_RESOURCE: gpus}
    template: dict[str, Any] = {"spec": {**spec, "containers": [main]}}
    if service.get("extraPodMetadata"):
        template = {"metadata": copy.deepcopy(service["extraPodMetadata"]), **template}
    return template


def to_v1beta1(obj: dict[str, Any]) -> dict[str, Any]:
    """The ``v1beta1`` form of a ``v1alpha1`` DGD that the runtime rendered."""
    spec = obj["spec"]
    components = []
    for name, service in spec["services"].items():
        component: dict[str, Any] = {
            "name": name,
            "type": service.get("subComponentType") or service["componentType"],
            "replicas": service.get("replicas", 1),
            "podTemplate": _pod_template(service),
        }
        components.append(component)
    beta: dict[str, Any] = {}
    if "backendFramework" in spec:
        beta["backendFramework"] = spec["backendFramework"]
    beta["env"] = copy.deepcopy(spec.get("envs") or [])
    beta["components"] = components
    return {
        "apiVersion": f"{GROUP}/{V1BETA1}",
        "kind": obj["kind"],
        "metadata": copy.deepcopy(obj["metadata"]),
        "spec": beta,
    }


def scale_patch(obj: dict[str, Any], component: str, replicas: int) -> dict[str, Any]:
    """The merge patch that sets ``component``'s replicas: a ``v1alpha1`` map entry, or
    in ``v1beta1`` the whole ``components`` list (a merge patch replaces a list)."""
    if obj["apiVersion"].endswith(f"/{V1ALPHA1}"):
        return {"spec": {"services": {component: {"replicas": replicas}}}}
    components = copy.deepcopy(obj["spec"]["components"])
    for c in components:
        if c["name"] == component:
            c["replicas"] = replicas
    return {"spec": {"components": components}}
