"""A user's own manifests as an engine (kind ``manifests``): every YAML document of
``kubernetes.manifests`` (a file, or each ``*.yaml``/``*.yml`` of a directory, in name
order) applied as it is, in the engine's namespace, with the session's labels and owner
added so that it goes with the session; the engine reached at the Service
``kubernetes.service`` names (one of the manifests, or one already in the namespace), its
pods the ones that Service selects.

The Role of ``k8s/role.py`` covers the kinds the runtime makes itself: a user's
manifests need the Role extended with create, patch and delete on their kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ....errors import ConfigError
from ...launchplan import LaunchPlan
from .deployments import labels
from .layout import Layout, deployment_scale
from .settings import KubeSettings


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    return [path]


def load(path_text: str, where: str) -> list[dict[str, Any]]:
    """The documents of the YAML file or directory ``path_text``; ``ConfigError`` naming
    the file for anything that is not a Kubernetes object."""
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            f"{where}: reading manifests needs PyYAML: pip install 'pytest-llmslo[k8s]'"
        ) from None
    path = Path(path_text).expanduser()
    if not path.exists():
        raise ConfigError(f"{where}: kubernetes.manifests={path_text!r}: no such file or directory")
    out: list[dict[str, Any]] = []
    for file in _files(path):
        try:
            docs = list(yaml.safe_load_all(file.read_text(encoding="utf-8")))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{where}: {file} is not valid YAML: {exc}") from None
        for doc in docs:
            if doc is None:
                continue
            if not isinstance(doc, dict) or not {"apiVersion", "kind", "metadata"} <= set(doc):
                raise ConfigError(
                    f"{where}: {file}: every document must be a Kubernetes object with "
                    "apiVersion, kind and metadata"
                )
            out.append(doc)
    if not out:
        raise ConfigError(f"{where}: kubernetes.manifests={path_text!r} holds no objects")
    return out


def user_layout(plan: LaunchPlan, settings: KubeSettings, namespace: str) -> Layout:
    """The user's objects in ``namespace`` (one named elsewhere is refused), labelled."""
    config = plan.config
    where = f"engine {config.display_name!r}"
    objects = load(settings.manifests or "", where)
    for obj in objects:
        meta = obj["metadata"]
        if meta.get("namespace") not in (None, namespace):
            raise ConfigError(
                f"{where}: {obj['kind']} {meta.get('name')} names namespace "
                f"{meta['namespace']!r}, the engine runs in {namespace!r} "
                "(leave it out of the manifest, or set kubernetes.namespace)"
            )
        meta["namespace"] = namespace
        meta["labels"] = {**(meta.get("labels") or {}), **labels(config)}
    service = settings.service or ""
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    return Layout(
        objects=objects,
        service=service,
        port=config.port,  # None: the Service's first port, read once applied
        api_selector="",  # the Service's selector, read once applied
        pod_selectors=[],
        scale_object=deployments[0] if len(deployments) == 1 else None,
        scale_patch=deployment_scale if len(deployments) == 1 else None,
        facts={"manifests": settings.manifests, "service": service},
    )
