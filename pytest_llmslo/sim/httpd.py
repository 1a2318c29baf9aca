"""A lean HTTP/1.1 server on asyncio Protocols, enough for an OpenAI-compatible API.

It parses requests with ``Content-Length`` bodies, keeps connections alive (HTTP/1.1
default, ``Connection: close`` honoured), and answers either with a full body
(``Content-Length``) or a stream: chunked transfer encoding for HTTP/1.1 clients,
close-delimited for HTTP/1.0 ones. A handler coroutine runs per request; streamed data is
written straight to the transport from wherever it is produced (the engine loop), so the
time a token is written is the time it leaves the process.

A client that goes away is noticed at once: end-of-file from the peer closes the
connection (``eof_received`` returns False) and every ``on_close`` callback runs, which is
how the engine drops the client's request and frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

log = logging.getLogger("pytest_llmslo.sim")

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
# A client that stops reading while its stream is produced gets cut off past this.
MAX_WRITE_BUFFER = 16 * 1024 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case."""

    method: str
    path: str
    query: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


Handler = Callable[[HttpRequest, "HttpConnection"], Awaitable[None]]


class HttpConnection(asyncio.Protocol):
    """One client connection; requests on it are handled one at a time."""

    def __init__(self, handler: Handler, connections: set[HttpConnection]) -> None:
        self._handler = handler
        self._connections = connections
        self._buf = bytearray()
        self._task: asyncio.Task[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.on_close: list[Callable[[], None]] = []
        self._keep_alive = True
        self._chunked = False
        self._continued = False
        self._head_only = False
        self.headers_sent = False

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream server's transport
        self._connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._task is None:
            self._next_request()

    def eof_received(self) -> bool:
        # The peer is gone (or half-closed, which no HTTP client does mid-request): close.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._connections.discard(self)
        callbacks, self.on_close = self.on_close, []
        for cb in callbacks:
            try:
                cb()
            except Exception:  # a failing callback must not stop the others
                log.exception("on_close callback failed")

    # -- parsing ---------------------------------------------------------------------------

    def _next_request(self) -> None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD_BYTES:
                self._fail(431, "request head too large")
            return
        try:
            head = bytes(buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise ValueError(f"bad header line {line!r}")
                headers[name.strip().lower()] = value.strip()
            if not version.startswith("HTTP/1."):
                raise ValueError(f"unsupported version {version!r}")
        except ValueError:
            self._fail(400, "malformed request head")
            return
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._fail(411, "chunked request bodies are not supported; send Content-Length")
            return
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            self._fail(400, "bad Content-Length")
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self._fail(413, "request body too large")
            return
        start = end + 4
        if len(buf) < start + length:
            # curl sends "Expect: 100-continue" for bodies over 1 KiB and waits a second
            # for this answer before sending the body; answer at once.
            if "100-continue" in headers.get("expect", "").lower() and not self._continued:
                self._continued = True
                if self.transport is not None:
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return
        self._continued = False
        body = bytes(buf[start : start + length])
        del buf[: start + length]
        path, _, query = target.partition("?")
        req = HttpRequest(method.upper(), path, query, version, headers, body)
        self._keep_alive = req.keep_alive
        self._head_only = req.method == "HEAD"
        self._chunked = False
        self.headers_sent = False
        self._task = asyncio.get_running_loop().create_task(self._run(req))

    async def _run(self, req: HttpRequest) -> None:
        try:
            await self._handler(req, self)
        except asyncio.CancelledError:
            self.close()
            raise
        except Exception:
            log.exception("handler failed for %s %s", req.method, req.path)
            if not self.headers_sent and not self.closed:
                self.send_json(
                    500,
                    {
                        "error": {
                            "message": "internal error",
                            "type": "InternalServerError",
                            "param": None,
                            "code": 500,
                        }
                    },
                )
            self._keep_alive = False
        finally:
            self._task = None
        if self.closed:
            return
        if not self._keep_alive:
            self.close()
        elif self._buf:
            self._next_request()

    def _fail(self, status: int, message: str) -> None:
        self._keep_alive = False
        self.send_json(
            status,
            {
                "error": {
                    "message": message,
                    "type": "BadRequestError",
                    "param": None,
                    "code": status,
                }
            },
        )
        self.close()

    # -- responses ---------------------------------------------------------------------------

    def _head(self, status: int, headers: Iterable[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}"]
        lines.extend(f"{k}: {v}" for k, v in headers)
        lines.append("Connection: keep-alive" if self._keep_alive else "Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """A complete response with a ``Content-Length`` body."""
        if self.closed or self.transport is None:
            return
        hs = [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers]
        self.headers_sent = True
        self.transport.write(self._head(status, hs) + (b"" if self._head_only else body))

    def send_json(self, status: int, obj: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        self.send(status, json.dumps(obj, separators=(",", ":")).encode(), headers=headers)

    def start_stream(self, status: int = 200, content_type: str = "text/event-stream") -> None:
        """Send the head of a streamed response; ``write_chunk`` sends the body."""
        if self.closed or self.transport is None:
            return
        hs = [("Content-Type", content_type), ("Cache-Control", "no-cache")]
        if self._keep_alive:
            self._chunked = True
            hs.append(("Transfer-Encoding", "chunked"))
        self.headers_sent = True
        self.transport.write(self._head(status, hs))

    def write_chunk(self, data: bytes) -> bool:
        """Write one piece of a streamed body now; False once the client is gone."""
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return False
        if t.get_write_buffer_size() > MAX_WRITE_BUFFER:
            log.warning("client stopped reading; closing its connection")
            self.close()
            return False
        if self._chunked:
            t.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            t.write(data)
        return True

    def end_stream(self) -> None:
        """Finish a streamed body (the terminating chunk, or closing the connection)."""
        t = self.transport
        if self.closed or t is None or t.is_closing():
            return
        if self._chunked:
            t.write(b"0\r\n\r\n")
        else:
            self._keep_alive = False

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class HttpServer:
    """Serves ``handler`` on ``host:port`` (port 0 picks a free one)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[HttpConnection] = set()

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: HttpConnection(self._handler, self.connections),
            host,
            port,
            reuse_address=True,
            backlog=1024,
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
