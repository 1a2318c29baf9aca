"""How each engine says it is ready, and where it tells its version.

A check is ``check(client, base_url) -> None`` when ready, or a short string saying what
is still missing (shown when the start times out). Checks never raise for connection
errors: an engine that is still loading refuses connections. Every request is bounded as a
whole (``probe.fetch``: the client's read timeout for the exchange, a bound on the body),
so a server that answers without end cannot hold a check.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from ..probe import fetch

ReadyCheck = Callable[[httpx.Client, str], "str | None"]
VersionProbe = Callable[[httpx.Client, str], "str | None"]


#: Model ids a message lists before it says how many more there are.
_LISTED = 8


def get(client: httpx.Client, url: str) -> httpx.Response | str:
    """``GET url``, bounded (``probe.fetch``), or what went wrong as text."""
    try:
        return fetch(client, url)
    except httpx.HTTPError as exc:
        return f"GET {url}: {type(exc).__name__}: {error_text(exc)}"


def error_text(exc: BaseException) -> str:
    """An exception's message, or its cause's when its own is empty (httpx wraps a failed
    TLS handshake in a ConnectError without text), with what to do for a certificate."""
    from ..tls import certificate_hint

    cur: BaseException | None = exc
    seen: set[int] = set()
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur).strip()
        if text:
            return certificate_hint(text)
        cur = cur.__cause__ or cur.__context__
    return type(exc).__name__


def http_ok(path: str) -> ReadyCheck:
    """Ready when ``GET path`` answers 2xx."""

    def check(client: httpx.Client, base_url: str) -> str | None:
        r = get(client, base_url + path)
        if isinstance(r, str):
            return r
        if r.is_success:
            return None
        return f"GET {path}: HTTP {r.status_code}"

    return check


def model_ids(payload: Any) -> list[str]:
    """The model ids of an OpenAI ``/v1/models`` answer."""
    if not isinstance(payload, dict):
        return []
    data = payload.get("data")
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def models_listed(model: str | None = None) -> ReadyCheck:
    """Ready when ``/v1/models`` answers with at least one model (``model`` if given)."""

    def check(client: httpx.Client, base_url: str) -> str | None:
        r = get(client, base_url + "/v1/models")
        if isinstance(r, str):
            return r
        if not r.is_success:
            return f"GET /v1/models: HTTP {r.status_code}"
        try:
            ids = model_ids(r.json())
        except ValueError:
            return "GET /v1/models: not JSON"
        if not ids:
            return "GET /v1/models lists no model (yet)"
        if model and model not in ids:
            return f"GET /v1/models lists {listed(ids)}; --model {model} is not one of them"
        return None

    return check


def listed(ids: Sequence[str]) -> str:
    """Model ids for a message: the first few, and how many there are in all."""
    head = ", ".join(ids[:_LISTED])
    return head if len(ids) <= _LISTED else f"{head}, ... ({len(ids)} models)"


def health_body_healthy(path: str = "/health") -> ReadyCheck:
    """Ready when ``path`` answers 200 *and* its JSON body does not say unhealthy.

    Dynamo's frontend answers 200 with ``{"status": "unhealthy", ...}`` until a worker
    has registered, so the status code alone says nothing.
    """

    def check(client: httpx.Client, base_url: str) -> str | None:
        r = get(client, base_url + path)
        if isinstance(r, str):
            return r
        if not r.is_success:
            return f"GET {path}: HTTP {r.status_code}"
        try:
            body = r.json()
        except ValueError:
            body = r.text
        status = body.get("status") if isinstance(body, dict) else body
        text = json.dumps(status) if not isinstance(status, str) else status
        if "unhealthy" in text.lower() or "not ready" in text.lower():
            return f"GET {path}: {text[:200]}"
        return None

    return check


def all_of(*checks: ReadyCheck) -> ReadyCheck:
    """Ready when every check is; reports the first that is not."""

    def check(client: httpx.Client, base_url: str) -> str | None:
        for c in checks:
            reason = c(client, base_url)
            if reason is not None:
                return reason
        return None

    return check


def version_from_json(path: str, keys: Sequence[str] = ("version",)) -> VersionProbe:
    """The first of ``keys`` found in the JSON at ``path`` (nested dicts searched too)."""

    def probe(client: httpx.Client, base_url: str) -> str | None:
        r = get(client, base_url + path)
        if isinstance(r, str) or not r.is_success:
            return None
        try:
            body = r.json()
        except ValueError:
            text = r.text.strip()
            return text[:100] or None
        return _find_key(body, keys)

    return probe


def _find_key(body: Any, keys: Sequence[str]) -> str | None:
    if isinstance(body, dict):
        for k in keys:
            v = body.get(k)
            if isinstance(v, (str, int, float)) and str(v):
                return str(v)
        for v in body.values():
            found = _find_key(v, keys)
            if found:
                return found
    return None
