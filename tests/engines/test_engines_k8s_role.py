"""The least-privilege Role of docs/engines.md is all the kubernetes runtime uses: every
request it makes against kmock while starting, reaching (port-forward), failing and
stopping engines is allowed by the Role, and the Role is a valid Kubernetes object."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo.engines.runtimes.k8s.role import allowed, role

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")


def test_the_role_is_a_valid_object() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(role("bench"), "1.37.0", strict=True)


@pytest.fixture
def every_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from k8s_cluster import fake_cluster

    from pytest_llmslo.engines.runtimes.k8s import ownership
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import forget_clients

    with fake_cluster(tmp_path) as cluster:
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
        monkeypatch.setattr(ownership, "SESSION_OWNERS", ownership.SessionOwners())
        forget_clients()
        yield cluster
        forget_clients()


def test_the_runtime_uses_nothing_the_role_does_not_allow(every_request: Any) -> None:
    import socket

    from k8s_cluster import Controller, ready, used

    from pytest_llmslo.engines import load_engine_configs, plan_engine
    from pytest_llmslo.engines.runtimes.kubernetes import KubernetesRuntime

    cluster = every_request
    with socket.create_server(("127.0.0.1", 0)) as target:
        cluster.forward_to(target.getsockname()[1])
        cfg = load_engine_configs(
            {"trtllm": {"runtime": "kubernetes", "model": "m", "dtype": "bfloat16",
                        "kubernetes": {"access": "port-forward", "reap_after_s": 60}}}
        )["trtllm"]  # fmt: skip
        plan = plan_engine(cfg)
        runtime = KubernetesRuntime()
        with Controller(cluster, "bench", lambda c, ns, pod: ready(c, ns, pod)):
            engine = runtime.start(plan).units[0]
            try:
                url = runtime.endpoint(plan, [engine])
                port = int(url.rsplit(":", 1)[1])
                # Until the pod runs and a connection reaches the target through it.
                for _ in range(50):
                    with socket.create_connection(("127.0.0.1", port)):
                        if _poll(target):
                            target.accept()[0].close()
                            break
                assert engine.alive() and engine.log_tail(5)
                # The operations on a running engine: a scale, a pod killed and restarted.
                engine.scale(2)
                engine.restart(0)  # (the test's controller makes no new pod)
            finally:
                engine.stop()
    rules = role("bench")["rules"]
    seen = used(cluster)
    # Every path was exercised: apply, readiness and failures, the forward, teardown.
    assert seen >= {
        ("", "configmaps", "create"), ("", "configmaps", "list"),
        ("apps", "deployments", "create"),
        ("", "services", "create"), ("", "pods", "list"), ("", "events", "list"),
        ("", "pods/log", "get"), ("", "pods/portforward", "get"),
        ("apps", "deployments", "delete"), ("", "configmaps", "delete"),
        ("apps", "deployments", "patch"), ("", "pods", "delete"),
    }, seen  # fmt: skip
    denied = [s for s in sorted(seen) if not allowed(*s, rules)]
    assert not denied, f"the runtime used what the Role does not grant: {denied}"


def _poll(server: Any, timeout_s: float = 0.2) -> bool:
    import select

    return bool(select.select([server], [], [], timeout_s)[0])


def test_docs_show_the_role_the_runtime_needs() -> None:
    yaml = pytest.importorskip("yaml")
    doc = (Path(__file__).parents[2] / "docs" / "engines.md").read_text()
    start = doc.index("```yaml\napiVersion: rbac.authorization.k8s.io/v1")
    shown = yaml.safe_load(doc[start + len("```yaml\n") : doc.index("```", start + 8)])
    assert shown == role("bench")
