"""The kubernetes runtime's objects: built from each kind's image unit, checked against
the Kubernetes 1.37 schemas of kubernetes-validate 1.37.0 (strict: no unknown fields),
and the engine config's ``kubernetes`` table checked when it is read."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from pytest_llmslo.engines import apply_overrides, load_engine_configs, plan_engine
from pytest_llmslo.engines.runtimes.k8s.deployments import (
    GPU_RESOURCE,
    MANAGED_BY,
    SESSION_ID,
    engine_objects,
    names_for,
    session_object,
)
from pytest_llmslo.engines.runtimes.k8s.settings import settings_of
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.sim.admintoken import TOKEN_ENV, session_token

#: The schemas the manifests are checked against (kubernetes-validate==1.37.0).
K8S_SCHEMA_VERSION = "1.37.0"

KUBE = {
    "namespace": "bench",
    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "cache_pvc": "hf-cache",
    "secret_env": {"HF_TOKEN": "hf-token/token"},
}

KINDS: dict[str, dict[str, Any]] = {
    "sim": {},
    "vllm": {"model": "meta-llama/Llama-3.1-8B-Instruct", "tensor_parallel_size": 2},
    "sglang": {"model": "Qwen/Qwen2.5-7B-Instruct"},
    "trtllm": {"model": "meta-llama/Llama-3.1-8B-Instruct", "dtype": "bfloat16"},
}


def objects_of(kind: str, kube: Mapping[str, Any] = KUBE, **table: Any) -> list[dict[str, Any]]:
    cfg = load_engine_configs(
        {kind: {"runtime": "kubernetes", "kubernetes": dict(kube), **KINDS[kind], **table}}
    )[kind]
    plan = plan_engine(cfg)
    return engine_objects(plan, settings_of(plan.config), names_for(plan.config), "bench")


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind)


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return by_kind(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_manifests_are_valid_kubernetes_objects(kind: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    objects = objects_of(kind)
    session = session_object("bench")
    for obj in [session, *objects]:
        kubernetes_validate.validate(obj, K8S_SCHEMA_VERSION, strict=True)
    assert {o["kind"] for o in objects} >= {"Deployment", "Service"}
    for obj in [session, *objects]:
        assert obj["metadata"]["labels"][MANAGED_BY] == "pytest-llmslo"
        assert obj["metadata"]["labels"]["llmslo.io/session"] == SESSION_ID


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_pod_gets_gpus_nodes_shm_cache_and_secret_references(kind: str) -> None:
    objects = objects_of(kind)
    pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    c = container(objects)
    gpus = c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE)
    assert gpus == {"sim": None, "vllm": "2", "sglang": "1", "trtllm": "1"}[kind]
    assert pod["nodeSelector"] == KUBE["node_selector"]
    assert pod["tolerations"] == KUBE["tolerations"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    assert volumes["hf-cache"]["persistentVolumeClaim"] == {"claimName": "hf-cache"}
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
    }
    # Sized for model loading: the startup probe allows the whole startup_timeout_s.
    probe = c["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 900
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    # The engine listens on every interface of its pod, on the Service's port.
    assert "0.0.0.0" in c["args"]
    svc = by_kind(objects, "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == c["ports"][0]["containerPort"] == 8000


def test_a_host_path_cache_and_the_generated_config_as_a_config_map() -> None:
    objects = objects_of("trtllm", {"cache_host_path": "/mnt/hf"})
    pod = by_kind(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["hf-cache"]["hostPath"] == {"path": "/mnt/hf", "type": "DirectoryOrCreate"}
    files = by_kind(objects, "ConfigMap")
    assert "llm_api_options.yaml" in files["data"]
    assert volumes["files-0"]["configMap"]["name"] == files["metadata"]["name"]


def test_the_sims_admin_token_is_in_a_secret_of_its_own_never_in_the_deployment() -> None:
    objects = objects_of("sim")
    token = session_token()
    deployment = by_kind(objects, "Deployment")
    assert token not in json.dumps(deployment)
    secret = by_kind(objects, "Secret")
    assert base64.b64decode(secret["data"][TOKEN_ENV]).decode() == token
    assert secret["metadata"]["labels"] == deployment["spec"]["template"]["metadata"]["labels"]
    env = {e["name"]: e for e in container(objects)["env"]}
    ref = {"name": secret["metadata"]["name"], "key": TOKEN_ENV}
    assert env[TOKEN_ENV] == {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}}
    # Applied before the Deployment whose pod reads it.
    kinds = [o["kind"] for o in objects]
    assert kinds.index("Secret") < kinds.index("Deployment")
    # An engine the harness made no secret for gets no Secret.
    assert all(o["kind"] != "Secret" for o in objects_of("vllm"))


def test_a_literal_secret_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"HF_TOKEN .*secret_env"):
        objects_of("sim", {}, env={"HF_TOKEN": "hf_abcdef"})


@pytest.mark.parametrize(
    ("kube", "message"),
    [
        ({"replicas": 2}, r"unknown kubernetes key\(s\) replicas. Valid keys: access, affinity,"),
        ({"nodes": 0}, r"kubernetes.nodes=0 is not valid: an integer >= 1"),
        ({"access": "ingress"}, r"kubernetes.access='ingress' is not valid. Valid access paths"),
        ({"secret_env": {"HF_TOKEN": "hf"}}, r"expected 'SECRET/KEY'"),
        ({"tolerations": [{"operator": "Maybe"}]}, r"operator='Maybe' is not valid"),
        ({"cache_pvc": "a", "cache_host_path": "/b"}, r"choose one cache volume"),
        ({"cache_host_path": "rel"}, r"must be an absolute path"),
        ({"keep_engines": "yes"}, r"keep_engines='yes' is not valid"),
        ({"node_selector": {"a": 1}}, r"node_selector=.* expected a table of strings"),
    ],
)
def test_a_bad_kubernetes_table_is_a_config_error(kube: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_engine_configs({"sim": {"runtime": "kubernetes", "kubernetes": kube}})


def test_kinds_the_runtime_does_not_run_are_named() -> None:
    with pytest.raises(ConfigError, match=r"does not run kind 'external' yet. Kinds it runs: sim"):
        load_engine_configs({"external": {"runtime": "kubernetes", "url": "http://x:1"}})
    with pytest.raises(ConfigError, match=r"kind 'sim' does not run across nodes here"):
        load_engine_configs({"sim": {"runtime": "kubernetes", "kubernetes": {"nodes": 2}}})
    with pytest.raises(ConfigError, match=r"kind 'manifests' needs kubernetes.service"):
        load_engine_configs(
            {"m": {"kind": "manifests", "runtime": "kubernetes",
                   "kubernetes": {"manifests": "x.yaml"}}}
        )  # fmt: skip


def test_overrides_reach_the_kubernetes_table() -> None:
    cfg = load_engine_configs({"sim": {"runtime": "kubernetes"}})["sim"]
    cfg = apply_overrides(cfg, ["kubernetes.namespace=other", "kubernetes.keep_engines=true"])
    assert cfg.kubernetes == {"namespace": "other", "keep_engines": True}
    with pytest.raises(ConfigError, match="unknown kubernetes key"):
        apply_overrides(cfg, ["kubernetes.nope=1"])


def test_the_progress_line_names_the_pod_stage() -> None:
    from pytest_llmslo.engines.runtimes.k8s.phases import stage

    scheduled = {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": "2026-01-01T00:00:01Z",
    }
    assert stage(None) == "no pod yet"
    assert stage({"status": {"phase": "Pending"}}) == "waiting for a node"
    waiting = {"state": {"waiting": {"reason": "ContainerCreating"}}}
    pod = {"status": {"conditions": [scheduled], "containerStatuses": [waiting]}}
    assert stage(pod) == "scheduled, ContainerCreating"
    running = {"state": {"running": {"startedAt": "2026-01-01T00:00:04Z"}}}
    pod = {"status": {"conditions": [scheduled], "containerStatuses": [running]}}
    assert stage(pod) == "container started, readiness probe not passed yet"
