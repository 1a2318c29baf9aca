"""The remote load workers' Indexed Job: a valid batch/v1 Job (Kubernetes 1.37 schemas of
kubernetes-validate 1.37.0, strict), created for the session against the emulated API
(kmock) and deleted with it; its pods, played here by local processes running the pod's
own command, reach the session at the address the Job hands them."""

from __future__ import annotations

import base64
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_engines_k8s_manifests import K8S_SCHEMA_VERSION

from pytest_llmslo.engines.runtimes.k8s.deployments import LABEL_SESSION, MANAGED_BY, SESSION_ID
from pytest_llmslo.engines.runtimes.k8s.kubeclient import cluster, forget_clients
from pytest_llmslo.engines.runtimes.k8s.settings import KubeSettings
from pytest_llmslo.engines.runtimes.k8s.workerjob import (
    WorkerJob,
    WorkerJobSpec,
    key_secret,
    worker_job,
)
from pytest_llmslo.load.remote import WorkerHub

ROOT = Path(__file__).resolve().parents[2]
SPEC = WorkerJobSpec(
    workers=3,
    image="ghcr.io/example/pytest-llmslo:0.1",
    address="10.0.0.7:7070",
    namespace="bench",
    node_selector={"pool": "cpu"},
    tolerations=({"key": "load", "operator": "Exists", "effect": "NoSchedule"},),
    key_secret=("llmslo-worker-key", "key"),
)


def test_the_worker_job_is_a_valid_indexed_job() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    job = worker_job(SPEC)
    kubernetes_validate.validate(job, K8S_SCHEMA_VERSION, strict=True)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 3
    assert spec["backoffLimitPerIndex"] == 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"pool": "cpu"} and pod["tolerations"][0]["key"] == "load"
    (c,) = pod["containers"]
    assert c["command"] == ["llmslo"]
    assert c["args"][:3] == ["worker", "--connect", "10.0.0.7:7070"]
    env = {e["name"]: e["valueFrom"] for e in c["env"]}
    assert env["LLMSLO_WORKER_KEY"]["secretKeyRef"] == {"name": "llmslo-worker-key", "key": "key"}
    assert env["POD_NAME"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert job["metadata"]["labels"][MANAGED_BY] == "pytest-llmslo"
    assert job["metadata"]["labels"][LABEL_SESSION] == SESSION_ID
    # Given the key instead of a Secret's name, the launcher makes the Secret, valid too.
    made = dataclasses.replace(SPEC, key_secret=None, key=b"k" * 64)
    secret = key_secret(made)
    assert secret is not None and key_secret(SPEC) is None
    kubernetes_validate.validate(secret, K8S_SCHEMA_VERSION, strict=True)
    (c,) = worker_job(made)["spec"]["template"]["spec"]["containers"]
    (ref,) = [e["valueFrom"]["secretKeyRef"] for e in c["env"] if e["name"] == "LLMSLO_WORKER_KEY"]
    assert ref == {"name": secret["metadata"]["name"], "key": "key"}


def test_a_worker_job_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        worker_job(WorkerJobSpec(0, "img", "h:1", "ns"))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    pytest.importorskip("kmock")
    from k8s_cluster import fake_cluster

    with fake_cluster(tmp_path) as c:
        c.handler.resources["batch/v1/jobs"] = {}
        c.handler.resources["v1/secrets"] = {}
        monkeypatch.setenv("KUBECONFIG", str(c.kubeconfig))
        forget_clients()
        yield c
        forget_clients()


def _run_pods(job: dict[str, Any], secrets: list[dict[str, Any]]) -> list[subprocess.Popen[bytes]]:
    """What the Job controller and the kubelet would do: one process per index, running
    the pod's command with its downward-API name (``llmslo`` as this interpreter's) and
    its environment from the Secrets it names."""
    (c,) = job["spec"]["template"]["spec"]["containers"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}  # no key file
    by_name = {s["metadata"]["name"]: s for s in secrets}
    for e in c["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            data = by_name[ref["name"]]["data"][ref["key"]]
            env[e["name"]] = base64.b64decode(data).decode()
    procs = []
    for index in range(job["spec"]["completions"]):
        pod = f"{job['metadata']['name']}-{index}-x7k2p"
        args = [a.replace("$(POD_NAME)", pod) for a in c["args"]]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "pytest_llmslo.cli", *args],
                env={**env, "PYTHONPATH": str(ROOT), "JOB_COMPLETION_INDEX": str(index)},
                stderr=subprocess.DEVNULL,
            )
        )
    return procs


def test_the_job_is_created_for_the_session_and_deleted_with_it(fake: Any) -> None:
    hub = WorkerHub("127.0.0.1:0", 2, wait_s=60)
    hub.open()
    where = cluster(KubeSettings())
    assert hub.key is not None
    spec = WorkerJobSpec(2, "img:1", hub.address, where.namespace, key=hub.key.secret)
    assert hub.key.secret.decode() not in repr(spec)
    launcher = WorkerJob(where, spec)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        launcher.start()
        (job,) = fake.items("/apis/batch/v1/namespaces/bench/jobs")
        (owner,) = job["metadata"]["ownerReferences"]
        (cm,) = fake.items("/api/v1/namespaces/bench/configmaps")
        assert owner["kind"] == "ConfigMap" and owner["uid"] == cm["metadata"]["uid"]
        # The key is in a Secret the launcher made (owned by the same ConfigMap), not in
        # the Job.
        (secret,) = fake.items("/api/v1/namespaces/bench/secrets")
        assert secret["metadata"]["ownerReferences"][0]["uid"] == cm["metadata"]["uid"]
        assert hub.key.secret.decode() not in str(job)
        procs = _run_pods(job, [secret])
        links = hub.ensure()
        assert sorted(link.name for link in links) == [
            f"{job['metadata']['name']}-{i}-x7k2p" for i in range(2)
        ]
    finally:
        hub.close()
        launcher.stop()
        for p in procs:
            assert p.wait(timeout=30) == 0
    assert fake.items("/apis/batch/v1/namespaces/bench/jobs") == []
    assert fake.items("/api/v1/namespaces/bench/secrets") == []
    assert fake.items("/api/v1/namespaces/bench/configmaps") == []
    assert "/apis/batch/v1/namespaces/bench/jobs" in fake.requests("post")
