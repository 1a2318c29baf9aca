"""What every engine launcher gives the rest of the package: ``EngineConfig`` in,
``EngineHandle`` out.

A launcher (one module per engine kind) turns an ``EngineConfig`` into a running,
ready engine and returns a handle; ``engines.start_engine(config)`` picks the launcher by
``config.kind``. The plugin and the load generator only ever see the handle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

#: The name of a runtime in ``engines.runtimes.RUNTIMES`` (``process``, ``docker``,
#: ``kubernetes``).
RuntimeName = str

ENGINE_KINDS: tuple[str, ...] = (
    "sim",
    "vllm",
    "sglang",
    "trtllm",
    "dynamo",
    "external",
    "manifests",
)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One engine, written once (pyproject/ini/config file), overridable on the command line.

    ``name`` is what tests ids and reports show (``sglang``, ``vllm-tp2``); ``kind`` picks the
    launcher. ``options`` holds engine-specific settings (sim profile, Dynamo workers and
    discovery, ...). ``kubernetes`` holds the settings of the kubernetes runtime
    (``runtimes/k8s/settings.py``: namespace, nodes, cache volume, secrets). ``env`` is
    passed to the engine and never logged. ``port=None`` picks a free loopback port.
    ``api_key_env``, ``ca_bundle`` and ``verify_tls`` are how the harness itself talks to
    the engine (readiness probes): the variable holding the API key
    it sends, and the TLS policy of ``tls.py``; the plugin fills them from the session's
    settings, the same the load generator uses. ``external_ready_timeout_s``: how long an
    external engine (already running, so not starting up) may take to answer ready.
    """

    kind: str
    name: str = ""
    model: str = ""
    served_model_name: str | None = None
    runtime: RuntimeName = "process"
    host: str = "127.0.0.1"
    port: int | None = None
    tensor_parallel_size: int = 1
    dtype: str | None = None
    quantization: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None
    gpus: str | None = None
    url: str | None = None
    python: str | None = None
    startup_timeout_s: float = 900.0
    external_ready_timeout_s: float = 60.0
    options: Mapping[str, Any] = field(default_factory=dict)
    kubernetes: Mapping[str, Any] = field(default_factory=dict)
    api_key_env: str | None = "OPENAI_API_KEY"
    ca_bundle: str | None = None
    verify_tls: bool = True

    @property
    def display_name(self) -> str:
        return self.name or self.kind


@runtime_checkable
class EngineHandle(Protocol):
    """A ready engine. ``base_url`` has no trailing slash and no ``/v1``
    (``http://127.0.0.1:8000``); ``model`` is the name to put in requests."""

    config: EngineConfig
    base_url: str
    model: str

    def version(self) -> str | None:
        """The engine's own version string (endpoint, package or image tag), if known."""
        ...

    def metadata(self) -> dict[str, Any]:
        """JSON-serialisable facts for the report: kind, runtime, version, image, command
        (with secrets removed), hardware."""
        ...

    def alive(self) -> bool:
        """False once the engine process/container has exited."""
        ...

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the engine's output (for errors)."""
        ...

    def stop(self) -> None:
        """Stop and clean up: no process, container or port left. Idempotent."""
        ...
