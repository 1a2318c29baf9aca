"""Fixtures of the engine launcher tests: paths, a docker client with the sim image and
the Dynamo mocker's configuration (each skipping with the reason where it is not set up),
a sim process and the fake Kubernetes cluster that forwards to it, and checks that each
test left nothing running (no registered unit, no llmslo container of this session)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from engines_helpers import DYNAMO_PYTHON, FAKE_ENGINE, K8S_SIM_MODEL, SIM_IMAGE, missing_module

from pytest_llmslo.engines import EngineConfig, lifecycle
from pytest_llmslo.engines.ports import pick_free_port
from pytest_llmslo.errors import EngineUnavailable


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A thread that dies with an exception during a Kubernetes test fails it: the client
    library's port-forward thread prints a traceback when either side resets its
    connection (the forwarder ends its socket gently; the fake API server answers a
    failed forward on the error channel, as the kubelet does)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.parent == here and item.path.name.startswith("test_engines_k8s"):
            item.add_marker(
                pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
            )


if TYPE_CHECKING:
    from k8s_cluster import FakeCluster


@pytest.fixture
def fake_engine_argv() -> list[str]:
    return [sys.executable, str(FAKE_ENGINE)]


@pytest.fixture(scope="module")
def client() -> Any:
    """A docker client of a daemon that has the sim image."""
    from pytest_llmslo.engines.runtimes import docker as dk

    try:
        c = dk.docker_client()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    try:
        c.images.get(SIM_IMAGE)
    except Exception:
        pytest.skip(f"image {SIM_IMAGE} not built (bash docker/build-sim-image.sh)")
    return c


@pytest.fixture(scope="module")
def dynamo_config() -> EngineConfig:
    """The Dynamo mocker deployment of ``engines.local`` (``.ci/engines.sh dynamo``)."""
    from pytest_llmslo.engines.local import dynamo_mocker_config

    reason = missing_module(DYNAMO_PYTHON, "dynamo.frontend")
    if reason:
        pytest.skip(f"Dynamo not available: {reason}")
    try:
        return dynamo_mocker_config()
    except EngineUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def sim_port() -> Iterator[int]:
    """The port of a sim serving ``K8S_SIM_MODEL``: what every pod of a fake cluster is."""
    port = pick_free_port("127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmslo.sim", "--host", "127.0.0.1", "--port", str(port),
         "--model", K8S_SIM_MODEL],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sim_port: int
) -> Iterator[FakeCluster]:
    """A fake cluster (``k8s_cluster``) whose port-forwards reach the sim of ``sim_port``,
    in ``KUBECONFIG``, with a fresh session owner and no cached clients. Modules whose
    tests need no engine behind the cluster define their own ``cluster``."""
    pytest.importorskip("kmock")
    pytest.importorskip("kubernetes")
    from k8s_cluster import fake_cluster

    from pytest_llmslo.engines.runtimes.k8s import ownership
    from pytest_llmslo.engines.runtimes.k8s.kubeclient import forget_clients

    with fake_cluster(tmp_path) as c:
        c.forward_to(sim_port)
        monkeypatch.setenv("KUBECONFIG", str(c.kubeconfig))
        monkeypatch.setattr(ownership, "SESSION_OWNERS", ownership.SessionOwners())
        forget_clients()
        yield c
        forget_clients()


@pytest.fixture(autouse=True)
def _nothing_left_registered() -> Iterator[None]:
    # Only this test's units: engines that other tests of the session hold stay running.
    before = lifecycle.tokens()
    yield
    left = lifecycle.tokens() - before
    for token in left:
        lifecycle.stop(token)
    if left:
        pytest.fail(f"{len(left)} engine unit(s) were left running by the test")
