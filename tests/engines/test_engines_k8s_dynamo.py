"""Dynamo as a DynamoGraphDeployment, a user's own manifests, and the operations on a
running engine, driven end to end against a Kubernetes API on loopback (kmock), the test
playing the operators (``k8s_cluster.DynamoOperator``, ``Controller``) and a sim process
standing for every pod behind the client's real port-forward."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from engines_helpers import K8S_SIM_MODEL
from k8s_cluster import Controller, DynamoOperator, FakeCluster, ready, used

from pytest_llmslo.engines import launch, load_engine_configs, plan_engine, startup
from pytest_llmslo.engines.runtimes.k8s.role import allowed, role
from pytest_llmslo.engines.runtimes.kubernetes import KubeEngine

NS = "bench"
MODEL = K8S_SIM_MODEL


def dynamo(**options: Any) -> Any:
    cfg = load_engine_configs({"dyn": {
        "kind": "dynamo", "runtime": "kubernetes", "model": MODEL, "startup_timeout_s": 60,
        "options": {"worker": "mocker", **options},
        "kubernetes": {"access": "port-forward"}}})["dyn"]  # fmt: skip
    return plan_engine(cfg)


def test_dynamo_waits_for_the_dgd_ready_then_serves_and_scrapes_every_worker(
    cluster: FakeCluster,
) -> None:
    seen: list[str] = []
    with DynamoOperator(cluster, NS, ready_after_s=1.5):
        with startup.reporting(lambda p: seen.append(p.waiting_for)):
            handle = launch(dynamo(workers=2), poll_s=0.1)
    try:
        # Until the operator said Ready, the progress line said so and nothing was reached.
        assert any("DynamoGraphDeployment not Ready: Frontend: 0/1 ready" in s for s in seen)
        assert handle.base_url.startswith("http://127.0.0.1:")
        # Each worker's /metrics through a port-forward pinned to its pod.
        assert len(handle.metrics_urls) == 2
        for url in handle.metrics_urls:
            assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
            r = httpx.get(url, timeout=10, trust_env=False)
            assert r.status_code == 200 and "# TYPE" in r.text
        engine = handle.units[0]
        assert isinstance(engine, KubeEngine)
        (dgd,) = cluster.dgds(NS)
        name = dgd["metadata"]["name"]
        assert engine.describe()["service"] == f"{name}-frontend"
        # A scale sets the aggregated workers' replicas of the DGD.
        done = engine.scale(3)
        assert done["replicas"] == 3
        (dgd,) = cluster.dgds(NS)
        assert dgd["spec"]["services"]["MockerWorker"]["replicas"] == 3
        # A kill deletes the frontend's pod at once.
        killed = engine.kill(0)
        assert killed["target"] == f"pod {name}-frontend-0"
        assert f"/api/v1/namespaces/{NS}/pods/{name}-frontend-0" in cluster.requests("delete")
    finally:
        handle.stop()
    assert cluster.dgds(NS) == []
    assert cluster.items(f"/api/v1/namespaces/{NS}/configmaps") == []
    rules = role(NS)["rules"]
    denied = [s for s in sorted(used(cluster)) if not allowed(*s, rules)]
    assert not denied, f"the runtime used what the Role does not grant: {denied}"
    assert ("nvidia.com", "dynamographdeployments", "get") in used(cluster)


def test_a_disaggregated_dgd_is_not_scaled_while_it_runs(cluster: FakeCluster) -> None:
    from pytest_llmslo.errors import ConfigError

    with DynamoOperator(cluster, NS, ready_after_s=0.1):
        handle = launch(dynamo(mode="disagg"), poll_s=0.1)
    try:
        assert len(handle.metrics_urls) == 2  # the prefill and the decode worker
        with pytest.raises(ConfigError, match="disaggregated Dynamo is scaled by its"):
            handle.units[0].scale(2)
    finally:
        handle.stop()


ENGINE_YAML = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: my-engine}
spec:
  replicas: 1
  selector: {matchLabels: {app: my-engine}}
  template:
    metadata: {labels: {app: my-engine}}
    spec: {containers: [{name: engine, image: pytest-llmslo/sim:local}]}
---
apiVersion: v1
kind: Service
metadata: {name: my-engine}
spec: {selector: {app: my-engine}, ports: [{name: http, port: 8000}]}
"""


def test_a_users_manifests_are_applied_reached_and_deleted(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    (tmp_path / "engine.yaml").write_text(ENGINE_YAML)
    cfg = load_engine_configs({"mine": {
        "kind": "manifests", "runtime": "kubernetes", "startup_timeout_s": 60,
        "kubernetes": {"manifests": str(tmp_path / "engine.yaml"), "service": "my-engine",
                       "access": "port-forward"}}})["mine"]  # fmt: skip
    with Controller(cluster, NS, lambda c, ns, pod: ready(c, ns, pod)):
        handle = launch(plan_engine(cfg), poll_s=0.1)
        try:
            # The model is the first the engine lists; the pods are the Service's.
            assert handle.model == MODEL
            unit = handle.metadata()["units"][0]
            assert unit["service"] == "my-engine" and unit["cold_start"]["ready_s"] == 7.0
            dep = cluster.deployments(NS)[0]
            assert dep["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pytest-llmslo"
            handle.units[0].scale(2)
            assert cluster.deployments(NS)[0]["spec"]["replicas"] == 2
        finally:
            handle.stop()
    assert cluster.deployments(NS) == []
    assert cluster.items(f"/api/v1/namespaces/{NS}/services") == []


def test_the_access_path_is_in_the_run_constants(cluster: FakeCluster) -> None:
    with DynamoOperator(cluster, NS, ready_after_s=0.1):
        handle = launch(dynamo(), poll_s=0.1)
    try:
        unit = handle.metadata()["units"][0]
        assert unit["access"] == "port-forward"
        json.dumps(handle.metadata())  # JSON data, as the run document holds it
    finally:
        handle.stop()


@pytest.mark.parametrize(
    ("kind", "kube"),
    [("vllm", {}), ("trtllm", {"ssh_secret": "llmslo-ssh"})],
    ids=["vllm", "trtllm"],
)
def test_a_multi_node_engine_is_reached_at_its_leader(
    cluster: FakeCluster, kind: str, kube: dict[str, str]
) -> None:
    from k8s_cluster import LwsController

    cfg = load_engine_configs({"e": {
        "kind": kind, "runtime": "kubernetes", "model": MODEL, "tensor_parallel_size": 8,
        "startup_timeout_s": 60,
        "kubernetes": {"nodes": 2, "access": "port-forward", **kube}}})["e"]  # fmt: skip
    with LwsController(cluster, NS, lambda c, ns, pod: None):
        handle = launch(plan_engine(cfg), poll_s=0.1)
    try:
        engine = handle.units[0]
        assert isinstance(engine, KubeEngine)
        # Both pods are the engine's; the API is the leader's.
        assert len(engine.pods()) == 2
        assert [p["metadata"]["name"] for p in engine.api_pods()] == [f"{engine.names.base}-0"]
        for pod in engine.pods():  # every pod mounts the SSH Secret MPI needs
            secrets = [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v]
            assert secrets == list(kube.values())
        assert handle.metadata()["units"][0]["nodes"] == 2
        engine.scale(2)
        lws = cluster.items(
            f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets"
        )[0]  # fmt: skip
        assert lws["spec"]["replicas"] == 2
    finally:
        handle.stop()
    assert (
        cluster.items(f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{NS}/leaderworkersets") == []
    )
    rules = role(NS)["rules"]
    assert not [s for s in sorted(used(cluster)) if not allowed(*s, rules)]


def test_streams_cut_mid_answer_end_their_port_forwards_cleanly(cluster: FakeCluster) -> None:
    # End to end through the client library's real port-forward: a load's cut (end of a
    # window, a stop signal) closes streams while the engine still sends; every proxy
    # thread ends, none with a traceback (this module fails on any thread's exception).
    # test_engines_k8s_forward.py holds the race that used to reset them.
    import threading

    with DynamoOperator(cluster, NS, ready_after_s=0.1):
        handle = launch(dynamo(), poll_s=0.1)
    try:
        body = {"model": MODEL, "stream": True, "max_tokens": 4000,
                "messages": [{"role": "user", "content": "count"}]}  # fmt: skip
        for _ in range(5):
            with httpx.Client(base_url=handle.base_url, timeout=10, trust_env=False) as client:
                with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    assert r.status_code == 200
                    chunks = r.iter_raw()
                    assert next(chunks)  # the first bytes, then the client goes away
    finally:
        handle.stop()
    proxies = [t for t in threading.enumerate() if t.name.startswith("Kubernetes port forward")]
    for t in proxies:
        t.join(5)
    assert not [t for t in proxies if t.is_alive()]
