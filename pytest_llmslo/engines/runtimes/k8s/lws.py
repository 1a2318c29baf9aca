"""One copy of an engine across several nodes (``kubernetes.nodes`` > 1): a
``LeaderWorkerSet`` (``leaderworkerset.x-k8s.io/v1``, LeaderWorkerSet 0.6 and later) of
``nodes`` pods per group, the leader serving the API behind a Service of its own, as
vLLM's and SGLang's own guides for LWS deploy them. LWS gives each pod
``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``.

The API's Service is ``<lws>-api``, never the LWS's own name: the LWS controller makes
the group's StatefulSets with ``serviceName: <lws>`` and creates the headless Service
``<lws>`` only when none of that name exists (kubernetes-sigs/lws
``pkg/controllers/leaderworkerset_controller.go``, ``createHeadlessServiceIfNotExists``
and ``WithServiceName(lws.Name)``, at commit 01ebf9bc69b6). A ClusterIP Service of that
name would stand in its place, ``<leader-pod>.<lws>.<ns>`` (``LWS_LEADER_ADDRESS``)
would never resolve, and the workers could not join.

- vLLM: a Ray cluster per group (``ray start --head`` on the leader, ``ray start
  --address=$LWS_LEADER_ADDRESS:6379 --block`` on the workers); the leader waits until
  the group's nodes have joined, then ``vllm serve`` with ``tensor_parallel_size`` per
  node and ``--pipeline-parallel-size nodes`` over Ray. A worker may start before the
  head listens: it tries again every 5 s, as vLLM's own
  ``examples/online_serving/multi-node-serving.sh`` does (its ``worker`` branch), and
  both waits end after ``startup_timeout_s`` with a line that says what was missing;
- SGLang: the same server on every pod, ``--tp-size`` over all the group's GPUs,
  ``--nnodes``, ``--node-rank $(LWS_WORKER_INDEX)`` and
  ``--dist-init-addr $(LWS_LEADER_ADDRESS):20000``;
- TensorRT-LLM: ``mpirun`` on the leader over SSH to ``sshd`` on the workers, with the
  keypair of a Secret the user names (``lws_mpi``).

Each pod asks for ``tensor_parallel_size`` GPUs. ``restartPolicy:
RecreateGroupOnPodRestart``: a group whose pod restarts starts again as a whole (a
tensor-parallel group cannot lose a member). Scaling sets the number of groups.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from ....errors import ConfigError
from ...launchplan import LaunchPlan
from .deployments import LABEL_INSTANCE, Names, pod_parts, service_object
from .layout import Layout, deployment_scale, selector_text
from .lws_mpi import trtllm_templates
from .pod_settings import EXCLUSIVE_TOPOLOGY, template_metadata
from .settings import KubeSettings

API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
LABEL_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
RAY_PORT = 6379
SGLANG_DIST_PORT = 20000
#: Seconds between two tries to join (a worker) or to count the joined nodes (the leader).
RAY_RETRY_S = 5
#: The API's Service: ``<lws>`` is the headless Service of the LWS controller.
API_SERVICE_SUFFIX = "-api"


def _without(args: list[str], flag: str) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if not a.startswith(flag + "="):
            out.append(a)
    return out


def _vllm(args: list[str], nodes: int, wait_s: float) -> tuple[list[str], list[str]]:
    """The leader's and the workers' container commands for vLLM over Ray; each waits
    (bounded by ``wait_s``) for what it needs: the head, or the group's nodes."""
    serve = shlex.join(["vllm", "serve", *args, "--pipeline-parallel-size", str(nodes),
                        "--distributed-executor-backend", "ray"])  # fmt: skip
    tries = max(1, math.ceil(wait_s / RAY_RETRY_S))
    count = (
        'python3 -c \'import ray; ray.init(address="auto", logging_level="ERROR"); '
        'print(sum(n["Alive"] for n in ray.nodes()))\''
    )
    leader = (
        f"ray start --head --port={RAY_PORT} && n=0 && "
        f'until [ "$({count})" -ge "$LWS_GROUP_SIZE" ]; do n=$((n+1)); '
        f'if [ "$n" -ge {tries} ]; then echo "llmslo: the Ray cluster of this group did '
        f'not reach $LWS_GROUP_SIZE nodes in {wait_s:g} s" >&2; exit 1; fi; '
        f"sleep {RAY_RETRY_S}; done && exec {serve}"
    )
    worker = (
        f"n=0; until ray start --address=$LWS_LEADER_ADDRESS:{RAY_PORT} --block; do "
        f'n=$((n+1)); if [ "$n" -ge {tries} ]; then echo "llmslo: the Ray head '
        f'$LWS_LEADER_ADDRESS:{RAY_PORT} did not answer in {wait_s:g} s" >&2; exit 1; fi; '
        f"sleep {RAY_RETRY_S}; done"
    )
    return ["sh", "-c", leader], ["sh", "-c", worker]


def _sglang(args: list[str], nodes: int, tp: int) -> list[str]:
    """The SGLang server's arguments on every pod of a group."""
    args = _without(_without(args, "--tp-size"), "--tp")
    return [*args, "--tp-size", str(tp * nodes), "--nnodes", str(nodes),
            "--node-rank", "$(LWS_WORKER_INDEX)",
            "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{SGLANG_DIST_PORT}"]  # fmt: skip


def _templates(plan: LaunchPlan, settings: KubeSettings, name: str, namespace: str) -> Any:
    config = plan.config
    pod = pod_parts(plan, 0, settings, name, namespace)
    leader, worker = pod.spec, _copy(pod.spec)
    main, other = leader["containers"][0], worker["containers"][0]
    if config.kind == "vllm":
        lead_cmd, work_cmd = _vllm(list(main["args"]), settings.nodes, config.startup_timeout_s)
        main["command"], main["args"] = lead_cmd[:2], lead_cmd[2:]
        other["command"], other["args"] = work_cmd[:2], work_cmd[2:]
    elif config.kind == "sglang":
        main["args"] = _sglang(list(main["args"]), settings.nodes, config.tensor_parallel_size)
        other["args"] = list(main["args"])
    elif config.kind != "trtllm":
        raise ConfigError(f"kind {config.kind!r} does not run across nodes here")
    # Only the leader serves the API: the workers have no HTTP port or probes.
    for key in ("ports", "startupProbe", "readinessProbe"):
        other.pop(key, None)
    if config.kind == "trtllm":
        trtllm_templates(plan, settings, leader, worker)

    def meta() -> dict[str, Any]:  # each template its own (no shared dicts: no YAML aliases)
        return template_metadata({**pod.labels, **pod.selector}, settings.pod)

    return pod, {"metadata": meta(), "spec": leader}, {"metadata": meta(), "spec": worker}


def _copy(spec: dict[str, Any]) -> dict[str, Any]:
    import copy

    return copy.deepcopy(spec)


def lws_layout(plan: LaunchPlan, settings: KubeSettings, names: Names, namespace: str) -> Layout:
    """The LeaderWorkerSet of ``plan`` across ``settings.nodes`` nodes, and the Service
    of its leaders."""
    name = names.base
    pod, leader, worker = _templates(plan, settings, name, namespace)
    labels = {**settings.pod.workload_labels(), **pod.labels}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if settings.pod.exclusive_topology:
        meta["annotations"] = {EXCLUSIVE_TOPOLOGY: settings.pod.exclusive_topology}
    lws = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": settings.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }
    leaders = {**pod.selector, LABEL_WORKER_INDEX: "0"}
    port = plan.images[0].ports[0]
    api = f"{name}{API_SERVICE_SUFFIX}"
    service = service_object(api, namespace, pod.labels, leaders, plan.port, port)
    return Layout(
        objects=[*pod.companions(), lws, service],
        service=api,
        port=plan.port,
        api_selector=selector_text(leaders),
        pod_selectors=[selector_text({LABEL_INSTANCE: name, **pod.selector})],
        scale_object=lws,
        scale_patch=deployment_scale,
        facts={"nodes": settings.nodes},
    )
