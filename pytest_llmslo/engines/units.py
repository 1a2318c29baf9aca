"""What an engine runs, whichever runtime runs it: a :class:`ProcessUnit` (a command on
this machine) or an :class:`ImageUnit` (a command in a container image).

A kind's ``plan(config)`` describes its units in these terms: commands, environment,
ports, GPUs, roles (``frontend``, ``prefill-0``, ...), the files they share. How a unit is
started (a process group, a container with host networking and GPU device requests, ...)
is the runtime's business (``runtimes/``), derived from this description.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..redact import redact_argv, redact_env, secret_values


@dataclass(frozen=True, slots=True)
class PythonModule:
    """A module the engine's Python (``config.python``) must import, and how to get it:
    without it the engine cannot run here (``EngineUnavailable``)."""

    name: str
    hint: str


@dataclass(frozen=True, slots=True)
class ProcessUnit:
    """One process: ``argv`` (``argv[0]`` a program or path), environment variables added
    to the current environment, and a short role name for logs. ``ports``: the ports it
    listens on, its API first. ``module`` and ``needs_gpu`` say what this machine must
    have for it (checked before anything starts): a Python module, an NVIDIA GPU (an
    engine without a CPU build)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    role: str = "engine"
    cwd: str | None = None
    ports: tuple[int, ...] = ()
    module: PythonModule | None = None
    needs_gpu: bool = False

    def describe(self) -> dict[str, Any]:
        """The unit with secrets masked (for metadata)."""
        secrets = secret_values(self.env, self.argv)
        return {
            "role": self.role,
            "argv": redact_argv(self.argv, secrets),
            "env": redact_env(self.env),
        }


@dataclass(frozen=True, slots=True)
class ImageUnit:
    """One container of ``image``: ``command`` (after ``entrypoint``, the image's own when
    None) with ``env``, in the role ``role``.

    ``gpus``: None for no GPU, else a ``--gpus`` style value (``all``, a count, device ids
    ``0,1`` / ``device=0,1``, or ``none``). ``mounts``: host paths (files the units share:
    discovery, generated configs) and where the unit sees them; ``read_only``: host paths
    it sees at the same path, read-only (a local model directory). ``hf_cache``: it keeps
    Hugging Face downloads in a cache that outlives it. ``shm``: the size of its
    memory-backed ``/dev/shm`` (None: the runtime's default). ``pull``: the image may be
    fetched when missing; ``hint`` says how to get it otherwise.

    ``secret_env``: variables whose values the harness made for the unit and keeps out of
    manifests and logs (the sim's admin token). Each runtime hands them over privately:
    docker as the container's environment (the container runs on this host), kubernetes
    through a Secret it makes for the unit and deletes with it, which the pod reads by
    ``secretKeyRef``. ``env`` wins where both name a variable."""

    image: str
    command: tuple[str, ...]
    role: str = "engine"
    entrypoint: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    ports: tuple[int, ...] = ()
    gpus: str | None = None
    mounts: Mapping[str, str] = field(default_factory=dict)
    read_only: tuple[str, ...] = ()
    hf_cache: bool = True
    shm: str | None = None
    pull: bool = True
    hint: str = ""
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)


Unit = ProcessUnit | ImageUnit
