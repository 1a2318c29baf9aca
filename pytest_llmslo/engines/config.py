"""Engine configs: read from TOML (a config file or pyproject's ``[tool.llmslo.engines]``)
or a dict, overridden with ``key=value`` strings from the command line.

A config file holds one table per engine name::

    [engines.vllm-tp2]            # or [tool.llmslo.engines.vllm-tp2] in pyproject.toml
    kind = "vllm"                 # may be left out when the name is a kind
    model = "meta-llama/Llama-3.1-8B-Instruct"
    tensor_parallel_size = 2
    env = { HF_TOKEN = "..." }
    options = { }                 # engine-specific, see each engine's OPTIONS
    kubernetes = { }              # runtime = "kubernetes": runtimes/k8s/settings.py

Every bad key or value raises ``ConfigError`` naming the source and the valid choices.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import shlex
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..suggest import did_you_mean
from .base import ENGINE_KINDS, EngineConfig
from .runtimes import RUNTIMES
from .runtimes.k8s.settings import check_kind, kube_settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

_FIELDS: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(EngineConfig)}
# Keys a config table may hold (``name`` comes from the table's key).
CONFIG_KEYS: tuple[str, ...] = tuple(k for k in _FIELDS if k != "name")


#: ``options`` keys every kind takes.
COMMON_OPTIONS: Mapping[str, str] = {
    "metrics_urls": "more Prometheus /metrics URLs scraped for the engine's signals besides "
    "its own (a Dynamo deployment's workers, on their DYN_SYSTEM_PORT)",
}


def kind_options(kind: str) -> Mapping[str, str]:
    """The ``options`` keys of ``kind`` (its own and the common ones) with their help."""
    mod = importlib.import_module(f"{__package__}.{kind}")
    return {**dict(getattr(mod, "OPTIONS", {})), **COMMON_OPTIONS}


def _valid(keys: Iterable[str]) -> str:
    return ", ".join(sorted(keys))


def _parse_scalar(text: str) -> Any:
    """A TOML value if ``text`` is one (``2``, ``0.9``, ``true``, ``"x"``), else the text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _coerce(key: str, value: Any, where: str) -> Any:
    """Check and convert one top-level value against ``EngineConfig``'s field type."""
    typ = _FIELDS[key]
    optional = "None" in typ
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "")):
        if optional:
            return None
        raise ConfigError(f"{where}: {key} cannot be empty")
    base = typ.replace("| None", "").strip()
    bad = f"{where}: {key}={value!r} is not valid"
    if base == "int":
        if isinstance(value, bool):
            raise ConfigError(f"{bad}: expected an integer")
        try:
            out = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{bad}: expected an integer") from None
        if isinstance(value, float) and out != value:
            raise ConfigError(f"{bad}: expected an integer")
        if key in ("tensor_parallel_size",) and out < 1:
            raise ConfigError(f"{bad}: must be >= 1")
        if key == "port" and not 0 < out < 65536:
            raise ConfigError(f"{bad}: must be 1..65535")
        return out
    if base == "float":
        if isinstance(value, bool):
            raise ConfigError(f"{bad}: expected a number")
        try:
            out_f = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{bad}: expected a number") from None
        if key == "gpu_memory_utilization" and not 0 < out_f <= 1:
            raise ConfigError(f"{bad}: must be in (0, 1]")
        if key in ("startup_timeout_s", "external_ready_timeout_s") and out_f <= 0:
            raise ConfigError(f"{bad}: must be > 0")
        return out_f
    if base == "RuntimeName":
        if value not in RUNTIMES:
            raise ConfigError(f"{bad}. Valid runtimes: {_valid(RUNTIMES)}")
        return value
    if base.startswith("tuple"):
        if isinstance(value, str):
            return tuple(shlex.split(value))
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{bad}: expected a list of strings or one string")
    if base.startswith("Mapping[str, str]"):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{bad}: expected a table of strings")
        return {str(k): str(v) for k, v in value.items()}
    if base.startswith("Mapping"):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{bad}: expected a table")
        return dict(value)
    if not isinstance(value, str):
        raise ConfigError(f"{bad}: expected a string")
    if key == "kind" and value not in ENGINE_KINDS:
        raise ConfigError(f"{bad}. Valid kinds: {_valid(ENGINE_KINDS)}")
    if key in ("python", "model") and value.startswith("~"):
        # Paths written as ~/...; a Hugging Face id never starts with "~".
        return os.path.expanduser(value)
    return value


def _check_options(kind: str, options: Mapping[str, Any], where: str) -> None:
    valid = kind_options(kind)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"{where}: unknown option(s) for kind {kind!r}: {', '.join(unknown)}. "
            f"Valid options: {_valid(valid) or '(none)'}"
        )


def _check_runtime(cfg: EngineConfig, where: str) -> None:
    """The ``kubernetes`` table is valid, and the kubernetes runtime runs the kind."""
    if cfg.kubernetes:
        kube_settings(cfg.kubernetes, where)
    if cfg.runtime == "kubernetes":
        check_kind(cfg.kind, where, cfg.kubernetes)


def config_from_table(name: str, table: Mapping[str, Any], where: str = "config") -> EngineConfig:
    """One ``EngineConfig`` from a table of settings; ``kind`` defaults to ``name``."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: engine {name!r} must be a table of settings")
    where = f"{where} [engine {name}]"
    unknown = sorted(set(table) - set(CONFIG_KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}. Valid keys: {_valid(CONFIG_KEYS)}"
        )
    kind = table.get("kind", name if name in ENGINE_KINDS else None)
    if kind is None:
        raise ConfigError(
            f"{where}: no kind given and {name!r} is not a kind. Valid kinds: "
            f"{_valid(ENGINE_KINDS)}"
        )
    values: dict[str, Any] = {"name": name}
    for key, raw in {**table, "kind": kind}.items():
        values[key] = _coerce(key, raw, where)
    cfg = EngineConfig(**values)
    _check_options(cfg.kind, cfg.options, where)
    _check_runtime(cfg, where)
    return cfg


def _engines_table(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    tool = doc.get("tool")
    if isinstance(tool, Mapping) and isinstance(tool.get("llmslo"), Mapping):
        engines = tool["llmslo"].get("engines", {})
        return engines, "[tool.llmslo.engines]"
    if "engines" in doc:
        return doc["engines"], "[engines]"
    return doc, "top level"


def load_engine_configs(
    source: str | os.PathLike[str] | Mapping[str, Any],
) -> dict[str, EngineConfig]:
    """Engine configs by name from a TOML file (``[engines.NAME]`` or pyproject's
    ``[tool.llmslo.engines.NAME]`` tables) or from a dict of the same shape (either the
    whole document or just ``{NAME: {...}}``)."""
    if isinstance(source, Mapping):
        doc: Mapping[str, Any] = source
        where = "engine configs"
    else:
        path = Path(source)
        where = str(path)
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"engine config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    table, section = _engines_table(doc)
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: {section} must be a table of engine tables")
    return {
        str(name): config_from_table(str(name), t, f"{where} {section}")
        for name, t in table.items()
    }


def resolve_engine(name: str, configs: Mapping[str, EngineConfig] | None = None) -> EngineConfig:
    """The config called ``name``, or the defaults of kind ``name`` (``--engine=sim``)."""
    configs = configs or {}
    if name in configs:
        return configs[name]
    if name in ENGINE_KINDS:
        return EngineConfig(kind=name, name=name)
    hint = did_you_mean(name, [*configs, *ENGINE_KINDS])
    raise ConfigError(
        f"unknown engine {name!r}{hint}. Configured engines: {_valid(configs) or '(none)'}; "
        f"kinds usable with their defaults: {_valid(ENGINE_KINDS)}"
    )


def apply_overrides(
    config: EngineConfig, overrides: Iterable[str], where: str = "override"
) -> EngineConfig:
    """A copy of ``config`` with ``key=value`` overrides applied, e.g.
    ``tensor_parallel_size=2``, ``env.HF_TOKEN=...``, ``options.profile=NAME``,
    ``extra_args=--enforce-eager --foo 1``, ``port=none``, ``kubernetes.namespace=NAME``."""
    values: dict[str, Any] = {}
    env = dict(config.env)
    options = dict(config.options)
    kube = dict(config.kubernetes)
    for item in overrides:
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ConfigError(
                f"{where}: {item!r} is not key=value. Valid keys: "
                f"{_valid(CONFIG_KEYS)}, env.NAME, options.NAME, kubernetes.NAME"
            )
        head, dot, sub = key.partition(".")
        if dot:
            if not sub:
                raise ConfigError(f"{where}: {item!r} has an empty name after '{head}.'")
            if head == "env":
                env[sub] = raw
                continue
            if head == "options":
                options[sub] = _parse_scalar(raw)
                continue
            if head == "kubernetes":
                kube[sub] = _parse_scalar(raw)
                continue
            raise ConfigError(
                f"{where}: {key!r} is not a valid key. Only env.NAME, options.NAME and "
                "kubernetes.NAME "
                f"take a dotted name; valid keys: {_valid(CONFIG_KEYS)}"
            )
        if key not in _FIELDS or key in ("env", "options", "kubernetes"):
            raise ConfigError(
                f"{where}: unknown key {key!r}. Valid keys: {_valid(CONFIG_KEYS)}, "
                "env.NAME, options.NAME, kubernetes.NAME"
            )
        typ = _FIELDS[key]
        if typ.startswith("tuple") or typ == "str" or "str |" in typ or typ == "RuntimeName":
            value: Any = raw
        else:
            value = _parse_scalar(raw)
        values[key] = _coerce(key, value, where)
    new = dataclasses.replace(config, **values, env=env, options=options, kubernetes=kube)
    _check_options(new.kind, new.options, where)
    _check_runtime(new, where)
    return new
