"""Which objects an engine becomes in a cluster, by its kind and settings (``layout``):
Dynamo a DynamoGraphDeployment (``dgd``), a user's manifests themselves (``user``), an
engine across several nodes a LeaderWorkerSet (``lws``), any other image unit a
Deployment and a Service (``deployments``)."""

from __future__ import annotations

from ...launchplan import LaunchPlan
from .deployments import Names, engine_objects, selector_of
from .dgd import dgd_layout
from .layout import Layout, deployment_scale
from .lws import lws_layout
from .settings import KubeSettings
from .user import user_layout


def deployments_layout(
    plan: LaunchPlan, settings: KubeSettings, names: Names, namespace: str
) -> Layout:
    objects = engine_objects(plan, settings, names, namespace)
    selectors = selector_of(objects)
    first = next(o for o in objects if o["kind"] == "Deployment")
    return Layout(
        objects=objects,
        service=names.base,
        port=plan.port,
        api_selector=selectors[0],
        pod_selectors=selectors,
        scale_object=first,
        scale_patch=deployment_scale,
    )


def layout_of(plan: LaunchPlan, settings: KubeSettings, names: Names, namespace: str) -> Layout:
    """The objects of ``plan``'s engine and how to read them."""
    kind = plan.config.kind
    if kind == "dynamo":
        return dgd_layout(plan, settings, names, namespace)
    if kind == "manifests":
        return user_layout(plan, settings, namespace)
    if settings.nodes > 1:
        return lws_layout(plan, settings, names, namespace)
    return deployments_layout(plan, settings, names, namespace)
