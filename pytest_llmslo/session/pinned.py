"""The pinned constants of a session's results document: the session's, each test's and
each engine's (what makes two runs comparable)."""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_llmslo import settings as S
from pytest_llmslo._version import __version__
from pytest_llmslo.document import constants
from pytest_llmslo.document.jsonable import SupportsToDict
from pytest_llmslo.engines.base import EngineConfig

__all__ = [
    "constants_of_test",
    "objective_dict",
    "per_engine_constants",
    "session_constants",
    "workload_text",
]


def workload_text(d: S.TestSettings) -> dict[str, Any]:
    """The workload fields of ``d`` other than its kind and path."""
    f = d.workload_fields()
    return {k: v for k, v in f.items() if k not in ("kind", "path")}


def objective_dict(o: Any) -> Any:
    """An objective as the document keeps it (its ``to_dict``, or its text)."""
    return o.to_dict() if isinstance(o, SupportsToDict) else str(o)


def constants_of_test(ts: S.TestSettings, salt: str | None = None) -> dict[str, Any]:
    """A test's own constants of the results document; ``salt``: its prompts' salt
    (``prompt_salt``)."""
    kind, path = ts.dataset_kind()
    return {
        "workload": {"kind": kind, "path": path, **workload_text(ts)},
        "dataset": path,
        "isl": ts.isl,
        "osl": ts.osl,
        # Not pinned: runs with other salts are compared (their prompts differ in words,
        # not in lengths); --prompt-salt=<this> repeats the prompts exactly.
        "prompt_salt": salt or None,
        "slo": [objective_dict(o) for o in ts.objectives],
        "levels": [lv.label for lv in ts.levels],
        "warmup": ts.warmup,
        "requests": ts.requests,
        "duration_s": ts.duration_s,
        "endpoint": ts.endpoint,
        "strict": ts.strict,
        "confidence": ts.confidence,
    }


def per_engine_constants(
    d: S.TestSettings,
    configs: Mapping[str, EngineConfig],
    engine_meta: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Each started engine's own pinned constants (``constants.engine_constants``): its
    model, precision, and hardware (its GPUs, or the sim engine's profile)."""
    from pytest_llmslo.engines.sim import DEFAULT_PROFILE

    out: dict[str, dict[str, Any]] = {}
    for name, meta in engine_meta.items():
        cfg = configs.get(name)
        metadata = dict(meta)
        precision = profile = None
        if cfg is not None:
            metadata.setdefault("kind", cfg.kind)
            metadata.setdefault("gpus", cfg.gpus)
            precision = cfg.quantization or cfg.dtype
            if cfg.kind == "sim":
                profile = str(cfg.options.get("profile") or DEFAULT_PROFILE)
        out[name] = constants.engine_constants(
            metadata,
            model=d.model or None,
            precision=precision,
            sim_profile=profile,
        )
    return out


def session_constants(
    d: S.TestSettings,
    configs: Mapping[str, EngineConfig],
    engine_meta: Mapping[str, Mapping[str, Any]],
    *,
    engines: Sequence[str],
    tests: Mapping[str, dict[str, Any]],
    salt: str,
) -> dict[str, Any]:
    """The session's constants of the results document: its defaults ``d``, the engines'
    (``configs``, and ``engine_meta`` of those that started), each test's own (``tests``,
    ``constants_of_test``) and the salt of its prompts."""
    models = sorted({str(m.get("model")) for m in engine_meta.values() if m.get("model")})
    precision = sorted(
        {str(c.quantization or c.dtype) for c in configs.values() if c.quantization or c.dtype}
    )
    per_engine = per_engine_constants(d, configs, engine_meta)
    # The machine of the load generator: information, not a constant of the measurement
    # (a baseline from a laptop pairs with a CI runner's run of the same engine).
    client = {
        "machine": platform.machine(),
        "system": platform.system(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    return {
        "harness": "pytest-llmslo",
        "harness_version": __version__,
        "model": d.model or (models[0] if len(models) == 1 else ",".join(models)),
        "precision": ",".join(precision) or None,
        # Per engine (the pinned values are in per_engine; these say the same at a glance).
        "hardware": {name: c["hardware"] for name, c in per_engine.items()},
        "per_engine": per_engine,
        "client": client,
        # The session's defaults, as a test's own (constants_of_test).
        **constants_of_test(d, salt),
        "engines": list(engines),
        "engine_versions": {n: m.get("version") for n, m in engine_meta.items()},
        "tests": tests,
    }
