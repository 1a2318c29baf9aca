"""The session's engines (``EngineRoster``): every engine of the engine config file, the
``--engine-opt`` items by engine, the configs the session runs, the factory that starts
them, and what each started engine told of itself (for the reports)."""

from __future__ import annotations

from typing import Any

from pytest_llmslo.engines.base import EngineConfig, EngineHandle

from .factory import EngineFactory

__all__ = ["EngineRoster", "engine_record"]


class EngineRoster:
    """The session's engines, each by name: ``configured`` (every engine of the engine
    config file, before the session's settings), ``opts`` (the ``--engine-opt`` items),
    ``configs`` (what the session runs: ``session.engines.resolve_engines``, and the
    engines a test's ``engines=`` adds), ``factory`` (made on first use:
    ``session.engines.engine_factory``) and ``meta`` (what each started engine told:
    ``engine_record``)."""

    def __init__(self) -> None:
        self.configured: dict[str, EngineConfig] = {}
        self.opts: dict[str, list[str]] = {}
        self.configs: dict[str, EngineConfig] = {}
        self.factory: EngineFactory | None = None
        self.meta: dict[str, dict[str, Any]] = {}

    def started(self, name: str, handle: EngineHandle) -> None:
        """Keep what the started engine ``name`` tells of itself (``engine_record``)."""
        self.meta[name] = engine_record(handle)

    def stop_all(self) -> None:
        """Stop every engine the factory started (none without a factory)."""
        if self.factory is not None:
            self.factory.stop_all()


def engine_record(handle: EngineHandle) -> dict[str, Any]:
    """A started engine's metadata, model, kind and version, for the reports."""
    try:
        meta = dict(handle.metadata())
    except Exception as exc:  # metadata is for the report: never fail a test over it
        meta = {"error": repr(exc)}
    try:
        version = handle.version()
    except Exception:
        version = None
    meta.setdefault("model", handle.model)
    meta.setdefault("kind", handle.config.kind)
    meta["version"] = meta.get("version") or version
    return meta
