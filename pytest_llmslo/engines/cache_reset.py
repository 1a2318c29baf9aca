"""Emptying an engine's prefix cache between load levels, where the engine has a way.

An engine that stays up keeps the KV blocks of every prompt it computed: a later level
(or a second run) that sends the same prompts is served from the cache and measures a
TTFT no new prompt gets. Each kind's plan names the endpoints that empty it
(``LaunchPlan.cache_resets``), or why there is none (``LaunchPlan.no_cache_reset``):

- vLLM: ``POST /reset_prefix_cache`` (vllm/entrypoints/serve/cache/api_router.py, and
  ``api_server.py`` before it), mounted only when the server runs with
  ``VLLM_SERVER_DEV_MODE=1``, which the launcher sets; it answers 200 even when blocks
  were still in use (then nothing was reset, and the server logs it).
- SGLang: ``GET|POST /flush_cache`` (python/sglang/srt/entrypoints/http_server.py, v0.4
  onwards; the ``timeout`` query, seconds to wait until the engine is idle, since v0.5);
  HTTP 400 when requests were still running.
- Dynamo: ``POST /clear_kv_blocks`` on the frontend (lib/llm/src/http/service/
  clear_kv_blocks.rs), which asks every worker that serves a ``clear_kv_blocks``
  endpoint; it answers 200 with ``cleared_workers`` and ``failed_workers`` lists (or a
  ``message`` when no worker has one).
- TensorRT-LLM: ``trtllm-serve`` (1.x) has no such endpoint; block reuse is fixed at start
  (``kv_cache_config.enable_block_reuse``).
- the sim: ``POST /reset_prefix_cache`` as vLLM, answering ``{"success": ...}``.
- external: whichever of these the server answers, tried in that order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ..probe import fetch
from ..redact import redact
from .readiness import error_text


def _success_field(resp: httpx.Response) -> str | None:
    """Why the reset failed, when the JSON body says ``"success": false``."""
    try:
        body = resp.json()
    except ValueError:
        return None
    if isinstance(body, dict) and body.get("success") is False:
        return str(body.get("message") or "the engine answered success=false")[:200]
    return None


def _dynamo_result(resp: httpx.Response) -> str | None:
    try:
        body = resp.json()
    except ValueError:
        return "the frontend's answer is not JSON"
    if not isinstance(body, dict):
        return "the frontend's answer is not a JSON object"
    failed = body.get("failed_workers") or []
    cleared = body.get("cleared_workers") or []
    if failed:
        names = ", ".join(str(f.get("name", "?")) for f in failed if isinstance(f, dict))
        return f"workers failed to clear their blocks: {names or len(failed)}"
    if not cleared:
        return str(body.get("message") or "no worker cleared its blocks")[:200]
    return None


@dataclass(frozen=True, slots=True)
class CacheReset:
    """One endpoint that empties an engine's prefix cache. ``failed(response)`` reads a
    2xx answer for a failure the status does not tell (None: it worked)."""

    method: str
    path: str
    failed: Callable[[httpx.Response], str | None] = _success_field

    @property
    def label(self) -> str:
        return f"{self.method} {self.path.partition('?')[0]}"


VLLM = CacheReset("POST", "/reset_prefix_cache")
SGLANG = CacheReset("POST", "/flush_cache?timeout=30")
DYNAMO = CacheReset("POST", "/clear_kv_blocks", failed=_dynamo_result)
#: Tried in order on a server of unknown kind (``external``).
ANY = (VLLM, SGLANG, DYNAMO)
TRTLLM_CANNOT = (
    "trtllm-serve has no endpoint that empties its KV cache (block reuse is set when it "
    "starts: kv_cache_config.enable_block_reuse)"
)
#: The total deadline of one reset request (SGLang waits up to 30 s for idleness).
RESET_TIMEOUT_S = 40.0


def reset_cache(
    client: httpx.Client, base_url: str, resets: Sequence[CacheReset], cannot: str | None
) -> dict[str, Any]:
    """Try ``resets`` in order until one answers (a 404 or 405 means the server has not
    that endpoint: the next is tried). Returns ``{"reset": bool, "how": "POST /path"}``
    with ``"why"`` when nothing was reset."""
    if not resets:
        return {"reset": False, "why": cannot or "the engine has no way to empty its cache"}
    seen: list[str] = []
    for r in resets:
        try:
            resp = fetch(client, base_url + r.path, method=r.method, total_s=RESET_TIMEOUT_S)
        except httpx.HTTPError as exc:
            return {
                "reset": False,
                "how": r.label,
                "why": redact(f"{r.label}: {type(exc).__name__}: {error_text(exc)}"),
            }
        if resp.status_code in (404, 405):
            seen.append(f"{r.label}: HTTP {resp.status_code}")
            continue
        if not resp.is_success:
            body = redact(resp.text.strip()[:200])
            why = f"{r.label}: HTTP {resp.status_code}" + (f" ({body})" if body else "")
            return {"reset": False, "how": r.label, "why": why}
        failure = r.failed(resp)
        if failure is not None:
            return {"reset": False, "how": r.label, "why": redact(f"{r.label}: {failure}")}
        return {"reset": True, "how": r.label}
    return {"reset": False, "why": "no cache-reset endpoint answered (" + "; ".join(seen) + ")"}
