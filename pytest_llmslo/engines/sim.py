"""The built-in sim engine: ``python -m pytest_llmslo.sim`` as a local process, or the same
server in the locally built image (``docker/build-sim-image.sh``)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from .._version import __version__
from ..sim.admintoken import TOKEN_ENV, is_loopback, session_token
from ._common import image_unit
from .base import EngineConfig
from .cache_reset import VLLM
from .launchplan import LaunchPlan
from .ports import pick_free_port, probe_host
from .readiness import http_ok, version_from_json
from .units import ProcessUnit

DEFAULT_PROFILE = "llama3-70b-fp8-4xh100-vllm"
DEFAULT_MODEL = "llmslo-sim"
DEFAULT_IMAGE = "pytest-llmslo/sim:local"

OPTIONS: Mapping[str, str] = {
    "profile": f"timing profile of the simulated engine (default {DEFAULT_PROFILE})",
    "trace_file": "path where the sim writes the true emit time of every token",
}


def served_model(config: EngineConfig) -> str:
    return config.served_model_name or config.model or DEFAULT_MODEL


def sim_args(config: EngineConfig, host: str, port: int) -> list[str]:
    """The arguments after ``python -m pytest_llmslo.sim``."""
    args = [
        "--host", host,
        "--port", str(port),
        "--profile", str(config.options.get("profile", DEFAULT_PROFILE)),
        "--model", served_model(config),
    ]  # fmt: skip
    trace = config.options.get("trace_file")
    if trace:
        args += ["--trace-file", str(trace)]
    return [*args, *config.extra_args]


def simulated_setup(profile: str) -> dict[str, Any]:
    """What the sim engine stands for under ``profile``: the simulated model, precision,
    hardware and deployment, for the report (the sim runs on the CPU; these are the
    numbers its timing model uses). A name that is not a built-in profile (a custom one
    from ``--profile-file``) gives just the name."""
    from pytest_llmslo.sim.profiles import PROFILES

    prof = PROFILES.get(profile)
    if prof is None:
        return {"profile": profile}
    weights = "FP8" if prof.model.weight_bytes == 1.0 else "BF16"
    return {
        "profile": profile,
        "model": prof.model.name.removesuffix("-FP8"),
        "precision": weights,
        "hardware": f"{prof.gpus}x {prof.gpu.name}",
        "engine": prof.engine.name,
        "deployment": prof.topology.describe(),
        "topology": prof.topology.to_dict(),
    }


def plan(config: EngineConfig) -> LaunchPlan:
    """The sim as a process of ``config.python`` or in its local image (no GPU)."""
    host = config.host
    port = config.port or pick_free_port(probe_host(host))
    args = sim_args(config, host, port)
    python = config.python or sys.executable
    # Beyond loopback (and always in a container, which binds its own interfaces) the
    # sim's admin endpoints need the session's token (``sim/admintoken.py``): a process
    # on another address gets it in its environment, an image unit as a secret the
    # runtime hands over privately (a pod reads it from a Secret, never its manifest).
    token = {TOKEN_ENV: session_token()}
    proc = ProcessUnit(
        argv=(python, "-m", "pytest_llmslo.sim", *args),
        env={**({} if is_loopback(host) else token), **config.env},
        role="sim",
        ports=(port,),
    )
    image = image_unit(
        config,
        config.image or DEFAULT_IMAGE,
        ("python3", "-m", "pytest_llmslo.sim", *args),
        ports=(port,),
        secret_env=token,
        pull=False,
        hint="build it with: bash docker/build-sim-image.sh",
    )
    return LaunchPlan(
        config=config,
        host=host,
        port=port,
        model=served_model(config),
        ready=http_ok("/health"),
        processes=(proc,),
        images=(image,),
        version_probe=version_from_json("/version"),
        static_version=__version__,
        ports=(port,),
        meta={"simulated": simulated_setup(str(config.options.get("profile", DEFAULT_PROFILE)))},
        cache_resets=(VLLM,),
    )
