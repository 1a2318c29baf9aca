"""SGLang: ``python -m sglang.launch_server --model-path M`` as a process or in the
``lmsysorg/sglang`` image (no CPU build: it needs a GPU).

Ready when ``/health`` answers 200 and ``/health_generate`` (which runs one generation)
does too; the version is ``version`` in ``/server_info``. Flags are SGLang's server
arguments: ``--model-path``, ``--served-model-name``, ``--tp-size`` (``--tp`` is argparse's
abbreviation of it), ``--dtype``, ``--quantization``, ``--context-length``,
``--mem-fraction-static``, ``--host``, ``--port``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._common import (
    SizingFlags,
    choose_port,
    image_tag,
    package_version,
    process_env,
    python_of,
    require_gpu,
    require_model,
    require_module,
    served_name,
)
from .base import EngineConfig
from .cache_reset import SGLANG
from .launch import LaunchPlan, RunningEngine, launch
from .process import ProcessSpec
from .readiness import all_of, http_ok, models_listed, version_from_json

DEFAULT_IMAGE = "lmsysorg/sglang:v0.5.21"

#: SGLang's server arguments for the sizing settings (Dynamo's SGLang worker takes the same).
SIZING = SizingFlags(
    tensor_parallel_size="--tp-size",
    dtype="--dtype",
    quantization="--quantization",
    max_model_len="--context-length",
    gpu_memory_utilization="--mem-fraction-static",
)

OPTIONS: Mapping[str, str] = {}


def server_args(config: EngineConfig, host: str, port: int) -> list[str]:
    """``sglang.launch_server`` arguments for ``config``."""
    args = ["--model-path", require_model(config), "--host", host, "--port", str(port)]
    if config.served_model_name:
        args += ["--served-model-name", config.served_model_name]
    return [*args, *SIZING.args(config), *config.extra_args]


def plan(config: EngineConfig) -> LaunchPlan:
    port = choose_port(config)
    name = served_name(config)
    args = server_args(config, config.host, port)
    common = {
        "config": config,
        "host": config.host,
        "port": port,
        "model": name,
        "ready": all_of(http_ok("/health"), http_ok("/health_generate"), models_listed(name)),
        "version_probe": version_from_json("/server_info"),
        "ports": (port,),
        "cache_resets": (SGLANG,),
    }
    if config.runtime == "docker":
        from .docker import container_spec

        image = config.image or DEFAULT_IMAGE
        spec = container_spec(
            config,
            image=image,
            command=("python3", "-m", "sglang.launch_server", *args),
            needs_gpu=True,
        )
        return LaunchPlan(containers=(spec,), static_version=image_tag(image), **common)
    proc = ProcessSpec(
        argv=(python_of(config), "-m", "sglang.launch_server", *args),
        env=process_env(config),
        role="sglang",
    )
    return LaunchPlan(
        processes=(proc,), version_fallback=package_version(config, "sglang"), **common
    )


def start(config: EngineConfig) -> RunningEngine:
    if config.runtime == "process":
        require_module(config, "sglang", "pip install sglang on a GPU machine, or set python=")
        require_gpu(config)  # no CPU build
    return launch(plan(config))
