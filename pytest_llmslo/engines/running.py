"""A ready engine (``RunningEngine``, the ``EngineHandle`` that ``launch`` hands back): its
units, version and metadata, its prefix-cache reset, log tails, how it ended, and its stop
(the ports it held checked); and the HTTP client its probes use."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import platform
import shutil
import signal
import subprocess
import warnings
from collections.abc import Iterable
from typing import Any

import httpx

from .._version import __version__ as harness_version
from ..errors import ConfigError, EngineStartError
from ..redact import redact, redact_env, redact_url, remember
from ..tls import make_ssl_context
from . import coldstart
from .base import EngineConfig
from .cache_reset import RESET_TIMEOUT_S, reset_cache
from .launchplan import LaunchPlan
from .managed import ManagedEngine
from .ports import probe_host
from .runtimes import Runtime, StartedUnit, runtime_of
from .runtimes.runtime import ExplainsFailure, LocatesWorkerMetrics
from .tempdirs import remove_dirs
from .units import ImageUnit

__all__ = [
    "PORT_FREE_TIMEOUT_S",
    "EngineTeardownWarning",
    "RunningEngine",
    "exit_text",
    "log_tails",
    "probe_client",
    "stop_units",
]

log = logging.getLogger("pytest_llmslo.engines.launch")

#: How long ``stop()`` waits for the engine's ports to be released.
PORT_FREE_TIMEOUT_S = 10.0


class EngineTeardownWarning(RuntimeWarning):
    """Stopping an engine left something behind (a port still in use)."""


class RunningEngine:
    """A ready engine made of one or more units; implements ``EngineHandle``."""

    def __init__(
        self,
        plan: LaunchPlan,
        units: list[StartedUnit],
        *,
        base_url: str | None = None,
        model: str | None = None,
        version: str | None = None,
        started_s: float = 0.0,
        temp_dirs: Iterable[str] = (),
        cold_start: coldstart.ColdStart | None = None,
    ) -> None:
        self.config = plan.config
        self.plan = plan
        self.runtime: Runtime = runtime_of(plan.config)
        self.base_url = (base_url or plan.base_url).rstrip("/")
        self.model = model or plan.model
        # Units that know where their workers' metrics are once running (a cluster's
        # worker pods, reached through the engine's access path) say so; else the plan's.
        found = [u for u in units if isinstance(u, LocatesWorkerMetrics)]
        self.metrics_urls = (
            tuple(x for u in found for x in u.metrics_urls()) if found else plan.metrics_urls
        )
        self._units = units
        self._version = version
        self._started_s = started_s
        #: The phases of the start (``coldstart.py``); None for an engine not started here.
        self.cold_start = cold_start
        self._stopped = False
        # The plan's directories and the process log directory, removed by stop().
        self._temp_dirs = tuple(dict.fromkeys([*plan.temp_dirs, *temp_dirs]))

    def version(self) -> str | None:
        return self._version

    def metadata(self) -> dict[str, Any]:
        cfg = self.config
        ran = self.runtime.units(self.plan)
        images = sorted({u.image for u in ran if isinstance(u, ImageUnit)})
        return {
            "name": cfg.display_name,
            "kind": cfg.kind,
            "runtime": cfg.runtime,
            "version": self._version,
            "model": self.model,
            "base_url": redact_url(self.base_url),
            "image": images[0] if len(images) == 1 else (images or None),
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "dtype": cfg.dtype,
            "quantization": cfg.quantization,
            "max_model_len": cfg.max_model_len,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "gpus": cfg.gpus,
            "env": redact_env(cfg.env),
            "units": [u.describe() for u in self._units],
            "startup_s": round(self._started_s, 3),
            "cold_start": None if self.cold_start is None else self.cold_start.to_dict(),
            "hardware": {**_hardware(), "gpus": list(_hardware()["gpus"])},
            "harness_version": harness_version,
            **dict(self.plan.meta),
        }

    def alive(self) -> bool:
        return not self._stopped and all(u.alive() for u in self._units)

    def add_unit(self, unit: StartedUnit, temp_dirs: Iterable[str] = ()) -> None:
        """A unit started after the engine was ready (a worker a scale-up added): part of
        the engine's liveness, its log tail and metadata, stopped first with it."""
        self._units.append(unit)
        self._temp_dirs = tuple(dict.fromkeys([*self._temp_dirs, *temp_dirs]))

    @property
    def units(self) -> tuple[StartedUnit, ...]:
        """The engine's started units, in start order."""
        return tuple(self._units)

    def reset_cache(self) -> dict[str, Any]:
        """Empty the engine's prefix cache (``cache_reset.py``): ``{"reset": bool, "how":
        "POST /path"}``, with ``"why"`` when it was not reset. Never raises."""
        timeout = httpx.Timeout(RESET_TIMEOUT_S, connect=2.0)
        try:
            with probe_client(self.config, timeout) as client:
                return reset_cache(
                    client, self.base_url, self.plan.cache_resets, self.plan.no_cache_reset
                )
        except Exception as exc:  # a reset is a courtesy to the next level, never fatal
            return {"reset": False, "why": redact(f"{type(exc).__name__}: {exc}")}

    def log_tail(self, lines: int = 40) -> str:
        return log_tails(self._units, lines)

    def exit_reason(self) -> str:
        """How the engine ended, for messages: ``vllm exited with status -9 (SIGKILL)``;
        ``"is running"`` while every unit is alive."""
        dead = [u for u in self._units if not u.alive()]
        if not dead:
            return "is running"
        d = dead[0].describe()
        return f"{d.get('role') or d.get('name') or 'engine'} {exit_text(dead[0])}"

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        stop_units(self._units)
        _check_ports_free(self.runtime, self.plan)
        remove_dirs(self._temp_dirs)

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<RunningEngine {self.config.display_name} {self.base_url} model={self.model}>"


#: A ``RunningEngine`` has every capability of an engine started here (mypy checks it).
_MANAGED: type[ManagedEngine] = RunningEngine


@functools.lru_cache(maxsize=1)
def _hardware() -> dict[str, Any]:
    hw: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.system(),
        "node": platform.node(),
        "cpus": os.cpu_count(),
        "gpus": [],
    }
    smi = shutil.which("nvidia-smi")
    if smi:
        with contextlib.suppress(Exception):
            out = subprocess.run(
                [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=15,
            ).stdout  # fmt: skip
            hw["gpus"] = [line.strip() for line in out.splitlines() if line.strip()]
    return hw


def log_tails(units: list[StartedUnit], lines: int) -> str:
    """The last ``lines`` of each unit's log, each headed by its role when there are several."""
    if len(units) == 1:
        return units[0].log_tail(lines)
    parts = []
    for u in units:
        d = u.describe()
        parts.append(f"--- {d.get('role') or d.get('name')} ---\n{u.log_tail(lines)}")
    return "\n".join(parts)


def _check_ports_free(runtime: Runtime, plan: LaunchPlan) -> None:
    """Warn, naming the engine and the port, about each port still held after stop."""
    host = probe_host(plan.host)
    for port in runtime.ports_still_held(plan, PORT_FREE_TIMEOUT_S):
        msg = (
            f"engine {plan.config.display_name!r}: port {port} on {host} is still in use "
            f"{PORT_FREE_TIMEOUT_S:.0f} s after the engine was stopped (a process it "
            "started may still be running; the next engine on this port will not start)"
        )
        log.warning(msg)
        warnings.warn(msg, EngineTeardownWarning, stacklevel=3)


def stop_units(units: list[StartedUnit]) -> None:
    """Stop every unit, workers before the frontend."""
    # Workers before the frontend (reverse start order), and every unit even if one fails.
    for u in reversed(units):
        with contextlib.suppress(Exception):
            u.stop()


def probe_client(config: EngineConfig, timeout: httpx.Timeout) -> httpx.Client:
    """The HTTP client of readiness and version probes: the session's TLS policy
    (``tls.py``) and API key (``config.api_key_env``), as the load generator uses them.
    Never ``trust_env``: proxies from the environment must not see loopback traffic."""
    headers = {}
    key = os.environ.get(config.api_key_env) if config.api_key_env else None
    if key:
        remember(key)
        headers["Authorization"] = f"Bearer {key}"
    try:
        ctx = make_ssl_context(config.ca_bundle, config.verify_tls)
    except ConfigError as exc:
        raise EngineStartError(f"{config.display_name}: {exc}") from None
    return httpx.Client(timeout=timeout, trust_env=False, verify=ctx, headers=headers)


def exit_text(unit: StartedUnit) -> str:
    """How a unit ended: ``exit status -9 (killed by SIGKILL)``, or why it failed."""
    # A unit that knows why it failed says so (a pod's ImagePullBackOff, FailedScheduling).
    why = unit.failure() if isinstance(unit, ExplainsFailure) else None
    if why:
        return str(why)
    rc = getattr(unit, "returncode", None)
    code = rc() if callable(rc) else None
    if code is None:
        return "exited"
    if code < 0:
        try:
            return f"exit status {code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exit status {code}"
