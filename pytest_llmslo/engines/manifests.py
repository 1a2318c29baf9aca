"""A user's own manifests: a YAML file, or a directory of YAML files, that stand up an
engine in a cluster (``runtime = "kubernetes"`` only). The runtime applies them as they
are (labelled and owned by the session, so that they go with it), waits, reaches the
engine at the Service ``kubernetes.service`` names and deletes what it applied at the
end (``runtimes/k8s/user.py``). Readiness is ``/v1/models`` listing the model (the first
it lists when ``model`` is unset)::

    [engines.mine]
    kind = "manifests"
    runtime = "kubernetes"
    kubernetes = { manifests = "deploy/engine/", service = "my-engine", namespace = "bench" }
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError
from .base import EngineConfig
from .cache_reset import ANY
from .external import first_model
from .launchplan import LaunchPlan
from .readiness import models_listed

OPTIONS: Mapping[str, str] = {}


def plan(config: EngineConfig) -> LaunchPlan:
    if config.runtime != "kubernetes":
        raise ConfigError(
            f"engine {config.display_name!r}: kind 'manifests' runs only with "
            'runtime = "kubernetes" (the manifests are applied to a cluster)'
        )
    model = config.served_model_name or config.model
    return LaunchPlan(
        config=config,
        host=config.host,
        port=config.port or 0,
        model=model,
        ready=models_listed(model or None),
        meta={"manifests": config.kubernetes.get("manifests")},
        on_ready=first_model(model),
        cache_resets=ANY,
    )
