"""The pod settings of the ``kubernetes`` table (``k8s/pod_settings.py``) as ``llmslo
render`` writes them, for the three layouts docs/engines.md shows them on: one GPU node
(a Deployment), a two-node LeaderWorkerSet group, Dynamo disaggregated; each checked
against Kubernetes' schema or the vendored CRD, and each bad value a ConfigError that
names the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo.engines import load_engine_configs, plan_engine
from pytest_llmslo.engines.runtimes.k8s.render import manifests
from pytest_llmslo.errors import ConfigError

pytest.importorskip("kubernetes_validate")
pytest.importorskip("yaml")

import kubernetes_validate
from crd_schema import errors

DGD = "nvidia.com_dynamographdeployments_v1alpha1.yaml"
LWS = "leaderworkerset.x-k8s.io_leaderworkersets_v1.yaml"
#: What a production cluster asks of a GPU pod (docs/engines.md, "Pod settings").
POD = {
    "image_pull_secrets": ["ngc-pull"],
    "runtime_class_name": "nvidia",
    "resources": {"requests": {"cpu": "16", "memory": "128Gi"}, "limits": {"memory": "128Gi"}},
    "shm_size": "32g",
    "security_context": {"runAsUser": 1000, "runAsGroup": 0, "fsGroup": 1000,
                         "seccompProfile": {"type": "RuntimeDefault"}},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "nvidia.com/gpu.product", "operator": "In",
             "values": ["NVIDIA-H100-80GB-HBM3"]}]}]}}},
}  # fmt: skip
#: And across nodes: RDMA devices, memory pinning, a group per NVLink domain.
MULTI = {
    **POD,
    "resources": {"requests": {"cpu": "32", "rdma/ib": "1"}, "limits": {"rdma/ib": "1"}},
    "capabilities": ["IPC_LOCK"],
    "exclusive_topology": "nvidia.com/gpu.clique",
}


def rendered(table: dict[str, Any]) -> list[dict[str, Any]]:
    cfg = load_engine_configs({"e": {"runtime": "kubernetes", **table}})["e"]
    out: list[dict[str, Any]] = manifests(plan_engine(cfg))
    return out


def check_pod(spec: dict[str, Any], container: dict[str, Any], shm: bool = True) -> None:
    assert spec["imagePullSecrets"] == [{"name": "ngc-pull"}]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "nodeAffinity" in spec["affinity"]
    if shm:
        dshm = next(v for v in spec["volumes"] if v["name"] == "dshm")
        assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert container["resources"]["requests"]["cpu"] in ("16", "32")


def test_one_gpu_node() -> None:
    objects = rendered({"kind": "vllm", "model": "m", "tensor_parallel_size": 2,
                        "kubernetes": {"namespace": "bench", **POD}})  # fmt: skip
    for obj in objects:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)
    dep = next(o for o in objects if o["kind"] == "Deployment")
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    check_pod(spec, container)
    # The GPUs stay the runtime's; the memory limit is added next to them.
    assert container["resources"]["limits"] == {"memory": "128Gi", "nvidia.com/gpu": "2"}


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_a_two_node_group(kind: str) -> None:
    objects = rendered({"kind": kind, "model": "m", "tensor_parallel_size": 8,
                        "kubernetes": {"namespace": "bench", "nodes": 2, **MULTI}})  # fmt: skip
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    assert errors(lws, LWS) == []
    for obj in objects:
        if obj["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(obj, "1.37.0", strict=True)
    assert lws["metadata"]["annotations"] == {
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "nvidia.com/gpu.clique"
    }
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    for part in ("leaderTemplate", "workerTemplate"):
        spec = tmpl[part]["spec"]
        container = spec["containers"][0]
        check_pod(spec, container)
        assert container["resources"]["limits"] == {"rdma/ib": "1", "nvidia.com/gpu": "8"}
        assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_dynamo_disaggregated() -> None:
    (_, dgd) = rendered({"kind": "dynamo", "model": "Qwen/Qwen3-0.6B",
                         "options": {"worker": "vllm", "mode": "disagg"},
                         "kubernetes": {"namespace": "bench", "cache_pvc": "hf",
                                        **{k: v for k, v in MULTI.items()
                                           if k != "exclusive_topology"}}})  # fmt: skip
    assert errors(dgd, DGD) == []
    for service in dgd["spec"]["services"].values():
        pod = service["extraPodSpec"]
        check_pod(pod, pod["mainContainer"], shm=False)
        # The user's security context wins over the default fsGroup of a PVC cache.
        assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
        assert pod["mainContainer"]["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


#: Gang scheduling: Kueue's queue label, or another scheduler's name, labels, annotations.
GANG = {
    "queue_name": "gpu-queue",
    "scheduler_name": "volcano",
    "pod_labels": {"kai.scheduler/queue": "team-a"},
    "pod_annotations": {"scheduling.volcano.sh/queue-name": "team-a"},
}


@pytest.mark.parametrize("nodes", [1, 2], ids=["deployment", "lws"])
def test_gang_scheduling(nodes: int) -> None:
    objects = rendered({"kind": "vllm", "model": "m", "tensor_parallel_size": 8,
                        "kubernetes": {"namespace": "bench", "nodes": nodes, **GANG}})  # fmt: skip
    (workload,) = [o for o in objects if o["kind"] in ("Deployment", "LeaderWorkerSet")]
    if nodes == 1:
        kubernetes_validate.validate(workload, "1.37.0", strict=True)
        templates = [workload["spec"]["template"]]
    else:
        assert errors(workload, LWS) == []
        tmpl = workload["spec"]["leaderWorkerTemplate"]
        templates = [tmpl["leaderTemplate"], tmpl["workerTemplate"]]
    # Kueue admits the workload object (a Deployment's pods, each LWS group as a gang).
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
    for template in templates:
        assert template["spec"]["schedulerName"] == "volcano"
        assert template["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
        assert template["metadata"]["labels"]["llmslo.io/session"]  # still the runtime's
        assert template["metadata"]["annotations"] == {"scheduling.volcano.sh/queue-name": "team-a"}


@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_dynamo_takes_the_queue_scheduler_and_pod_metadata(mode: str) -> None:
    table = {"kind": "dynamo", "model": "Qwen/Qwen3-0.6B",
             "options": {"worker": "vllm", "mode": mode}}  # fmt: skip
    kube = {
        "namespace": "bench",
        "queue_name": "q",
        "scheduler_name": "kai-scheduler",
        "pod_labels": GANG["pod_labels"],
        "pod_annotations": GANG["pod_annotations"],
    }
    (_, dgd) = rendered({**table, "kubernetes": kube})
    assert errors(dgd, DGD) == []
    assert dgd["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "q"
    for service in dgd["spec"]["services"].values():
        assert service["extraPodSpec"]["schedulerName"] == "kai-scheduler"
        # The operator copies extraPodMetadata onto each service's pods.
        assert service["extraPodMetadata"] == {"labels": GANG["pod_labels"],
                                               "annotations": GANG["pod_annotations"]}  # fmt: skip
    # v1beta1: the podTemplate's own metadata, and its spec the pod settings.
    (_, beta) = rendered({**table, "kubernetes": {**kube, "dynamo_api": "v1beta1"}})
    assert errors(beta, "nvidia.com_dynamographdeployments_v1beta1.yaml") == []
    for component in beta["spec"]["components"]:
        template = component["podTemplate"]
        assert template["metadata"] == {"labels": GANG["pod_labels"],
                                        "annotations": GANG["pod_annotations"]}  # fmt: skip
        assert template["spec"]["schedulerName"] == "kai-scheduler"
    # The operator's own labels, which the runtime's selectors read, are not the user's.
    with pytest.raises(ConfigError, match=r"nvidia\.com/dynamo-component-type are the runtime"):
        rendered(
            {**table, "kubernetes": {"pod_labels": {"nvidia.com/dynamo-component-type": "worker"}}}
        )


@pytest.mark.parametrize(
    ("kube", "message"),
    [
        ({"image_pull_secrets": "ngc"}, r"kubernetes.image_pull_secrets='ngc' is not valid: "
         r"expected a list of Secret names"),
        ({"runtime_class_name": "Nvidia!"}, r"kubernetes.runtime_class_name='Nvidia!'"),
        ({"resources": {"requests": {"cpu": "lots"}}},
         r"kubernetes.resources.requests.cpu='lots' is not valid: expected a quantity"),
        ({"resources": {"limits": {"nvidia.com/gpu": "2"}}},
         r"nvidia.com/gpu is set by the runtime from tensor_parallel_size"),
        ({"resources": {"requests": {"rdma/ib": "1"}, "limits": {"rdma/ib": "2"}}},
         r"rdma/ib is an extended resource, whose request must equal its limit"),
        ({"resources": {"cpu": "1"}}, r"expected a table with requests and/or limits"),
        ({"shm_size": "huge"}, r"shared memory size 'huge' is not a size like 16g"),
        ({"security_context": {"privileged": True}},
         r"security_context: unknown key 'privileged'. Valid keys: runAsUser"),
        ({"security_context": {"runAsUser": "1000"}},
         r"security_context.runAsUser='1000' is not valid: expected int"),
        ({"security_context": {"fsGroupChangePolicy": "Never"}},
         r"expected Always or OnRootMismatch"),
        ({"capabilities": ["ipc_lock"]}, r"expected a list of capability names like IPC_LOCK"),
        ({"affinity": {"nodeSelector": {}}}, r"expected a table of nodeAffinity, podAffinity"),
        ({"exclusive_topology": "rack"}, r"exclusive_topology places LeaderWorkerSet groups: "
         r"it needs kubernetes.nodes > 1"),
        ({"queue_name": "Team A"}, r"kubernetes.queue_name='Team A' is not valid: expected a name"),
        ({"pod_labels": {"llmslo.io/session": "x"}},
         r"pod_labels: llmslo.io/session are the runtime's own labels"),
        ({"pod_annotations": {"a": 1}}, r"pod_annotations=\{'a': 1\} is not valid: expected a "
         r"table of key = 'string'"),
    ],
)  # fmt: skip
def test_a_bad_pod_setting_names_the_key(kube: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_engine_configs({"e": {"kind": "vllm", "runtime": "kubernetes", "model": "m",
                                   "kubernetes": kube}})  # fmt: skip


@pytest.mark.parametrize(
    ("engine", "scheduler", "labels", "annotations"),
    [
        # volcano-sh/apis scheduling/v1beta1 QueueNameAnnotationKey: an annotation.
        ("llama70b-volcano", "volcano", {}, {"scheduling.volcano.sh/queue-name": "team-a"}),
        # NVIDIA/KAI-Scheduler constants DefaultQueueLabel: a label.
        ("llama70b-kai", "kai-scheduler", {"kai.scheduler/queue": "team-a"}, {}),
    ],
)  # fmt: skip
def test_the_docs_gang_examples_put_each_schedulers_names_on_every_pod(
    tmp_path: Path, engine: str, scheduler: str, labels: dict[str, str],
    annotations: dict[str, str],
) -> None:  # fmt: skip
    import re

    doc = (Path(__file__).parents[2] / "docs" / "engines.md").read_text()
    (block,) = [b for b in re.findall(r"```toml\n(.*?)```", doc, re.S) if engine in b]
    path = tmp_path / "engines.toml"
    path.write_text(block)
    objects = manifests(plan_engine(load_engine_configs(path)[engine]))
    (lws,) = [o for o in objects if o["kind"] == "LeaderWorkerSet"]
    assert errors(lws, LWS) == []
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    for template in (tmpl["leaderTemplate"], tmpl["workerTemplate"]):
        assert template["spec"]["schedulerName"] == scheduler
        meta = template["metadata"]
        assert labels.items() <= meta["labels"].items()
        assert meta.get("annotations", {}) == annotations
