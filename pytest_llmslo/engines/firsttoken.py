"""The last phase of a start: one real streamed completion, timed to its first token.

A health endpoint that answers and a model that is listed do not make an engine that
serves (a probe passing during CUDA-graph warm-up is the classic case), so a start ends
with one request as the load will send it: ``POST /v1/chat/completions`` with
``stream: true``, a short prompt and a few output tokens. The first token is the first
chunk that carries output (content, reasoning, text or token ids). An engine that serves
no chat template answers the chat endpoint 4xx; then ``/v1/completions`` is asked.

``first_token(client, base_url, model, deadline)`` returns what was asked and the seconds
to the first token, or raises ``FirstTokenError`` saying what the engine answered. A stream
that ends without any output is tried again (the Dynamo mocker streams no text for about
one completion in 300), up to ``ATTEMPTS`` times.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

__all__ = ["ATTEMPTS", "MAX_TOKENS", "FirstTokenError", "first_token"]

#: Output tokens asked for: enough for a stream, few enough to cost nothing.
MAX_TOKENS = 8
#: Streams without output tried before the start fails.
ATTEMPTS = 3
_PROMPT = "Say hello."
_OUTPUT_KEYS = ("content", "reasoning_content", "reasoning", "text", "token_ids")


class FirstTokenError(Exception):
    """The engine did not stream a first token: the message says what it answered."""


def _has_output(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    for part in (choice.get("delta"), choice):
        if isinstance(part, dict) and any(part.get(k) for k in _OUTPUT_KEYS):
            return True
    return False


def _body(path: str, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": MAX_TOKENS, "stream": True}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": _PROMPT}]
    else:
        body["prompt"] = _PROMPT
    return body


def _stream(client: httpx.Client, url: str, body: dict[str, Any], deadline: float) -> str | float:
    """Seconds to the first output chunk, or what the engine did instead (text)."""
    sent = time.monotonic()
    left = max(deadline - sent, 0.05)
    timeout = httpx.Timeout(min(left, 30.0), connect=min(left, 5.0))
    with client.stream("POST", url, json=body, timeout=timeout) as resp:
        if not resp.is_success:
            text = resp.read()[:300].decode("utf-8", errors="replace").strip()
            return f"HTTP {resp.status_code}" + (f": {text}" if text else "")
        chunks = 0
        for line in resp.iter_lines():
            if time.monotonic() > deadline:
                return f"no token within the start's deadline ({chunks} chunks without output)"
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                return f"a chunk that is not JSON: {data[:120]!r}"
            if isinstance(event, dict) and event.get("error"):
                return f"an error event: {json.dumps(event['error'])[:200]}"
            chunks += 1
            choices = event.get("choices") if isinstance(event, dict) else None
            if isinstance(choices, list) and any(_has_output(c) for c in choices):
                return time.monotonic() - sent
        return f"the stream ended without output ({chunks} chunks)"


def first_token(
    client: httpx.Client, base_url: str, model: str, deadline: float
) -> tuple[dict[str, Any], float]:
    """One streamed completion of ``model``: ``({"endpoint", "max_tokens", "ttft_s",
    "attempts"}, seconds to its first token)``. ``deadline`` is a ``time.monotonic()``
    bound over every attempt. Raises ``FirstTokenError``."""
    paths = ["/v1/chat/completions", "/v1/completions"]
    why = "not tried"
    attempt = 0
    while attempt < ATTEMPTS and time.monotonic() < deadline:
        attempt += 1
        path = paths[0]
        try:
            got = _stream(client, base_url + path, _body(path, model), deadline)
        except httpx.HTTPError as exc:
            got = f"{type(exc).__name__}: {str(exc).strip() or type(exc).__name__}"
        if isinstance(got, float):
            return {
                "endpoint": path,
                "max_tokens": MAX_TOKENS,
                "ttft_s": round(got, 4),
                "attempts": attempt,
            }, got
        why = f"POST {path}: {got}"
        if got.startswith(("HTTP 400", "HTTP 404", "HTTP 405", "HTTP 422")) and len(paths) > 1:
            paths.pop(0)  # no chat template (or no chat route): the plain completions
            attempt -= 1
            continue
        if "ended without output" not in got:
            break
    raise FirstTokenError(why)
