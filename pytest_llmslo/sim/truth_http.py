"""The truth server's connections (``truth_server.py``): HTTP/1.1 keep-alive requests read
off the socket, each dated by when its bytes arrived, routed to the server, and the plain
JSON answers."""

from __future__ import annotations

import asyncio
import json
from time import perf_counter_ns
from typing import Any, Protocol, cast

from .. import stamped

__all__ = ["OpenStream", "TruthConnection", "TruthHandler"]


class OpenStream(Protocol):
    """A connection's stream in progress (``done`` once its last chunk is written)."""

    done: bool


class TruthHandler(Protocol):
    """What a connection asks of the server: a completion streamed or whole, the model's
    name, the lateness stats and their reset, and the count of open streams."""

    model: str
    active: int

    def start_stream(
        self, conn: TruthConnection, body: dict[str, Any], chat: bool, recv_ns: int
    ) -> None: ...

    def complete(
        self, conn: TruthConnection, body: dict[str, Any], chat: bool, recv_ns: int
    ) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def reset_all(self) -> None: ...


class TruthConnection(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection."""

    def __init__(self, server: TruthHandler) -> None:
        self.server = server
        self.transport: stamped.ConnectionTransport | None = None
        self.buf = b""
        self.stream: OpenStream | None = None
        self.busy = False
        self.read_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport | stamped.StampedSocket) -> None:
        # A stream connection's transport: asyncio's (a Transport) or a StampedSocket.
        self.transport = cast(stamped.ConnectionTransport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        s = self.stream
        if s is not None and not s.done:
            s.done = True
            self.server.active -= 1
        self.stream = None
        self.transport = None

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def stream_done(self) -> None:
        self.stream = None
        self.busy = False
        if self.buf:
            asyncio.get_running_loop().call_soon(self._process)

    def data_received(self, data: bytes) -> None:
        self.received(data, perf_counter_ns())

    def received(self, data: bytes, ts: int) -> None:
        """``data`` arrived at ``ts``: the kernel's receive stamp where the socket gives one
        (``stamped.py``), so a request's clock starts when it reached this host, not when
        this process got round to reading it (which is the server's own lateness)."""
        self.read_ns = ts
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.busy and self.buf:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                if len(self.buf) > 65536:
                    self.respond(431, b'{"error":"header too large"}')
                return
            head = self.buf[:i]
            lines = head.split(b"\r\n")
            parts = lines[0].split()
            if len(parts) < 2:
                self.respond(400, b'{"error":"bad request line"}', close=True)
                return
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        self.respond(400, b'{"error":"bad content-length"}', close=True)
                        return
            if len(self.buf) < i + 4 + length:
                return
            body = self.buf[i + 4 : i + 4 + length]
            self.buf = self.buf[i + 4 + length :]
            self._handle(parts[0], parts[1], body, self.read_ns)

    def respond(
        self,
        status: int,
        payload: bytes,
        content_type: str = "application/json",
        close: bool = False,
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 431: "Too Large"}.get(
            status, "Error"
        )
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        ).encode()
        self.write(head + payload)
        self.busy = False
        if close and self.transport is not None:
            self.transport.close()
        elif self.buf:
            asyncio.get_running_loop().call_soon(self._process)

    def _handle(self, method: bytes, target: bytes, body: bytes, recv_ns: int) -> None:
        srv = self.server
        path = target.split(b"?", 1)[0]
        self.busy = True
        if method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            try:
                req = json.loads(body) if body else {}
            except ValueError:
                self.respond(400, b'{"error":{"message":"body is not JSON","code":400}}')
                return
            if not isinstance(req, dict):
                self.respond(400, b'{"error":{"message":"body is not an object","code":400}}')
                return
            chat = path == b"/v1/chat/completions"
            if req.get("stream"):
                srv.start_stream(self, req, chat, recv_ns)
            else:
                srv.complete(self, req, chat, recv_ns)
        elif path == b"/health":
            self.respond(200, b'{"status":"ok"}')
        elif path == b"/v1/models":
            self.respond(
                200,
                json.dumps(
                    {"object": "list", "data": [{"id": srv.model, "object": "model"}]}
                ).encode(),
            )
        elif path == b"/stats" and method == b"GET":
            self.respond(200, json.dumps(srv.stats()).encode())
        elif path == b"/stats/reset" and method == b"POST":
            srv.reset_all()
            self.respond(200, b'{"reset":true}')
        else:
            self.respond(404, b'{"error":{"message":"not found","code":404}}')
