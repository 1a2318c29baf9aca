"""Helpers shared by the engine tests (imported by name: tests/engines is on sys.path)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pytest_llmslo.engines import EngineConfig
from pytest_llmslo.engines import docker as dk
from pytest_llmslo.engines.launch import LaunchPlan
from pytest_llmslo.engines.readiness import http_ok, version_from_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAKE_ENGINE = HERE / "fake_engine.py"
SIM_IMAGE = "pytest-llmslo/sim:local"


def fake_docker_plan(port: int, *extra: str, timeout: float = 60, **env: str) -> LaunchPlan:
    cfg = EngineConfig(
        kind="sim", name="fake-docker", runtime="docker", env=env, startup_timeout_s=timeout
    )
    spec = dk.container_spec(
        cfg,
        image=SIM_IMAGE,
        command=("python3", "/fake/fake_engine.py", "--port", str(port), *extra),
        needs_gpu=False,
        pull=False,
        mount_hf_cache=False,
    )
    # The fake engine script, mounted from the test folder into the sim image's Python.
    spec = dataclasses.replace(spec, mounts={str(HERE): "/fake"})
    return LaunchPlan(
        config=cfg,
        host="127.0.0.1",
        port=port,
        model="fake-model",
        ready=http_ok("/health"),
        containers=(spec,),
        version_probe=version_from_json("/version"),
        ports=(port,),
    )
