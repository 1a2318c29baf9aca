"""A completion request's body as the sim engine reads it: checked as vLLM's OpenAI server
checks it (the same errors, ``ApiError``), into a typed ``CompletionRequest``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from .tokens import chat_tokens, completion_tokens

__all__ = ["DEFAULT_COMPLETION_MAX_TOKENS", "ApiError", "CompletionRequest", "read_completion"]

DEFAULT_COMPLETION_MAX_TOKENS = 16  # vLLM's (and the legacy OpenAI API's) default


class ApiError(Exception):
    """An error answered as vLLM answers it."""

    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """A checked ``/v1/completions`` or ``/v1/chat/completions`` body: its prompt's tokens,
    how its output is to be written and how long it may be."""

    chat: bool
    body: dict[str, Any]
    tokens: list[str]
    stream: bool
    include_usage: bool
    continuous_usage: bool
    max_tokens: int

    @property
    def model(self) -> str | None:
        """The model (or adapter) the body names, None when it names none."""
        model = self.body.get("model")
        return None if model is None else str(model)


def read_completion(
    raw: bytes, *, chat: bool, models: tuple[str, ...], max_model_len: int
) -> CompletionRequest:
    """The checked request in ``raw``; ``models`` are the names served (the model first,
    then its adapters). ``ApiError`` says what is wrong, as vLLM says it."""
    body, tokens = _body_and_tokens(raw, chat, models)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream: Input should be a valid boolean", param="stream")
    opts = _stream_options(body, stream)
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "n: only n=1 is supported by the sim engine", param="n")
    return CompletionRequest(
        chat=chat,
        body=body,
        tokens=tokens,
        stream=stream,
        include_usage=bool(opts.get("include_usage")),
        continuous_usage=bool(opts.get("continuous_usage_stats")),
        max_tokens=_max_tokens(body, chat, len(tokens), max_model_len),
    )


def _int_field(body: Mapping[str, Any], name: str) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(400, f"{name}: Input should be a valid integer", param=name)
    return v


def _body_and_tokens(
    raw: bytes, chat: bool, models: tuple[str, ...]
) -> tuple[dict[str, Any], list[str]]:
    """The JSON object of the body and its prompt's tokens (messages or prompt)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"JSON decode error: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "Input should be a valid dictionary or object to extract fields from")
    model = body.get("model")
    if model is not None and model not in models:
        raise ApiError(
            HTTPStatus.NOT_FOUND,
            f"The model `{model}` does not exist.",
            "NotFoundError",
            "model",
        )
    return body, _chat_tokens(body) if chat else _prompt_tokens(body)


def _chat_tokens(body: Mapping[str, Any]) -> list[str]:
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "messages: Field required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: Input should be a non-empty list", param="messages")
    if not all(isinstance(m, dict) for m in messages):
        raise ApiError(400, "messages: each message should be an object", param="messages")
    return chat_tokens(messages)


def _prompt_tokens(body: Mapping[str, Any]) -> list[str]:
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError(400, "prompt: Field required", param="prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, str) for t in prompt):
        raise ApiError(400, "batched prompts are not supported by the sim engine", param="prompt")
    if not isinstance(prompt, (str, list)) or (isinstance(prompt, str) and not prompt):
        raise ApiError(400, "prompt: Input should be a non-empty string", param="prompt")
    return completion_tokens(prompt)


def _stream_options(body: Mapping[str, Any], stream: bool) -> Mapping[str, Any]:
    opts = body.get("stream_options")
    if opts is not None and not stream:
        raise ApiError(
            400,
            "Stream options can only be defined when `stream=True`.",
            param="stream_options",
        )
    if opts is not None and not isinstance(opts, dict):
        raise ApiError(400, "stream_options: Input should be an object", param="stream_options")
    return opts or {}


def _max_tokens(body: Mapping[str, Any], chat: bool, n_prompt: int, max_model_len: int) -> int:
    """The output tokens asked for (or what the context leaves), checked against the
    context length and ``min_tokens``."""
    max_tokens = _int_field(body, "max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens")
    min_tokens = _int_field(body, "min_tokens") or 0
    if n_prompt >= max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, "
            f"your request has {n_prompt} input tokens. Please reduce the length of the "
            "input messages.",
            param="messages" if chat else "prompt",
        )
    if max_tokens is None:
        remaining = max_model_len - n_prompt
        max_tokens = remaining if chat else min(DEFAULT_COMPLETION_MAX_TOKENS, remaining)
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    if min_tokens < 0 or min_tokens > max_tokens:
        raise ApiError(
            400,
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            param="min_tokens",
        )
    if n_prompt + max_tokens > max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, "
            f"you requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages "
            "or completion.",
            param="max_tokens",
        )
    return max_tokens
