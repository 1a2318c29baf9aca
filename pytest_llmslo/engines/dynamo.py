"""NVIDIA Dynamo: ``python -m dynamo.frontend`` (OpenAI HTTP, preprocessor, router) plus
workers ``python -m dynamo.{vllm,sglang,trtllm,mocker}``, aggregated or disaggregated
(prefill and decode workers), as processes or in the ``nvcr.io/nvidia/ai-dynamo/*-runtime``
images. Its options and command lines are in ``dynamoargs.py``.

Discovery is by file by default (``--discovery-backend file`` with ``DYN_FILE_KV`` a
directory shared by all units), requests over TCP (``--request-plane tcp``) and events
over ZMQ (``--event-plane zmq``), so no etcd or NATS is needed; every ``DYN_*_HOST`` is the
configured host (loopback by default). Set ``options.discovery = "etcd"`` (with
``ETCD_ENDPOINTS``) and ``options.request_plane``/``event_plane = "nats"`` (with
``NATS_SERVER``) for a cluster setup.

Ready when ``/v1/models`` lists the model and the ``/health`` *body* says healthy: the
frontend answers 200 with an unhealthy status until a worker has registered.

The mocker worker (an engine simulator that needs no GPU) streams random ids of the
model's vocabulary. With ``options.replay_trace`` unset it is also given a generated
response-replay trace (see :func:`write_replay_trace`); Dynamo 1.6.1 replays it only for
requests annotated ``nvext.annotations = ["output_replay_id:KEY"]``, so the harness's
requests get random ids. About 1 in 300 of the mocker's completions streams no text at all
(a role chunk, then the finish chunk, while ``usage`` counts the tokens): such a request is
completed but not good (its TTFT is undefined), and the verdict says so.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EngineStartError
from ._common import (
    choose_port,
    gpu_ids,
    gpus_of,
    image_unit,
    package_version,
    python_of,
    require_model,
    served_name,
)
from .base import EngineConfig
from .cache_reset import DYNAMO
from .dynamoargs import (
    DISCOVERY,
    GPU_ONLY_WORKERS,
    IMAGES,
    MODES,
    OPTIONS,
    WORKERS,
    frontend_argv,
    int_option,
    option,
    runtime_env,
    worker_argv,
    worker_defaults,
)
from .launchplan import LaunchPlan
from .ports import pick_free_port, port_is_free, probe_host
from .readiness import all_of, health_body_healthy, models_listed
from .tempdirs import remove_dirs
from .units import ImageUnit, ProcessUnit, PythonModule

__all__ = ["OPTIONS", "extra_worker", "plan", "write_replay_trace"]


def write_replay_trace(path: str | os.PathLike[str], vocab_size: int, seed: int = 0) -> None:
    """A Mooncake-style JSONL response-replay trace for the mocker: rows of
    ``output_token_ids`` (ids below ``vocab_size``) that it replays as its output, so that
    the frontend detokenizes them into real text."""
    rng = random.Random(seed)
    # Ids of ordinary tokens: low ids are often specials (bos/eos/pad), which decode empty.
    low = min(16, max(0, vocab_size - 1))
    with open(path, "w", encoding="utf-8") as f:
        for i in range(64):
            ids = [rng.randrange(low, vocab_size) for _ in range(4096)]
            row = {"timestamp": i, "input_length": 1, "output_length": len(ids),
                   "output_replay_id": str(i), "output_token_ids": ids}  # fmt: skip
            f.write(json.dumps(row) + "\n")


def _vocab_size(model: str) -> int:
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
        return int(cfg.get("vocab_size") or 32000)
    except (OSError, ValueError):
        return 32000


def _roles(config: EngineConfig) -> list[str]:
    mode = option(config, "mode", "agg", MODES)
    if mode == "agg":
        return ["agg"] * int_option(config, "workers", 1)
    return ["prefill"] * int_option(config, "prefill_workers", 1) + ["decode"] * int_option(
        config, "decode_workers", 1
    )


def _gpu_slices(config: EngineConfig, n: int) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES per worker: consecutive groups of tensor_parallel_size GPUs
    from ``config.gpus`` (ids) or from 0."""
    tp = config.tensor_parallel_size
    gpus = (config.gpus or "").strip()
    if gpus.lower() == "none":
        return [None] * n
    ids = gpu_ids(gpus) or [str(i) for i in range(n * tp)]
    if len(ids) < n * tp:
        raise ConfigError(
            f"engine {config.display_name!r}: {n} worker(s) x tensor_parallel_size {tp} "
            f"need {n * tp} GPUs, gpus={config.gpus!r} gives {len(ids)}"
        )
    return [",".join(ids[i * tp : (i + 1) * tp]) for i in range(n)]


@dataclass(slots=True)
class _Ports:
    """Ports the workers bind besides the frontend's (NIXL side channels, KV event
    publishers, SGLang bootstrap servers, status servers): all on this host, so each its
    own."""

    host: str
    taken: set[int]

    def next(self) -> int:
        """A free port not given to any other unit."""
        while True:
            p = pick_free_port(self.host)
            if p not in self.taken:
                self.taken.add(p)
                return p

    def low(self, engine: str) -> int:
        """A free port below 32768: DYN_SYSTEM_PORT is an i16 in Dynamo, so the kernel's
        ephemeral ports (32768 and up) would not parse."""
        for p in random.sample(range(20000, 32000), 200):
            if p not in self.taken and port_is_free(p, self.host):
                self.taken.add(p)
                return p
        raise EngineStartError(f"{engine}: no free port below 32768 for a worker")


@dataclass(slots=True)
class _Files:
    """The directories made for one plan (listed in ``made``, removed when the engine
    stops) and the one that holds generated worker files, made when first needed."""

    made: list[str]
    workdir: list[str] = field(default_factory=list)

    def mkdtemp(self) -> str:
        path = tempfile.mkdtemp(prefix="llmslo-dyn-")
        self.made.append(path)
        return path

    def get_workdir(self) -> str:
        if not self.workdir:
            self.workdir.append(self.mkdtemp())
        return self.workdir[0]


@dataclass(frozen=True, slots=True)
class _Worker:
    """One worker, whichever way it runs: its role (agg, prefill, decode) and index, the
    arguments after the Python, its environment, its GPUs (``CUDA_VISIBLE_DEVICES``) and
    its status server's port."""

    role: str
    index: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    gpus: str | None
    system_port: int | None


def _replay_trace(
    config: EngineConfig, worker: str, file_kv: str | None, files: _Files
) -> list[str]:
    """The mocker's ``--response-replay-trace-path`` (written here unless given), or []."""
    trace = config.options.get("replay_trace")
    off = trace is False or (isinstance(trace, str) and trace.lower() == "none")
    if worker != "mocker" or off or "--response-replay-trace-path" in config.extra_args:
        return []
    if not trace:
        trace_dir = file_kv or files.mkdtemp()
        trace = os.path.join(trace_dir, "replay-trace.jsonl")
        write_replay_trace(trace, _vocab_size(config.model))
    return ["--response-replay-trace-path", str(trace)]


def _workers(
    config: EngineConfig,
    base_env: Mapping[str, str],
    ports: _Ports,
    files: _Files,
    extra: Sequence[str],
) -> list[_Worker]:
    """Each worker's arguments (``extra`` last), environment, GPUs and status port.

    Each worker's status server publishes its /metrics (KV-cache usage, prefix hits and
    its engine's own names) for the engine's signals, on a port of its own unless ``env``
    names one."""
    worker = option(config, "worker", "vllm", WORKERS)
    roles = _roles(config)
    uses_gpu = worker != "mocker"
    slices = _gpu_slices(config, len(roles)) if uses_gpu else [None] * len(roles)
    out = []
    for i, role in enumerate(roles):
        defaults, extra_env = worker_defaults(config, worker, role, ports.next, files.get_workdir)
        env = {**base_env, **extra_env}
        sys_port = None
        if "DYN_SYSTEM_PORT" not in config.env:
            sys_port = ports.low(config.display_name)
            env["DYN_SYSTEM_ENABLED"] = "true"
            env["DYN_SYSTEM_PORT"] = str(sys_port)
        if slices[i] is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(slices[i])
        argv = (*worker_argv(config, worker, role, defaults), *extra)
        out.append(_Worker(role, i, argv, env, slices[i], sys_port))
    return out


def _processes(
    config: EngineConfig, port: int, base_env: Mapping[str, str], workers: list[_Worker]
) -> tuple[ProcessUnit, ...]:
    """The frontend and the workers as processes of ``config.python``."""
    worker = option(config, "worker", "vllm", WORKERS)
    python = python_of(config)
    frontend = ProcessUnit(
        argv=(python, *frontend_argv(config, config.host, port)),
        env=base_env,
        role="frontend",
        ports=(port,),
        module=PythonModule(
            "dynamo.frontend", "pip install ai-dynamo-runtime and ai-dynamo, or set python="
        ),
    )
    units = [frontend]
    for w in workers:
        units.append(
            ProcessUnit(
                argv=(python, *w.argv),
                env=w.env,
                role=f"{worker}-{w.role}-{w.index}",
                ports=(w.system_port,) if w.system_port else (),
                # vLLM has a CPU build and the mocker needs no GPU; SGLang and TRT-LLM do.
                needs_gpu=worker in GPU_ONLY_WORKERS,
            )
        )
    return tuple(units)


def _images(
    config: EngineConfig,
    port: int,
    base_env: Mapping[str, str],
    workers: list[_Worker],
    shared: Sequence[str],
) -> tuple[ImageUnit, ...]:
    """The frontend and the workers in the runtime image of the worker backend. Every unit
    sees the ``shared`` files at the same paths: file discovery works only when all units
    share one directory. A worker's GPUs are its device ids, not CUDA_VISIBLE_DEVICES."""
    worker = option(config, "worker", "vllm", WORKERS)
    image = config.image or IMAGES[worker]
    mounts = {path: path for path in dict.fromkeys(shared)}
    frontend = image_unit(
        config,
        image,
        ("python3", *frontend_argv(config, config.host, port)),
        env=dict(base_env),
        role="frontend",
        ports=(port,),
        mounts=mounts,
    )
    units = [frontend]
    for w in workers:
        gpus = None
        if worker != "mocker":
            gpus = f"device={w.gpus}" if w.gpus is not None else gpus_of(config)
        env = {k: v for k, v in w.env.items() if k != "CUDA_VISIBLE_DEVICES"}
        units.append(
            image_unit(
                config,
                image,
                ("python3", *w.argv),
                env=env,
                role=f"{w.role}-{w.index}",
                gpus=gpus,
                ports=(w.system_port,) if w.system_port else (),
                mounts=mounts,
            )
        )
    return tuple(units)


def plan(config: EngineConfig) -> LaunchPlan:
    """The frontend and its workers, as processes and as images."""
    # Directories made here, removed when the engine stops (never one the user named),
    # or right away when the config turns out to be bad.
    temp_dirs: list[str] = []
    try:
        return _plan(config, _Files(temp_dirs))
    except BaseException:
        remove_dirs(temp_dirs)
        raise


def _plan(config: EngineConfig, files: _Files) -> LaunchPlan:
    require_model(config)
    worker = option(config, "worker", "vllm", WORKERS)
    roles = _roles(config)
    port = choose_port(config)
    name = served_name(config)
    discovery = option(config, "discovery", "file", DISCOVERY)
    file_kv = None
    if discovery == "file":
        file_kv = str(config.options.get("file_kv_dir") or files.mkdtemp())
    base_env = runtime_env(config, file_kv)
    trace = _replay_trace(config, worker, file_kv, files)
    port_host = probe_host(config.host if config.host not in ("", "::") else "127.0.0.1")
    ports = _Ports(port_host, {port})
    workers = _workers(config, base_env, ports, files, trace)
    # Files every unit must see at the same path: discovery, the trace, generated configs.
    shared = [file_kv] if file_kv else []
    if trace:
        shared.append(os.path.dirname(trace[-1]))
    return LaunchPlan(
        config=config,
        host=config.host,
        port=port,
        model=name,
        ready=all_of(models_listed(name), health_body_healthy("/health")),
        processes=_processes(config, port, base_env, workers),
        images=_images(config, port, base_env, workers, [*shared, *files.workdir]),
        version_fallback=package_version(config, "ai-dynamo", "ai-dynamo-runtime"),
        ports=(port,),
        meta={
            "dynamo_worker": worker,
            "dynamo_mode": option(config, "mode", "agg", MODES),
            "dynamo_workers": roles,
            "discovery": discovery,
        },
        temp_dirs=tuple(files.made),
        metrics_urls=tuple(
            f"http://{ports.host}:{w.system_port}/metrics" for w in workers if w.system_port
        ),
        cache_resets=(DYNAMO,),
    )


def extra_worker(running: LaunchPlan, workers: int) -> tuple[ProcessUnit, tuple[str, ...]]:
    """One more aggregated worker for a running Dynamo process deployment (a scale-up:
    ``engines/scaling.py``): the worker the plan of ``workers`` workers gives last, with
    its own free ports, registering through the running units' discovery directory and
    replaying their trace. Returns it and the directories made for it (removed with the
    engine). ``ConfigError`` for a disaggregated deployment."""
    config = running.config
    if option(config, "mode", "agg", MODES) != "agg":
        raise ConfigError(
            f"engine {config.display_name!r}: a disaggregated Dynamo adds no worker while "
            "running (scale its prefill or decode pool in its config instead)"
        )
    options: dict[str, Any] = {**config.options, "workers": workers}
    env = running.processes[0].env if running.processes else {}
    if env.get("DYN_FILE_KV"):
        options["file_kv_dir"] = env["DYN_FILE_KV"]
    argv = running.processes[-1].argv if running.processes else ()
    if "--response-replay-trace-path" in argv:
        options["replay_trace"] = argv[list(argv).index("--response-replay-trace-path") + 1]
    temp_dirs: list[str] = []
    try:
        grown = _plan(replace(config, options=options), _Files(temp_dirs))
    except BaseException:
        remove_dirs(temp_dirs)
        raise
    return grown.processes[-1], tuple(temp_dirs)
