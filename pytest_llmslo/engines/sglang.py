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
    gpus_of,
    image_unit,
    package_version,
    process_env,
    python_of,
    require_model,
    served_name,
)
from .base import EngineConfig
from .cache_reset import SGLANG
from .launchplan import LaunchPlan
from .readiness import all_of, http_ok, models_listed, version_from_json
from .units import ProcessUnit, PythonModule

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
    """SGLang as a process or as its image; either way it needs a GPU (no CPU build)."""
    port = choose_port(config)
    name = served_name(config)
    args = server_args(config, config.host, port)
    proc = ProcessUnit(
        argv=(python_of(config), "-m", "sglang.launch_server", *args),
        env=process_env(config),
        role="sglang",
        ports=(port,),
        module=PythonModule("sglang", "pip install sglang on a GPU machine, or set python="),
        needs_gpu=True,
    )
    image = image_unit(
        config,
        config.image or DEFAULT_IMAGE,
        ("python3", "-m", "sglang.launch_server", *args),
        gpus=gpus_of(config),
        ports=(port,),
    )
    return LaunchPlan(
        config=config,
        host=config.host,
        port=port,
        model=name,
        ready=all_of(http_ok("/health"), http_ok("/health_generate"), models_listed(name)),
        processes=(proc,),
        images=(image,),
        version_probe=version_from_json("/server_info"),
        version_fallback=package_version(config, "sglang"),
        ports=(port,),
        cache_resets=(SGLANG,),
    )
