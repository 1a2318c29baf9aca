"""The built-in Kubernetes layouts on a real cluster (``pytest -m k8s``): for each layout
the cluster is said to run (``LLMSLO_K8S_LAYOUTS``, default ``sim``), the preflight finds
nothing missing, then the engine comes up, serves a first token and leaves nothing in the
namespace. Skipped, with the reason, where no cluster answers (KUBECONFIG unset) and for
the layouts not asked for. docs/engines.md ("On a cluster of your own") lists the
variables:

- ``KUBECONFIG`` (required), ``KUBE_NAMESPACE`` (default ``default``);
- ``LLMSLO_K8S_LAYOUTS``: a comma list of ``sim``, ``vllm``, ``vllm-2nodes``,
  ``sglang-2nodes``, ``trtllm-2nodes``, ``dynamo-agg``, ``dynamo-disagg``;
- ``LLMSLO_K8S_MODEL`` (default ``Qwen/Qwen3-0.6B``), ``LLMSLO_K8S_TP`` (GPUs per pod,
  default 1), ``LLMSLO_K8S_CACHE_PVC`` (ReadWriteMany for the multi-node layouts),
  ``LLMSLO_K8S_SSH_SECRET`` and ``LLMSLO_K8S_TRTLLM_IMAGE`` (an image with ``sshd``) for
  ``trtllm-2nodes``, ``LLMSLO_K8S_STARTUP_S`` (default 1800).
"""

from __future__ import annotations

import io
import os
from typing import Any

import httpx
import pytest

from pytest_llmslo.engines import launch, load_engine_configs, plan_engine

LAYOUTS = ("sim", "vllm", "vllm-2nodes", "sglang-2nodes", "trtllm-2nodes", "dynamo-agg",
           "dynamo-disagg")  # fmt: skip


def _table(layout: str, namespace: str) -> dict[str, Any]:
    model = os.environ.get("LLMSLO_K8S_MODEL", "Qwen/Qwen3-0.6B")
    kube: dict[str, Any] = {"namespace": namespace}
    if os.environ.get("LLMSLO_K8S_CACHE_PVC"):
        kube["cache_pvc"] = os.environ["LLMSLO_K8S_CACHE_PVC"]
    table: dict[str, Any] = {
        "runtime": "kubernetes", "model": model, "kubernetes": kube,
        "startup_timeout_s": float(os.environ.get("LLMSLO_K8S_STARTUP_S", "1800")),
        "tensor_parallel_size": int(os.environ.get("LLMSLO_K8S_TP", "1")),
    }  # fmt: skip
    kind, _, shape = layout.partition("-")
    table["kind"] = kind
    if kind == "sim":
        table.pop("model")
        table.pop("tensor_parallel_size")
    if shape == "2nodes":
        kube["nodes"] = 2
    if kind == "trtllm":
        kube["ssh_secret"] = os.environ.get("LLMSLO_K8S_SSH_SECRET", "llmslo-ssh")
        if os.environ.get("LLMSLO_K8S_TRTLLM_IMAGE"):
            table["image"] = os.environ["LLMSLO_K8S_TRTLLM_IMAGE"]
    if kind == "dynamo":
        table["options"] = {"worker": "vllm", "mode": shape}
    return table


def _cluster_or_skip(layout: str) -> str:
    if not os.environ.get("KUBECONFIG"):
        pytest.skip("needs a real Kubernetes cluster: set KUBECONFIG (kind, a staging cluster)")
    pytest.importorskip("kubernetes", reason="pip install 'pytest-llmslo[k8s]'")
    asked = os.environ.get("LLMSLO_K8S_LAYOUTS", "sim").split(",")
    if layout not in asked:
        pytest.skip(f"layout {layout} not in LLMSLO_K8S_LAYOUTS={','.join(asked)}")
    return os.environ.get("KUBE_NAMESPACE", "default")


def _config(layout: str) -> Any:
    namespace = _cluster_or_skip(layout)
    return load_engine_configs({layout: _table(layout, namespace)})[layout]


@pytest.mark.k8s
@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_preflight_finds_nothing_missing(layout: str) -> None:
    from pytest_llmslo.engines.runtimes.k8s.preflight import check_engine

    out = io.StringIO()
    code = check_engine(_config(layout), out)
    assert code == 0, out.getvalue()


@pytest.mark.k8s
@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_layout_comes_up_serves_and_leaves_nothing(layout: str) -> None:
    config = _config(layout)
    handle = launch(plan_engine(config), poll_s=2.0)
    try:
        models = httpx.get(f"{handle.base_url}/v1/models", timeout=60, trust_env=False).json()
        model = models["data"][0]["id"]
        r = httpx.post(
            f"{handle.base_url}/v1/chat/completions",
            json={"model": model, "max_tokens": 4,
                  "messages": [{"role": "user", "content": "hello"}]},
            timeout=300, trust_env=False,
        )  # fmt: skip
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
        session = handle.units[0].names.session
    finally:
        handle.stop()
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import cluster, json_of
    from pytest_llmslo.engines.runtimes.k8s.settings import settings_of

    where = cluster(settings_of(config))
    left = json_of(where.core.list_namespaced_config_map(
        where.namespace, label_selector="app.kubernetes.io/managed-by=pytest-llmslo",
        _preload_content=False))  # fmt: skip
    assert session not in [c["metadata"]["name"] for c in left.get("items") or []]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_is_a_valid_engine(layout: str) -> None:
    # Without a cluster: the suite's configs plan and render (a typo here would only
    # show on the team's cluster).
    pytest.importorskip("yaml")
    from pytest_llmslo.engines.runtimes.k8s.render import manifests

    config = load_engine_configs({layout: _table(layout, "bench")})[layout]
    kinds = [o["kind"] for o in manifests(plan_engine(config))]
    shape = layout.partition("-")[2]
    expected = {"2nodes": "LeaderWorkerSet", "agg": "DynamoGraphDeployment",
                "disagg": "DynamoGraphDeployment"}.get(shape, "Deployment")  # fmt: skip
    assert expected in kinds
