"""The kubernetes runtime driven end to end against a Kubernetes API served over real HTTP
on loopback (kmock), the test playing the cluster's controllers (``k8s_cluster.py``):
a ready pod resolves the endpoint; a pod that cannot start ends the start at once with
the cluster's words and the container's last log lines; teardown deletes the engine's
objects and the session's ConfigMap that owns them."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")

from k8s_cluster import (
    LOG_LINES,
    Controller,
    FakeCluster,
    emit_event,
    fake_cluster,
    patch_status,
    ready,
)

from pytest_llmslo.engines import launch, load_engine_configs, plan_engine
from pytest_llmslo.engines.launchplan import LaunchPlan
from pytest_llmslo.engines.ports import pick_free_port
from pytest_llmslo.engines.runtimes import kubernetes as kube_runtime
from pytest_llmslo.engines.runtimes.k8s import ownership
from pytest_llmslo.engines.runtimes.k8s.deployments import SESSION_ID
from pytest_llmslo.engines.runtimes.k8s.kubeclient import forget_clients
from pytest_llmslo.errors import EngineStartError
from pytest_llmslo.faults import inject, parse_faults
from pytest_llmslo.sim.admintoken import TOKEN_ENV, session_token

NS = "bench"


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    with fake_cluster(tmp_path) as c:
        monkeypatch.setenv("KUBECONFIG", str(c.kubeconfig))
        monkeypatch.setattr(ownership, "SESSION_OWNERS", ownership.SessionOwners())
        forget_clients()
        yield c
        forget_clients()


def sim_plan(**kube: Any) -> LaunchPlan:
    cfg = load_engine_configs({"sim": {"runtime": "kubernetes", "kubernetes": kube}})["sim"]
    # The harness is outside this fake cluster: its readiness check never passes here,
    # so only the runtime decides how the start ends.
    return dataclasses.replace(plan_engine(cfg), ready=lambda client, url: "not serving yet")


def wait_for(check: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_ready_pod_resolves_the_endpoint_and_teardown_deletes_everything(
    cluster: FakeCluster,
) -> None:
    plan = sim_plan(access="service")
    runtime = kube_runtime.KubernetesRuntime()
    with Controller(cluster, NS, lambda c, ns, pod: ready(c, ns, pod)):
        engine = runtime.start(plan).units[0]
        assert isinstance(engine, kube_runtime.KubeEngine)
        try:
            wait_for(engine.ready)
            assert engine.alive()
            name = engine.names.base
            assert runtime.endpoint(plan, [engine]) == f"http://{name}.{NS}.svc:8000"
            session = cluster.items(f"/api/v1/namespaces/{NS}/configmaps")[0]
            uid = session["metadata"]["uid"]
            dep = cluster.deployments(NS)[0]
            svc = cluster.items(f"/api/v1/namespaces/{NS}/services")[0]
            for obj in (dep, svc):
                assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
                assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pytest-llmslo"
        finally:
            engine.stop()
    deleted = cluster.requests("delete")
    assert f"/apis/apps/v1/namespaces/{NS}/deployments/{name}" in deleted
    assert f"/api/v1/namespaces/{NS}/services/{name}" in deleted
    # The session's ConfigMap last: what it still owns goes with it.
    assert deleted[-1] == f"/api/v1/namespaces/{NS}/configmaps/{session['metadata']['name']}"
    assert cluster.deployments(NS) == []


def _image_pull(c: FakeCluster, ns: str, pod: dict[str, Any]) -> None:
    patch_status(c, ns, pod["metadata"]["name"], {
        "phase": "Pending",
        "containerStatuses": [{"name": "engine", "ready": False, "restartCount": 0, "state": {
            "waiting": {"reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "pytest-llmslo/sim:local"'}}}],
    })  # fmt: skip


def _unschedulable(c: FakeCluster, ns: str, pod: dict[str, Any]) -> None:
    emit_event(c, ns, pod["metadata"]["name"], "FailedScheduling",
               "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")  # fmt: skip


def _crash_loop(c: FakeCluster, ns: str, pod: dict[str, Any]) -> None:
    emit_event(c, ns, pod["metadata"]["name"], "BackOff",
               "Back-off restarting failed container engine in pod")  # fmt: skip


def _oom(c: FakeCluster, ns: str, pod: dict[str, Any]) -> None:
    patch_status(c, ns, pod["metadata"]["name"], {
        "phase": "Running",
        "containerStatuses": [{"name": "engine", "ready": False, "restartCount": 1,
            "state": {"running": {}},
            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}],
    })  # fmt: skip


@pytest.mark.parametrize(
    ("behaviour", "words"),
    [
        (_image_pull, 'ImagePullBackOff: Back-off pulling image "pytest-llmslo/sim:local"'),
        (_unschedulable, "FailedScheduling: 0/3 nodes are available: 3 Insufficient nvidia.com"),
        (_crash_loop, "BackOff: Back-off restarting failed container engine"),
        (_oom, "OOMKilled (exit code 137)"),
    ],
    ids=["ImagePullBackOff", "FailedScheduling", "CrashLoopBackOff", "OOMKilled"],
)
def test_a_pod_that_cannot_start_ends_the_start_at_once(
    cluster: FakeCluster, behaviour: Any, words: str
) -> None:
    plan = sim_plan()
    t0 = time.monotonic()
    with Controller(cluster, NS, behaviour), pytest.raises(EngineStartError) as info:
        launch(plan, poll_s=0.05)
    # Ended by the failure, not by startup_timeout_s (900 s).
    assert time.monotonic() - t0 < 10
    message = str(info.value)
    assert words in message.splitlines()[0]
    assert LOG_LINES.splitlines()[-1] in info.value.log_tail
    # Nothing left: the start's objects and the session's ConfigMap were deleted.
    assert cluster.deployments(NS) == []
    assert cluster.items(f"/api/v1/namespaces/{NS}/configmaps") == []


def test_keep_engines_leaves_the_objects(cluster: FakeCluster) -> None:
    plan = sim_plan(keep_engines=True)
    engine = kube_runtime.KubernetesRuntime().start(plan).units[0]
    engine.stop()
    assert cluster.requests("delete") == []
    assert len(cluster.deployments(NS)) == 1


def _session_cm(name: str, session: str, created: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NS,
            "creationTimestamp": created,
            "labels": {
                "app.kubernetes.io/managed-by": "pytest-llmslo",
                "llmslo.io/session": session,
            },
        },
        "data": {"session": session},
    }


def test_the_reaper_removes_old_sessions_only(cluster: FakeCluster) -> None:
    # A session that crashed two days ago, and one that started a minute ago.
    for name, session, created in [
        ("llmslo-crashed", "crashed", "2026-01-01T00:00:00Z"),
        ("llmslo-running", "running", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
    ]:
        cluster.http.post(
            f"/api/v1/namespaces/{NS}/configmaps", json=_session_cm(name, session, created)
        ).raise_for_status()
    engine = kube_runtime.KubernetesRuntime().start(sim_plan(reap_after_s=3600)).units[0]
    try:
        names = {
            c["metadata"]["name"] for c in cluster.items(f"/api/v1/namespaces/{NS}/configmaps")
        }
        assert "llmslo-crashed" not in names and "llmslo-running" in names
    finally:
        engine.stop()


def test_a_pod_that_dies_after_it_was_ready_ends_the_engine(cluster: FakeCluster) -> None:
    runtime = kube_runtime.KubernetesRuntime()
    with Controller(cluster, NS, lambda c, ns, pod: ready(c, ns, pod)) as controller:
        engine = runtime.start(sim_plan(access="service")).units[0]
        assert isinstance(engine, kube_runtime.KubeEngine)
        try:
            wait_for(engine.ready)
            assert engine.alive()
            pod = f"{next(iter(controller.seen))}-7d4b9c6f5d-x2x9z"
            _oom(cluster, NS, {"metadata": {"name": pod}})
            wait_for(lambda: not engine.alive())
            assert "OOMKilled (exit code 137)" in (engine.failure() or "")
            assert engine.returncode() == 137
        finally:
            engine.stop()


def test_the_progress_line_names_where_the_pod_is(cluster: FakeCluster) -> None:
    from pytest_llmslo.engines import startup

    seen: list[str] = []
    cfg = load_engine_configs(
        {"sim": {"runtime": "kubernetes", "startup_timeout_s": 4}}
    )["sim"]  # fmt: skip
    plan = dataclasses.replace(plan_engine(cfg), ready=lambda client, url: "not serving yet")
    # The pod is made but never scheduled.
    with Controller(cluster, NS, lambda c, ns, pod: None):
        with startup.reporting(lambda p: seen.append(p.waiting_for)):
            with pytest.raises(EngineStartError, match="not ready after"):
                launch(plan, poll_s=0.1)
    assert "waiting for readiness (waiting for a node): not serving yet" in seen


HARNESS = """
import sys, time
from pytest_llmslo.engines import load_engine_configs, plan_engine
from pytest_llmslo.engines.runtimes.kubernetes import KubernetesRuntime

cfg = load_engine_configs({"sim": {"runtime": "kubernetes"}})["sim"]
KubernetesRuntime().start(plan_engine(cfg))
print("started", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_harness_ended_by_a_signal_deletes_what_it_applied(
    cluster: FakeCluster, sig: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", HARNESS], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        assert len(cluster.deployments(NS)) == 1
        proc.send_signal(sig)
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert cluster.deployments(NS) == []
    assert cluster.items(f"/api/v1/namespaces/{NS}/services") == []
    assert cluster.items(f"/api/v1/namespaces/{NS}/configmaps") == []


def test_an_object_that_exists_is_applied_server_side(cluster: FakeCluster) -> None:
    from pytest_llmslo.engines.runtimes.k8s.apply import apply, get
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import cluster as connect
    from pytest_llmslo.engines.runtimes.k8s.settings import KubeSettings

    where = connect(KubeSettings())
    obj = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "cm", "namespace": NS}, "data": {"a": "1"}}  # fmt: skip
    apply(where, obj)
    apply(where, {**obj, "data": {"a": "2"}})
    patched = [r for r in cluster.handler if r.method == "PATCH"]
    assert [str(r.url.path) for r in patched] == [f"/api/v1/namespaces/{NS}/configmaps/cm"]
    assert patched[0].headers["Content-Type"] == "application/apply-patch+yaml"
    assert dict(patched[0].url.query) == {"fieldManager": "pytest-llmslo", "force": "true"}
    assert get(where, obj)["data"] == {"a": "2"}
    assert get(where, {**obj, "metadata": {"name": "gone", "namespace": NS}}) is None


def _resolved_env(c: FakeCluster, ns: str, pod: dict[str, Any]) -> dict[str, str]:
    """The pod's secret variables as the kubelet resolves them: each ``secretKeyRef``
    read from the Secret it names (a KeyError when that Secret or entry is missing)."""
    secrets = {s["metadata"]["name"]: s for s in c.items(f"/api/v1/namespaces/{ns}/secrets")}
    env: dict[str, str] = {}
    for var in pod["spec"]["containers"][0]["env"]:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            raw = secrets[ref["name"]]["data"][ref["key"]]
            env[var["name"]] = base64.b64decode(raw).decode()
    return env


@pytest.mark.slow
def test_the_sims_admin_token_reaches_its_pod_through_a_secret_made_and_deleted_with_it(
    cluster: FakeCluster,
) -> None:
    # The kubelet's part: the pod's sim started on loopback (its port forwarded) with the
    # environment its Secret references resolve to; then the harness's faults through
    # /admin reach it with the session's token, and nothing else does.
    port = pick_free_port()
    sims: list[subprocess.Popen[bytes]] = []
    seen: dict[str, str] = {}

    def kubelet(c: FakeCluster, ns: str, pod: dict[str, Any]) -> None:
        seen.update(_resolved_env(c, ns, pod))
        c.forward_to(port)
        sims.append(subprocess.Popen(
            [sys.executable, "-m", "pytest_llmslo.sim", "--host", "127.0.0.1",
             "--port", str(port), "--model", "llmslo-sim"],
            env={**os.environ, **seen}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))  # fmt: skip
        ready(c, ns, pod)

    cfg = load_engine_configs({"sim": {"runtime": "kubernetes", "kubernetes": {"namespace": NS}}})
    try:
        with Controller(cluster, NS, kubelet):
            handle = launch(plan_engine(cfg["sim"]), poll_s=0.1)
            try:
                token = session_token()
                assert seen == {TOKEN_ENV: token}
                (secret,) = cluster.items(f"/api/v1/namespaces/{NS}/secrets")
                session = cluster.items(f"/api/v1/namespaces/{NS}/configmaps")[0]
                assert secret["metadata"]["ownerReferences"][0]["uid"] == session["metadata"]["uid"]
                assert secret["metadata"]["labels"]["llmslo.io/session"] == SESSION_ID
                assert token not in json.dumps(cluster.deployments(NS))
                done = inject(handle, parse_faults("stall at=0s,for=0.2s")[0])
                assert done["how"] == "POST /admin/fault" and done["answer"]
                refused = httpx.post(
                    handle.base_url + "/admin/fault", json={"kind": "kill"}, trust_env=False
                )
                assert refused.status_code in (401, 403), refused.text
            finally:
                handle.stop()
    finally:
        for sim in sims:
            sim.terminate()
            sim.wait(10)
    assert f"/api/v1/namespaces/{NS}/secrets/{secret['metadata']['name']}" in (
        cluster.requests("delete")
    )
    assert cluster.items(f"/api/v1/namespaces/{NS}/secrets") == []
