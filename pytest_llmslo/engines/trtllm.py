"""TensorRT-LLM: ``trtllm-serve MODEL`` as a process or in the
``nvcr.io/nvidia/tensorrt-llm/release`` image (GPU only).

Ready when ``/health`` answers 200 and ``/v1/models`` lists the model; the version is at
``/version``. ``trtllm-serve`` spells its options with underscores
(``--tensor_parallel_size``, ``--max_seq_len``, ``--free_gpu_memory_fraction``); it has no
dtype flag (``dtype`` goes into the ``--config`` YAML that this launcher writes) and serves
the model under the name it was given (no served-name flag).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping

from ..errors import ConfigError
from ._common import (
    SizingFlags,
    choose_port,
    gpus_of,
    image_unit,
    package_version,
    process_env,
    require_model,
)
from .base import EngineConfig
from .cache_reset import TRTLLM_CANNOT
from .launchplan import LaunchPlan
from .readiness import all_of, http_ok, models_listed, version_from_json
from .units import ProcessUnit, PythonModule

#: The newest tag NVIDIA's TensorRT-LLM documentation gives a ``docker pull`` for
#: (installation/containers.html of the 1.3.0rc24 docs). Dynamo 1.6.1 pins 1.3.0rc29 in its
#: trtllm extra; set ``image`` to use that one.
DEFAULT_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc24"

#: trtllm-serve's sizing flags; dtype goes into the --config YAML and quantization comes
#: from the checkpoint, so neither has one. These are the 1.x spellings
#: (tensorrt_llm/commands/serve.py: ``--tp_size``, ``--kv_cache_free_gpu_memory_fraction`` and
#: ``--extra_llm_api_options`` are aliases of them); 0.18 knew only ``--tp_size`` and
#: ``--kv_cache_free_gpu_memory_fraction``, and had no ``--config``.
SIZING = SizingFlags(
    tensor_parallel_size="--tensor_parallel_size",
    max_model_len="--max_seq_len",
    gpu_memory_utilization="--free_gpu_memory_fraction",
)

OPTIONS: Mapping[str, str] = {
    "backend": "trtllm-serve --backend: pytorch (its default), tensorrt or _autodeploy",
    "config_dir": "where the generated --config YAML is written (default: a temporary dir)",
}


def _check(config: EngineConfig) -> None:
    if config.quantization:
        raise ConfigError(
            f"engine {config.display_name!r}: trtllm-serve has no quantization flag; it "
            "reads the quantization from the checkpoint (use a pre-quantized model, or "
            "quant_config in a --config YAML through extra_args)"
        )
    if config.served_model_name and config.served_model_name != config.model:
        raise ConfigError(
            f"engine {config.display_name!r}: trtllm-serve serves the model under the name "
            "it is given; leave served_model_name unset (or equal to model)"
        )


def serve_args(
    config: EngineConfig, host: str, port: int, config_file: str | None = None
) -> list[str]:
    """``trtllm-serve`` arguments (after the program name) for ``config``."""
    _check(config)
    args = [require_model(config), "--host", host, "--port", str(port)]
    backend = config.options.get("backend")
    if backend:
        args += ["--backend", str(backend)]
    args += SIZING.args(config)
    if config_file:
        args += ["--config", config_file]
    return [*args, *config.extra_args]


def write_llm_config(config: EngineConfig, temp_dirs: list[str] | None = None) -> str | None:
    """The ``--config`` YAML for settings without a flag (dtype); None when not needed.
    JSON is valid YAML, so no YAML writer is needed. A temporary directory made for it is
    appended to ``temp_dirs`` (removed when the engine stops; ``config_dir`` never is)."""
    if not config.dtype:
        return None
    folder = config.options.get("config_dir")
    if not folder:
        folder = tempfile.mkdtemp(prefix="llmslo-trtllm-")
        if temp_dirs is not None:
            temp_dirs.append(folder)
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "llm_api_options.yaml")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"dtype": config.dtype}, f)
    return path


def plan(config: EngineConfig) -> LaunchPlan:
    """``trtllm-serve`` as a process or in its image (GPU only), with the ``--config``
    YAML it needs seen by the container at the same path."""
    _check(config)
    model = require_model(config)
    port = choose_port(config)
    temp_dirs: list[str] = []
    config_file = write_llm_config(config, temp_dirs)
    args = serve_args(config, config.host, port, config_file)
    program = (
        os.path.join(os.path.dirname(config.python), "trtllm-serve")
        if config.python
        else "trtllm-serve"
    )
    proc = ProcessUnit(
        argv=(program, *args),
        env=process_env(config),
        role="trtllm",
        ports=(port,),
        module=PythonModule(
            "tensorrt_llm", "pip install tensorrt-llm on a GPU machine, or set python="
        ),
        needs_gpu=True,
    )
    shared = os.path.dirname(config_file) if config_file else None
    image = image_unit(
        config,
        config.image or DEFAULT_IMAGE,
        ("trtllm-serve", *args),
        gpus=gpus_of(config),
        ports=(port,),
        mounts={shared: shared} if shared else {},
    )
    return LaunchPlan(
        config=config,
        host=config.host,
        port=port,
        model=model,
        ready=all_of(http_ok("/health"), models_listed(model)),
        processes=(proc,),
        images=(image,),
        version_probe=version_from_json("/version"),
        version_fallback=package_version(config, "tensorrt-llm", "tensorrt_llm"),
        ports=(port,),
        temp_dirs=tuple(temp_dirs),
        no_cache_reset=TRTLLM_CANNOT,
    )
