"""The sim engine as a Deployment through the whole plugin path: on a real cluster
(``pytest -m k8s``: KUBECONFIG names the cluster, KUBE_NAMESPACE the namespace, default
``default``; the cluster must have the sim image, with kind:
``bash docker/build-sim-image.sh && kind load docker-image pytest-llmslo/sim:local``),
skipped with the reason wherever there is none; and the same run against kmock, the
test playing the controllers and a sim process standing for the pod behind the
port-forward."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo.engines.ports import pick_free_port

SUITE = """
import pytest
from pytest_llmslo import assert_goodput, ttft_p99

@pytest.mark.slo(concurrency=[1, 2])
def test_chat(slo_run):
    assert len(slo_run.ok_records) == len(slo_run.records)
    assert_goodput(ttft_p99 < 60000)
"""


def _cluster_or_skip(namespace: str) -> str:
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        pytest.skip("needs a real Kubernetes cluster: set KUBECONFIG (kind, a staging cluster)")
    kubernetes = pytest.importorskip("kubernetes", reason="pip install 'pytest-llmslo[k8s]'")
    try:
        api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
        kubernetes.client.CoreV1Api(api).list_namespaced_config_map(
            namespace, limit=1, _request_timeout=10, _preload_content=False
        )
    except Exception as exc:
        pytest.skip(f"the cluster of KUBECONFIG={kubeconfig} does not answer: {exc}")
    return kubeconfig


def run_through_plugin(
    pytester: pytest.Pytester, kubeconfig: str, namespace: str
) -> dict[str, Any]:
    """An SLO test of the sim as a Deployment, through the plugin; nothing is left. The
    engine's metadata in the run document."""
    pytester.makefile(
        ".toml",
        engines=f"""
[engines.sim-k8s]
kind = "sim"
runtime = "kubernetes"
startup_timeout_s = 300
kubernetes = {{ namespace = "{namespace}", kubeconfig = "{kubeconfig}" }}
""",
    )
    pytester.makepyfile(test_k8s=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine-config=engines.toml", "--engine=sim-k8s",
        "--warmup=2", "--requests=8", "--isl=32", "--osl=16", "-rs", "--slo-json=out.json",
        timeout=600,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "out.json").read_text())
    engine = doc["engines"]["sim-k8s"]["metadata"]
    assert engine["runtime"] == "kubernetes"
    # The access path is pinned: runs over another path are not compared.
    pinned = doc["constants"]["per_engine"]["sim-k8s"]["hardware"]
    assert pinned["access"] == engine["units"][0]["access"]
    # Nothing of the session is left in the namespace.
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    left = kubernetes.client.CoreV1Api(api).list_namespaced_config_map(
        namespace, label_selector="app.kubernetes.io/managed-by=pytest-llmslo",
        _preload_content=False,
    )  # fmt: skip
    session = engine["units"][0]["name"].split("-")[-2]
    names = [c["metadata"]["name"] for c in json.loads(left.data)["items"]]
    assert not [n for n in names if session in n]
    return dict(engine)


@pytest.mark.k8s
def test_the_sim_as_a_deployment_through_the_plugin(pytester: pytest.Pytester) -> None:
    namespace = os.environ.get("KUBE_NAMESPACE", "default")
    run_through_plugin(pytester, _cluster_or_skip(namespace), namespace)


def test_the_plugin_path_against_kmock(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytest.importorskip("kmock")
    pytest.importorskip("kubernetes")
    from k8s_cluster import Controller, fake_cluster, ready

    port = pick_free_port("127.0.0.1")
    sim = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmslo.sim", "--host", "127.0.0.1", "--port", str(port),
         "--model", "llmslo-sim"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with fake_cluster(tmp_path) as cluster:
            cluster.forward_to(port)
            with Controller(cluster, "bench", lambda c, ns, pod: ready(c, ns, pod)):
                engine = run_through_plugin(pytester, str(cluster.kubeconfig), "bench")
            assert cluster.deployments("bench") == []
        # Readiness and the load went through the port-forward (outside a cluster's pod),
        # and the cold start is the cluster's timestamps (k8s_cluster.ready's).
        unit = engine["units"][0]
        assert unit["access"] == "port-forward"
        assert engine["base_url"].startswith("http://127.0.0.1:")
        assert unit["cold_start"] == {
            "pod": unit["cold_start"]["pod"], "scheduled_s": 1.0, "image_pulled_s": 3.0,
            "container_started_s": 4.0, "ready_s": 7.0,
        }  # fmt: skip
    finally:
        sim.terminate()
        sim.wait(10)


DIES = """
import os, threading
import httpx
import pytest

OOM = {"status": {"phase": "Running", "containerStatuses": [{
    "name": "engine", "ready": False, "restartCount": 1, "state": {"running": {}},
    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}}

@pytest.fixture
def killer(slo_engine, slo_level):
    if slo_level.value == 4:
        pod = slo_engine.handle.units[0].api_pods()[0]["metadata"]["name"]
        url = f"{os.environ['FAKE_KUBE_URL']}/api/v1/namespaces/bench/pods/{pod}/status"
        patch = lambda: httpx.patch(url, json=OOM, trust_env=False,
                                    headers={"Content-Type": "application/merge-patch+json"})
        threading.Timer(1.0, patch).start()

@pytest.mark.slo(concurrency=[4, 8])
def test_chat(killer, slo_run):
    pass
"""


@pytest.mark.slow
def test_a_pod_that_dies_mid_level_is_a_clear_error_and_the_level_is_kept(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("kmock")
    pytest.importorskip("kubernetes")
    from k8s_cluster import Controller, fake_cluster, ready

    port = pick_free_port("127.0.0.1")
    sim = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmslo.sim", "--host", "127.0.0.1", "--port", str(port),
         "--model", "llmslo-sim"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with fake_cluster(tmp_path) as cluster:
            cluster.forward_to(port)
            monkeypatch.setenv("FAKE_KUBE_URL", cluster.url)
            pytester.makefile(".toml", engines=f"""
[engines.sim-k8s]
kind = "sim"
runtime = "kubernetes"
startup_timeout_s = 120
kubernetes = {{ namespace = "bench", kubeconfig = "{cluster.kubeconfig}" }}
""")  # fmt: skip
            pytester.makepyfile(test_dies=DIES)
            with Controller(cluster, "bench", lambda c, ns, pod: ready(c, ns, pod)):
                result = pytester.runpytest_subprocess(
                    "-p", "no:cacheprovider", "--engine-config=engines.toml",
                    "--engine=sim-k8s", "--warmup=0", "--requests=400", "--duration=3",
                    "--isl=32", "--osl=16", "--slo-json=r.json", "-v",
                    "--slo-max-error-rate=100%", timeout=300,
                )  # fmt: skip
            assert cluster.deployments("bench") == []
    finally:
        sim.terminate()
        sim.wait(10)
    result.assert_outcomes(errors=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*EngineDiedError: engine 'sim-k8s'*OOMKilled (exit code 137)*during the load at c4*"
            "the results measured so far are kept*",
        ]
    )
    points = json.loads((pytester.path / "r.json").read_text())["points"]
    assert [p["level"]["value"] for p in points] == [4.0, 8.0]
    assert points[0]["summary"]["requests"] > 0  # the partial c4 point is kept


def _crd_or_skip(kubeconfig: str, group_version: str, what: str) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    api = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    try:
        api.call_api(*api.param_serialize("GET", f"/apis/{group_version}",
                                          auth_settings=["BearerToken"])).read()  # fmt: skip
    except Exception as exc:
        pytest.skip(f"the cluster has no {group_version} ({what} not installed): {exc}")


@pytest.mark.k8s
def test_dynamo_as_a_dgd_through_the_plugin(pytester: pytest.Pytester) -> None:
    """Needs the Dynamo operator in the cluster and DYNAMO_MODEL (a Hugging Face id the
    mocker worker, which needs no GPU, reads the tokenizer of)."""
    namespace = os.environ.get("KUBE_NAMESPACE", "default")
    kubeconfig = _cluster_or_skip(namespace)
    model = os.environ.get("DYNAMO_MODEL")
    if not model:
        pytest.skip("set DYNAMO_MODEL to a Hugging Face id for the mocker (e.g. Qwen/Qwen3-0.6B)")
    _crd_or_skip(kubeconfig, "nvidia.com/v1alpha1", "the Dynamo operator")
    pytester.makefile(".toml", engines=f"""
[engines.dyn]
kind = "dynamo"
runtime = "kubernetes"
model = "{model}"
startup_timeout_s = 900
options = {{ worker = "mocker", workers = 2 }}
kubernetes = {{ namespace = "{namespace}", kubeconfig = "{kubeconfig}" }}
""")  # fmt: skip
    pytester.makepyfile(test_k8s=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine-config=engines.toml", "--engine=dyn",
        "--warmup=2", "--requests=8", "--isl=32", "--osl=16", "-rs", "--slo-json=out.json",
        timeout=1200,
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "out.json").read_text())
    unit = doc["engines"]["dyn"]["metadata"]["units"][0]
    assert unit["objects"][0].startswith("dynamographdeployment/")
