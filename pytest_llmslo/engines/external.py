"""An engine someone else runs: ``config.url`` points at an OpenAI-compatible server.

Nothing is started or stopped; readiness is ``/v1/models`` answering, and the model is
the first one it lists when the config names none. The server is already running, so
the wait is short: ``external_ready_timeout_s`` (60 s by default,
``--external-ready-timeout``), after which the start fails with what the last probe saw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..errors import ConfigError
from ..redact import redact_url, remember, url_password
from .base import EngineConfig
from .cache_reset import ANY
from .launchplan import LaunchPlan
from .readiness import get, model_ids, models_listed, version_from_json

OPTIONS: Mapping[str, str] = {}


def base_url_of(url: str) -> str:
    """``url`` without a trailing ``/`` or ``/v1`` (users paste either)."""
    u = url.strip().rstrip("/")
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    return u


def plan(config: EngineConfig) -> LaunchPlan:
    if not config.url:
        raise ConfigError(
            f"engine {config.display_name!r} (kind external) needs url= "
            '(e.g. url = "http://127.0.0.1:8000")'
        )
    base = base_url_of(config.url)
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"engine {config.display_name!r}: url={config.url!r} is not an http(s) URL"
        )
    remember(url_password(base))
    model = config.served_model_name or config.model
    return LaunchPlan(
        config=config,
        host=parts.hostname,
        port=parts.port or (443 if parts.scheme == "https" else 80),
        model=model,
        ready=models_listed(model or None),
        version_probe=version_from_json("/version"),
        meta={"url": redact_url(base)},
        url=base,
        on_ready=first_model(model),
        cache_resets=ANY,
    )


def first_model(model: str) -> Any:
    """The model to put in requests: ``model``, else the first ``/v1/models`` lists."""

    def pick(client: httpx.Client, base_url: str) -> str | None:
        if model:
            return model
        r = get(client, base_url + "/v1/models")
        if isinstance(r, str) or not r.is_success:
            return None
        try:
            ids = model_ids(r.json())
        except ValueError:
            return None
        return ids[0] if ids else None

    return pick
