"""TCP sockets whose reads carry the time the kernel received the bytes.

A process that stamps a read with its own clock stamps it when it got round to reading:
on a busy machine that is after the scheduler let it run and after every read that was
ready before it. With ``SO_TIMESTAMPNS`` the kernel stamps each packet as it arrives and
``recvmsg`` returns the stamp with the bytes, so a client descheduled for 30 ms, or busy
with 200 other streams, still dates each chunk when it arrived. TCP returns the stamp of
the *last* packet a read consumed: when several arrived while the process was away, all of
them carry the last one's time (``load.health.stalled_tokens`` counts those).

``StampedSocket`` is the transport of one such connection on an asyncio loop (a reader
callback around ``recvmsg``); it offers the calls a protocol makes of an asyncio transport
(``write``, ``close``, ``abort``) and calls the protocol's ``connection_made``,
``received(data, ts)`` and ``connection_lost``. Stamps are converted to the
``perf_counter_ns`` clock (CLOCK_MONOTONIC) by the offset of the moment of the read.
``open_stamped`` connects one; ``serve_stamped`` accepts them on a listening socket.
Available on Linux (``AVAILABLE``); elsewhere callers use asyncio's transports.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from collections.abc import Callable
from time import perf_counter_ns, time_ns
from typing import Any, Protocol, TypeVar

__all__ = ["AVAILABLE", "StampedProtocol", "StampedSocket", "open_stamped", "serve_stamped"]

# SO_TIMESTAMPNS (asm-generic/socket.h; Python's socket module does not name it): every
# received packet carries a CLOCK_REALTIME timespec, returned as SCM_TIMESTAMPNS (the same
# number) in recvmsg's ancillary data.
_SO_TIMESTAMPNS = 35
AVAILABLE = sys.platform == "linux" and hasattr(socket.socket, "recvmsg")
_TIMESPEC = struct.Struct("@ll")
# Bytes asked of one read: recvmsg allocates them before it knows how many arrived, and a
# 256 KiB allocation per read (asyncio's size) costs three times a 64 KiB one.
_READ_SIZE = 64 * 1024
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_SOL_SOCKET = socket.SOL_SOCKET


class StampedProtocol(Protocol):
    def connection_made(self, transport: StampedSocket) -> None: ...

    def received(self, data: bytes, ts: int) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


_Proto = TypeVar("_Proto", bound=StampedProtocol)


class ConnectionTransport(Protocol):
    """What a connection's protocol uses of its transport: an asyncio ``Transport`` and a
    ``StampedSocket`` alike (the HTTP/1.1 client and the truth server run on either)."""

    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


def _prepare(sock: socket.socket) -> None:
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(_SOL_SOCKET, _SO_TIMESTAMPNS, 1)


class StampedSocket:
    """The transport of one connection whose reads carry the kernel's receive stamp."""

    __slots__ = ("_fd", "_gone", "_loop", "_out", "_proto", "_received", "_recvmsg", "_sock")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, proto: StampedProtocol
    ) -> None:
        self._sock, self._fd, self._loop, self._proto = sock, sock.fileno(), loop, proto
        # Bound once: a read is the hot path (one per streamed chunk).
        self._recvmsg = sock.recvmsg
        self._received = proto.received
        self._out: list[memoryview] = []
        self._gone = False
        proto.connection_made(self)
        loop.add_reader(self._fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data, anc, _flags, _addr = self._recvmsg(_READ_SIZE, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        if not data:
            self._lose(None)
            return
        now = perf_counter_ns()
        ts = now
        if anc:
            level, kind, cdata = anc[0]  # the only ancillary message asked for
            if kind == _SO_TIMESTAMPNS and level == _SOL_SOCKET:
                sec, nsec = _TIMESPEC.unpack_from(cdata)
                # CLOCK_REALTIME to CLOCK_MONOTONIC by the offset of this moment; a stamp
                # is never later than the read (a clock step between the two).
                k = sec * 1_000_000_000 + nsec - (time_ns() - now)
                if k < now:
                    ts = k
        self._received(data, ts)

    def write(self, data: bytes) -> None:
        if self._gone:
            return
        if self._out:
            self._out.append(memoryview(data))
            return
        try:
            n = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._lose(exc)
            return
        if n < len(data):
            self._out.append(memoryview(data)[n:])
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        while self._out:
            buf = self._out[0]
            try:
                n = self._sock.send(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lose(exc)
                return
            if n < len(buf):
                self._out[0] = buf[n:]
                return
            self._out.pop(0)
        self._loop.remove_writer(self._fd)

    def is_closing(self) -> bool:
        return self._gone

    def _shut(self) -> bool:
        if self._gone:
            return False
        self._gone = True
        self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
            self._out.clear()
        self._sock.close()
        return True

    def _lose(self, exc: Exception | None) -> None:
        if self._shut():
            self._proto.connection_lost(exc)

    def close(self) -> None:
        """Close at once (pending writes dropped: callers close after a whole response);
        as with asyncio's transports, the protocol hears of it in a later callback."""
        if self._shut():
            self._loop.call_soon(self._proto.connection_lost, None)

    abort = close


def _literal(host: str, port: int) -> list[tuple[Any, ...]]:
    """The address of an IP literal without a resolver call (which asyncio runs in a
    thread); empty for a name."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        addr = (host, port) if family == socket.AF_INET else (host, port, 0, 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", addr)]
    return []


async def open_stamped(host: str, port: int, factory: Callable[[], _Proto]) -> _Proto:
    """Connect to ``host:port`` (each address it resolves to, in turn) and return the
    protocol ``factory`` made, its transport a ``StampedSocket``. OSError when no address
    answers or the kernel refuses the socket option."""
    loop = asyncio.get_running_loop()
    infos = _literal(host, port) or await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError | None = None
    for family, type_, proto_no, _canon, addr in infos:
        sock = socket.socket(family, type_, proto_no)
        try:
            _prepare(sock)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        proto = factory()
        StampedSocket(loop, sock, proto)
        return proto
    raise error or OSError(f"cannot resolve {host!r}")


def serve_stamped(
    listener: socket.socket, factory: Callable[[], StampedProtocol]
) -> Callable[[], None]:
    """Accept connections on the listening, non-blocking ``listener`` on the running loop,
    each served by a protocol of ``factory`` over a ``StampedSocket``. Returns the call
    that stops accepting and closes the connections still open."""
    loop = asyncio.get_running_loop()
    open_: set[StampedSocket] = set()

    def on_accept() -> None:
        for _ in range(64):
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # ECONNABORTED and friends: the next one may do
            try:
                _prepare(sock)
            except OSError:
                sock.close()
                continue
            open_.add(StampedSocket(loop, sock, factory()))
            if len(open_) > 256:
                open_.difference_update([t for t in open_ if t.is_closing()])

    loop.add_reader(listener.fileno(), on_accept)

    def stop() -> None:
        loop.remove_reader(listener.fileno())
        for t in open_:
            t.close()
        open_.clear()

    return stop
