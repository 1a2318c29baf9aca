"""A lean HTTP/1.1 streaming client on asyncio Protocols (the fast path).

Why not only httpx: a plain httpx ``aiter_lines`` loop saturates a core at about 170
streamed requests/s of 100 chunks here, far below what one engine can serve. This client
does per read only what a measurement needs: take the read's time, strip the chunked
transfer framing, append ``(time, bytes)``. No per-chunk future, task, timer or string.

- A read's time, over plain TCP on Linux, is when the *kernel* received its bytes
  (``stamped.py``), not when the process got round to reading them: a client that is
  descheduled for 30 ms on a busy machine, or busy with 200 other streams' reads, still
  dates each chunk when it arrived. When several chunks arrived while the client was
  away, one read returns them all under the stamp of the last; those are the only stamps
  a stall can still move, and ``health.stalled_tokens`` counts them. TLS connections
  (whose bytes the ssl module decrypts) and other platforms take ``perf_counter_ns()`` at
  the read, as ``receive_stamps="read"`` does everywhere.

- Keep-alive connection pool (LIFO), one request per connection at a time, a stale idle
  connection closed by the server is retried once on a fresh one.
- The deadlines of ``deadlines.py`` (connect, first byte, idle, total), checked by one
  sweeper task rather than a timer per read. A read whose payload starts with ``:`` (an
  SSE comment, a keep-alive) is not data for them.
- Failures become ``RawExchange.kind``: ``connect``, ``timeout``, ``reset`` (connection
  reset, or closed before the HTTP body was complete), ``malformed`` (not HTTP). A failed
  exchange ends when the failure was detected (the deadline passed, the reset arrived),
  as with httpx: dated at its last data instead, the wait for the failure would count as
  the client's turnaround in a closed loop and blame the client for the server's stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Mapping
from time import perf_counter_ns
from typing import Literal, cast
from urllib.parse import urlsplit

from .. import stamped
from ..tls import certificate_hint
from .client import MAX_ERROR_BODY, ClientSettings, RawExchange, request_headers

_MAX_HEAD = 64 * 1024
# A 2xx body whose last event is ``data: [DONE]``: the stream is over (as a client library
# stops there), whether or not the server ends the HTTP body after it.
_DONE_TAILS = (b"[DONE]\n\n", b"[DONE]\r\n\r\n")
_DONE_FRAMES = tuple(t + b"\r\n" for t in _DONE_TAILS)  # ... as one whole chunk of a read
# How long a connection whose stream ended with [DONE] waits for the end of its body (the
# last chunk) before it is closed instead of reused.
_DRAIN_S = 1.0

_IDLE, _HEAD, _CHUNKED, _LENGTH, _UNTIL_CLOSE = 0, 1, 2, 3, 4


class _Stale(Exception):
    """A reused keep-alive connection was closed before any byte of the response."""


class _Conn(asyncio.Protocol):
    """One connection; parses one response at a time into ``self.ex``."""

    def __init__(self) -> None:
        self.transport: stamped.ConnectionTransport | None = None
        self.ex: RawExchange | None = None
        self.fut: asyncio.Future[None] | None = None
        self.state = _IDLE
        self.head = b""
        self.rem = 0
        self.pend = b""
        self.crlf = False
        self.keep = True
        self.closed = False
        self.reused = False
        self.got_bytes = False
        self.error_size = 0
        self.last_ns = 0  # the latest byte
        self.data_ns = 0  # the latest body read that was not an SSE comment (0: none yet)
        self.fast = False  # in a 2xx chunked body between chunks: the one-chunk fast path
        self.done_ns = 0  # the read that brought a 2xx stream's [DONE] (0: not yet)
        self.owner: FastTransport | None = None
        self.drain: asyncio.TimerHandle | None = None  # set while waiting for the body's end

    # -- asyncio callbacks ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport | stamped.StampedSocket) -> None:
        # A stream connection's transport: asyncio's (a Transport) or a StampedSocket.
        self.transport = cast(stamped.ConnectionTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.received(data, perf_counter_ns())

    def received(self, data: bytes, ts: int) -> None:
        """``data`` read at ``ts`` (perf_counter_ns clock): the kernel's arrival stamp, or
        when the process read it."""
        if ts < self.last_ns:
            ts = self.last_ns  # a stamp never goes back (clock conversion jitter)
        self.last_ns = ts
        if self.state == _CHUNKED:
            if self.fast:
                # The common read: exactly one whole chunk of a 2xx stream, nothing pending.
                i = data.find(b"\r\n", 0, 10)
                try:
                    end = i + 2 + int(data[:i], 16) if i > 0 else -1
                except ValueError:
                    end = -1  # chunk extensions or garbage: the general parser decides
                if end > i + 2:
                    if end + 2 == len(data) and data[end:] == b"\r\n":
                        ex = self.ex
                        if ex is not None:
                            ex.times.append(ts)
                            ex.pieces.append(data[i + 2 : end])
                            if data[i + 2 : i + 3] != b":":
                                self.data_ns = ts
                                if data.endswith(_DONE_FRAMES):
                                    self.done_ns = ts
                                    self._stream_over()
                            return
            self._chunked(data, ts)
            if self.done_ns and self.state == _CHUNKED:
                self._stream_over()
        elif self.state == _HEAD:
            self.got_bytes = True
            self._head(data, ts)
            if self.done_ns and self.state == _CHUNKED:
                self._stream_over()
        elif self.state == _LENGTH:
            self._length(data, ts)
        elif self.state == _UNTIL_CLOSE:
            self._piece(data, ts)
            if self.done_ns:
                self.keep = False
                self._finish(ts)  # over at [DONE]: the close would add nothing
        else:
            # Bytes while no request is in flight: the connection is out of step.
            self.keep = False
            if self.transport is not None:
                self.transport.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._drained()
        if self.fut is None or self.fut.done():
            return
        ex = self.ex
        if self.state == _UNTIL_CLOSE and exc is None:
            # The close ends the body: that is when the response was known to be over.
            self._finish(perf_counter_ns())
            return
        if self.reused and not self.got_bytes:
            self.fut.set_exception(_Stale())
            return
        if ex is not None and ex.kind is None:
            ex.kind = "reset"
            # A failure ends when it was detected, not at the last data before it: the
            # gap would otherwise count as the client's turnaround (health.py).
            ex.end_ns = perf_counter_ns()
            if exc is None:
                ex.error = "connection closed before the response was complete"
            else:
                ex.error = f"{type(exc).__name__}: {exc}"
        self._done()

    # -- response parsing -------------------------------------------------------------
    def _piece(self, data: bytes, ts: int) -> None:
        ex = self.ex
        if ex is None:
            return
        if data[:1] != b":":
            self.data_ns = ts
            if data.endswith(_DONE_TAILS) and 200 <= ex.status < 300:
                self.done_ns = ts
        if ex.status and not 200 <= ex.status < 300:
            # Error bodies: keep an excerpt, not megabytes.
            if self.error_size >= MAX_ERROR_BODY:
                ex.times.append(ts)
                return
            data = data[: MAX_ERROR_BODY - self.error_size]
            self.error_size += len(data)
        ex.times.append(ts)
        ex.pieces.append(data)

    def _head(self, data: bytes, ts: int) -> None:
        buf = self.head + data if self.head else data
        while True:
            i = buf.find(b"\r\n\r\n")
            if i < 0:
                if len(buf) > _MAX_HEAD:
                    self._fail("malformed", "response head too large or not HTTP")
                else:
                    self.head = buf
                return
            head, buf = buf[:i], buf[i + 4 :]
            lines = head.split(b"\r\n")
            status_line = lines[0].split(None, 2)
            if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
                self._fail("malformed", f"not an HTTP response: {lines[0][:80]!r}")
                return
            try:
                status = int(status_line[1])
            except ValueError:
                self._fail("malformed", f"bad status line: {lines[0][:80]!r}")
                return
            if 100 <= status < 200:
                continue  # 100 Continue and friends: the real head follows
            break
        self.head = b""
        ex = self.ex
        if ex is None:
            return
        ex.status = status
        chunked = False
        length: int | None = None
        keep = not status_line[0].endswith(b"/1.0")
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    self._fail("malformed", "bad Content-Length")
                    return
            elif name == b"connection":
                v = value.strip().lower()
                if v == b"close":
                    keep = False
                elif v == b"keep-alive":
                    keep = True
        self.keep = self.keep and keep
        if chunked:
            self.state = _CHUNKED
            self.rem, self.pend, self.crlf = 0, b"", False
            if buf:
                self._chunked(buf, ts)
        elif length is not None:
            self.state = _LENGTH
            self.rem = length
            if length == 0:
                self._finish(ts)
            elif buf:
                self._length(buf, ts)
        else:
            self.state = _UNTIL_CLOSE
            self.keep = False
            if buf:
                self._piece(buf, ts)

    def _length(self, data: bytes, ts: int) -> None:
        n = len(data)
        if n >= self.rem:
            self._piece(data[: self.rem], ts)
            self.rem = 0
            self._finish(ts)
        else:
            self.rem -= n
            self._piece(data, ts)

    def _chunked(self, data: bytes, ts: int) -> None:
        buf = self.pend + data if self.pend else data
        pos = 0
        n = len(buf)
        while pos < n:
            rem = self.rem
            if rem:
                end = pos + rem
                if end <= n:
                    self._piece(buf[pos:end] if pos or end != n else buf, ts)
                    self.rem = 0
                    self.crlf = True
                    pos = end
                else:
                    self._piece(buf[pos:], ts)
                    self.rem = rem - (n - pos)
                    pos = n
                continue
            if self.crlf:
                if n - pos < 2:
                    break
                pos += 2
                self.crlf = False
                continue
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            try:
                size = int(buf[pos:i].split(b";", 1)[0], 16)
            except ValueError:
                self._fail("malformed", f"bad chunk size line: {buf[pos:i][:40]!r}")
                return
            if size == 0:
                # Last chunk; trailers (rare) end with an empty line.
                tail = buf[i + 2 :]
                if tail[:2] == b"\r\n" or b"\r\n\r\n" in tail:
                    self.pend = b""
                    self._finish(ts)
                    return
                break
            self.rem = size
            pos = i + 2
        self.pend = buf[pos:] if pos < n else b""
        ex = self.ex
        self.fast = (
            not self.pend
            and not self.rem
            and not self.crlf
            and self.state == _CHUNKED
            and ex is not None
            and 200 <= ex.status < 300
        )

    # -- completion -------------------------------------------------------------------
    def _finish(self, ts: int) -> None:
        self.fast = False
        if self.ex is not None:
            self.ex.end_ns = self.done_ns or ts
        self.state = _IDLE
        if not self.keep and self.transport is not None:
            self.transport.close()
        self._done()
        if self.drain is not None:
            # The body's end came after its [DONE]: the connection can serve again.
            self._drained()
            owner = self.owner
            if self.keep and not self.closed and owner is not None and not owner._closed:
                owner._idle.append(self)

    def _stream_over(self) -> None:
        """A 2xx stream's ``[DONE]`` arrived before the end of its HTTP body: the exchange
        ends now, dated at the ``[DONE]``, and the connection waits (up to ``_DRAIN_S``,
        off the request's clock) for the body's last chunk to be reused, or is closed. A
        server that never ends the body thus costs a connection, not a stalled request."""
        if self.fut is None or self.ex is None:
            return
        self.ex.end_ns = self.done_ns
        self.ex = None  # nothing after [DONE] belongs to the exchange
        self.fast = False
        owner = self.owner
        if owner is not None:
            owner._draining.add(self)
        self.drain = self.fut.get_loop().call_later(_DRAIN_S, self._drain_over)
        self._done()

    def _drain_over(self) -> None:
        self.drain = None
        self._drained()
        self.keep = False
        if self.transport is not None:
            self.transport.close()

    def _drained(self) -> None:
        if self.drain is not None:
            self.drain.cancel()
            self.drain = None
        if self.owner is not None:
            self.owner._draining.discard(self)

    def _fail(self, kind: Literal["malformed", "timeout", "reset"], error: str) -> None:
        ex = self.ex
        if ex is not None and ex.kind is None:
            ex.kind, ex.error = kind, error
            ex.end_ns = perf_counter_ns()  # detected now (a deadline, a bad byte)
        self.keep = False
        self.state = _IDLE
        self.fast = False
        if self.transport is not None:
            self.transport.abort()
        self._done()

    def _done(self) -> None:
        fut = self.fut
        self.fut = None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def start(self, ex: RawExchange, fut: asyncio.Future[None], request: bytes) -> None:
        self.ex, self.fut = ex, fut
        self.state = _HEAD
        self.fast = False
        self.head = b""
        self.got_bytes = False
        self.error_size = 0
        self.last_ns = perf_counter_ns()
        self.data_ns = 0
        self.done_ns = 0
        if self.closed:
            # Closed by the server between the connect and this request (accepted, then
            # dropped at once): its loss is told now, not waited for forever.
            self.connection_lost(None)
            return
        if self.transport is not None:
            self.transport.write(request)


class FastTransport:
    """Streams requests over pooled HTTP/1.1 connections (http, or https through the
    loop's TLS transport)."""

    def __init__(self, settings: ClientSettings) -> None:
        parts = urlsplit(settings.url)
        self._host = parts.hostname or "127.0.0.1"
        tls = parts.scheme == "https"
        self._port = parts.port or (443 if tls else 80)
        self._ssl: ssl.SSLContext | None = settings.ssl_context() if tls else None
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        hostport = parts.netloc.rpartition("@")[2]  # never a URL's user:password
        headers = request_headers(settings)
        head = f"POST {path} HTTP/1.1\r\nHost: {hostport}\r\nUser-Agent: pytest-llmslo\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self._head = head.encode("latin-1")
        self._fresh = settings.fresh_connection
        self._deadlines = settings.deadlines
        self._connect_timeout = settings.connect_timeout_s
        # Kernel receive stamps: plain TCP on Linux, unless the settings ask for read times.
        self.kernel_stamps = not tls and stamped.AVAILABLE and settings.receive_stamps != "read"
        self._idle: list[_Conn] = []
        self._active: set[_Conn] = set()
        self._draining: set[_Conn] = set()  # streams over at [DONE], bodies not yet ended
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    async def _connect(self) -> _Conn:
        if self.kernel_stamps:
            conn = await asyncio.wait_for(
                stamped.open_stamped(self._host, self._port, _Conn), self._connect_timeout
            )
        else:
            loop = asyncio.get_running_loop()
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Conn, self._host, self._port, ssl=self._ssl),
                self._connect_timeout,
            )
        conn.owner = self
        return conn

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        # One task checks every stream's deadlines instead of a timer per read.
        d = self._deadlines
        interval = d.sweep_interval_s
        while not self._closed:
            await asyncio.sleep(interval)
            now = perf_counter_ns()
            for conn in list(self._active):
                ex = conn.ex
                if conn.fut is None or ex is None:
                    continue
                why = d.expired(now, ex.sent_ns, conn.data_ns)
                if why is not None:
                    conn._fail("timeout", why)

    async def send(
        self, body: bytes, raw: RawExchange, headers: Mapping[str, str] | None = None
    ) -> None:
        raw.sent_ns = perf_counter_ns()
        head = self._head
        if headers:
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1")
        request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        self._ensure_sweeper()
        if self._draining and not self._idle:
            # A stream just ended at its [DONE]; the end of its body is usually in the
            # socket already: one turn of the loop reads it and frees the connection,
            # instead of opening a new one. Before the send time: not the server's time.
            await asyncio.sleep(0)
            raw.sent_ns = perf_counter_ns()
        for attempt in (0, 1):
            conn: _Conn | None = None
            while self._idle and attempt == 0:
                c = self._idle.pop()
                if not c.closed:
                    conn = c
                    conn.reused = True
                    break
            if conn is None:
                try:
                    conn = await self._connect()
                except (asyncio.TimeoutError, TimeoutError):
                    raw.kind = "timeout"
                    raw.error = f"connect timeout after {self._connect_timeout:g} s"
                    raw.end_ns = perf_counter_ns()
                    return
                except OSError as exc:
                    raw.kind = "connect"
                    raw.error = certificate_hint(f"{type(exc).__name__}: {exc}")
                    raw.end_ns = perf_counter_ns()
                    return
                conn.reused = False
            if self._fresh:
                conn.keep = False
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._active.add(conn)
            try:
                conn.start(raw, fut, request)
                await fut
            except _Stale:
                raw.times.clear()
                raw.pieces.clear()
                continue
            except asyncio.CancelledError:
                conn.keep = False
                if conn.transport is not None:
                    conn.transport.abort()
                raise
            finally:
                self._active.discard(conn)
            if raw.end_ns == 0:
                raw.end_ns = raw.times[-1] if raw.times else perf_counter_ns()
            if conn.keep and not conn.closed and conn.state == _IDLE:
                conn.ex = None
                self._idle.append(conn)
            return
        raw.kind, raw.error = "reset", "connection closed before the response began"
        raw.end_ns = perf_counter_ns()

    async def aclose(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sweeper
        for conn in self._idle + list(self._active) + list(self._draining):
            conn._drained()
            if conn.transport is not None:
                conn.transport.close()
        self._idle.clear()
