"""Fixtures of the engine launcher tests: paths, a docker client with the sim image and
the Dynamo mocker's configuration (each skipping with the reason where it is not set up),
and checks that each test left nothing running (no registered unit, no llmslo container
of this session)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from engines_helpers import DYNAMO_PYTHON, FAKE_ENGINE, SIM_IMAGE, missing_module

from pytest_llmslo.engines import EngineConfig, lifecycle
from pytest_llmslo.errors import EngineUnavailable


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
