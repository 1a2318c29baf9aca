"""Engines started by name, once each (``EngineFactory``), and an engine as a test sees it
(``EngineRef``): the session's engines without the session, which hands the factory its
configs and callbacks (``engines.engine_factory``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pytest_llmslo.engines.base import EngineConfig, EngineHandle
from pytest_llmslo.engines.managed import ExplainsExit
from pytest_llmslo.errors import (
    ConfigError,
    EngineDiedError,
    EngineStartError,
    EngineUnavailable,
)

if TYPE_CHECKING:
    from pytest_llmslo.engines.startup import StartupPhase
    from pytest_llmslo.load import Progress as LoadProgress

__all__ = ["EngineFactory", "EngineRef", "NullProgress", "Progress", "exit_reason"]


class Progress(Protocol):
    """The live progress of one level: called with the load generator's progress
    snapshots (and, while an engine starts, with its start's phases), closed with the
    level's final line."""

    def __call__(self, p: LoadProgress | StartupPhase) -> None: ...
    def close(self, text: str) -> None: ...


class NullProgress:
    """Progress that shows nothing."""

    def __call__(self, p: LoadProgress | StartupPhase) -> None:
        return None

    def close(self, text: str) -> None:
        return None


class EngineFactory:
    """Starts engines by name, once each, and keeps them until ``stop``/``stop_all``.

    A start failure is remembered, so every test of that engine reports the same error
    without starting it again. ``on_start`` is told each new handle (for the report).
    An engine found dead when a test asks for it is started again, at most
    ``max_restarts`` times per name (``--engine-restarts``); past that its tests error with
    how it exited and its log tail. While an engine starts, ``progress(label, 0, 0)``
    (the session's progress line) shows what the start waits for."""

    def __init__(
        self,
        configs: Mapping[str, EngineConfig],
        starter: Callable[[EngineConfig], EngineHandle] | None = None,
        announce: Callable[[str], None] | None = None,
        on_start: Callable[[str, EngineHandle], None] | None = None,
        max_restarts: int = 1,
        prepare: Callable[[str, EngineConfig], EngineConfig | None] | None = None,
        progress: Callable[[str, int, int], Progress] | None = None,
    ) -> None:
        self.configs = dict(configs)
        self._progress = progress
        self._prepare = prepare
        self._starter = starter
        self._announce = announce or (lambda _msg: None)
        self._on_start = on_start
        self.max_restarts = max_restarts
        self._handles: dict[str, EngineHandle] = {}
        self._failed: dict[str, BaseException] = {}
        self.restarts: dict[str, int] = {}

    def config(self, name: str) -> EngineConfig:
        if name not in self.configs:
            known = ", ".join(self.configs)
            raise ConfigError(f"engine {name!r} is not configured. Configured: {known}.")
        return self.configs[name]

    def get(self, name: str) -> EngineHandle:
        """The running engine ``name``: started on first use, restarted when it died."""
        handle = self._handles.get(name)
        if handle is not None:
            if handle.alive():
                return handle
            return self._restart(name, handle)
        if name in self._failed:
            raise self._failed[name]
        return self._start(name)

    def _start(self, name: str, what: str = "starting") -> EngineHandle:
        config = self.config(name)
        starter = self._starter
        if starter is None:
            from pytest_llmslo.engines import start_engine

            starter = start_engine
        self._announce(f"llmslo: {what} engine {name} ({config.kind}, {config.runtime}) ...")
        t0 = time.monotonic()
        try:
            if self._prepare is not None:
                config = self._prepare(name, config) or config
            handle = self._started(name, starter, config)
        except (EngineUnavailable, EngineStartError, ConfigError) as exc:
            self._failed[name] = exc
            raise
        except Exception as exc:  # a launcher bug still must not stop other engines' tests
            err = EngineStartError(f"engine {name!r} failed to start: {exc!r}")
            self._failed[name] = err
            raise err from exc
        self._handles[name] = handle
        self._announce(
            f"llmslo: engine {name} ready at {handle.base_url} "
            f"(model {handle.model}) in {time.monotonic() - t0:.1f} s"
        )
        if self._on_start is not None:
            self._on_start(name, handle)
        return handle

    def _started(
        self, name: str, starter: Callable[[EngineConfig], EngineHandle], config: EngineConfig
    ) -> EngineHandle:
        """``starter(config)`` with its startup phases on a progress line of its own."""
        from pytest_llmslo.engines import startup

        if self._progress is None:
            return starter(config)
        line = self._progress(f"engine {name}", 0, 0)
        try:
            with startup.reporting(line):
                return starter(config)
        finally:
            done = getattr(line, "done", None)
            if callable(done):
                done()

    def _restart(self, name: str, dead: EngineHandle) -> EngineHandle:
        why = exit_reason(dead)
        tail = dead.log_tail()
        self._handles.pop(name, None)
        try:
            dead.stop()
        except Exception as exc:  # what is left of it must not keep a restart from trying
            self._announce(f"llmslo: cleaning up dead engine {name} failed: {exc!r}")
        done = self.restarts.get(name, 0)
        if done >= self.max_restarts:
            after = f" after {done} restart(s)" if done else ""
            err = EngineDiedError(
                f"engine {name!r} is not running any more: {why}{after}; it is not started "
                f"again (--engine-restarts={self.max_restarts})",
                tail,
            )
            self._failed[name] = err
            raise err
        self.restarts[name] = done + 1
        self._announce(
            f"llmslo: engine {name} {why}; restarting it "
            f"({done + 1} of {self.max_restarts}, --engine-restarts)"
        )
        return self._start(name, "restarting")

    def try_start(self, name: str) -> tuple[str | None, str | None]:
        """Start (or find running) engine ``name`` for a test: ``(None, None)`` when it
        runs, ``(why, None)`` when it cannot run here (no docker, GPU or package: its
        tests skip), ``(None, why)`` when it failed to start (its tests error)."""
        try:
            self.get(name)
        except EngineUnavailable as exc:
            return f"engine {name!r} unavailable: {exc}", None
        except (EngineStartError, EngineDiedError, ConfigError) as exc:
            return None, f"engine {name!r} did not start:\n{exc}"
        return None, None

    def running(self) -> dict[str, EngineHandle]:
        return dict(self._handles)

    def stop(self, name: str) -> None:
        handle = self._handles.pop(name, None)
        if handle is not None:
            handle.stop()

    def stop_all(self) -> None:
        for name in list(self._handles):
            try:
                self.stop(name)
            except Exception as exc:  # keep stopping the others
                self._announce(f"llmslo: stopping engine {name} failed: {exc!r}")


def exit_reason(handle: EngineHandle) -> str:
    """How an engine ended (``vllm exited with exit status -9 (killed by SIGKILL)``)."""
    if isinstance(handle, ExplainsExit):
        try:
            return f"exited: {handle.exit_reason()}"
        except Exception:  # a report detail must not hide the death itself
            pass
    return "exited"


class EngineRef:
    """The engine of one name as a test sees it (the ``slo_engine`` fixture): every
    attribute is the factory's current handle's, so a test that runs after a restart sees
    the new engine, not the dead one."""

    def __init__(self, factory: EngineFactory, name: str) -> None:
        self._factory = factory
        self.name = name

    @property
    def handle(self) -> EngineHandle:
        return self._factory.get(self.name)

    @property
    def config(self) -> EngineConfig:
        """The config the engine runs with (after ``pytest_llmslo_engine_config``), or the
        configured one while it is not running."""
        handle = self._factory.running().get(self.name)
        return handle.config if handle is not None else self._factory.config(self.name)

    @property
    def base_url(self) -> str:
        return self.handle.base_url

    @property
    def model(self) -> str:
        return self.handle.model

    def version(self) -> str | None:
        return self.handle.version()

    def metadata(self) -> dict[str, Any]:
        return self.handle.metadata()

    def alive(self) -> bool:
        handle = self._factory.running().get(self.name)
        return handle is not None and handle.alive()

    def log_tail(self, lines: int = 40) -> str:
        handle = self._factory.running().get(self.name)
        return "" if handle is None else handle.log_tail(lines)

    def stop(self) -> None:
        self._factory.stop(self.name)

    def __repr__(self) -> str:
        return f"<EngineRef {self.name}>"
