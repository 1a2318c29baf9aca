"""Every built-in Kubernetes layout started end to end on a fake cluster that behaves like
the real controllers (``k8s_behaving``): the LWS controller's headless Service and DNS,
the Dynamo operator's labels, pods run as their image's user, start scripts run with
what the image and the cluster give them. Each defect a real cluster would show is a
test here: the API Service shadowing the LWS's headless one, the cache under ``/root``
for Dynamo's uid-1000 images, disaggregated workers' labels, a Ray worker that starts
before its head, a worker image without ``sshd`` under group restarts, and the verbs
owner references need."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from engines_helpers import K8S_SIM_MODEL
from k8s_behaving import (
    BehavingDynamo,
    BehavingLws,
    owner_reference_denials,
    resolves,
    run_as_image_user,
)
from k8s_cluster import Controller, FakeCluster

from pytest_llmslo.engines import launch, load_engine_configs, plan_engine
from pytest_llmslo.engines.readiness import all_of, http_ok, models_listed
from pytest_llmslo.engines.runtimes.k8s.podfailures import pod_failure
from pytest_llmslo.engines.runtimes.k8s.role import role
from pytest_llmslo.engines.runtimes.kubernetes import KubeEngine
from pytest_llmslo.errors import EngineStartError

NS = "bench"
MODEL = K8S_SIM_MODEL
LWS = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets"


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    """The SSH Secret's files, as mounted in a pod."""
    keys = tmp_path / "ssh-pk"
    keys.mkdir()
    (keys / "private.key").write_text("private\n")
    (keys / "private.key.pub").write_text("ssh-ed25519 AAAA test\n")
    return keys


def multi_node(kind: str, **more: Any) -> Any:
    kube = {"nodes": 2, "access": "port-forward", "cache_pvc": "hf-cache"}
    if kind == "trtllm":
        kube["ssh_secret"] = "llmslo-ssh"
    cfg = load_engine_configs({"e": {
        "kind": kind, "runtime": "kubernetes", "model": MODEL, "tensor_parallel_size": 8,
        "startup_timeout_s": 30, "kubernetes": kube, **more}})["e"]  # fmt: skip
    plan = plan_engine(cfg)
    if kind == "sglang":  # the sim stands for the server and has no /health_generate
        plan = replace(plan, ready=all_of(http_ok("/health"), models_listed(MODEL)))
    return plan


def first_token(base_url: str) -> str:
    r = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={"model": MODEL, "max_tokens": 4,
              "messages": [{"role": "user", "content": "hello"}]},
        timeout=30, trust_env=False,
    )  # fmt: skip
    r.raise_for_status()
    return str(r.json()["choices"][0]["message"]["content"])


def nothing_left(cluster: FakeCluster) -> None:
    assert cluster.items(LWS) == []
    assert cluster.items(f"/api/v1/namespaces/{NS}/configmaps") == []
    assert cluster.dgds(NS) == []
    # What is left is the controllers' (the headless Service the LWS owns), not ours.
    ours = [s["metadata"]["name"] for s in cluster.items(f"/api/v1/namespaces/{NS}/services")
            if (s["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by")]  # fmt: skip
    assert ours == []


@pytest.mark.parametrize("image", [None, "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1"])
def test_one_node_comes_up_as_its_images_user(cluster: FakeCluster, image: str | None) -> None:
    # The default vLLM image runs as root; Dynamo's vLLM image as uid 1000.
    cfg = load_engine_configs({"e": {
        "kind": "vllm", "runtime": "kubernetes", "model": MODEL, "startup_timeout_s": 30,
        **({"image": image} if image else {}),
        "kubernetes": {"access": "port-forward", "cache_pvc": "hf-cache",
                       "security_context": {"fsGroup": 1000}}}})["e"]  # fmt: skip
    with Controller(cluster, NS, run_as_image_user):
        handle = launch(plan_engine(cfg), poll_s=0.1)
        try:
            assert first_token(handle.base_url)
        finally:
            handle.stop()
    nothing_left(cluster)
    assert cluster.deployments(NS) == []
    assert owner_reference_denials(cluster, role(NS)["rules"]) == []


@pytest.mark.parametrize(
    ("kind", "more"),
    [("vllm", {}), ("sglang", {}),
     ("trtllm", {"image": "registry.example/trtllm-with-sshd:1.3"})],
    ids=["vllm-ray", "sglang", "trtllm-mpi"],
)  # fmt: skip
def test_a_multi_node_layout_comes_up_serves_and_leaves_nothing(
    cluster: FakeCluster, secret_dir: Path, kind: str, more: dict[str, Any]
) -> None:
    with BehavingLws(cluster, NS, secret_dir) as lws_controller:
        handle = launch(multi_node(kind, **more), poll_s=0.1)
        try:
            engine = handle.units[0]
            assert isinstance(engine, KubeEngine)
            name = engine.names.base
            # No container exited: the workers joined the leader on the first group.
            assert lws_controller.outcome.exits == []
            assert lws_controller.outcome.groups == 1
            # The LWS controller's headless Service is the one of the LWS's name, and
            # the leader's address resolves through it; the API has a Service of its own.
            headless = cluster.http.get(f"/api/v1/namespaces/{NS}/services/{name}").json()
            assert headless["spec"]["clusterIP"] == "None"
            assert resolves(cluster, NS, f"{name}-0.{name}.{NS}")
            assert engine.describe()["service"] == f"{name}-api"
            assert first_token(handle.base_url)
        finally:
            handle.stop()
    nothing_left(cluster)
    assert owner_reference_denials(cluster, role(NS)["rules"]) == []


def test_a_ray_worker_that_starts_before_the_head_retries(
    cluster: FakeCluster, secret_dir: Path
) -> None:
    # The behaving cluster starts the workers first; the head answers from the second try.
    with BehavingLws(cluster, NS, secret_dir) as lws_controller:
        handle = launch(multi_node("vllm"), poll_s=0.1)
        try:
            assert first_token(handle.base_url)
        finally:
            handle.stop()
    assert lws_controller.outcome.exits == []


def test_an_image_without_sshd_ends_the_start_with_the_reason(
    cluster: FakeCluster, secret_dir: Path
) -> None:
    # The default TRT-LLM image is played without sshd: the worker exits, the group is
    # made again and again (RecreateGroupOnPodRestart); the start ends on the first exit.
    with BehavingLws(cluster, NS, secret_dir, max_groups=50) as lws_controller:
        with pytest.raises(EngineStartError) as info:
            launch(multi_node("trtllm"), poll_s=0.1)
    assert "this image has no sshd" in str(info.value).splitlines()[0]
    assert lws_controller.outcome.groups < 50
    nothing_left(cluster)


def dynamo(mode: str, **kube: Any) -> Any:
    cfg = load_engine_configs({"dyn": {
        "kind": "dynamo", "runtime": "kubernetes", "model": MODEL, "startup_timeout_s": 30,
        "options": {"worker": "vllm", "mode": mode},
        "kubernetes": {"access": "port-forward", "pod_labels": {"kai.scheduler/queue": "team-a"},
                       **kube}}})["dyn"]  # fmt: skip
    return plan_engine(cfg)


def serves_v1beta1(method: str, path: str, data: Any) -> tuple[int, Any] | None:
    """The discovery of an operator that serves the DGD's v1beta1 alone."""
    if method == "GET" and path == "/apis/nvidia.com/v1alpha1":
        return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
    if method == "GET" and path == "/apis/nvidia.com/v1beta1":
        dgd = {"name": "dynamographdeployments", "namespaced": True,
               "kind": "DynamoGraphDeployment", "verbs": ["create"]}  # fmt: skip
        return 200, {"kind": "APIResourceList", "groupVersion": "nvidia.com/v1beta1",
                     "resources": [dgd]}  # fmt: skip
    return None


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["agg", "disagg"])
@pytest.mark.parametrize(
    ("kube", "served"),
    [({}, False), ({"cache_pvc": "hf-cache"}, False), ({"dynamo_api": "v1beta1"}, False),
     ({"cache_pvc": "hf-cache"}, True)],
    ids=["emptydir", "pvc", "v1beta1-forced", "v1beta1-served"],
)  # fmt: skip
def test_dynamo_comes_up_as_its_images_user_and_scrapes_every_worker(
    cluster: FakeCluster, mode: str, kube: dict[str, Any], served: bool
) -> None:
    if served:  # an operator that serves v1beta1 alone: the runtime writes that one
        cluster.answer_with(serves_v1beta1)
    version = "v1beta1" if served or kube.get("dynamo_api") else "v1alpha1"
    with BehavingDynamo(cluster, NS) as operator:
        handle = launch(dynamo(mode, **kube), poll_s=0.1)
        try:
            # The version the cluster serves (or the one forced) is the one applied.
            assert [d["apiVersion"] for d in cluster.dgds(NS)] == [f"nvidia.com/{version}"]
            # Dynamo's images run as uid 1000: the cache is theirs to write.
            assert operator.exits == []
            # Every worker is scraped, prefill and decode ones too.
            assert len(handle.metrics_urls) == (1 if mode == "agg" else 2)
            assert first_token(handle.base_url)
            # The pods carry the scheduler's queue label, the operator's labels kept.
            for pod in cluster.pods(NS):
                labels = pod["metadata"]["labels"]
                assert labels["kai.scheduler/queue"] == "team-a", pod["metadata"]["name"]
                assert labels["nvidia.com/dynamo-graph-deployment-name"]
        finally:
            handle.stop()
    nothing_left(cluster)
    assert owner_reference_denials(cluster, role(NS)["rules"]) == []


def test_a_cache_the_images_user_cannot_write_is_named(cluster: FakeCluster) -> None:
    # A node directory is root's: Dynamo's uid-1000 user cannot write it; the start ends
    # with the container's own words.
    with BehavingDynamo(cluster, NS) as operator, pytest.raises(EngineStartError) as info:
        launch(dynamo("agg", cache_host_path="/mnt/hf"), poll_s=0.1)
    assert operator.exits
    first = str(info.value).splitlines()[0]
    assert "CrashLoopBackOff" in first
    assert "it said: PermissionError: [Errno 13] Permission denied: '/llmslo/hf-cache'" in first
    nothing_left(cluster)


def test_a_start_script_that_says_what_it_lacks_is_a_failure() -> None:
    def pod(message: str, code: int = 1) -> dict[str, Any]:
        last = {"terminated": {"exitCode": code, "message": message}}
        status = {"name": "c", "state": {"running": {}}, "lastState": last}
        return {"metadata": {"name": "p"}, "status": {"containerStatuses": [status]}}

    said = pod("starting\nllmslo: this image has no sshd, which ...\n")
    assert pod_failure(said) == (
        "pod p, container c exited (llmslo: this image has no sshd, which ...)"
    )
    # Another exit is left to the kubelet's restarts; a clean exit is no failure.
    assert pod_failure(pod("Traceback: something\n")) is None
    assert pod_failure(pod("llmslo: done", code=0)) is None


def test_a_cluster_without_the_lws_api_says_so(cluster: FakeCluster) -> None:
    # No LWS controller installed: the API server answers 404 to the LeaderWorkerSet.
    cluster.answer_with(
        lambda method, path, data: (
            (404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            if "/leaderworkersets" in path
            else None
        )
    )
    with pytest.raises(EngineStartError) as info:
        launch(multi_node("vllm"), poll_s=0.1)
    first = str(info.value).splitlines()[0]
    assert "cannot apply LeaderWorkerSet" in first
    assert "the cluster does not serve leaderworkerset.x-k8s.io/v1 LeaderWorkerSet" in first
    assert "llmslo check --engine NAME" in first
    nothing_left(cluster)
