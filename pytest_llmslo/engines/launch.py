"""From a launch plan to a ready engine: start the units, wait for readiness, read the
version, and hand back an ``EngineHandle`` (a ``RunningEngine``, ``running.py``).

Each engine's spec module only describes *what* to run (a :class:`LaunchPlan` of units, a
readiness check and a version probe); the runtime of ``config.runtime`` (``runtimes/``)
starts the units, and this module does the rest the same way for every engine and every
runtime, so teardown, timeouts and log tails behave identically.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import time
from urllib.parse import urlsplit

import httpx

from .. import interrupts
from ..errors import ConfigError, EngineStartError
from ..redact import redact, redact_url, remember, secret_values
from . import coldstart, startup
from .base import EngineConfig
from .firsttoken import FirstTokenError, first_token
from .launchplan import LaunchPlan
from .ports import probe_host
from .readiness import models_listed
from .running import RunningEngine, exit_text, log_tails, probe_client, stop_units
from .runtimes import Runtime, StartedUnit, runtime_of
from .runtimes.runtime import HostNetwork, TellsStage
from .tempdirs import remove_dirs

log = logging.getLogger(__name__)

#: An external endpoint is already running: refused connections for this long end the wait.
EXTERNAL_REFUSED_S = 5.0
#: How often a start checks whether the engine's port is open (the resolution of
#: ``port_open_s``).
PORT_POLL_S = 0.05


def launch(plan: LaunchPlan, *, poll_s: float = 0.5) -> RunningEngine:
    """Start the plan's units in the runtime of ``config.runtime`` and wait until ready; on
    failure stop everything and raise ``EngineStartError`` with the log tails. A stop
    signal ends the start between its steps and probes (``KeyboardInterrupt``, the units
    stopped), never in the middle of one (``interrupts.owned``)."""
    with interrupts.owned():
        return _launch(plan, poll_s)


def _launch(plan: LaunchPlan, poll_s: float) -> RunningEngine:
    cfg = plan.config
    runtime = runtime_of(cfg)
    clock = coldstart.StartClock(runtime.name)
    t0 = clock.t0
    started: list[StartedUnit] = []
    log_dir: str | None = None
    argv = [a for p in plan.processes for a in p.argv]
    remember(*secret_values(cfg.env, [*cfg.extra_args, *argv]))
    try:
        runtime.check(plan)
        busy = runtime.ports_in_use(plan)
        if busy:
            raise EngineStartError(
                f"{cfg.display_name}: port {busy[0]} on {plan.host} is already in use "
                "(set port= to another value or leave it unset to pick a free one)"
            )
        units = runtime.units(plan)
        if plan.processes or plan.images:
            if not units:
                raise ConfigError(
                    f"engine {cfg.display_name!r}: kind {cfg.kind} cannot run in the "
                    f"{runtime.name} runtime"
                )
            _phase(plan, t0, "starting " + ", ".join(u.role for u in units))
        interrupts.checkpoint()
        run = runtime.start(plan)
        started, log_dir = run.units, run.log_dir
        clock.from_units(started)
        handle = _wait_ready(plan, runtime, started, clock, poll_s, log_dir)
    except BaseException as exc:
        stop_units(started)
        dirs = [*plan.temp_dirs, *([log_dir] if log_dir else [])]
        # The logs an error message points to stay; everything else goes.
        remove_dirs(dirs, keep=[d for d in dirs if d in str(exc)])
        raise
    return handle


def _phase(
    plan: LaunchPlan,
    t0: float,
    what: str,
    deadline_s: float | None = None,
    bound: str = "startup_timeout_s",
    phase: str = "starting",
) -> None:
    startup.report(
        startup.StartupPhase(
            engine=plan.config.display_name,
            waiting_for=what,
            elapsed_s=time.monotonic() - t0,
            deadline_s=plan.config.startup_timeout_s if deadline_s is None else deadline_s,
            bound=bound,
            phase=phase,
        )
    )


def _ready_bound(plan: LaunchPlan, units: list[StartedUnit]) -> tuple[float, str]:
    """How long readiness may take and the setting that says so: an external engine is
    already running, so its short ``external_ready_timeout_s`` applies (when shorter)."""
    cfg = plan.config
    if plan.url is not None and not units and cfg.external_ready_timeout_s < cfg.startup_timeout_s:
        return cfg.external_ready_timeout_s, "--external-ready-timeout"
    return cfg.startup_timeout_s, "startup_timeout_s"


def _wait_ready(
    plan: LaunchPlan,
    runtime: Runtime,
    units: list[StartedUnit],
    clock: coldstart.StartClock,
    poll_s: float,
    log_dir: str | None = None,
) -> RunningEngine:
    """Wait for readiness, then (for an engine the harness started) for the model to be
    listed and the first token of one real completion; each phase timed on ``clock``."""
    cfg = plan.config
    base_url = runtime.endpoint(plan, units)
    wait = _Wait(plan, runtime, units, clock, log_dir)
    # Short timeouts: a loading engine may accept a connection and answer late. Each probe
    # is bounded as a whole (``probe.fetch``), and never past the deadline.
    per_probe = httpx.Timeout(10.0, connect=2.0)
    with probe_client(cfg, per_probe) as client:
        _poll_ready(wait, client, base_url, poll_s)
        client.timeout = per_probe
        model = plan.model
        if callable(plan.on_ready):
            model = plan.on_ready(client, base_url) or model
        if units:
            _serves(wait, client, base_url, model, poll_s)
        client.timeout = per_probe
        version = plan.static_version or runtime.known_version(plan)
        if plan.version_probe is not None:
            with contextlib.suppress(Exception):
                version = plan.version_probe(client, base_url) or version
        if version is None:
            with contextlib.suppress(Exception):
                version = runtime.fallback_version(plan)
    cold = None
    if units:
        clock.from_units(units)
        cold = clock.record()
    return RunningEngine(
        plan,
        units,
        base_url=base_url,
        model=model,
        version=version,
        started_s=clock.elapsed(),
        temp_dirs=[log_dir] if log_dir else (),
        cold_start=cold,
    )


class _Wait:
    """What a start waits with: its deadline and the setting that sets it, the log
    directory to name, the engine's port when it is on this machine."""

    def __init__(
        self,
        plan: LaunchPlan,
        runtime: Runtime,
        units: list[StartedUnit],
        clock: coldstart.StartClock,
        log_dir: str | None,
    ) -> None:
        self.plan = plan
        self.units = units
        self.clock = clock
        self.bound_s, self.bound = _ready_bound(plan, units)
        self.deadline = clock.t0 + self.bound_s
        # Process engines log to files: name them, the tail shown is only the last lines.
        self.logs = f"; full logs in {log_dir}" if log_dir else ""
        self.external = plan.url is not None and not units
        on_host = bool(units) and isinstance(runtime, HostNetwork) and plan.port > 0
        self.port: tuple[str, int] | None = (probe_host(plan.host), plan.port) if on_host else None
        if self.port is not None:
            clock.expect("port_open_s")
        if units:
            clock.expect("ready_s", "model_listed_s", "first_token_s")

    def check_alive(self) -> None:
        dead = [u for u in self.units if not u.alive()]
        if dead:
            d = dead[0].describe()
            raise EngineStartError(
                f"{self.plan.config.display_name}: {d.get('role') or d.get('name')} exited "
                f"before it was ready ({exit_text(dead[0])}){self.logs}",
                log_tails(self.units, 60),
            )

    def left(self) -> float:
        return max(self.deadline - time.monotonic(), 0.05)

    def timed_out(self, base_url: str, reason: str) -> EngineStartError:
        return EngineStartError(
            _not_ready(self.plan, base_url, self.bound_s, self.bound, reason) + self.logs,
            log_tails(self.units, 60),
        )

    def phase(self, name: str, detail: str = "", stage: str = "") -> None:
        """Tell the progress line which phase the start waits for, and why."""
        text = coldstart.PHASE_TEXT[name] + stage + (f": {detail}" if detail else "")
        _phase(self.plan, self.clock.t0, text, self.bound_s, self.bound, phase=name)

    def port_open(self) -> bool:
        """Whether the engine's port accepts a connection (marked the first time)."""
        if self.port is None or self.clock.has("port_open_s"):
            return True
        try:
            with socket.create_connection(self.port, timeout=0.2):
                pass
        except OSError:
            return False
        self.clock.mark("port_open_s")
        return True

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (never past the deadline), watching the port meanwhile so
        that its opening is timed to ``PORT_POLL_S``, not to the readiness poll; the
        port opening ends the sleep (readiness is asked at once)."""
        end = min(time.monotonic() + seconds, self.deadline)
        was_open = self.port_open()
        while time.monotonic() < end:
            if was_open:
                interrupts.pause(end - time.monotonic())
                break
            if interrupts.pause(min(PORT_POLL_S, max(end - time.monotonic(), 0.0))):
                break
            if self.port_open():
                break
        # A stop signal ends the wait here, between two probes.
        interrupts.checkpoint()


def _poll_ready(wait: _Wait, client: httpx.Client, base_url: str, poll_s: float) -> None:
    """Until ``plan.ready`` passes (``ready_s``), a unit dies or the deadline passes."""
    refused_since: float | None = None
    while True:
        interrupts.checkpoint()
        wait.check_alive()
        left = wait.left()
        client.timeout = httpx.Timeout(min(10.0, left), connect=min(2.0, left))
        wait.port_open()
        reason = redact(wait.plan.ready(client, base_url) or "")
        if not reason:
            wait.port_open()
            wait.clock.mark("ready_s")
            return
        if wait.external:
            refused_since = _check_external(wait.plan.config, base_url, reason, refused_since)
        if time.monotonic() >= wait.deadline:
            raise wait.timed_out(base_url, reason)
        if not wait.port_open():
            wait.phase("port_open_s", reason)
        else:
            wait.phase("ready_s", reason, _stage(wait.units))
        wait.sleep(poll_s)


def _serves(wait: _Wait, client: httpx.Client, base_url: str, model: str, poll_s: float) -> None:
    """Ready is not serving: the model listed (``model_listed_s``), then the first token
    of one real streamed completion (``first_token_s``); a failure ends the start."""
    listed = models_listed(model)
    while True:
        client.timeout = httpx.Timeout(min(10.0, wait.left()), connect=min(2.0, wait.left()))
        reason = listed(client, base_url)
        if reason is None:
            wait.clock.mark("model_listed_s")
            break
        if time.monotonic() >= wait.deadline:
            raise wait.timed_out(base_url, redact(reason))
        wait.phase("model_listed_s", redact(reason))
        wait.check_alive()
        wait.sleep(poll_s)
    wait.phase("first_token_s", f"one streamed completion of {model}")
    try:
        asked, seconds = first_token(client, base_url, model, wait.deadline)
    except FirstTokenError as exc:
        name = wait.plan.config.display_name
        raise EngineStartError(
            f"{name}: ready and listing {model}, but its first streamed completion did not "
            f"stream a token ({redact(str(exc))}): the engine does not serve yet{wait.logs}",
            log_tails(wait.units, 60),
        ) from None
    wait.clock.mark("first_token_s")
    wait.clock.first_token = asked
    log.debug("%s: first token in %.3f s", wait.plan.config.display_name, seconds)


def _not_ready(plan: LaunchPlan, base_url: str, bound_s: float, bound: str, reason: str) -> str:
    """The message of a start that timed out: what the last probe saw, and for an
    external engine what that usually means."""
    name = plan.config.display_name
    if bound == "startup_timeout_s":
        return f"{name}: not ready after {bound_s:.0f} s (startup_timeout_s); last check: {reason}"
    url = redact_url(base_url)
    text = (
        f"{name}: {url} accepts connections but was not ready within {bound_s:g} s "
        f"({bound}); the last probe saw: {reason}"
    )
    return text


def _speaks_tls(url: str) -> bool:
    """Whether the server of an ``http://`` URL completes a TLS handshake (certificate not
    checked): an https server reached over http closes the connection without a word."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((parts.hostname, parts.port or 80), timeout=2.0) as raw:
            with ctx.wrap_socket(raw, server_hostname=parts.hostname):
                return True
    except (OSError, ValueError):
        return False


def _check_external(
    cfg: EngineConfig, url: str, reason: str, refused_since: float | None
) -> float | None:
    """An external endpoint is someone else's running server, not one starting up: a
    refused connection for a few seconds, a rejected key or a TLS failure ends the wait at
    once instead of after ``external_ready_timeout_s``. Returns when refusals began (None:
    not refusing now)."""
    name = cfg.display_name
    shown = redact_url(url)
    if " HTTP 401" in reason or " HTTP 403" in reason:
        var = cfg.api_key_env
        key = "set" if var and os.environ.get(var) else "not set"
        raise EngineStartError(
            f"{name}: {shown} refused the API key ({reason}); the key is read from "
            f"${var or '(none: --api-key-env is empty)'} ({key}): set it, or name another "
            "variable with --api-key-env"
        )
    low = reason.lower()
    if "certificate" in low or "ssl" in low:
        raise EngineStartError(f"{name}: TLS to {shown} failed: {reason}")
    if "RemoteProtocolError" in reason and refused_since is None and _speaks_tls(url):
        https = "https://" + shown.partition("://")[2]
        raise EngineStartError(
            f"{name}: {shown} is an https server reached over http:// ({reason}): "
            f"use --engine-url {https}"
        )
    if "ConnectError" not in reason and "ConnectTimeout" not in reason:
        return None
    now = time.monotonic()
    if refused_since is None:
        return now
    if now - refused_since >= EXTERNAL_REFUSED_S:
        raise EngineStartError(
            f"{name}: nothing answers at {shown} ({reason}). An external engine is not "
            "started by pytest-llmslo: start the server first, or fix --engine-url"
        )
    return refused_since


def _stage(units: list[StartedUnit]) -> str:
    """`` (pulling the image)``: where a unit that can tell (a pod) is in its start."""
    for unit in units:
        if not isinstance(unit, TellsStage):
            continue
        with contextlib.suppress(Exception):
            stage = unit.waiting_for()
            if stage:
                return f" ({stage})"
    return ""
