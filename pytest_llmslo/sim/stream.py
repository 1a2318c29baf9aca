"""One request's output from the sim engine: SSE chunks written to its connection as its
tokens are emitted (vLLM's chunks, usage as ``stream_options`` asks), or one JSON response."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from .answerer import Answer, Answerer
from .httpd import HttpConnection
from .requestbody import ApiError
from .scheduler import SimRequest
from .tokens import output_piece, output_piece_json

__all__ = ["Stream", "StreamShape"]

_ROLE_CHOICE = (
    b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
)


@dataclass(frozen=True, slots=True)
class StreamShape:
    """How a request's output is written: chat or text chunks, the model it names, streamed
    or whole, and the usage it carries (``stream_options``)."""

    chat: bool
    model: str
    stream: bool
    include_usage: bool = False
    continuous_usage: bool = False


class Stream:
    """One request's output: SSE chunks written to its connection as tokens are emitted,
    or collected for a single JSON response."""

    def __init__(
        self,
        conn: HttpConnection,
        req: SimRequest,
        shape: StreamShape,
        *,
        seed: int,
        answer: tuple[Answerer, Answer] | None = None,
    ) -> None:
        self.conn = conn
        #: An eval item's answer, said as the first output token (``answerer.py``).
        self.answer = answer
        self.req = req
        self.chat = chat = shape.chat
        self.model = model = shape.model
        self.stream = shape.stream
        self.include_usage = shape.include_usage
        self.continuous_usage = shape.continuous_usage
        self.seed = seed
        self.created = int(time.time())
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pieces: list[str] = []
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = (
            f'{{"id":"{req.rid}","object":"{obj}","created":{self.created},'
            f'"model":{json.dumps(model)},"choices":'
        )
        self._head = head.encode()
        # The bytes around a token's JSON string, built once per request: the hot path
        # (every token of every stream) only joins three byte strings.
        pre = b"data: " + self._head
        if chat:
            self._pre = pre + b'[{"index":0,"delta":{"content":'
            self._post = b'},"logprobs":null,"finish_reason":null}]'
            self._post_last = b'},"logprobs":null,"finish_reason":"length"}]'
        else:
            self._pre = pre + b'[{"index":0,"text":'
            self._post = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]'
            self._post_last = b',"logprobs":null,"finish_reason":"length","stop_reason":null}]'

    def _usage(self, completion: int) -> str:
        p = self.req.prompt_tokens
        return (
            f'{{"prompt_tokens":{p},"total_tokens":{p + completion},'
            f'"completion_tokens":{completion}}}'
        )

    def emit(self, index: int, last: bool) -> bool:
        """Write output token ``index``; False when the client is gone."""
        said = None
        if index == 0 and self.answer is not None:
            said = self.answer[0].say(self.answer[1], self.req)
        if not self.stream:
            self.pieces.append(output_piece(self.seed, index) if said is None else said)
            if last:
                self._finish_full()
            return True
        piece = output_piece_json(self.seed, index) if said is None else json.dumps(said).encode()
        parts = [self._pre, piece]
        parts.append(self._post_last if last else self._post)
        if self.continuous_usage:
            parts.append(b',"usage":' + self._usage(index + 1).encode())
        parts.append(b"}\n\n")
        if index == 0 and self.chat:
            parts.insert(0, b"data: " + self._head + _ROLE_CHOICE + b"}\n\n")
        if last:
            if self.include_usage:
                parts.append(b"data: " + self._head + b'[],"usage":')
                parts.append(self._usage(index + 1).encode() + b"}\n\n")
            parts.append(b"data: [DONE]\n\n")
        ok = self.conn.write_chunk(b"".join(parts))
        if last and ok:
            self.conn.end_stream()
        if last and not self.done.done():
            self.done.set_result(None)
        return ok

    def _finish_full(self) -> None:
        text = "".join(self.pieces)
        n = len(self.pieces)
        usage = json.loads(self._usage(n))
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
            obj = "text_completion"
        self.conn.send_json(
            200,
            {
                "id": self.req.rid,
                "object": obj,
                "created": self.created,
                "model": self.model,
                "choices": [choice],
                "usage": usage,
            },
        )
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, message: str) -> None:
        """End the request with a server error: an error event then ``[DONE]`` in a stream
        (its 200 head is already out), else a 500 response."""
        if self.done.done():
            return
        err = ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, message, "InternalServerError")
        if self.stream:
            body = json.dumps(err.body(), separators=(",", ":")).encode()
            if self.conn.write_chunk(b"data: " + body + b"\n\ndata: [DONE]\n\n"):
                self.conn.end_stream()
        else:
            self.conn.send_json(err.status, err.body())
        self.done.set_result(None)

    def cancel(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
