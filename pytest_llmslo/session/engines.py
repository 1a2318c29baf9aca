"""The session's engines: their configs, resolved from the engine config file and the
session's settings (``resolve_engines``, ``engine_config``, ``engines_of_test``), what each
measures in a few words, and the factory that starts them (``engine_factory``)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from pytest_llmslo import settings as S
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.errors import ConfigError
from pytest_llmslo.redact import remember, url_password

from .factory import EngineFactory
from .state import Session, resolve_path

__all__ = [
    "check_sim_profile",
    "engine_config",
    "engine_factory",
    "engine_target",
    "engines_of_test",
    "engines_text",
    "resolve_engines",
]


def resolve_engines(state: Session) -> dict[str, EngineConfig]:
    """The configs of the session's engines (``--engine``); engines that only a test's
    ``engines=`` names are resolved at collection (``_test_engine_configs``)."""
    from pytest_llmslo.engines import apply_overrides, load_engine_configs

    settings = state.settings
    configured: dict[str, EngineConfig] = {}
    if settings.engine_config:
        path = resolve_path(state, settings.engine_config, "engine_config")
        label = settings.sources.get("engine_config", "--engine-config")
        try:
            configured = load_engine_configs(path)
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    else:
        pyproject = state.rootpath / "pyproject.toml"
        if pyproject.is_file():
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover - exercised on 3.10 only
                import tomli as tomllib
            try:
                doc = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                doc = {}
            if doc.get("tool", {}).get("llmslo", {}).get("engines"):
                configured = load_engine_configs(pyproject)
    state.roster.configured = configured
    where = settings.sources.get("engine", "--engine")
    S.check_engine_names(settings.engines, configured, where)
    out = {name: engine_config(state, name, where) for name in settings.engines}
    opts: dict[str, list[str]] = {}
    for item in settings.engine_opts:
        head, _, value = item.partition("=")
        ename, _, key = head.partition(".")
        if ename not in out and ename not in configured:
            raise ConfigError(
                f"--engine-opt {item!r}: {ename!r} is not an engine of this session. "
                f"Engines: {', '.join(dict.fromkeys([*out, *configured]))}."
            )
        opts.setdefault(ename, []).append(f"{key}={value}")
    state.roster.opts = opts
    for ename, items in opts.items():
        if ename in out:
            out[ename] = apply_overrides(out[ename], items, where=f"--engine-opt {ename}")
    if settings.engine_url and not any(c.kind == "external" for c in out.values()):
        url_label = settings.sources.get("engine_url", "--engine-url")
        raise ConfigError(
            f"{url_label} {S.shown_url(settings.engine_url)}: {where} chose "
            f"{', '.join(out)}, none of them external, so the URL would not be measured. "
            "Leave --engine out (--engine-url alone means --engine=external), give "
            "--engine=external, or drop --engine-url."
        )
    for name, cfg in out.items():
        check_sim_profile(state, name, cfg)
    return out


def check_sim_profile(state: Session, name: str, cfg: EngineConfig) -> None:
    """A sim engine's profile must be one the sim knows (unless its extra arguments give a
    ``--profile-file``): found out when the engine starts, it would fail every test."""
    if cfg.kind != "sim" or "--profile-file" in " ".join(cfg.extra_args):
        return
    profile = cfg.options.get("profile")
    if not profile:
        return
    from pytest_llmslo.sim.profiles import PROFILES

    if str(profile) in PROFILES:
        return
    settings = state.settings
    label = (
        settings.sources.get("sim_profile", "--sim-profile")
        if profile == settings.sim_profile
        else f"engine {name}: options.profile"
    )
    raise ConfigError(
        f"{label}: {profile!r} is not a sim profile. Profiles: {', '.join(sorted(PROFILES))} "
        "(python -m pytest_llmslo.sim --list-profiles)."
    )


def engine_target(state: Session, name: str) -> str:
    """What engine ``name`` measures, in a few words: the URL of an external engine (a
    password in it masked), the built-in sim and its profile, or the kind and runtime."""
    cfg = state.roster.configs.get(name)
    if cfg is None:
        return name
    if cfg.kind == "external":
        return S.shown_url(cfg.url or "") or "external"
    if cfg.kind == "sim":
        from pytest_llmslo.engines.sim import DEFAULT_PROFILE

        return f"built-in sim, {cfg.options.get('profile') or DEFAULT_PROFILE}"
    return f"{cfg.kind}, {cfg.runtime}"


def engines_text(state: Session, names: Sequence[str]) -> str:
    """Engine names with what each measures: ``external (http://127.0.0.1:8000)``."""
    return ", ".join(f"{n} ({engine_target(state, n)})" for n in names)


def engine_config(state: Session, name: str, where: str) -> EngineConfig:
    """The config of engine ``name`` (configured, or the defaults of a bare kind) with the
    session's settings applied: model, sim profile (for sim engines whose config names
    none), API key, TLS, the external URL."""
    settings = state.settings
    cfg = state.roster.configured.get(name) or EngineConfig(kind=name, name=name)
    if not cfg.name:
        cfg = dataclasses.replace(cfg, name=name)
    model = state.defaults.model
    model_set = state.defaults.sources.get("model", "default") != "default"
    if model_set or not cfg.model:
        cfg = dataclasses.replace(cfg, model=model or cfg.model)
    if cfg.kind == "sim" and settings.sim_profile and not cfg.options.get("profile"):
        cfg = dataclasses.replace(cfg, options={**cfg.options, "profile": settings.sim_profile})
    # The readiness probes talk to the engine as the load generator will.
    d = state.defaults
    cfg = dataclasses.replace(
        cfg,
        api_key_env=d.api_key_env or None,
        ca_bundle=d.ca_bundle,
        verify_tls=not d.insecure,
    )
    if cfg.kind == "external":
        url = settings.engine_url or cfg.url
        if not url:
            raise ConfigError(
                f"{where}: engine {name!r} is external and needs a URL: give --engine-url "
                "(or url = ... in its engine config)."
            )
        remember(url_password(url))
        cfg = dataclasses.replace(cfg, url=url)
        if settings.sources.get("external_ready_timeout", "default") != "default":
            cfg = dataclasses.replace(
                cfg, external_ready_timeout_s=settings.external_ready_timeout_s
            )
    return cfg


def engines_of_test(state: Session, ts: S.TestSettings, where: str) -> tuple[list[str], str | None]:
    """The engines a test runs on, and why it runs on none (a skip reason).

    A test's ``engines=`` replaces the session's engines, unless ``--engine`` (or its
    environment variable) chose engines: then the test runs on those of its own that were
    chosen, and is skipped when none was."""
    from pytest_llmslo.engines import apply_overrides

    settings = state.settings
    if not ts.engines:
        return list(settings.engines), None
    label = f"@pytest.mark.slo(engines=...) on {where}"
    S.check_engine_names(ts.engines, state.roster.configured, label)
    for name in ts.engines:
        if name not in state.roster.configs:
            cfg = engine_config(state, name, label)
            items = state.roster.opts.get(name)
            if items:
                cfg = apply_overrides(cfg, items, where=f"--engine-opt {name}")
            check_sim_profile(state, name, cfg)
            state.roster.configs[name] = cfg
    src = settings.sources.get("engine", "default")
    if not (src.startswith("--") or src.startswith(S.ENV_PREFIX)):
        return list(ts.engines), None
    picked = [e for e in ts.engines if e in settings.engines]
    if picked:
        return picked, None
    return [], (
        f"this test runs on {', '.join(ts.engines)} (its engines=); {src} chose "
        f"{', '.join(settings.engines)}"
    )


def engine_factory(state: Session) -> EngineFactory:
    """The session's engine factory (made on first use): engines start lazily, announce
    themselves through ``state.say``, are recorded for the report, restart up to
    ``--engine-restarts`` times and pass ``hooks.engine_config`` before they start."""
    if state.roster.factory is None:
        state.roster.factory = EngineFactory(
            state.roster.configs,
            announce=state.say,
            on_start=state.roster.started,
            max_restarts=state.settings.engine_restarts,
            prepare=state.hooks.engine_config,
            progress=state.progress,
        )
    return state.roster.factory
