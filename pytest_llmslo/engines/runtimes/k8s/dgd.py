"""Dynamo in a cluster: one ``DynamoGraphDeployment``, written as ``nvidia.com/v1alpha1``
and converted into ``v1beta1`` where the cluster serves it (``dgd_versions``), which the
Dynamo operator turns into the frontend's and the workers' Deployments and Services.

- aggregated (``options.mode = "agg"``): ``Frontend`` and one worker service with
  ``options.workers`` replicas;
- disaggregated (``"disagg"``): ``Frontend``, a prefill worker service
  (``subComponentType: prefill``, ``options.prefill_workers`` replicas) and a decode one
  (``subComponentType: decode``, ``options.decode_workers``);
- ``options.router_mode`` (``kv`` for KV-aware routing) goes to the frontend's
  ``--router-mode``, and the workers publish their KV events as they do on a host.

The workers run the commands the dynamo kind gives them (``dynamoargs.worker_argv``), with
Kubernetes discovery (``--discovery-backend kubernetes``: the operator's default in a
cluster, no etcd) unless ``options.discovery`` says otherwise. Each worker asks for
``tensor_parallel_size`` GPUs (``resources.limits.gpu``). Secrets are ``secretKeyRef``s
in ``spec.envs``.

The operator names the frontend's Service ``<name>-frontend`` (port 8000) and labels
every pod ``nvidia.com/dynamo-graph-deployment-name`` and
``nvidia.com/dynamo-component-type``: ``frontend``, and ``worker``, or for a
disaggregated graph ``prefill`` and ``decode`` (``ComponentTypePrefill`` and
``ComponentTypeDecode`` of the operator's ``internal/consts``, which later operators
write on the prefill and decode pods): the workers are selected by all three. Each
worker serves its ``/metrics`` on the system port 9090 (``DynamoSystemPort`` of the
operator's consts).

Dynamo's runtime images run as the user ``dynamo`` (uid 1000, group 0,
``HOME=/home/dynamo``: ai-dynamo/dynamo ``container/templates/dynamo_runtime.Dockerfile``,
``useradd -m -s /bin/bash -g 0 dynamo`` then ``USER dynamo``): the Hugging Face cache is
mounted at ``deployments.HF_HOME``, under no home, and a PersistentVolumeClaim cache is
made writable to that user by the pod's ``fsGroup`` (``OnRootMismatch``: the volume is
not walked again at each start once its root is right).
Ready when the DGD's ``Ready`` condition is true, then the frontend's ``/v1/models``
lists the model and its ``/health`` body says healthy (the dynamo kind's readiness).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import ModuleType
from typing import Any

from ....errors import ConfigError
from ....redact import is_secret_name
from ...base import EngineConfig
from ...launchplan import LaunchPlan
from .deployments import HF_HOME, Names, _cache_volume, labels, placement
from .dgd_versions import V1BETA1, scale_patch, to_v1beta1
from .layout import Layout, Metrics, selector_text
from .pod_settings import apply_to_container, apply_to_pod
from .settings import KubeSettings

API_VERSION = "nvidia.com/v1alpha1"
KIND = "DynamoGraphDeployment"
FRONTEND_PORT = 8000
SYSTEM_PORT = 9090
LABEL_DGD = "nvidia.com/dynamo-graph-deployment-name"
LABEL_COMPONENT_TYPE = "nvidia.com/dynamo-component-type"
#: ``spec.backendFramework`` of each worker backend (the mocker has none).
FRAMEWORKS: Mapping[str, str | None] = {
    "vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "mocker": None,
}  # fmt: skip
#: Ports a worker binds besides its system port, fixed: each worker has its own pod.
FIRST_WORKER_PORT = 20000
#: The component types of a worker's pods, aggregated or disaggregated.
WORKER_TYPES = ("decode", "prefill", "worker")
#: The group the user of Dynamo's runtime images may write a volume with (its uid).
DYNAMO_FS_GROUP = 1000


def _dynamoargs() -> ModuleType:
    """The dynamo kind's options and commands (``dynamoargs``), which the DGD runs
    (imported when used, as ``runtimes`` is imported while ``engines`` is)."""
    from ... import dynamoargs

    return dynamoargs


def adapt(config: EngineConfig) -> EngineConfig:
    """Dynamo's defaults in a cluster: Kubernetes discovery, and no generated replay trace
    for the mocker (a file on this machine, which no pod sees)."""
    options = dict(config.options)
    options.setdefault("discovery", "kubernetes")
    options.setdefault("replay_trace", "none")
    return replace(config, options=options)


def _service_names(worker: str) -> dict[str, str]:
    head = worker.capitalize()
    return {"agg": f"{head}Worker", "prefill": f"{head}PrefillWorker",
            "decode": f"{head}DecodeWorker"}  # fmt: skip


def _no_files() -> str:
    raise ConfigError(
        "a disaggregated TRT-LLM worker needs its --extra-engine-args YAML, which a pod "
        "does not see from this machine: give a path in the image with "
        "options.prefill_args / decode_args = ['--extra-engine-args', PATH]"
    )


def _worker_args(config: EngineConfig, worker: str, role: str) -> list[str]:
    dynamoargs = _dynamoargs()
    ports = iter(range(FIRST_WORKER_PORT, FIRST_WORKER_PORT + 100))
    defaults, _env = dynamoargs.worker_defaults(
        config, worker, role, lambda: next(ports), _no_files
    )
    argv: list[str] = dynamoargs.worker_argv(config, worker, role, defaults)
    return argv


def _envs(config: EngineConfig, settings: KubeSettings) -> list[dict[str, Any]]:
    literal = sorted(k for k, v in config.env.items() if is_secret_name(k) and v)
    if literal:
        raise ConfigError(
            f"engine {config.display_name!r} (runtime kubernetes): {', '.join(literal)} "
            "would be written into the DynamoGraphDeployment as a literal value; give it as "
            "kubernetes.secret_env.NAME = 'SECRET/KEY' (a Secret reference)"
        )
    env: dict[str, dict[str, Any]] = {"HF_HOME": {"name": "HF_HOME", "value": HF_HOME}}
    for name, value in config.env.items():
        env[name] = {"name": name, "value": value}
    for name, (secret, key) in settings.secret_env.items():
        env[name] = {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
    return list(env.values())


def _pod(image: str, args: list[str], settings: KubeSettings) -> dict[str, Any]:
    """``extraPodSpec``: the main container (``python3`` and ``args``), the cache volume,
    where the pods run."""
    out: dict[str, Any] = {
        **placement(settings),
        "volumes": [_cache_volume(settings)],
        "mainContainer": {
            "image": image,
            "command": ["python3"],
            "args": args,
            "volumeMounts": [{"name": "hf-cache", "mountPath": HF_HOME}],
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
    }
    if settings.cache_pvc:
        out["securityContext"] = {
            "fsGroup": DYNAMO_FS_GROUP,
            "fsGroupChangePolicy": "OnRootMismatch",
        }
    apply_to_pod(out, settings.pod)
    apply_to_container(out["mainContainer"], settings.pod)
    return out


def pod_metadata(settings: KubeSettings) -> dict[str, Any]:
    """The pods' extra labels and annotations (``pod_labels``, ``pod_annotations``), as
    the operator takes them: ``extraPodMetadata`` of each service (v1alpha1), the
    ``podTemplate``'s metadata (v1beta1); empty when neither is set."""
    out: dict[str, Any] = {}
    if settings.pod.pod_labels:
        out["labels"] = dict(settings.pod.pod_labels)
    if settings.pod.pod_annotations:
        out["annotations"] = dict(settings.pod.pod_annotations)
    return out


def _worker_service(
    config: EngineConfig, worker: str, role: str, replicas: int, image: str,
    settings: KubeSettings,
) -> dict[str, Any]:  # fmt: skip
    service: dict[str, Any] = {"componentType": "worker", "replicas": replicas}
    if role != "agg":
        service["subComponentType"] = role
    if worker != "mocker":
        service["resources"] = {"limits": {"gpu": str(config.tensor_parallel_size)}}
    service["extraPodSpec"] = _pod(image, _worker_args(config, worker, role), settings)
    return service


def _pools(config: EngineConfig) -> dict[str, int]:
    """Replicas of each worker role: ``agg``, or ``prefill`` and ``decode``."""
    dynamoargs = _dynamoargs()
    if dynamoargs.option(config, "mode", "agg", dynamoargs.MODES) == "agg":
        return {"agg": dynamoargs.int_option(config, "workers", 1)}
    return {
        "prefill": dynamoargs.int_option(config, "prefill_workers", 1),
        "decode": dynamoargs.int_option(config, "decode_workers", 1),
    }


def dgd_object(
    plan: LaunchPlan, settings: KubeSettings, name: str, namespace: str
) -> dict[str, Any]:
    """The DynamoGraphDeployment of ``plan`` (a dynamo engine)."""
    dynamoargs = _dynamoargs()
    config = plan.config
    worker = dynamoargs.option(config, "worker", "vllm", dynamoargs.WORKERS)
    image = config.image or dynamoargs.IMAGES[worker]
    frontend = dynamoargs.frontend_argv(config, "0.0.0.0", FRONTEND_PORT)
    services: dict[str, Any] = {
        "Frontend": {
            "componentType": "frontend",
            "replicas": 1,
            "extraPodSpec": _pod(image, frontend, settings),
        }
    }
    names = _service_names(worker)
    for role, replicas in _pools(config).items():
        services[names[role]] = _worker_service(config, worker, role, replicas, image, settings)
    metadata = pod_metadata(settings)
    if metadata:
        for service in services.values():
            service["extraPodMetadata"] = metadata
    spec: dict[str, Any] = {"envs": _envs(config, settings), "services": services}
    framework = FRAMEWORKS[worker]
    if framework:
        spec = {"backendFramework": framework, **spec}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**settings.pod.workload_labels(), **labels(config)},
        },
        "spec": spec,
    }


def worker_selector(name: str) -> str:
    """The label selector of every worker pod of the DGD ``name``, whatever its type."""
    types = ",".join(WORKER_TYPES)
    return f"{selector_text({LABEL_DGD: name})},{LABEL_COMPONENT_TYPE} in ({types})"


def dgd_layout(plan: LaunchPlan, settings: KubeSettings, names: Names, namespace: str) -> Layout:
    """The DGD, in the version ``settings.dynamo_api`` names (``v1alpha1`` when unset),
    and how to read it (``layout.Layout``)."""
    dynamoargs = _dynamoargs()
    obj = dgd_object(plan, settings, names.base, namespace)
    pods = {LABEL_DGD: names.base}
    services = obj["spec"]["services"]
    pools = _pools(plan.config)
    scaled = _service_names(dynamoargs.option(plan.config, "worker", "vllm", dynamoargs.WORKERS))[
        "agg"
    ]
    if settings.dynamo_api == V1BETA1:
        obj = to_v1beta1(obj)

    def scale(replicas: int) -> dict[str, Any]:
        if scaled not in services:
            raise ConfigError(
                f"engine {plan.config.display_name!r}: a disaggregated Dynamo is scaled by "
                "its prefill_workers and decode_workers options, not while it runs"
            )
        return scale_patch(obj, scaled, replicas)

    return Layout(
        objects=[obj],
        service=f"{names.base}-frontend",
        port=FRONTEND_PORT,
        api_selector=selector_text({**pods, LABEL_COMPONENT_TYPE: "frontend"}),
        pod_selectors=[selector_text(pods)],
        metrics=[Metrics(worker_selector(names.base), SYSTEM_PORT)],
        ready_object=obj,
        scale_object=obj,
        scale_patch=scale,
        replicas=pools.get("agg", 1),
        facts={"dynamo_services": sorted(services)},
    )
