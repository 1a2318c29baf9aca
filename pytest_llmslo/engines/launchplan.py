"""A launch plan: what one engine runs (its units, in every form its kind can run them)
and how to tell it is ready. A kind's ``plan(config)`` makes it; the runtime of
``config.runtime`` (``runtimes/``) runs the units of its form, and ``launch.py`` waits for
readiness the same way for every engine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .base import EngineConfig
from .cache_reset import CacheReset
from .readiness import ReadyCheck, VersionProbe
from .units import ImageUnit, ProcessUnit


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """What to run for one engine and how to tell it is ready.

    ``processes`` and ``images`` are the same engine in two forms: as local processes
    and as container images; a runtime runs one form (the process runtime the first, the
    docker runtime the second). In either, the first unit serves the API on ``port``.
    """

    config: EngineConfig
    host: str
    port: int
    model: str
    ready: ReadyCheck
    processes: tuple[ProcessUnit, ...] = ()
    images: tuple[ImageUnit, ...] = ()
    version_probe: VersionProbe | None = None
    # A version known without asking the engine, whichever form runs (the sim's).
    static_version: str | None = None
    # Asked when a process engine does not answer the probe (the package in config.python).
    version_fallback: Any = None
    # Ports the units listen on, checked free before start and after stop.
    ports: tuple[int, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    # Called once when ready, before the handle is returned (e.g. to discover the model).
    on_ready: Any = None
    # A base URL given as is (an external engine's), instead of host and port.
    url: str | None = None
    # Directories the launcher made for this engine (discovery, generated configs),
    # removed when it stops.
    temp_dirs: tuple[str, ...] = ()
    # Prometheus endpoints of the engine's units besides its base URL's /metrics (a
    # Dynamo deployment's workers), scraped for the engine's signals.
    metrics_urls: tuple[str, ...] = ()
    # How the engine's prefix cache is emptied between levels (``cache_reset.py``), tried
    # in order; none: ``no_cache_reset`` says why it cannot be.
    cache_resets: tuple[CacheReset, ...] = ()
    no_cache_reset: str | None = None

    @property
    def client_host(self) -> str:
        """Where the harness connects: a wildcard bind is reached on loopback."""
        if self.host in ("0.0.0.0", "", "::"):
            return "127.0.0.1"
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def base_url(self) -> str:
        """The engine's URL on this host's network (``url`` as given for an external one)."""
        if self.url:
            return self.url
        return f"http://{self.client_host}:{self.port}"
