"""Before anything is applied: what the cluster the kubeconfig names lacks for an engine
(``llmslo check --engine NAME``), so that a missing prerequisite is a line naming it, not
a pod Pending for ten minutes. Each check reads, never writes:

- the namespace exists;
- each custom resource the layout applies is served in its version (API discovery,
  ``/apis/<group>/<version>``: a LeaderWorkerSet needs the LWS controller installed, a
  DynamoGraphDeployment the Dynamo operator);
- the user may do what the runtime will do (a ``SelfSubjectAccessReview`` per verb of
  ``role.RULES`` the layout needs);
- some node offers the GPUs one pod asks for (``status.allocatable``), the RuntimeClass
  exists (``runtime_class_name``);
- each Secret the pods name exists (``image_pull_secrets``, ``secret_env``,
  ``ssh_secret``);
- the cache's PersistentVolumeClaim exists and, when pods on several nodes mount it (a
  LeaderWorkerSet, Dynamo's services), offers ``ReadWriteMany``.

A check the user's rights do not allow (403) is reported as unknown, with the reason,
not as missing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ....errors import ConfigError
from ...base import EngineConfig
from ...launchplan import LaunchPlan
from .deployments import GPU_RESOURCE, names_for
from .dgd_versions import resolved
from .kubeclient import Cluster, cluster, json_of, kubernetes_module
from .objects import layout_of
from .role import RULES
from .settings import KubeSettings, settings_of

OK, MISSING, UNKNOWN = "ok", "missing", "unknown"
RWX = "ReadWriteMany"


@dataclass(frozen=True, slots=True)
class Finding:
    """One prerequisite: ``state`` ok, missing or unknown (the check was not allowed)."""

    state: str
    what: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.state:<8} {self.what}" + (f": {self.detail}" if self.detail else "")


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None)


def _read(what: str, call: Any) -> tuple[Finding | None, Any]:
    """``call()``'s JSON, or the finding that says why there is none (404 missing, 403
    unknown)."""
    try:
        return None, json_of(call())
    except Exception as exc:
        code = _status(exc)
        if code == 404:
            return Finding(MISSING, what, "not found"), None
        reason = f"HTTP {code}" if code else f"{type(exc).__name__}: {exc}"
        return Finding(UNKNOWN, what, f"cannot check ({reason})"), None


def _resources(where: Cluster, version: str) -> Any:
    """The API's discovery of ``group/version`` (``/apis/<group>/<version>``)."""
    group, _, ver = version.partition("/")
    custom = kubernetes_module().client.CustomObjectsApi(where.api)
    return custom.get_api_resources(group, ver, _preload_content=False, _request_timeout=10)


def _crds(where: Cluster, objects: Sequence[dict[str, Any]]) -> Iterator[Finding]:
    served = {o["apiVersion"]: o["kind"] for o in objects if "/" in o["apiVersion"]}
    for version, kind in sorted(served.items()):
        if version.split("/")[0] in ("apps", "batch"):
            continue
        what = f"{kind} ({version}) served"
        bad, doc = _read(what, lambda v=version: _resources(where, v))
        if bad:
            yield Finding(bad.state, what, "no such API: install its controller, or check "
                          "the version" if bad.state == MISSING else bad.detail)  # fmt: skip
            continue
        kinds = sorted({str(r.get("kind")) for r in (doc or {}).get("resources") or []})
        if kind in kinds:
            yield Finding(OK, what)
        else:
            yield Finding(MISSING, what, f"{version} serves {', '.join(kinds) or 'nothing'}")


def _needed(
    objects: Sequence[dict[str, Any]], settings: KubeSettings
) -> list[tuple[str, str, str]]:
    """The (group, resource, verb) of ``role.RULES`` this layout uses."""
    groups = {o["apiVersion"].split("/")[0] if "/" in o["apiVersion"] else "" for o in objects}
    out = []
    for group, resource, verbs in RULES:
        if group not in groups and group != "":
            continue
        if resource == "pods/portforward" and settings.access_path() != "port-forward":
            continue
        out += [(group, resource, verb) for verb in verbs]
    return out


def _rbac(where: Cluster, needed: Sequence[tuple[str, str, str]]) -> Iterator[Finding]:
    authz = kubernetes_module().client.AuthorizationV1Api(where.api)
    for group, resource, verb in needed:
        res, _, sub = resource.partition("/")
        attrs = {"namespace": where.namespace, "verb": verb, "group": group, "resource": res}
        if sub:
            attrs["subresource"] = sub
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}  # fmt: skip
        what = f"may {verb} {resource}" + (f" ({group})" if group else "")
        bad, doc = _read(what, lambda b=body: authz.create_self_subject_access_review(
            b, _preload_content=False, _request_timeout=10))  # fmt: skip
        if bad:
            yield bad
        elif (doc or {}).get("status", {}).get("allowed"):
            yield Finding(OK, what)
        else:
            why = (doc or {}).get("status", {}).get("reason") or "denied"
            yield Finding(MISSING, what, f"{why}: bind the Role of docs/engines.md")


def _gpus(where: Cluster, objects: Sequence[dict[str, Any]]) -> Iterator[Finding]:
    per_pod = max((int(n) for n in _gpu_counts(objects)), default=0)
    if not per_pod:
        return
    what = f"a node with {per_pod} allocatable {GPU_RESOURCE}"
    bad, doc = _read(what, lambda: where.core.list_node(_preload_content=False,
                                                         _request_timeout=10))  # fmt: skip
    if bad:
        yield bad
        return
    best = max((int((n.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0))
                for n in (doc or {}).get("items") or []), default=0)  # fmt: skip
    yield Finding(OK if best >= per_pod else MISSING, what,
                  "" if best >= per_pod else f"the most any node offers is {best}")  # fmt: skip


def _gpu_counts(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            # A pod's nvidia.com/gpu limit; a DGD service's resources.limits.gpu.
            if key in (GPU_RESOURCE, "gpu") and isinstance(value, str) and value.isdigit():
                yield value
            else:
                yield from _gpu_counts(value)
    elif isinstance(node, list):
        for item in node:
            yield from _gpu_counts(item)


def _named(where: Cluster, settings: KubeSettings) -> Iterator[Finding]:
    core, ns = where.core, where.namespace
    secrets = {*settings.pod.image_pull_secrets, *(s for s, _ in settings.secret_env.values())}
    if settings.ssh_secret:
        secrets.add(settings.ssh_secret)
    for name in sorted(secrets):
        bad, _ = _read(f"Secret {name}", lambda n=name: core.read_namespaced_secret(
            n, ns, _preload_content=False, _request_timeout=10))  # fmt: skip
        yield bad or Finding(OK, f"Secret {name}")
    if settings.pod.runtime_class_name:
        name = settings.pod.runtime_class_name
        node_api = kubernetes_module().client.NodeV1Api(where.api)
        bad, _ = _read(f"RuntimeClass {name}", lambda: node_api.read_runtime_class(
            name, _preload_content=False, _request_timeout=10))  # fmt: skip
        yield bad or Finding(OK, f"RuntimeClass {name}")


def _cache(where: Cluster, settings: KubeSettings, shared: bool) -> Iterator[Finding]:
    if not settings.cache_pvc:
        return
    what = f"PersistentVolumeClaim {settings.cache_pvc}"
    claims, name = where.core.read_namespaced_persistent_volume_claim, settings.cache_pvc
    bad, pvc = _read(what, lambda: claims(
        name, where.namespace, _preload_content=False, _request_timeout=10))  # fmt: skip
    if bad:
        yield bad
        return
    modes = (pvc.get("status") or {}).get("accessModes") or (pvc.get("spec") or {}).get(
        "accessModes") or []  # fmt: skip
    if shared and RWX not in modes:
        yield Finding(MISSING, f"{what} {RWX}", f"its access modes are {', '.join(modes)}; "
                      "pods on several nodes mount it: give a ReadWriteMany claim")  # fmt: skip
    else:
        yield Finding(OK, what, ", ".join(modes))


def preflight(plan: LaunchPlan) -> list[Finding]:
    """What the cluster of ``plan``'s ``kubernetes`` table lacks to start it."""
    settings = settings_of(plan.config)
    where = cluster(settings)
    if plan.config.kind == "dynamo":
        settings = resolved(settings, where)
    layout = layout_of(plan, settings, names_for(plan.config), where.namespace)
    objects = layout.objects
    bad, _ = _read(f"namespace {where.namespace}", lambda: where.core.read_namespace(
        where.namespace, _preload_content=False, _request_timeout=10))  # fmt: skip
    out = [bad or Finding(OK, f"namespace {where.namespace}")]
    out += _crds(where, objects)
    out += _rbac(where, _needed(objects, settings))
    out += _gpus(where, objects)
    out += _named(where, settings)
    shared = settings.nodes > 1 or any(o["kind"] == "DynamoGraphDeployment" for o in objects)
    out += _cache(where, settings, shared)
    return out


def check_engine(config: EngineConfig, out: TextIO) -> int:
    """``llmslo check``: each finding of ``config``'s engine on a line, then the count;
    1 when something is missing, else 0."""
    from ... import plan_engine

    if config.runtime != "kubernetes":
        raise ConfigError(
            f"engine {config.display_name!r} has runtime={config.runtime!r}: check reads the "
            'cluster of runtime = "kubernetes"'
        )
    from ...tempdirs import remove_dirs

    plan = plan_engine(config)
    try:
        findings = preflight(plan)
    finally:
        remove_dirs(plan.temp_dirs)
    out.write("".join(f"{f.line()}\n" for f in findings))
    missing = [f for f in findings if f.state == MISSING]
    out.write(f"{len(missing)} missing of {len(findings)} checked\n")
    return 1 if missing else 0
