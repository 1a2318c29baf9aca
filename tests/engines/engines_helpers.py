"""Helpers shared by the engine tests (imported by name: tests/engines is on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx

from pytest_llmslo.engines import EngineConfig, local
from pytest_llmslo.engines.launchplan import LaunchPlan
from pytest_llmslo.engines.readiness import http_ok, version_from_json
from pytest_llmslo.engines.units import ImageUnit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FAKE_ENGINE = HERE / "fake_engine.py"
SIM_IMAGE = "pytest-llmslo/sim:local"
#: The model the sim behind a fake Kubernetes cluster serves (``conftest.sim_port``).
K8S_SIM_MODEL = "llmslo-sim"


def fake_docker_plan(port: int, *extra: str, timeout: float = 60, **env: str) -> LaunchPlan:
    cfg = EngineConfig(
        kind="sim", name="fake-docker", runtime="docker", env=env, startup_timeout_s=timeout
    )
    unit = ImageUnit(
        image=SIM_IMAGE,
        command=("python3", "/fake/fake_engine.py", "--port", str(port), *extra),
        env=env,
        # The fake engine script, mounted from the test folder into the sim image's Python.
        mounts={str(HERE): "/fake"},
        hf_cache=False,
        pull=False,
    )
    return LaunchPlan(
        config=cfg,
        host="127.0.0.1",
        port=port,
        model="fake-model",
        ready=http_ok("/health"),
        images=(unit,),
        version_probe=version_from_json("/version"),
        ports=(port,),
    )


# Where .ci/engines.sh puts the real engines' environments and the tiny model.
VLLM_PYTHON = local.vllm_python()
DYNAMO_PYTHON = local.dynamo_python()
TINY_MODEL = local.tiny_model()


def missing_module(python: Path, module: str) -> str | None:
    """Why ``module`` cannot be used from ``python`` (None when it can)."""
    if not python.exists():
        return f"{python} does not exist (set it up with: bash .ci/engines.sh)"
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    rc = subprocess.run([str(python), "-c", code], capture_output=True, timeout=120).returncode
    return None if rc == 0 else f"{module} is not installed for {python} (bash .ci/engines.sh)"


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stream_chat(base_url: str, model: str, max_tokens: int = 16) -> tuple[list[str], dict]:
    """One streamed chat completion: the content pieces and the usage block."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hello there, how are you"}],
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    pieces: list[str] = []
    usage: dict = {}
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=120) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: ") :])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                text = (choice.get("delta") or {}).get("content")
                if text:
                    pieces.append(text)
    return pieces, usage
