"""What ``llmslo render`` prints: the objects the kubernetes runtime would apply for a
plan, as YAML, without a cluster."""

from __future__ import annotations

from typing import Any

from ....errors import EngineUnavailable
from ....redact import MASK
from ...launchplan import LaunchPlan
from .deployments import names_for, session_object
from .objects import layout_of
from .settings import settings_of


def manifests(plan: LaunchPlan) -> list[dict[str, Any]]:
    """What :meth:`KubernetesRuntime.start` would apply for ``plan``, without a cluster:
    the session's ConfigMap, then the engine's objects (in ``kubernetes.namespace``,
    ``default`` when unset; the owner references to the ConfigMap are added when applied,
    since they name its uid). The values of the Secrets it makes (the secrets the harness
    made for a unit) are masked: what is printed is no way to learn them."""
    settings = settings_of(plan.config)
    namespace = settings.namespace or "default"
    layout = layout_of(plan, settings, names_for(plan.config), namespace)
    return [session_object(namespace), *(_masked(o) for o in layout.objects)]


def _masked(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj``, a Secret's values replaced by a mask (as ``stringData``: still a valid
    Secret)."""
    if obj.get("kind") != "Secret":
        return obj
    out = {k: v for k, v in obj.items() if k != "data"}
    out["stringData"] = dict.fromkeys(obj.get("data") or {}, MASK)
    return out


def render_manifests(plan: LaunchPlan) -> str:
    """:func:`manifests` as YAML, one document each."""
    try:
        import yaml
    except ImportError:
        raise EngineUnavailable(
            "rendering manifests needs PyYAML: pip install 'pytest-llmslo[k8s]'"
        ) from None
    head = (
        f"# {plan.config.display_name}: the objects the kubernetes runtime applies. Each but the\n"
        "# first also gets an ownerReference to the first (its uid is the cluster's).\n"
    )
    body: str = yaml.safe_dump_all(manifests(plan), sort_keys=False, explicit_start=True)
    return head + body
