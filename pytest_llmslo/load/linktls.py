"""TLS on the remote workers' link (``--slo-worker-tls-cert``/``-key``/``-ca`` on the
session, ``llmslo worker --tls-ca`` and, for mutual TLS, ``--tls-cert``/``--tls-key``):
prompts and completions cross it, and a team on a shared network keeps them private.

The standard library's ``ssl``: TLS 1.2 at least, the worker checking the session's
certificate against its CA and name (``check_hostname``), the session checking the
worker's certificate against ``--slo-worker-tls-ca`` when one is given (mutual TLS). The
key handshake (``handshake.py``) runs inside the TLS session, so a worker still proves
the key and only then is a message read.

``TlsLink`` is ``wire.Link`` over a TLS socket. A link is read by one thread while
others send on it, and an OpenSSL connection must not be used by two threads at once, so
the socket is non-blocking and every TLS read or write holds one lock; a reader that has
nothing to read releases it and waits in ``select`` for the socket, so a sender never
waits behind it.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading

from ..errors import LoadError
from .wire import MAX_FRAME, Link

__all__ = ["TlsLink", "client_context", "server_context"]


def server_context(cert: str, key: str, ca: str | None = None) -> ssl.SSLContext:
    """The session's context: its certificate and key; with ``ca``, workers must present
    a certificate that CA signed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cert, key, "--slo-worker-tls-cert/--slo-worker-tls-key")
    if ca is not None:
        _load_ca(ctx, ca, "--slo-worker-tls-ca")
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(ca: str, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A worker's context: the session's certificate checked against ``ca`` (and its
    name); ``cert``/``key`` presented to a session that asks for one (mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_ca(ctx, ca, "--tls-ca")
    if cert is not None or key is not None:
        if cert is None or key is None:
            raise LoadError("--tls-cert and --tls-key go together (the worker's certificate)")
        _load_chain(ctx, cert, key, "--tls-cert/--tls-key")
    return ctx


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, what: str) -> None:
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise LoadError(
            f"{what}: cannot load the certificate {cert} with the key {key} ({exc}); give "
            "PEM files, the key the certificate's"
        ) from None


def _load_ca(ctx: ssl.SSLContext, ca: str, what: str) -> None:
    try:
        ctx.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise LoadError(f"{what}: cannot load the CA {ca} ({exc}); give a PEM file") from None


class TlsLink(Link):
    """``wire.Link`` over a TLS socket, safe for one reader and several senders (see the
    module docstring)."""

    def __init__(self, sock: ssl.SSLSocket, max_frame: int = MAX_FRAME) -> None:
        sock.setblocking(False)
        super().__init__(sock, max_frame)
        self._io = threading.Lock()

    def _recv_into(self, view: memoryview) -> int:
        while True:
            with self._io:
                try:
                    return self.sock.recv_into(view)
                except ssl.SSLWantReadError:
                    wait_write = False
                except ssl.SSLWantWriteError:
                    wait_write = True
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return 0
            if wait_write:
                select.select([], [self.sock], [], 1.0)
            else:
                select.select([self.sock], [], [], 1.0)
            if self.sock.fileno() < 0:
                return 0  # closed while waiting

    def _sendall(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while len(view):
            with self._io:
                try:
                    sent = self.sock.send(view)
                except ssl.SSLWantReadError:
                    sent, wait_read = 0, True
                except ssl.SSLWantWriteError:
                    sent, wait_read = 0, False
            if sent:
                view = view[sent:]
                continue
            if self.sock.fileno() < 0:
                raise OSError("the link was closed")
            if wait_read:
                select.select([self.sock], [], [], 1.0)
            else:
                select.select([], [self.sock], [], 1.0)

    def shutdown(self) -> None:
        try:
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass
