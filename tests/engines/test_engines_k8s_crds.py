"""The custom resources of the kubernetes runtime, checked against the vendored CRD
schema extracts (``crds/README.md``: sources and versions): Dynamo as a
DynamoGraphDeployment (aggregated, disaggregated, KV router), multi-node vLLM and SGLang
as a LeaderWorkerSet; and a user's own manifests read as they are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo.engines import load_engine_configs, plan_engine
from pytest_llmslo.engines.runtimes.k8s.deployments import MANAGED_BY, names_for
from pytest_llmslo.engines.runtimes.k8s.objects import layout_of
from pytest_llmslo.engines.runtimes.k8s.render import manifests
from pytest_llmslo.engines.runtimes.k8s.settings import settings_of
from pytest_llmslo.errors import ConfigError

pytest.importorskip("kubernetes_validate")
pytest.importorskip("yaml")

from crd_schema import errors

DGD = "nvidia.com_dynamographdeployments_v1alpha1.yaml"
LWS = "leaderworkerset.x-k8s.io_leaderworkersets_v1.yaml"
KUBE = {"namespace": "bench", "secret_env": {"HF_TOKEN": "hf-token/token"},
        "cache_pvc": "hf-cache", "node_selector": {"gpu": "h100"}}  # fmt: skip


def layout(name: str, table: dict[str, Any]) -> Any:
    cfg = load_engine_configs({name: {"runtime": "kubernetes", **table}})[name]
    plan = plan_engine(cfg)
    return layout_of(plan, settings_of(plan.config), names_for(plan.config), "bench")


DGD_BETA = "nvidia.com_dynamographdeployments_v1beta1.yaml"
#: Each version's schema extract.
DGD_SCHEMAS = {"v1alpha1": DGD, "v1beta1": DGD_BETA}


def dgd(version: str | None = None, **options: Any) -> dict[str, Any]:
    kube = {**KUBE, "dynamo_api": version} if version else KUBE
    lay = layout("dynamo", {"model": "Qwen/Qwen3-0.6B", "tensor_parallel_size": 2,
                            "kubernetes": kube, "options": options})  # fmt: skip
    (obj,) = lay.objects
    return dict(obj)


@pytest.mark.parametrize(
    "options",
    [{}, {"mode": "disagg"}, {"mode": "disagg", "router_mode": "kv"},
     {"worker": "sglang", "mode": "disagg", "router_mode": "kv"}, {"worker": "mocker"},
     {"worker": "trtllm", "workers": 2}],
    ids=["agg", "disagg", "disagg-kv", "sglang-disagg-kv", "mocker", "trtllm-agg"],
)  # fmt: skip
@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1"])
def test_the_dgd_is_valid_against_dynamos_crd(options: dict[str, Any], version: str) -> None:
    obj = dgd(version, **options)
    assert errors(obj, DGD_SCHEMAS[version]) == []
    assert obj["apiVersion"] == f"nvidia.com/{version}"
    assert obj["metadata"]["labels"][MANAGED_BY] == "pytest-llmslo"
    # Each version's schema refuses the other's shape.
    other = DGD_BETA if version == "v1alpha1" else DGD
    assert errors(obj, other) != []


def test_render_without_a_cluster_writes_v1alpha1() -> None:
    assert dgd()["apiVersion"] == "nvidia.com/v1alpha1"


def test_the_v1beta1_dgd_carries_what_the_v1alpha1_one_does() -> None:
    alpha = dgd("v1alpha1", mode="disagg", prefill_workers=2, router_mode="kv")
    beta = dgd("v1beta1", mode="disagg", prefill_workers=2, router_mode="kv")
    assert beta["spec"]["env"] == alpha["spec"]["envs"]
    assert beta["spec"]["backendFramework"] == "vllm"
    services = alpha["spec"]["services"]
    components = {c["name"]: c for c in beta["spec"]["components"]}
    assert sorted(components) == sorted(services)
    # prefill and decode are component types of their own in v1beta1.
    assert {n: c["type"] for n, c in components.items()} == {
        "Frontend": "frontend",
        "VllmPrefillWorker": "prefill",
        "VllmDecodeWorker": "decode",
    }
    assert components["VllmPrefillWorker"]["replicas"] == 2
    for name, component in components.items():
        extra = dict(services[name]["extraPodSpec"])
        main_alpha = extra.pop("mainContainer")
        spec = dict(component["podTemplate"]["spec"])
        (main,) = spec.pop("containers")
        assert spec == extra  # the pod's settings: volumes, node selector, ...
        assert main["name"] == "main"
        assert main["args"] == main_alpha["args"] and main["image"] == main_alpha["image"]
        gpus = main.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        assert gpus == ("2" if name != "Frontend" else None)


def test_a_dgd_version_the_runtime_does_not_write_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"kubernetes.dynamo_api='v2' is not valid. "
                       r"Valid versions: v1alpha1, v1beta1"):  # fmt: skip
        dgd("v2")


def test_aggregated_and_disaggregated_services() -> None:
    agg = dgd(workers=3)["spec"]["services"]
    assert sorted(agg) == ["Frontend", "VllmWorker"]
    assert agg["VllmWorker"]["replicas"] == 3
    assert agg["VllmWorker"]["resources"] == {"limits": {"gpu": "2"}}
    assert "subComponentType" not in agg["VllmWorker"]
    dis = dgd(mode="disagg", prefill_workers=2, decode_workers=1, router_mode="kv")
    services = dis["spec"]["services"]
    assert dis["spec"]["backendFramework"] == "vllm"
    assert services["VllmPrefillWorker"]["subComponentType"] == "prefill"
    assert services["VllmPrefillWorker"]["replicas"] == 2
    assert services["VllmDecodeWorker"]["subComponentType"] == "decode"
    frontend = services["Frontend"]["extraPodSpec"]["mainContainer"]["args"]
    assert frontend[:2] == ["-m", "dynamo.frontend"]
    assert frontend[frontend.index("--router-mode") + 1] == "kv"
    prefill = services["VllmPrefillWorker"]["extraPodSpec"]["mainContainer"]["args"]
    assert prefill[prefill.index("--disaggregation-mode") + 1] == "prefill"
    assert "--kv-transfer-config" in prefill and "--kv-events-config" in prefill
    assert prefill[prefill.index("--discovery-backend") + 1] == "kubernetes"
    env = {e["name"]: e for e in dis["spec"]["envs"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    pod = services["VllmDecodeWorker"]["extraPodSpec"]
    assert pod["nodeSelector"] == {"gpu": "h100"}
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "hf-cache"}


def test_the_check_is_strict() -> None:
    obj = dgd()
    obj["spec"]["services"]["VllmWorker"]["gpus"] = 2  # not a field: would be pruned
    obj["spec"]["services"]["Frontend"]["extraPodSpec"]["mainContainer"]["argz"] = []
    found = errors(obj, DGD)
    assert any("'gpus' was unexpected" in e for e in found), found
    assert any("'argz' was unexpected" in e for e in found), found


def test_a_literal_secret_is_refused_in_the_dgd() -> None:
    with pytest.raises(ConfigError, match=r"HF_TOKEN would be written into the Dynamo"):
        layout("dynamo", {"model": "m", "env": {"HF_TOKEN": "hf_x"}})


def test_the_dgd_layout_reads_the_operators_objects() -> None:
    lay = layout("dynamo", {"model": "m", "options": {"workers": 2}})
    name = lay.objects[0]["metadata"]["name"]
    assert lay.service == f"{name}-frontend" and lay.port == 8000
    assert "nvidia.com/dynamo-component-type=frontend" in lay.api_selector
    assert lay.metrics[0].port == 9090
    assert lay.scale_patch(3) == {"spec": {"services": {"VllmWorker": {"replicas": 3}}}}
    assert lay.ready_object is lay.objects[0]
    # v1beta1's components are a list: a merge patch replaces it whole.
    beta = layout("dynamo", {"model": "m", "options": {"workers": 2},
                             "kubernetes": {"dynamo_api": "v1beta1"}})  # fmt: skip
    patched = beta.scale_patch(3)["spec"]["components"]
    assert [c["name"] for c in patched] == ["Frontend", "VllmWorker"]
    assert [c["replicas"] for c in patched] == [1, 3]
    assert beta.objects[0]["spec"]["components"][1]["replicas"] == 2  # not changed in place


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_multi_node_engines_are_a_valid_leader_worker_set(kind: str) -> None:
    import kubernetes_validate

    lay = layout(kind, {"model": "meta-llama/Llama-3.1-70B-Instruct", "tensor_parallel_size": 8,
                        "kubernetes": {**KUBE, "nodes": 2}})  # fmt: skip
    lws = next(o for o in lay.objects if o["kind"] == "LeaderWorkerSet")
    assert errors(lws, LWS) == []
    for obj in lay.objects:
        if obj["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(obj, "1.37.0", strict=True)
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 2
    leader = tmpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tmpl["workerTemplate"]["spec"]["containers"][0]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    text = " ".join([*leader.get("command", []), *leader["args"]])
    if kind == "vllm":
        assert "ray start --head" in text and "--pipeline-parallel-size 2" in text
        assert "--tensor-parallel-size 8" in text
        assert "$LWS_LEADER_ADDRESS:6379" in " ".join(worker["args"])
    else:
        assert "--tp-size 16 --nnodes 2 --node-rank $(LWS_WORKER_INDEX)" in text
        assert worker["args"] == leader["args"]
    svc = next(o for o in lay.objects if o["kind"] == "Service")
    assert svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert lay.scale_patch(2) == {"spec": {"replicas": 2}}


ENGINE_YAML = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: my-engine, labels: {app: my-engine}}
spec:
  selector: {matchLabels: {app: my-engine}}
  template:
    metadata: {labels: {app: my-engine}}
    spec: {containers: [{name: engine, image: pytest-llmslo/sim:local}]}
---
apiVersion: v1
kind: Service
metadata: {name: my-engine}
spec: {selector: {app: my-engine}, ports: [{port: 8000}]}
"""


def test_a_users_manifests_are_applied_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "engine.yaml").write_text(ENGINE_YAML)
    (tmp_path / "notes.txt").write_text("not yaml: skipped")
    kube = {"manifests": str(tmp_path), "service": "my-engine", "namespace": "bench"}
    lay = layout("mine", {"kind": "manifests", "kubernetes": kube})
    assert [o["kind"] for o in lay.objects] == ["Deployment", "Service"]
    for obj in lay.objects:
        assert obj["metadata"]["namespace"] == "bench"
        assert obj["metadata"]["labels"][MANAGED_BY] == "pytest-llmslo"
    assert lay.objects[0]["metadata"]["labels"]["app"] == "my-engine"
    assert lay.service == "my-engine" and lay.port is None
    printed = manifests(
        plan_engine(
            load_engine_configs(
                {"mine": {"kind": "manifests", "runtime": "kubernetes", "kubernetes": kube}}
            )["mine"]
        )
    )
    assert [o["kind"] for o in printed] == ["ConfigMap", "Deployment", "Service"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: other}\n",
         r"names namespace 'other', the engine runs in 'bench'"),
        ("just: text\n", r"must be a Kubernetes object with apiVersion, kind and metadata"),
        ("a: [\n", r"is not valid YAML"),
    ],
)  # fmt: skip
def test_bad_manifests_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    kube = {"manifests": str(path), "service": "s", "namespace": "bench"}
    with pytest.raises(ConfigError, match=message):
        layout("mine", {"kind": "manifests", "kubernetes": kube})


def test_the_access_path_is_a_pinned_constant() -> None:
    from pytest_llmslo.document.constants import constants_mismatch, engine_constants

    def run(access: str) -> dict[str, Any]:
        meta = {"kind": "sim", "runtime": "kubernetes", "command": ["--profile", "h100"],
                "units": [{"role": "engine", "access": access}]}  # fmt: skip
        return engine_constants(meta)

    assert run("port-forward")["hardware"]["access"] == "port-forward"
    # A port-forward adds latency to every request: such runs are not compared.
    assert constants_mismatch(run("port-forward"), run("service"))
    assert not constants_mismatch(run("service"), run("service"))
