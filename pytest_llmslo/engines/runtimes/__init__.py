"""The runtimes an engine's units can run in, by the name ``config.runtime`` gives.

    process   ``plan.processes`` as local process groups (``process.py``)
    docker    ``plan.images`` as docker containers on the host's network (``docker.py``)
    kubernetes  ``plan.images`` as Deployments and a Service in a cluster (``kubernetes.py``,
              ``k8s/``; the client library is imported only when an engine uses it)

A new runtime is one module here implementing ``runtime.Runtime`` and one entry in
:data:`RUNTIMES`; no engine kind changes, since kinds describe their units in both forms
(``quantities.py``) and never ask which runtime runs them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ...errors import ConfigError
from ..base import EngineConfig
from .docker import DockerRuntime
from .kubernetes import KubernetesRuntime
from .process import ProcessRuntime
from .runtime import Runtime, Started, StartedUnit

__all__ = ["RUNTIMES", "Runtime", "Started", "StartedUnit", "runtime_of"]

RUNTIMES: Mapping[str, Runtime] = {
    "process": ProcessRuntime(),
    "docker": DockerRuntime(),
    "kubernetes": KubernetesRuntime(),
}


def runtime_of(config: EngineConfig) -> Runtime:
    """The runtime ``config.runtime`` names."""
    try:
        return RUNTIMES[config.runtime]
    except KeyError:
        raise ConfigError(
            f"engine {config.display_name!r}: runtime={config.runtime!r} is not valid. "
            f"Valid runtimes: {', '.join(sorted(RUNTIMES))}"
        ) from None
