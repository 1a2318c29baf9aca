"""Dynamo's options and command lines (``dynamo.py`` plans the units): the engine options
it takes, its images and version, and the frontend's and each worker's arguments and
environment, with the defaults a worker needs beside the others on one host."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from . import sglang, vllm
from ._common import SizingFlags, require_model, served_name
from .base import EngineConfig

__all__ = [
    "DISCOVERY",
    "DYNAMO_VERSION",
    "EVENT_PLANES",
    "GPU_ONLY_WORKERS",
    "IMAGES",
    "MODES",
    "OPTIONS",
    "REQUEST_PLANES",
    "WORKERS",
    "frontend_argv",
    "int_option",
    "option",
    "runtime_args",
    "runtime_env",
    "user_worker_args",
    "worker_argv",
    "worker_defaults",
]

DYNAMO_VERSION = "1.6.1"
WORKERS = ("vllm", "sglang", "trtllm", "mocker")
MODES = ("agg", "disagg")
DISCOVERY = ("file", "etcd", "kubernetes", "mem")
REQUEST_PLANES = ("tcp", "nats")
EVENT_PLANES = ("zmq", "nats")
IMAGES = {
    "vllm": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO_VERSION}",
    "sglang": f"nvcr.io/nvidia/ai-dynamo/sglang-runtime:{DYNAMO_VERSION}",
    "trtllm": f"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{DYNAMO_VERSION}",
    # The mocker ships in every runtime image; the vLLM one is the smallest common choice.
    "mocker": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO_VERSION}",
}
#: Dynamo's TRT-LLM worker spells trtllm-serve's options with dashes; like trtllm-serve it
#: has no dtype or quantization flag.
TRTLLM_SIZING = SizingFlags(
    tensor_parallel_size="--tensor-parallel-size",
    max_model_len="--max-seq-len",
    gpu_memory_utilization="--free-gpu-memory-fraction",
)
#: The mocker simulates one engine: no tensor parallelism, dtype or quantization.
MOCKER_SIZING = SizingFlags(
    tensor_parallel_size=None,
    max_model_len="--max-model-len",
    gpu_memory_utilization="--gpu-memory-utilization",
)
HOST_VARS = (
    "DYN_HTTP_HOST",
    "DYN_HTTP_RPC_HOST",
    "DYN_TCP_RPC_HOST",
    "DYN_TCP_RESPONSE_STREAM_HOST",
    "DYN_EVENT_PLANE_HOST",
    "DYN_SYSTEM_HOST",
)

#: The KV cache transfer of disaggregated vLLM workers. Dynamo 1.6 refuses a prefill worker
#: without ``--kv-transfer-config`` (dynamo/vllm/args.py, update_dynamo_config_with_engine);
#: its examples/backends/vllm/launch/disagg.sh gives both sides NIXL with ``kv_both``.
VLLM_KV_TRANSFER = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
#: What Dynamo's own disaggregated TRT-LLM configs put in the worker's
#: ``--extra-engine-args`` YAML (examples/backends/trtllm/engine_configs/*/prefill.yaml and
#: decode.yaml): a KV cache transceiver, and no overlap scheduler on prefill-only workers.
TRTLLM_DISAGG_ENGINE_ARGS: Mapping[str, Mapping[str, Any]] = {
    "prefill": {
        "cache_transceiver_config": {"backend": "DEFAULT"},
        "disable_overlap_scheduler": True,
    },
    "decode": {"cache_transceiver_config": {"backend": "DEFAULT"}},
}
#: Workers whose engine has no CPU build: as processes they need a GPU on this machine.
GPU_ONLY_WORKERS = ("sglang", "trtllm")

OPTIONS: Mapping[str, str] = {
    "worker": f"worker backend: {', '.join(WORKERS)} (default vllm)",
    "mode": "agg (default: aggregated workers) or disagg (prefill + decode workers)",
    "workers": "number of aggregated workers (default 1)",
    "prefill_workers": "number of prefill workers in disagg mode (default 1)",
    "decode_workers": "number of decode workers in disagg mode (default 1)",
    "discovery": f"discovery backend: {', '.join(DISCOVERY)} (default file)",
    "request_plane": f"request plane: {', '.join(REQUEST_PLANES)} (default tcp)",
    "event_plane": f"event plane: {', '.join(EVENT_PLANES)} (default zmq)",
    "router_mode": "frontend --router-mode (round-robin, random, kv, ...)",
    "frontend_args": "extra arguments for the frontend (extra_args go to every worker)",
    "prefill_args": "extra arguments for prefill workers only",
    "decode_args": "extra arguments for decode workers only",
    "file_kv_dir": "directory for file discovery (default: a fresh temporary directory)",
    "replay_trace": "mocker: --response-replay-trace-path (default: one generated here; "
    "false or 'none' for none)",
    "speedup_ratio": "mocker: --speedup-ratio (default 1.0)",
}


def option(config: EngineConfig, key: str, default: Any, choices: Sequence[str] = ()) -> Any:
    """``options.KEY`` of the engine (``default`` when unset), one of ``choices`` if given."""
    value = config.options.get(key, default)
    if choices and value not in choices:
        raise ConfigError(
            f"engine {config.display_name!r}: options.{key}={value!r}. "
            f"Valid values: {', '.join(choices)}"
        )
    return value


def int_option(config: EngineConfig, key: str, default: int) -> int:
    """``options.KEY`` of the engine as an integer >= 1 (``default`` when unset)."""
    value = config.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"engine {config.display_name!r}: options.{key}={value!r} must be an integer >= 1"
        )
    return value


def _args_opt(config: EngineConfig, key: str) -> list[str]:
    import shlex

    value = config.options.get(key, ())
    if isinstance(value, str):
        return shlex.split(value)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(
        f"engine {config.display_name!r}: options.{key} must be a list of strings or a string"
    )


def runtime_args(config: EngineConfig) -> list[str]:
    """Discovery and transport flags shared by the frontend and every worker."""
    return [
        "--discovery-backend",
        str(option(config, "discovery", "file", DISCOVERY)),
        "--request-plane",
        str(option(config, "request_plane", "tcp", REQUEST_PLANES)),
        "--event-plane",
        str(option(config, "event_plane", "zmq", EVENT_PLANES)),
    ]


def runtime_env(config: EngineConfig, file_kv: str | None) -> dict[str, str]:
    host = config.host if config.host not in ("", "0.0.0.0") else "127.0.0.1"
    env = {var: host for var in HOST_VARS}
    if file_kv:
        env["DYN_FILE_KV"] = file_kv
    env.update(config.env)
    return env


def frontend_argv(config: EngineConfig, host: str, port: int) -> list[str]:
    args = ["-m", "dynamo.frontend", "--http-host", host, "--http-port", str(port)]
    args += runtime_args(config)
    router = config.options.get("router_mode")
    if router:
        args += ["--router-mode", str(router)]
    return [*args, *_args_opt(config, "frontend_args")]


def _has_flag(args: Sequence[str], *names: str) -> bool:
    """True when ``args`` sets one of the flags ``names`` (``--a-b`` or argparse's
    ``--a_b`` spelling, with or without ``=value``)."""
    want = {n.replace("_", "-") for n in names}
    return any(a.split("=", 1)[0].replace("_", "-") in want for a in args if a.startswith("--"))


def user_worker_args(config: EngineConfig, role: str) -> list[str]:
    """The flags the user gives one worker: ``extra_args``, then ``prefill_args`` or
    ``decode_args`` for that side."""
    args = list(config.extra_args)
    if role in ("prefill", "decode"):
        args += _args_opt(config, f"{role}_args")
    return args


def worker_defaults(
    config: EngineConfig,
    worker: str,
    role: str,
    next_port: Callable[[], int],
    workdir: Callable[[], str],
) -> tuple[list[str], dict[str, str]]:
    """The flags and environment variables one worker needs to run on a host shared with
    the other workers, each left out where the user sets it (``extra_args``, the side's
    ``*_args`` or ``env``):

    - vLLM, disaggregated: ``--kv-transfer-config`` with NIXL (Dynamo refuses a prefill
      worker without it) and a ``VLLM_NIXL_SIDE_CHANNEL_PORT`` of its own;
    - vLLM with ``router_mode = "kv"``: a ``--kv-events-config`` publishing on a loopback
      port of its own (Dynamo's vLLM worker publishes no KV events without one);
    - SGLang, disaggregated: ``--disaggregation-transfer-backend nixl`` (SGLang's default
      is Mooncake) and, on prefill workers, a ``--disaggregation-bootstrap-port`` each;
    - TRT-LLM, disaggregated: an ``--extra-engine-args`` YAML with a KV cache transceiver
      (``cache_transceiver_config``), as in Dynamo's own disaggregated configs;
    - TRT-LLM with ``router_mode = "kv"``: ``--publish-kv-events`` (off by default).

    ``next_port`` hands out a free port not given to any other unit; ``workdir`` the
    directory for generated files."""
    user = user_worker_args(config, role)
    disagg = role in ("prefill", "decode")
    kv_router = str(config.options.get("router_mode") or "") == "kv"
    args: list[str] = []
    env: dict[str, str] = {}
    if worker == "vllm":
        if disagg and not _has_flag(user, "--kv-transfer-config"):
            args += ["--kv-transfer-config", VLLM_KV_TRANSFER]
        if disagg and "VLLM_NIXL_SIDE_CHANNEL_PORT" not in config.env:
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(next_port())
        if kv_router and not _has_flag(user, "--kv-events-config"):
            # Bound by the worker's engine and read by the same worker: loopback only.
            events = {
                "publisher": "zmq",
                "topic": "kv-events",
                "endpoint": f"tcp://127.0.0.1:{next_port()}",
                "enable_kv_cache_events": True,
            }
            args += ["--kv-events-config", json.dumps(events)]
    elif worker == "sglang" and disagg:
        if not _has_flag(user, "--disaggregation-transfer-backend"):
            args += ["--disaggregation-transfer-backend", "nixl"]
        if role == "prefill" and not _has_flag(user, "--disaggregation-bootstrap-port"):
            args += ["--disaggregation-bootstrap-port", str(next_port())]
    elif worker == "trtllm":
        own_yaml = _has_flag(user, "--extra-engine-args")
        if disagg and not own_yaml and "DYN_TRTLLM_EXTRA_ENGINE_ARGS" not in config.env:
            path = os.path.join(workdir(), f"{role}-engine-args.yaml")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(TRTLLM_DISAGG_ENGINE_ARGS[role], f)  # JSON is YAML
            args += ["--extra-engine-args", path]
        publish = _has_flag(user, "--publish-kv-events", "--no-publish-kv-events")
        if kv_router and not publish and "DYN_TRTLLM_PUBLISH_KV_EVENTS" not in config.env:
            args += ["--publish-kv-events"]
    return args, env


def worker_argv(
    config: EngineConfig, worker: str, role: str, defaults: Sequence[str] = ()
) -> list[str]:
    """The worker's arguments after the Python executable. ``role`` is agg, prefill or
    decode; ``defaults`` (see :func:`worker_defaults`) come before the user's flags. Flags
    are each backend's own (vLLM engine args, SGLang server args, the TRT-LLM and mocker
    options of Dynamo)."""
    model = require_model(config)
    name = served_name(config)
    args = ["-m", f"dynamo.{worker}"]
    if worker == "vllm":
        args += ["--model", model, "--served-model-name", name, *vllm.SIZING.args(config)]
    elif worker == "sglang":
        args += ["--model-path", model, "--served-model-name", name, *sglang.SIZING.args(config)]
    elif worker == "trtllm":
        args += ["--model", model, "--served-model-name", name, *TRTLLM_SIZING.args(config)]
    else:  # mocker
        args += ["--model-path", model, "--model-name", name, *MOCKER_SIZING.args(config)]
        speedup = config.options.get("speedup_ratio")
        if speedup is not None:
            args += ["--speedup-ratio", str(speedup)]
    if role in ("prefill", "decode"):
        args += ["--disaggregation-mode", role]
    args += runtime_args(config)
    return [*args, *defaults, *user_worker_args(config, role)]
