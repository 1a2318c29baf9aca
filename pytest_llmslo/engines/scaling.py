"""Capacity added to a running engine in the middle of a level: what a test asks
(``ScaleUp``: when, to how many replicas) and how each engine grows (``add_capacity``).

- the **sim** (any runtime): ``POST /admin/replicas`` (``sim/admin.py``): a replica that
  takes requests ``startup_s`` later (its simulated cold start); the sim logs when it came
  up;
- **Dynamo** as processes (aggregated): one more worker process, started next to the
  running ones, registering through their discovery directory (``dynamo.extra_worker``);
- a **Kubernetes** Deployment: the runtime scales it (``scale(replicas)``: the started
  unit's, else the runtime's; ``runtimes/runtime.Scalable``).

A test asks with the ``scale_up`` setting (marker keyword, ``--slo-scale-up``):
``"at=50%"``, ``"at=20s,replicas=3,startup_s=2,window=3s,share=90%"``, or a dict of the
same keys. ``at`` is a point of the level (``levelpoint``); ``replicas`` the total
wanted (one more by default); ``window`` and ``share`` define when the new capacity
shows in goodput (``metrics.timetocapacity``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..levelpoint import LevelPoint, parse_level_point
from .base import EngineHandle
from .managed import StartedHere
from .runtimes.runtime import Scalable

__all__ = ["ScaleUp", "add_capacity", "parse_scale_up"]

_KEYS = ("at", "replicas", "startup_s", "window", "share")


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """Add capacity ``at`` a point of each level: to ``replicas`` in all (None: one more),
    a sim replica taking ``startup_s`` to come up; the new capacity shows in goodput from
    the first second that starts ``window_s`` seconds of goodput at ``share`` of the new
    steady state or more."""

    at: LevelPoint
    replicas: int | None = None
    startup_s: float = 0.0
    window_s: float = 3.0
    share: float = 0.9

    def __post_init__(self) -> None:
        if self.replicas is not None and self.replicas < 2:
            raise ValueError(f"replicas is the total after the scale-up: >= 2, got {self.replicas}")
        if not (math.isfinite(self.startup_s) and self.startup_s >= 0):
            raise ValueError(f"startup_s must be >= 0, got {self.startup_s}")
        if not self.window_s >= 1:
            raise ValueError(
                f"window must be at least 1 s (the series is per second), got {self.window_s}"
            )
        if not 0 < self.share <= 1:
            raise ValueError(f"share must be in (0 %, 100 %], got {self.share}")

    @property
    def label(self) -> str:
        to = f"to {self.replicas} replicas" if self.replicas else "one replica more"
        return f"scale-up at {self.at.label}, {to}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.label,
            "replicas": self.replicas,
            "startup_s": self.startup_s,
            "window_s": self.window_s,
            "share": self.share,
        }


def _seconds(text: str) -> float:
    text = text.strip()
    return float(text[:-1]) if text.endswith("s") else float(text)


def _share(text: str) -> float:
    text = text.strip()
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


def parse_scale_up(value: Any) -> ScaleUp | None:
    """A ``ScaleUp`` from the setting's text or dict (module docstring); None for
    ``None``, ``""``, ``"off"``. ``ValueError`` says what is wrong and what is accepted."""
    if value is None or isinstance(value, ScaleUp):
        return value
    if isinstance(value, str) and value.strip().lower() in ("", "off", "none", "false"):
        return None
    if isinstance(value, Mapping):
        items = {str(k): v for k, v in value.items()}
    else:
        text = str(value).strip()
        if "=" not in text:
            text = f"at={text}"
        items = {}
        for part in text.split(","):
            key, sep, val = part.partition("=")
            if not sep:
                raise ValueError(f"scale_up: {part!r} is not key=value")
            items[key.strip()] = val.strip()
    unknown = sorted(set(items) - set(_KEYS))
    if unknown or "at" not in items:
        raise ValueError(
            f"scale_up: {'unknown key(s) ' + ', '.join(unknown) if unknown else 'at= missing'}; "
            "give at=<time or share of the level>[,replicas=N][,startup_s=S][,window=3s]"
            "[,share=90%], e.g. 'at=50%,replicas=2'"
        )
    try:
        return ScaleUp(
            at=parse_level_point(items["at"], "scale_up at"),
            replicas=None if items.get("replicas") in (None, "") else int(items["replicas"]),
            startup_s=_seconds(str(items.get("startup_s", 0))),
            window_s=_seconds(str(items.get("window", 3))),
            share=_share(str(items.get("share", 0.9))),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scale_up: {exc}") from None


def add_capacity(handle: EngineHandle, spec: ScaleUp, timeout_s: float = 30.0) -> dict[str, Any]:
    """Grow the running engine ``handle`` as ``spec`` asks (module docstring); what was
    done, as JSON data. ``ConfigError`` when its kind and runtime cannot grow running."""
    config = handle.config
    if config.kind == "sim":
        return _sim(handle, spec, timeout_s)
    if config.kind == "dynamo" and config.runtime == "process":
        return _dynamo_worker(handle, spec)
    # Its started units first (a Deployment that scales itself), then its runtime; an
    # engine not started here has neither.
    targets: tuple[object, ...] = ()
    if isinstance(handle, StartedHere):
        targets = (*handle.units, handle.runtime)
    for target in targets:
        if isinstance(target, Scalable):
            replicas = spec.replicas or int(getattr(target, "replicas", 1) or 1) + 1
            target.scale(replicas)
            return {"how": f"{config.runtime} scale", "replicas": replicas}
    raise ConfigError(
        f"engine {config.display_name!r} ({config.kind}, {config.runtime}) cannot add capacity "
        "while it runs: scale_up works on the sim, Dynamo as processes and engines on "
        "kubernetes"
    )


def _sim(handle: Any, spec: ScaleUp, timeout_s: float) -> dict[str, Any]:
    body: dict[str, Any] = {"startup_s": spec.startup_s}
    if spec.replicas:
        body["replicas"] = spec.replicas
    else:
        body["add"] = 1
    import httpx

    from ..sim.admintoken import admin_headers

    url = handle.base_url + "/admin/replicas"
    with httpx.Client(timeout=timeout_s, trust_env=False) as client:
        resp = client.post(url, json=body, headers=admin_headers())
    if not resp.is_success:
        raise ConfigError(
            f"POST /admin/replicas answered HTTP {resp.status_code}: {resp.text[:300]}"
        )
    answer = resp.json()
    return {"how": "POST /admin/replicas", "asked": body, "answer": answer}


def _dynamo_worker(handle: Any, spec: ScaleUp) -> dict[str, Any]:
    from pathlib import Path

    from . import dynamo
    from .runtimes.process import ManagedProcess

    # Any: a process unit's spec (its role, its log) is read where it has one.
    units: list[Any] = list(handle.units) if isinstance(handle, StartedHere) else []
    workers = sum(1 for u in units if getattr(u, "spec", None) and u.spec.role != "frontend")
    wanted = spec.replicas or workers + 1
    if wanted != workers + 1:
        raise ConfigError(
            f"scale_up replicas={wanted}: Dynamo as processes adds one worker at a time "
            f"({workers} running)"
        )
    unit, temp_dirs = dynamo.extra_worker(handle.plan, wanted)
    log_dir = Path(units[0].log_path).parent if units else None
    role = f"{unit.role}-scaled"
    started = ManagedProcess(unit, None if log_dir is None else log_dir / f"{role}.log")
    handle.add_unit(started, temp_dirs)
    return {
        "how": "one more Dynamo worker process",
        "replicas": wanted,
        "worker": unit.role,
        "spawned_unix": round(time.time(), 3),
    }
