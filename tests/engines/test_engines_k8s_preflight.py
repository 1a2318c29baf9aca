"""``llmslo check``: the preflight of an engine's cluster, against kmock answering as a
cluster that has every prerequisite, then as one that lacks each of them in turn (the
namespace, the LWS API, a verb of the Role, GPUs, the RuntimeClass, a Secret, a
ReadWriteMany cache), and as one that forbids a read (unknown, not missing)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from k8s_cluster import FakeCluster, fake_cluster

from pytest_llmslo.cli import main
from pytest_llmslo.engines import load_engine_configs
from pytest_llmslo.engines.runtimes.k8s.kubeclient import forget_clients
from pytest_llmslo.engines.runtimes.k8s.preflight import check_engine

NS = "bench"
ENGINES = f"""
[engines.llama-2nodes]
kind = "vllm"
runtime = "kubernetes"
model = "meta-llama/Llama-3.1-70B-Instruct"
tensor_parallel_size = 8

[engines.llama-2nodes.kubernetes]
namespace = "{NS}"
nodes = 2
cache_pvc = "hf-cache"
image_pull_secrets = ["ngc-pull"]
runtime_class_name = "nvidia"
secret_env = {{ HF_TOKEN = "hf-token/token" }}
"""


@dataclass(frozen=True)
class Has:
    """What the fake cluster has."""

    namespace: bool = True
    lws_api: bool = True
    denied: frozenset[str] = frozenset()  # "verb resource[/sub]"
    node_gpus: int = 8
    nodes_forbidden: bool = False
    runtime_classes: tuple[str, ...] = ("nvidia",)
    secrets: tuple[str, ...] = ("ngc-pull", "hf-token")
    pvc_modes: tuple[str, ...] = ("ReadWriteMany",)
    reviews: list[dict[str, Any]] = field(default_factory=list)


def answers(has: Has) -> Any:
    base = f"/api/v1/namespaces/{NS}"

    def answer(method: str, path: str, data: Any) -> tuple[int, Any] | None:
        if method == "POST" and path.endswith("/selfsubjectaccessreviews"):
            attrs = data["spec"]["resourceAttributes"]
            has.reviews.append(attrs)
            res = attrs["resource"] + (f"/{attrs['subresource']}" if attrs.get("subresource")
                                       else "")  # fmt: skip
            allowed = f"{attrs['verb']} {res}" not in has.denied
            return 201, {**data, "status": {"allowed": allowed}}
        if method != "GET":
            return None
        found: dict[str, Any] = {
            base: {"metadata": {"name": NS}} if has.namespace else None,
            "/apis/leaderworkerset.x-k8s.io/v1": {"resources": [
                {"name": "leaderworkersets", "kind": "LeaderWorkerSet"}]} if has.lws_api else None,
            "/api/v1/nodes": {"items": [{"metadata": {"name": "gpu-1"}, "status": {
                "allocatable": {"nvidia.com/gpu": str(has.node_gpus)}}}]},
            f"{base}/persistentvolumeclaims/hf-cache": {"spec": {
                "accessModes": list(has.pvc_modes)}},
        }  # fmt: skip
        for name in ("nvidia", "runc"):
            found[f"/apis/node.k8s.io/v1/runtimeclasses/{name}"] = (
                {"handler": name} if name in has.runtime_classes else None
            )
        for name in ("ngc-pull", "hf-token"):
            found[f"{base}/secrets/{name}"] = {"type": "Opaque"} if name in has.secrets else None
        if path == "/api/v1/nodes" and has.nodes_forbidden:
            return 403, {"kind": "Status", "code": 403, "reason": "Forbidden"}
        if path in found:
            body = found[path]
            return (200, body) if body is not None else (404, {"kind": "Status", "code": 404})
        return None

    return answer


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    with fake_cluster(tmp_path) as c:
        monkeypatch.setenv("KUBECONFIG", str(c.kubeconfig))
        forget_clients()
        yield c
        forget_clients()


def check(cluster: FakeCluster, has: Has, tmp_path: Path) -> tuple[int, str]:
    cluster.answer_with(answers(has))
    engines = tmp_path / "engines.toml"
    engines.write_text(ENGINES)
    out = io.StringIO()
    config = load_engine_configs(engines)["llama-2nodes"]
    return check_engine(config, out), out.getvalue()


def test_a_cluster_with_everything(cluster: FakeCluster, tmp_path: Path) -> None:
    has = Has()
    code, text = check(cluster, has, tmp_path)
    assert code == 0, text
    lines = text.splitlines()
    assert lines[-1] == f"0 missing of {len(lines) - 1} checked"
    assert all(ln.startswith("ok ") for ln in lines[:-1]), text
    for what in ("namespace bench", "LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) served",
                 "may create leaderworkersets (leaderworkerset.x-k8s.io)",
                 "may update configmaps/finalizers", "a node with 8 allocatable nvidia.com/gpu",
                 "Secret ngc-pull", "Secret hf-token", "RuntimeClass nvidia",
                 "PersistentVolumeClaim hf-cache"):  # fmt: skip
        assert any(ln.startswith("ok") and what in ln for ln in lines), (what, text)
    # Each review asked about the engine's namespace, never another.
    assert has.reviews and {r["namespace"] for r in has.reviews} == {NS}


@pytest.mark.parametrize(
    ("lacks", "line"),
    [
        ({"namespace": False}, "missing  namespace bench: not found"),
        ({"lws_api": False}, "missing  LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) served: "
         "no such API: install its controller, or check the version"),
        ({"denied": frozenset({"update configmaps/finalizers"})},
         "missing  may update configmaps/finalizers: denied: bind the Role of docs/engines.md"),
        ({"node_gpus": 4}, "missing  a node with 8 allocatable nvidia.com/gpu: the most any "
         "node offers is 4"),
        ({"runtime_classes": ()}, "missing  RuntimeClass nvidia: not found"),
        ({"secrets": ("hf-token",)}, "missing  Secret ngc-pull: not found"),
        ({"pvc_modes": ("ReadWriteOnce",)}, "missing  PersistentVolumeClaim hf-cache "
         "ReadWriteMany: its access modes are ReadWriteOnce; pods on several nodes mount it"),
    ],
    ids=["namespace", "crd", "rbac", "gpus", "runtime-class", "pull-secret", "rwx"],
)  # fmt: skip
def test_each_missing_prerequisite_is_named(
    cluster: FakeCluster, tmp_path: Path, lacks: dict[str, Any], line: str
) -> None:
    code, text = check(cluster, replace(Has(), **lacks), tmp_path)
    assert code == 1
    assert any(ln.startswith(line) for ln in text.splitlines()), text
    assert "1 missing of " in text


def test_a_forbidden_read_is_unknown_not_missing(cluster: FakeCluster, tmp_path: Path) -> None:
    code, text = check(cluster, Has(nodes_forbidden=True), tmp_path)
    assert code == 0
    assert "unknown  a node with 8 allocatable nvidia.com/gpu: cannot check (HTTP 403)" in text


def test_the_command_line(
    cluster: FakeCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.answer_with(answers(Has(secrets=())))
    engines = tmp_path / "engines.toml"
    engines.write_text(ENGINES)
    assert main(["check", "--engine", "llama-2nodes", "--engines-file", str(engines)]) == 1
    out = capsys.readouterr().out
    assert "missing  Secret hf-token: not found" in out
    assert "missing  Secret ngc-pull: not found" in out
    assert main(["check", "--engine", "nope", "--engines-file", str(engines)]) == 2


DYNAMO = f"""
[engines.dyn]
kind = "dynamo"
runtime = "kubernetes"
model = "Qwen/Qwen3-0.6B"
options = {{ worker = "vllm", mode = "disagg" }}

[engines.dyn.kubernetes]
namespace = "{NS}"
"""


@pytest.mark.parametrize(
    ("served", "line"),
    [
        (("v1alpha1", "v1beta1"), "ok       DynamoGraphDeployment (nvidia.com/v1alpha1) served"),
        (("v1alpha1",), "ok       DynamoGraphDeployment (nvidia.com/v1alpha1) served"),
        (("v1beta1",), "ok       DynamoGraphDeployment (nvidia.com/v1beta1) served"),
        ((), "missing  DynamoGraphDeployment (nvidia.com/v1alpha1) served: no such API"),
    ],
    ids=["both", "v1alpha1-only", "v1beta1-only", "no-operator"],
)  # fmt: skip
def test_dynamo_is_checked_in_the_version_the_cluster_serves(
    cluster: FakeCluster, tmp_path: Path, served: tuple[str, ...], line: str
) -> None:
    base = answers(Has())

    def answer(method: str, path: str, data: Any) -> tuple[int, Any] | None:
        if method == "GET" and path.startswith("/apis/nvidia.com/"):
            version = path.removeprefix("/apis/nvidia.com/")
            if version not in served:
                return 404, {"kind": "Status", "code": 404}
            dgd = {"name": "dynamographdeployments", "kind": "DynamoGraphDeployment"}
            return 200, {"resources": [dgd]}
        found: tuple[int, Any] | None = base(method, path, data)
        return found

    cluster.answer_with(answer)
    engines = tmp_path / "engines.toml"
    engines.write_text(DYNAMO)
    out = io.StringIO()
    code = check_engine(load_engine_configs(engines)["dyn"], out)
    text = out.getvalue()
    assert any(ln.startswith(line) for ln in text.splitlines()), text
    assert code == (1 if not served else 0), text
