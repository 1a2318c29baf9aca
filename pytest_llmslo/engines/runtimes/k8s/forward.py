"""The port-forward access path: a listener on this machine's loopback whose connections
are carried, each through a port-forward of the API server (the client library's own
websocket, no ``kubectl``), to the engine's port in one of its running pods.

Every connection costs a websocket through the API server and back: a port-forward adds
latency to each request (AIPerf found ~2 ms/request from exactly this), so the access
path is part of what a run measures and is named in its metadata.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_CHUNK = 1 << 16


_DRAIN_S = 2.0


def _pump(conn: Any, remote: Any, stop: threading.Event) -> None:
    """Copy bytes both ways between the accepted connection and the port-forward's socket
    until either side closes (or ``stop``), then end both the gentle way."""
    peers = {conn: remote, remote: conn}
    try:
        while not stop.is_set():
            ready, _, _ = select.select(list(peers), [], [], 0.5)
            for sock in ready:
                data = sock.recv(_CHUNK)
                if not data:
                    return
                peers[sock].sendall(data)
    except OSError:
        return
    finally:
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            conn.close()
        _end_forward(remote)


def _end_forward(remote: Any) -> None:
    """End the port-forward's socket so that the client library's proxy thread ends
    cleanly: an end of stream first (it then closes its side and its websocket), what it
    still sends read and dropped until it has, then the close. Closing at once while its
    bytes sit unread resets its side, and its thread dies with ``ConnectionResetError``
    (a traceback on stderr at every cut stream). Bounded by ``_DRAIN_S``."""
    with contextlib.suppress(OSError):
        remote.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + _DRAIN_S
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([remote], [], [], left)
            if ready and not remote.recv(_CHUNK):
                break
    with contextlib.suppress(OSError):
        remote.close()


def _unavailable(conn: socket.socket, why: str) -> None:
    """Answer the connection's request ``503`` with ``why`` (its request read first, so
    that closing does not reset it), then close it."""
    body = f"no pod of the engine serves yet: {why}\n".encode()
    try:
        conn.settimeout(2.0)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < _CHUNK:
            data = conn.recv(_CHUNK)
            if not data:
                break
            head += data
        conn.sendall(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            conn.close()


class PortForwarder:
    """Listens on ``127.0.0.1`` (``local_port``); each accepted connection is forwarded
    to ``port`` of the pod ``pick_pod()`` names at that moment. While there is none, the
    connection is answered ``503`` with ``why_not()`` (the harness's readiness probe
    shows it and waits). ``open_socket(pod, port)`` opens the port-forward and returns
    its socket."""

    def __init__(
        self,
        open_socket: Callable[[str, int], Any],
        pick_pod: Callable[[], str | None],
        port: int,
        why_not: Callable[[], str | None] | None = None,
    ) -> None:
        self._open = open_socket
        self._pick = pick_pod
        self._why_not = why_not
        self.port = port
        self._stop = threading.Event()
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(512)
        self._server.settimeout(0.5)
        self.local_port: int = self._server.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(
            target=self._serve, name=f"llmslo port-forward :{self.local_port}", daemon=True
        )
        self._accept.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._forward, args=(conn,), daemon=True)
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _forward(self, conn: socket.socket) -> None:
        try:
            pod = self._pick()
            if pod is None:
                _unavailable(conn, (self._why_not() if self._why_not else None) or "no pod")
                return
            remote = self._open(pod, self.port)
        except Exception as exc:
            log.debug("port-forward to %s failed: %s", self.port, exc)
            with contextlib.suppress(OSError):
                conn.close()
            return
        _pump(conn, remote, self._stop)

    def close(self) -> None:
        """Stop listening and end every forwarded connection."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._server.close()
        self._accept.join(2)
        for t in self._threads:
            t.join(2)
