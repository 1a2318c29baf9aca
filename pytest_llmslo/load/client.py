"""Talking to an OpenAI-compatible server: settings, request bodies, transports, records.

Two transports stream a request and keep the body as ``(arrival_ns, bytes)`` pieces:

- ``http1.FastTransport`` — the default: a lean HTTP/1.1 client on asyncio Protocols
  (http, and https through the loop's TLS transport). It does a fraction of httpx's work
  per chunk, which is what lets a few processes drive hundreds of streams on a small
  machine;
- ``HttpxTransport`` — the general path (``transport="httpx"``), an ``httpx.AsyncClient``
  whose pool limits are sized to the load (never httpx's defaults of 100 connections and
  a 5 s timeout, which silently cap and break a run).

Both apply the same four deadlines (``deadlines.py``: connect, first byte, idle, total) and
the same TLS policy (``tls.py``). ``build_record`` then decodes the pieces (``sse.py``) into
a ``RequestRecord``; a failure is always recorded with its ``FailureKind``, never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import ssl
import zlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from ..choices import (
    ENDPOINTS,
    EVENT_LOOPS,
    RECEIVE_STAMPS,
    TRANSPORTS,
    Endpoint,
    LoopName,
    ReceiveStamps,
    TransportName,
)
from ..errors import ConfigError
from ..records import FailureKind, RequestRecord
from ..redact import is_secret_name, redact, remember, url_password
from ..tls import certificate_hint, make_ssl_context
from .deadlines import Deadlines
from .sse import StreamResult, decode_stream, error_excerpt, parse_body, split_events

ENDPOINT_PATHS: dict[str, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
}

# An HTTP header name (RFC 9110 token).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Headers the client sets itself; an extra header may not replace them.
_OWN_HEADERS = ("content-type", "content-length", "host", "accept-encoding", "authorization")

# Bytes of an error body kept for the record's message; the rest is read and dropped.
MAX_ERROR_BODY = 64 * 1024
# The end of a 2xx stream's last event when it is ``data: [DONE]``: the stream is over.
DONE_TAILS = (b"[DONE]\n\n", b"[DONE]\r\n\r\n")
# How long, after a stream's [DONE], the httpx transport waits for the end of the HTTP body
# (so that the connection can be reused) before it closes the response.
_DONE_GRACE_S = 0.05


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How to reach the server and what every request carries.

    ``base_url`` has no ``/v1``. The API key is read from the environment variable named by
    ``api_key_env`` when a transport is built; it is never stored here, logged or put in
    ``to_dict()``. ``ignore_eos`` sends ``ignore_eos`` and ``min_tokens`` so the output
    length is pinned to ``max_tokens`` (servers that reject unknown fields need False).
    ``extra_body`` is merged into every request body (one level deep for mappings, so
    ``{"stream_options": {"continuous_usage_stats": True}}`` keeps ``include_usage``).
    ``processes=None`` picks the number of client processes from the load (``levelplan.py``).
    ``transport="auto"`` is the fast HTTP/1.1 client (http and https); ``httpx`` is the
    general one (an independent HTTP stack: a cross-check of the fast client and a
    fallback for a server it does not handle), several times dearer per chunk.
    ``verify_tls=False`` accepts any certificate (self-signed test servers); ``ca_bundle``
    names a PEM file of CAs to trust instead of the system store (``tls.py``).
    Deadlines (``deadlines.py``): ``connect_timeout_s``, ``first_byte_timeout_s`` (no
    response data yet), ``idle_timeout_s`` (no data since the last, SSE comments not
    counted) and ``timeout_s`` (the whole request).
    ``headers`` are sent with every request (a gateway's routing or tenant header); the
    client's own (Content-Type, Host, Authorization, ...) cannot be replaced. ``models``
    is a weighted list ``((name, weight), ...)``: each request asks for one, drawn by
    weight (LoRA adapters served by one engine). ``session_header`` names a header that
    carries a conversation's id on each of its turns (sticky routing).
    ``fresh_connection`` opens a new connection for every request. ``event_loop`` is the
    loop of the worker processes: ``auto`` takes uvloop when it is installed (it halves
    the cost of a socket read), else asyncio's; a single-process run uses the caller's.
    ``receive_stamps="auto"`` stamps a read of the fast client with the kernel's arrival
    time where it can (plain TCP on Linux, ``http1.py``); ``read`` takes the time the
    process read it, as the httpx transport and TLS connections always do.
    """

    base_url: str
    model: str
    endpoint: Endpoint = "chat"
    api_key_env: str | None = "OPENAI_API_KEY"
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    first_byte_timeout_s: float = 300.0
    idle_timeout_s: float = 60.0
    ignore_eos: bool = True
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    processes: int | None = None
    transport: TransportName = "auto"
    fresh_connection: bool = False
    event_loop: LoopName = "auto"
    verify_tls: bool = True
    ca_bundle: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    models: tuple[tuple[str, float], ...] = ()
    session_header: str | None = None
    receive_stamps: ReceiveStamps = "auto"

    def __post_init__(self) -> None:
        for k, v in self.headers.items():
            if not _TOKEN.fullmatch(str(k)) or any(c in str(v) for c in "\r\n"):
                raise ConfigError(
                    f"bad extra header {k!r}: {v!r} (a header is NAME: VALUE on one line)"
                )
            if k.lower() in _OWN_HEADERS:
                hint = (
                    " (--api-key-env names the key's variable)"
                    if k.lower() == "authorization"
                    else ""
                )
                raise ConfigError(f"extra header {k!r} is set by the client itself{hint}")
        if self.session_header is not None and not _TOKEN.fullmatch(self.session_header):
            raise ConfigError(f"bad session header name {self.session_header!r}")
        if self.models:
            if any(not (w > 0 and math.isfinite(w)) for _, w in self.models):
                raise ConfigError(f"model weights must be > 0, got {list(self.models)}")
            if any(not name for name, _ in self.models):
                raise ConfigError("a model in the weighted list has no name")
        if self.endpoint not in ENDPOINT_PATHS:
            raise ConfigError(
                f"{self.endpoint!r} is not a valid endpoint. "
                f"Valid endpoints: {', '.join(ENDPOINTS)}."
            )
        if self.transport not in TRANSPORTS:
            raise ConfigError(
                f"{self.transport!r} is not a valid transport. "
                f"Valid transports: {', '.join(TRANSPORTS)}."
            )
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"base_url must be http(s)://host[:port], got {self.base_url!r}")
        if self.base_url.rstrip("/").endswith("/v1"):
            raise ConfigError(f"base_url must not end in /v1, got {self.base_url!r}")
        if self.receive_stamps not in RECEIVE_STAMPS:
            raise ConfigError(
                f"{self.receive_stamps!r} is not a valid receive_stamps. "
                f"Valid: {', '.join(RECEIVE_STAMPS)}."
            )
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(
                f"{self.event_loop!r} is not a valid event_loop. "
                f"Valid loops: {', '.join(EVENT_LOOPS)}."
            )
        if self.processes is not None and self.processes < 1:
            raise ConfigError(f"processes must be >= 1, got {self.processes!r}")
        for name in ("timeout_s", "connect_timeout_s", "first_byte_timeout_s", "idle_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0):
                raise ConfigError(f"{name} must be a number of seconds > 0, got {value!r}")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + ENDPOINT_PATHS[self.endpoint]

    @property
    def resolved_transport(self) -> Literal["fast", "httpx"]:
        if self.transport != "auto":
            return self.transport
        return "fast"

    @property
    def deadlines(self) -> Deadlines:
        return Deadlines.of(
            self.connect_timeout_s, self.first_byte_timeout_s, self.idle_timeout_s, self.timeout_s
        )

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of every connection (``tls.make_ssl_context``)."""
        return make_ssl_context(self.ca_bundle, self.verify_tls)

    def api_key(self) -> str | None:
        """The key sent to the server, remembered as a secret (``redact``) in the process
        that reads it: no error text of this process shows it."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env) or None
        remember(key)
        return key

    def to_dict(self) -> dict[str, Any]:
        """Everything but secrets: the key's variable name is kept, its value never."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "endpoint": self.endpoint,
            "api_key_env": self.api_key_env,
            "timeout_s": self.timeout_s,
            "connect_timeout_s": self.connect_timeout_s,
            "first_byte_timeout_s": self.first_byte_timeout_s,
            "idle_timeout_s": self.idle_timeout_s,
            "ignore_eos": self.ignore_eos,
            "extra_body": _jsonable(self.extra_body),
            "processes": self.processes,
            "transport": self.resolved_transport,
            "fresh_connection": self.fresh_connection,
            "event_loop": self.event_loop,
            "verify_tls": self.verify_tls,
            "ca_bundle": self.ca_bundle,
            # Header names only: values may be credentials.
            "headers": sorted(self.headers),
            "models": [[m, w] for m, w in self.models],
            "session_header": self.session_header,
            "receive_stamps": self.receive_stamps,
        }

    def model_for(self, seed: int, index: int) -> str:
        """The model of request ``index``: ``model``, or one of ``models`` drawn by weight
        from a generator seeded with the index (the same draw in every process)."""
        if not self.models:
            return self.model
        total = sum(w for _, w in self.models)
        u = (zlib.crc32(f"{seed}:{index}".encode()) / 2**32) * total
        for name, w in self.models:
            u -= w
            if u < 0:
                return name
        return self.models[-1][0]


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def new_event_loop(kind: LoopName = "auto") -> asyncio.AbstractEventLoop:
    """A fresh event loop: uvloop when asked for (or, with ``auto``, when installed)."""
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ConfigError("event_loop 'uvloop' needs the uvloop package") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def request_body(
    settings: ClientSettings,
    prompt: str,
    max_tokens: int,
    *,
    model: str | None = None,
    history: Sequence[tuple[str, str]] = (),
    system: str | None = None,
) -> bytes:
    """The JSON body of one streaming request, encoded once before the run starts (or, for
    a later turn of a conversation, when the turn is due). ``history`` holds the earlier
    turns as (user message, assistant reply) pairs: chat messages, or, for the completions
    endpoint, the texts joined in order; ``system``, a system message first (for the
    completions endpoint, the first text)."""
    body: dict[str, Any] = {"model": model or settings.model}
    if settings.endpoint == "chat":
        messages: list[dict[str, str]] = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        for user, reply in history:
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": prompt})
        body["messages"] = messages
    else:
        head = [] if system is None else [system]
        body["prompt"] = "\n".join([*head, *(f"{u}\n{r}" for u, r in history), prompt])
    body["max_tokens"] = int(max_tokens)
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if settings.ignore_eos:
        body["ignore_eos"] = True
        body["min_tokens"] = int(max_tokens)
    for key, value in settings.extra_body.items():
        if isinstance(value, Mapping) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def request_headers(settings: ClientSettings) -> dict[str, str]:
    # identity: the transports keep raw body bytes and never decompress them.
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "Accept-Encoding": "identity",
    }
    key = settings.api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    if settings.fresh_connection:
        headers["Connection"] = "close"
    headers.update(settings.headers)
    remember(*(v for k, v in settings.headers.items() if is_secret_name(k)))
    remember(url_password(settings.url))
    return headers


class RawExchange:
    """One request as the transport saw it. Mutable and slotted: the hot path appends."""

    __slots__ = ("end_ns", "error", "kind", "pieces", "sent_ns", "status", "times")

    def __init__(self) -> None:
        self.sent_ns = 0
        self.end_ns = 0
        self.status = 0
        self.times: list[int] = []
        self.pieces: list[bytes] = []
        self.kind: FailureKind | None = None
        self.error: str | None = None


class Transport(Protocol):
    """Streams one request into a ``RawExchange``; never raises for a failed request.
    ``headers`` are this request's own (a conversation's session id), sent after the
    settings' headers. ``kernel_stamps`` says whether reads are dated by the kernel's
    arrival stamp (``stamped.py``) rather than when the process read them."""

    kernel_stamps: bool

    async def send(
        self, body: bytes, raw: RawExchange, headers: Mapping[str, str] | None = None
    ) -> None: ...

    async def aclose(self) -> None: ...


def build_record(
    index: int,
    scheduled_ns: int,
    raw: RawExchange,
    *,
    requested_prompt_tokens: int | None = None,
    requested_output_tokens: int | None = None,
    worker: int = 0,
    session: int = -1,
    turn: int = 0,
) -> RequestRecord:
    """Decode a finished exchange into its record (JSON decoding happens here, after the
    request, never on the hot path)."""
    status = raw.status
    kind = raw.kind
    error = raw.error
    if kind is None and status and not 200 <= status < 300:
        kind = "http"
        excerpt = error_excerpt(raw.pieces, status)
        error = f"HTTP {status}" + (f": {excerpt}" if excerpt else "")
        stream = StreamResult()
    elif kind is None:
        stream = parse_body(raw.times, raw.pieces)
        kind, error = stream.error_kind, stream.error
    else:
        # A transport failure: keep what arrived, and prefer the server's own in-stream
        # error over "reset"/"timeout" when it sent one before the connection went.
        ev_times, events, _ = split_events(raw.times, raw.pieces) if raw.pieces else ([], [], b"")
        stream = decode_stream(ev_times, events)
        if stream.error_kind == "stream_error":
            kind, error = stream.error_kind, stream.error
        elif kind == "timeout" and error and error.startswith("stream stalled"):
            error += f"; {len(stream.chunk_ns)} output chunk(s) had arrived"
    if error:
        # A server may echo the key or the Authorization header in its error.
        error = redact(error)
    end_ns = raw.end_ns or (raw.times[-1] if raw.times else raw.sent_ns)
    return RequestRecord(
        index=index,
        scheduled_ns=scheduled_ns,
        sent_ns=raw.sent_ns,
        end_ns=end_ns,
        chunk_ns=array("q", stream.chunk_ns),
        chunk_tokens=array("I", stream.chunk_tokens),
        tokens_exact=stream.tokens_exact,
        first_content_ns=stream.first_content_ns,
        prompt_tokens=stream.prompt_tokens,
        completion_tokens=stream.completion_tokens,
        requested_prompt_tokens=requested_prompt_tokens,
        requested_output_tokens=requested_output_tokens,
        status=status,
        error=error,
        error_kind=kind,
        finish_reason=stream.finish_reason,
        worker=worker,
        session=session,
        turn=turn,
    )


class _Watch:
    """A request in flight on the httpx transport, as its deadline sweeper sees it."""

    __slots__ = ("done_ns", "expired", "last_ns", "raw")

    def __init__(self, raw: RawExchange) -> None:
        self.raw = raw
        self.last_ns = 0
        self.done_ns = 0  # the read that brought the stream's [DONE]
        self.expired: str | None = None


class HttpxTransport:
    """The general path: httpx with limits sized to the load.

    The load is spread over several ``AsyncClient`` shards of at most
    ``_SHARD_CONNECTIONS`` connections each, every request going to the least busy one:
    httpcore's pool scans all its connections for each one when it assigns a request
    (quadratic in the pool size), which at a few hundred connections costs more than the
    streaming itself.

    httpx's own timeouts cover the connect only; the first-byte, idle and total deadlines
    are the sweeper's (as in the fast client), which cancels the request's streaming task
    when one passes.
    """

    kernel_stamps = False  # httpx reads through its own stack: read times

    _SHARD_CONNECTIONS = 32

    def __init__(self, settings: ClientSettings, max_connections: int | None) -> None:
        import httpx

        self._httpx = httpx
        self._url = settings.url
        self._headers = request_headers(settings)
        self._deadlines = settings.deadlines
        if max_connections is None:
            # No cap: an open loop must never queue inside the client, or the client's
            # queue would be reported as the server's latency.
            shards, per_shard = 8, None
        else:
            shards = max(1, -(-max_connections // self._SHARD_CONNECTIONS))
            per_shard = -(-max_connections // shards)
        limits = httpx.Limits(
            max_connections=per_shard,
            max_keepalive_connections=0 if settings.fresh_connection else per_shard,
            keepalive_expiry=30.0,
        )
        # Reads are bounded by the sweeper; httpx's read timeout is only a backstop.
        timeout = httpx.Timeout(
            settings.timeout_s + 5.0,
            connect=settings.connect_timeout_s,
            pool=settings.timeout_s,
        )
        ctx = settings.ssl_context()
        self._clients = [
            httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False, verify=ctx)
            for _ in range(shards)
        ]
        self._busy = [0] * shards
        self._watch: dict[asyncio.Future[None], _Watch] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def _sweep(self) -> None:
        d = self._deadlines
        while True:
            await asyncio.sleep(d.sweep_interval_s)
            now = perf_counter_ns()
            for task, w in list(self._watch.items()):
                why = d.expired(now, w.raw.sent_ns, w.last_ns)
                if why is not None and w.expired is None:
                    w.expired = why
                    task.cancel()

    async def send(
        self, body: bytes, raw: RawExchange, headers: Mapping[str, str] | None = None
    ) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        raw.sent_ns = perf_counter_ns()
        watch = _Watch(raw)
        hdrs = self._headers if not headers else {**self._headers, **headers}
        inner = asyncio.ensure_future(self._stream(body, raw, watch, hdrs))
        self._watch[inner] = watch
        try:
            await inner
        except asyncio.CancelledError:
            if watch.expired is None or not inner.cancelled():
                raise  # the caller was cancelled, not the request timed out
            raw.kind, raw.error = "timeout", watch.expired
        finally:
            self._watch.pop(inner, None)
        # A stream ends at its [DONE]; without one, when its body ended; a failure, when
        # it was detected (never at its last data: the wait for the failure would read as
        # the client's turnaround).
        raw.end_ns = watch.done_ns if raw.kind is None and watch.done_ns else perf_counter_ns()

    async def _stream(
        self, body: bytes, raw: RawExchange, watch: _Watch, headers: Mapping[str, str]
    ) -> None:
        httpx = self._httpx
        pc = perf_counter_ns
        times = raw.times
        pieces = raw.pieces
        busy = self._busy
        shard = busy.index(min(busy))
        busy[shard] += 1
        try:
            async with self._clients[shard].stream(
                "POST", self._url, content=body, headers=headers
            ) as resp:
                raw.status = resp.status_code
                if 200 <= resp.status_code < 300:
                    chunks = resp.aiter_raw()
                    async for data in chunks:
                        ts = pc()
                        times.append(ts)
                        pieces.append(data)
                        if data[:1] != b":":
                            watch.last_ns = ts
                            if data.endswith(DONE_TAILS):
                                watch.done_ns = ts
                                break
                    if watch.done_ns:
                        # The stream is over; its body's end keeps the connection for reuse,
                        # unless the server holds the body open after [DONE].
                        with contextlib.suppress(TimeoutError, httpx.HTTPError, OSError):
                            await asyncio.wait_for(_drain(chunks), _DONE_GRACE_S)
                else:
                    size = 0
                    async for data in resp.aiter_raw():
                        ts = pc()
                        times.append(ts)
                        watch.last_ns = ts
                        if size < MAX_ERROR_BODY:
                            pieces.append(data[: MAX_ERROR_BODY - size])
                            size += len(data)
        except httpx.TimeoutException as exc:
            raw.kind, raw.error = "timeout", f"{type(exc).__name__}: {_exc_text(exc)}"
        except httpx.ConnectError as exc:
            raw.kind, raw.error = "connect", certificate_hint(f"ConnectError: {_exc_text(exc)}")
        except (httpx.HTTPError, OSError) as exc:
            # RemoteProtocolError (closed mid-body), ReadError (reset), WriteError, ...
            raw.kind, raw.error = "reset", f"{type(exc).__name__}: {_exc_text(exc)}"
        finally:
            busy[shard] -= 1

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for c in self._clients:
            await c.aclose()


async def _drain(chunks: Any) -> None:
    """Read what is left of a body (after [DONE]: normally only its end)."""
    async for _ in chunks:
        pass


def _exc_text(exc: BaseException) -> str:
    """An exception's message, or that of its causes when its own is empty (httpx wraps
    the ssl error of a failed handshake in a ConnectError without text)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur).strip()
        if text:
            return text if cur is exc else f"{type(cur).__name__}: {text}"
        cur = cur.__cause__ or cur.__context__
    return type(exc).__name__
