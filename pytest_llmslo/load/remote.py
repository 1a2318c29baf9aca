"""Remote load workers: the session listens on TCP and workers started anywhere with
``llmslo worker --connect HOST:PORT`` join it; each serves level after level on its
connection, speaking the worker protocol (``protocol.py``).

``WorkerHub`` is the session's side: it listens (``--worker-listen``), waits a bounded time
for the ``--remote-workers`` it was asked for (``ensure``; a clear message names how many
came), checks each one's protocol version, and holds the connections (``RemoteLink``) until
the session ends, when closing them tells the workers to exit. ``remote_pool.py`` runs a
level on them.

The messages are pickled, so a worker and its session must trust each other: listen on a
private network, or set the same ``LLMSLO_WORKER_KEY`` on both sides, which makes each side
prove it knows the key before anything is unpickled (``multiprocessing.connection``'s HMAC
challenge).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import socket
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge
from time import perf_counter_ns
from typing import Any

from ..errors import LoadError
from .clock import PROBES, ClockOffset, ClockSample, best_offset
from .protocol import (
    JOIN_TAG,
    PROTOCOL_VERSION,
    Message,
    Ping,
    Pong,
    ProtocolError,
    welcome_message,
)

__all__ = [
    "KEY_ENV",
    "Lost",
    "RemoteLink",
    "WorkerHub",
    "parse_address",
    "read_plain",
    "send_plain",
    "worker_key",
]

log = logging.getLogger(__name__)

#: The environment variable of the shared key (optional; the same on both sides).
KEY_ENV = "LLMSLO_WORKER_KEY"
_JOIN_TIMEOUT_S = 5.0  # a connection that says nothing this long is not a load worker
_PONG_TIMEOUT_S = 10.0
_PLAIN_MAX = 64 * 1024  # the longest handshake message read


class Lost:
    """A remote worker's connection ended (delivered to the level in place of a message)."""

    kind = "lost"

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _timeval(seconds: float) -> bytes:
    return struct.pack("ll", int(seconds), int(seconds % 1 * 1e6))


def send_plain(conn: Connection, obj: dict[str, object]) -> None:
    """A handshake message: JSON, which any version reads (and nothing is unpickled
    before a peer has joined)."""
    conn.send_bytes(json.dumps(obj).encode())


def read_plain(conn: Connection) -> dict[str, Any]:
    """A handshake message (``send_plain``); ``ValueError`` when it is not one."""
    data = conn.recv_bytes(_PLAIN_MAX)
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError(f"not a handshake message: {data[:80]!r}")
    return obj


def parse_address(text: str, what: str = "--worker-listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for an IPv6 address) as a (host, port) pair."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise LoadError(
            f"{what} {text!r}: give HOST:PORT, e.g. 0.0.0.0:7070 (port 0: any free port)"
        )
    return host, int(port)


def worker_key() -> bytes | None:
    """The shared key from ``LLMSLO_WORKER_KEY``, if set."""
    key = os.environ.get(KEY_ENV)
    return key.encode() if key else None


class RemoteLink:
    """One remote worker's connection: a reader thread takes its messages as they come
    (stamping clock answers on arrival) and hands them to the level that runs (``attach``);
    between levels they are dropped, and a lost connection is remembered."""

    def __init__(self, conn: Connection, name: str, peer: str) -> None:
        self.conn = conn
        self.name = name
        self.peer = peer
        self.lost: str | None = None
        self._lock = threading.Lock()
        self._sink: Callable[[Message | Lost], None] | None = None
        self._pongs: queue.SimpleQueue[tuple[int, Pong]] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read, name=f"llmslo-{name}", daemon=True)
        self._reader.start()

    @property
    def label(self) -> str:
        return f"remote load worker {self.name} ({self.peer})"

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError) as exc:
                with self._lock:
                    self.lost = f"its connection ended ({exc!r})"
                    sink = self._sink
                if sink is not None:
                    sink(Lost(self.lost))
                return
            arrived = perf_counter_ns()
            if isinstance(msg, Pong):
                self._pongs.put((arrived, msg))
                continue
            with self._lock:
                sink = self._sink
            if sink is not None:
                try:
                    sink(msg)
                except Exception:  # a level's bug must not end the reading of later ones
                    log.exception("%s: a message could not be handed over", self.label)

    def attach(self, sink: Callable[[Message | Lost], None]) -> None:
        """Hand this worker's messages to ``sink`` (a level's), or its loss at once."""
        with self._lock:
            self._sink = sink
            lost = self.lost
        if lost is not None:
            sink(Lost(lost))

    def detach(self) -> None:
        with self._lock:
            self._sink = None

    def send(self, msg: Message) -> None:
        self.conn.send(msg)

    def measure(self, probes: int = PROBES) -> ClockOffset:
        """The worker's clock offset, from ``probes`` probes (``clock.py``)."""
        with contextlib.suppress(queue.Empty):
            while True:
                self._pongs.get_nowait()  # answers to an earlier, abandoned measurement
        samples = []
        for seq in range(probes):
            t1 = perf_counter_ns()
            self.conn.send(Ping(seq))
            deadline = time.monotonic() + _PONG_TIMEOUT_S
            while True:
                left = deadline - time.monotonic()
                if self.lost is not None or left <= 0:
                    raise LoadError(
                        f"{self.label} did not answer a clock probe within "
                        f"{_PONG_TIMEOUT_S:g} s" + (f": {self.lost}" if self.lost else "")
                    )
                try:
                    t4, pong = self._pongs.get(timeout=min(left, 0.5))
                except queue.Empty:
                    continue
                if pong.seq == seq:
                    samples.append(ClockSample(t1, pong.received_ns, pong.sent_ns, t4))
                    break
        return best_offset(samples)

    def close(self) -> None:
        """Close the connection: the worker reads its end and exits. A shutdown first, as
        the reader thread still holds the socket in ``recv``, which a bare close neither
        wakes nor lets send its FIN."""
        self.detach()
        with contextlib.suppress(OSError):
            sock = socket.socket(fileno=self.conn.fileno())
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.detach()
        with contextlib.suppress(OSError):
            self.conn.close()
        self._reader.join(timeout=5)


class WorkerHub:
    """The session's listening socket and the remote workers that joined it (see the
    module docstring). ``listen`` is ``HOST:PORT``; ``expected`` workers are waited for
    at most ``wait_s`` seconds."""

    def __init__(self, listen: str, expected: int, wait_s: float = 120.0) -> None:
        if expected < 1:
            raise LoadError(f"--remote-workers must be >= 1 with --worker-listen, got {expected}")
        self.host, self.port = parse_address(listen)
        self.expected = expected
        self.wait_s = wait_s
        self.key = worker_key()
        self.links: list[RemoteLink] = []
        self.failed: str | None = None  # why the wait for the workers ended short
        self._sock: socket.socket | None = None

    @property
    def address(self) -> str:
        """Where the workers connect (the port the system chose, for port 0)."""
        return f"{self.host}:{self.port}"

    def open(self) -> None:
        """Start listening (workers may connect from now on)."""
        if self._sock is not None:
            return
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise LoadError(
                f"--worker-listen {self.host}:{self.port}: cannot listen there ({exc})"
            ) from None
        sock.listen(max(self.expected, 16))
        self.port = sock.getsockname()[1]
        self._sock = sock

    def ensure(self, say: Callable[[str], None] | None = None) -> list[RemoteLink]:
        """Every expected worker, connected: wait for those still missing (bounded)."""
        self.open()
        gone = [link for link in self.links if link.lost is not None]
        if gone:
            names = "; ".join(f"{g.label}: {g.lost}" for g in gone)
            raise LoadError(
                f"{len(gone)} of the session's {self.expected} remote load workers were "
                f"lost in an earlier level ({names}); restart the session with its workers"
            )
        if len(self.links) < self.expected and say is not None:
            say(
                f"waiting up to {self.wait_s:g} s for {self.expected - len(self.links)} remote "
                f"load worker(s): `llmslo worker --connect {self.address}`"
            )
        if self.failed is not None:
            raise LoadError(self.failed)  # waited once already: the next level waits no more
        deadline = time.monotonic() + self.wait_s
        while len(self.links) < self.expected:
            left = deadline - time.monotonic()
            if left <= 0:
                self.failed = self._timeout_message()
                raise LoadError(self.failed)
            self._accept(left)
        return list(self.links)

    def _timeout_message(self) -> str:
        names = ", ".join(link.label for link in self.links) or "none"
        return (
            f"only {len(self.links)} of {self.expected} remote load workers connected to "
            f"{self.address} within {self.wait_s:g} s (connected: {names}); start each with "
            f"`llmslo worker --connect {self.address}`, reachable from where it runs"
        )

    def _accept(self, timeout: float) -> None:
        sock = self._sock
        if sock is None:
            raise LoadError("the session stopped listening for its remote load workers")
        try:
            sock.settimeout(min(timeout, 1.0))
            client, addr = sock.accept()
        except TimeoutError:
            return
        except OSError:
            if self._sock is None:  # closed while waiting (the session is stopping)
                raise LoadError(
                    "the session stopped listening for its remote load workers"
                ) from None
            raise
        client.settimeout(None)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Until it has joined, a peer gets a bounded time for each read.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(_JOIN_TIMEOUT_S))
        peer = f"{addr[0]}:{addr[1]}"
        conn = Connection(client.detach())
        try:
            name = self._join(conn, peer)
        except ProtocolError:
            conn.close()
            raise
        except (OSError, EOFError, LoadError, ValueError, AuthenticationError):
            # Not a load worker (a port scan, a health check), or one without the key:
            # it is turned away and the wait goes on.
            conn.close()
            return
        sock = socket.socket(fileno=conn.fileno())
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(0))
        sock.detach()
        self.links.append(RemoteLink(conn, name, peer))

    def _join(self, conn: Connection, peer: str) -> str:
        """Check a new connection's key and version; its worker's name."""
        if self.key is not None:
            deliver_challenge(conn, self.key)
            answer_challenge(conn, self.key)
        join = read_plain(conn)
        if join.get("tag") != JOIN_TAG:
            raise LoadError(f"the connection from {peer} is not a load worker")
        name = str(join.get("name") or peer)
        theirs = join.get("version")
        if theirs != PROTOCOL_VERSION:
            refusal = (
                f"remote load worker {name} ({peer}) speaks worker protocol version "
                f"{theirs!r}, this session version {PROTOCOL_VERSION}: run the same version "
                "of pytest-llmslo on both sides"
            )
            with contextlib.suppress(OSError):
                send_plain(conn, welcome_message(refusal))
            raise ProtocolError(refusal)
        send_plain(conn, welcome_message())
        return name

    def close(self) -> None:
        """Close every connection (the workers exit) and stop listening."""
        for link in self.links:
            link.close()
        self.links = []
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
