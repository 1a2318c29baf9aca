"""Remote load workers: the session listens on TCP and workers started anywhere with
``llmslo worker --connect HOST:PORT`` join it; each serves level after level on its
connection, speaking the worker protocol (``protocol.py``) in data-only frames
(``wire.py``).

``WorkerHub`` is the session's side: it listens (``--worker-listen``), accepts on a thread
of its own from then on, and lets a peer in only once it proved it holds the session's key
(``handshake.py``, ``workerkey.py``: the session always has one). Each handshake runs on
a thread of its own, bounded in time and bytes, at most ``MAX_PENDING`` at once, so a
slow or hostile peer neither holds up a real worker nor costs more than a thread and a
few hundred bytes; whatever fails the handshake is turned away with a log line and the
wait goes on. ``ensure`` waits a bounded time for the ``--remote-workers`` it was asked
for (a clear message names how many came), and the connections (``RemoteLink``) are held
until the session ends, when closing them tells the workers to exit. A frame a joined
worker sends that is not a message of the protocol ends its connection with the reason
(the worker is lost; the level says so). ``remote_pool.py`` runs a level on them.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import ssl
import threading
import time
from collections.abc import Callable
from time import perf_counter_ns

from ..errors import LoadError
from .clock import PROBES, ClockOffset, ClockSample, best_offset
from .handshake import HANDSHAKE_S, accept_worker
from .linktls import TlsLink
from .protocol import Message, Ping, Pong
from .wire import Link, WireError
from .workerkey import WorkerKey, session_key

__all__ = ["MAX_PENDING", "Lost", "RemoteLink", "WorkerHub", "parse_address"]

log = logging.getLogger(__name__)

_PONG_TIMEOUT_S = 10.0
#: Handshakes under way at once; a peer past them is turned away at once.
MAX_PENDING = 32


class Lost:
    """A remote worker's connection ended (delivered to the level in place of a message)."""

    kind = "lost"

    def __init__(self, reason: str) -> None:
        self.reason = reason


def parse_address(text: str, what: str = "--worker-listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for an IPv6 address) as a (host, port) pair."""
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise LoadError(
            f"{what} {text!r}: give HOST:PORT, e.g. 0.0.0.0:7070 (port 0: any free port)"
        )
    return host, int(port)


def _shut(sock: socket.socket) -> None:
    """End a handshake that ran past its time (``socket.shutdown``, not TLS's)."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class RemoteLink:
    """One remote worker's connection: a reader thread takes its messages as they come
    (stamping clock answers on arrival) and hands them to the level that runs (``attach``);
    between levels they are dropped, and a lost connection is remembered."""

    def __init__(self, conn: Link, name: str, peer: str) -> None:
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
            except (EOFError, OSError, WireError) as exc:
                with self._lock:
                    self.lost = (
                        f"it sent what is not a message of the protocol, and its connection "
                        f"was closed ({exc})"
                        if isinstance(exc, WireError)
                        else f"its connection ended ({exc!r})"
                    )
                    sink = self._sink
                if isinstance(exc, WireError):
                    log.warning("%s: %s", self.label, self.lost)
                    self.conn.shutdown()
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
        self.conn.shutdown()
        with contextlib.suppress(OSError):
            self.conn.close()
        self._reader.join(timeout=5)


class WorkerHub:
    """The session's listening socket and the remote workers that joined it (see the
    module docstring). ``listen`` is ``HOST:PORT``; ``expected`` workers are waited for
    at most ``wait_s`` seconds; ``key`` is the shared key (``workerkey.session_key``
    when None: from the environment, or the default file, made if need be)."""

    def __init__(
        self,
        listen: str,
        expected: int,
        wait_s: float = 120.0,
        key: WorkerKey | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if expected < 1:
            raise LoadError(f"--remote-workers must be >= 1 with --worker-listen, got {expected}")
        self.host, self.port = parse_address(listen)
        self.expected = expected
        self.wait_s = wait_s
        self.key = key
        self.tls = tls  # TLS on the link (``linktls.server_context``), None: plain TCP
        self.links: list[RemoteLink] = []
        self.failed: str | None = None  # why the wait for the workers ended short
        self.turned_away = 0  # peers that failed the handshake
        self.handshake_s = HANDSHAKE_S  # the time a peer has to prove the key, in all
        self._sock: socket.socket | None = None
        self._joined = threading.Condition()
        self._pending = threading.BoundedSemaphore(MAX_PENDING)
        self._acceptor: threading.Thread | None = None

    @property
    def address(self) -> str:
        """Where the workers connect (the port the system chose, for port 0)."""
        return f"{self.host}:{self.port}"

    @property
    def worker_command(self) -> str:
        """The command that starts a worker, naming where its key is, never the key."""
        key = self.key.worker_option if self.key is not None else ""
        tls = ""
        if self.tls is not None:
            tls = " --tls-ca CA.pem"  # the CA of the session's certificate
            if self.tls.verify_mode == ssl.CERT_REQUIRED:
                tls += " --tls-cert WORKER.pem --tls-key WORKER.key"
        return f"llmslo worker --connect {self.address} {key}{tls}".strip()

    def open(self) -> None:
        """Start listening (workers may connect and join from now on)."""
        if self._sock is not None:
            return
        if self.key is None:
            self.key = session_key()
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
        sock.settimeout(0.5)
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._acceptor = threading.Thread(
            target=self._accept_loop, args=(sock, self.key.secret), name="llmslo-hub", daemon=True
        )
        self._acceptor.start()

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
                f"load worker(s): `{self.worker_command}`"
            )
        if self.failed is not None:
            raise LoadError(self.failed)  # waited once already: the next level waits no more
        deadline = time.monotonic() + self.wait_s
        with self._joined:
            while len(self.links) < self.expected:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.failed = self._timeout_message()
                    raise LoadError(self.failed)
                if self._sock is None:
                    raise LoadError("the session stopped listening for its remote load workers")
                self._joined.wait(min(left, 0.5))
            return list(self.links)

    def _timeout_message(self) -> str:
        names = ", ".join(link.label for link in self.links) or "none"
        away = f"; {self.turned_away} peer(s) turned away (see the log)" if self.turned_away else ""
        return (
            f"only {len(self.links)} of {self.expected} remote load workers connected to "
            f"{self.address} within {self.wait_s:g} s (connected: {names}{away}); start each "
            f"with `{self.worker_command}`, reachable from where it runs, with the "
            "session's key"
        )

    def _accept_loop(self, sock: socket.socket, key: bytes) -> None:
        while self._sock is sock:
            try:
                client, addr = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed: the session is stopping
            peer = f"{addr[0]}:{addr[1]}"
            if not self._pending.acquire(blocking=False):
                self._turn_away(client, peer, f"more than {MAX_PENDING} handshakes at once")
                continue
            threading.Thread(
                target=self._handshake, args=(client, peer, key), name="llmslo-join", daemon=True
            ).start()

    def _turn_away(self, client: socket.socket, peer: str, why: str) -> None:
        with self._joined:
            self.turned_away += 1
        log.warning("turned away %s from the load workers' port %s: %s", peer, self.port, why)
        with contextlib.suppress(OSError):
            client.close()

    def _full(self) -> str | None:
        with self._joined:
            if len(self.links) >= self.expected:
                return f"the session has all its {self.expected} workers"
        return None

    def _handshake(self, client: socket.socket, peer: str, key: bytes) -> None:
        # The whole handshake, TLS included, in ``handshake_s`` at most: past it the
        # socket is shut, which ends whatever read waits (a peer trickling bytes).
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _shut(client)

        watchdog = threading.Timer(self.handshake_s, expire)
        watchdog.start()
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                if self.tls is not None:
                    client.settimeout(self.handshake_s)
                    client = self.tls.wrap_socket(client, server_side=True)
                name = accept_worker(client, key, self.handshake_s, self._full) or peer
                watchdog.cancel()
            except (LoadError, OSError, EOFError) as exc:
                # A port scan, a health check, a wrong key, an old version, a slow peer
                # (whose read the watchdog ended: that is why, whatever the read saw).
                why = str(exc) or type(exc).__name__
                if expired.is_set():
                    why = f"its handshake did not end in time ({self.handshake_s:g} s): {why}"
                self._turn_away(client, peer, why)
                return
            with self._joined:
                if self._sock is None or len(self.links) >= self.expected:
                    full = True
                else:
                    full = False
                    link = TlsLink(client) if isinstance(client, ssl.SSLSocket) else Link(client)
                    self.links.append(RemoteLink(link, name, peer))
                    self._joined.notify_all()
            if full:
                self._turn_away(client, peer, "the session has all its workers")
        finally:
            watchdog.cancel()
            self._pending.release()

    def close(self) -> None:
        """Close every connection (the workers exit) and stop listening."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        if self._acceptor is not None:
            self._acceptor.join(timeout=2)
            self._acceptor = None
        with self._joined:
            links, self.links = self.links, []
            self._joined.notify_all()
        for link in links:
            link.close()
