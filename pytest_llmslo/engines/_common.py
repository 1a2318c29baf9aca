"""Pieces the real-engine spec modules share: the served name, the port, the Python that
runs a process engine, the package version read from that Python, the sizing flags
(tensor parallelism, dtype, quantization, context length, memory share) in each server's
own spelling, and the parts of an image unit that come from the config."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EngineUnavailable
from .base import EngineConfig
from .ports import pick_free_port
from .units import ImageUnit


@dataclass(frozen=True, slots=True)
class SizingFlags:
    """How one server spells the sizing settings of ``EngineConfig``; None where it has no
    such flag (the setting is then not passed on the command line)."""

    tensor_parallel_size: str | None
    max_model_len: str
    gpu_memory_utilization: str
    dtype: str | None = None
    quantization: str | None = None

    def args(self, config: EngineConfig) -> list[str]:
        """The flags for ``config``'s settings, in the order tensor parallelism, dtype,
        quantization, context length, memory share; unset settings are left out."""
        args: list[str] = []
        if self.tensor_parallel_size:
            args += [self.tensor_parallel_size, str(config.tensor_parallel_size)]
        if self.dtype and config.dtype:
            args += [self.dtype, config.dtype]
        if self.quantization and config.quantization:
            args += [self.quantization, config.quantization]
        if config.max_model_len is not None:
            args += [self.max_model_len, str(config.max_model_len)]
        if config.gpu_memory_utilization is not None:
            args += [self.gpu_memory_utilization, str(config.gpu_memory_utilization)]
        return args


def require_model(config: EngineConfig) -> str:
    if not config.model:
        raise ConfigError(
            f"engine {config.display_name!r} (kind {config.kind}) needs model= "
            "(a Hugging Face id or a local path)"
        )
    return config.model


def served_name(config: EngineConfig) -> str:
    return config.served_model_name or config.model


def choose_port(config: EngineConfig) -> int:
    host = config.host if config.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
    return config.port or pick_free_port(host)


def python_of(config: EngineConfig) -> str:
    return config.python or sys.executable


def image_tag(image: str) -> str | None:
    """``vllm/vllm-openai:v0.32.0`` -> ``v0.32.0`` (None without a tag)."""
    last = image.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else None


def require_module(config: EngineConfig, module: str, hint: str) -> None:
    """``EngineUnavailable`` when ``module`` cannot be found by ``config.python``."""
    python = python_of(config)
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    try:
        rc = subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineUnavailable(f"{config.display_name}: cannot run {python}: {exc}") from None
    if rc != 0:
        raise EngineUnavailable(
            f"{config.display_name}: Python module {module!r} is not installed for {python} "
            f"({hint})"
        )


def host_gpu_reason() -> str | None:
    """Why this machine has no NVIDIA GPU (no ``/dev/nvidia0`` and no ``nvidia-smi``), or
    None when it has one. Engines without a CPU build need it, as processes or in docker."""
    if Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is not None:
        return None
    return "no NVIDIA GPU on this machine (no /dev/nvidia0, no nvidia-smi)"


def require_gpu(config: EngineConfig) -> None:
    """``EngineUnavailable`` (a skip) when a GPU-only engine would run on a machine
    without an NVIDIA GPU."""
    reason = host_gpu_reason()
    if reason:
        raise EngineUnavailable(f"{config.display_name}: {reason}")


def gpu_ids(gpus: str | None) -> list[str] | None:
    """The device ids a ``gpus`` value names (``0,1`` or ``device=0,1``); None for
    ``all``, a count (``2``), ``none`` or unset, which name no particular device."""
    value = (gpus or "").strip()
    if not value or value.lower() in ("all", "none") or value.isdigit():
        return None
    ids = [g.strip() for g in value.removeprefix("device=").split(",") if g.strip()]
    return ids or None


def process_env(config: EngineConfig) -> dict[str, str]:
    """The environment of a process engine: ``CUDA_VISIBLE_DEVICES`` from ``gpus`` when it
    names device ids (what ``--gpus device=...`` does for a container), then ``env``,
    which wins."""
    env: dict[str, str] = {}
    ids = gpu_ids(config.gpus)
    if ids:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
    env.update(config.env)
    return env


def gpus_of(config: EngineConfig) -> str:
    """The GPUs an image unit of a GPU engine asks for: ``config.gpus``, all by default."""
    return config.gpus or "all"


def local_model(config: EngineConfig) -> tuple[str, ...]:
    """``config.model`` when it is a local path, which image units must see (read-only,
    at the same path); empty for a Hugging Face id."""
    if config.model and os.path.isabs(config.model) and os.path.exists(config.model):
        return (config.model,)
    return ()


def image_unit(
    config: EngineConfig,
    image: str,
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    **fields: Any,
) -> ImageUnit:
    """An image unit of ``config``'s engine: ``env`` then ``config.env`` (which wins), and
    a local model seen read-only at its own path; ``fields`` are the unit's others
    (``role``, ``entrypoint``, ``gpus``, ``ports``, ``mounts``, ...)."""
    return ImageUnit(
        image=image,
        command=tuple(command),
        env={**(env or {}), **config.env},
        read_only=local_model(config),
        **fields,
    )


def package_version(config: EngineConfig, *dists: str) -> Callable[[], str | None]:
    """A fallback version probe: the installed distribution's version in config.python."""

    def probe() -> str | None:
        code = (
            "import importlib.metadata as m\n"
            f"for d in {list(dists)!r}:\n"
            "    try:\n        print(m.version(d)); break\n"
            "    except m.PackageNotFoundError: pass\n"
        )
        out = subprocess.run(
            [python_of(config), "-c", code], capture_output=True, text=True, timeout=60
        )
        return out.stdout.strip() or None

    return probe


def take_flag_value(args: tuple[str, ...] | list[str], flag: str) -> tuple[list[str], str | None]:
    """``args`` without ``flag VALUE`` / ``flag=VALUE``, and the value (the last one given).
    Used to move a secret off the command line, where ``ps`` shows it to every user of the
    machine, into the engine's environment."""
    out: list[str] = []
    value: str | None = None
    it = iter(args)
    for arg in it:
        if arg == flag:
            value = next(it, None)
            continue
        if arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
            continue
        out.append(arg)
    return out, value
