"""Custom resources checked against the vendored CRD schema extracts of ``crds/``
(``crds/README.md``), strictly: every object schema with properties refuses unknown ones
(the API server would prune them silently), a property marked ``x-llmslo-elided`` must
not be written, and the core Kubernetes types marked ``x-llmslo-k8s`` are checked against
kubernetes-validate's strict 1.37 definitions."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

CRDS = Path(__file__).parent / "crds"
K8S_SCHEMA = "v1.37.0-local-strict"
DEFS_URI = "https://kubernetes.io/api/_definitions.json"


def _k8s_defs() -> dict[str, Any]:
    path = resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/{K8S_SCHEMA}/_definitions.json"
    )
    defs: dict[str, Any] = json.loads(path.read_text())
    d = defs["$defs"]
    # Dynamo's extraPodSpec: a PodSpec without required containers, plus mainContainer,
    # a Container without a required name.
    extra = copy.deepcopy(d["io.k8s.api.core.v1.PodSpec"])
    extra["required"] = []
    main = copy.deepcopy(d["io.k8s.api.core.v1.Container"])
    main["required"] = []
    d["llmslo.MainContainer"] = main
    extra["properties"]["mainContainer"] = {"$ref": "#/$defs/llmslo.MainContainer"}
    d["ExtraPodSpec"] = extra
    return defs


def _strict(node: Any) -> Any:
    """The extract as a JSON Schema: markers resolved, unknown properties refused."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    if node.get("x-llmslo-elided"):
        return {"not": {}, "description": "elided upstream property: never written"}
    if "x-llmslo-k8s" in node:
        return {"$ref": f"{DEFS_URI}#/$defs/{node['x-llmslo-k8s']}"}
    out = {k: _strict(v) for k, v in node.items() if not k.startswith("x-")}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def schema_of(name: str) -> dict[str, Any]:
    import yaml

    return _strict(yaml.safe_load((CRDS / name).read_text()))  # type: ignore[no-any-return]


def errors(obj: dict[str, Any], name: str) -> list[str]:
    """What is wrong with ``obj`` against the extract ``crds/<name>`` (empty: valid)."""
    import jsonschema
    from referencing import Registry, Resource

    defs = Resource.from_contents(_k8s_defs())
    registry = Registry().with_resource(DEFS_URI, defs)
    validator = jsonschema.Draft202012Validator(schema_of(name), registry=registry)
    return [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
