"""A remote load worker: ``llmslo worker --connect HOST:PORT [--key-file PATH]``.

It connects to a session that listens (``--worker-listen``), retrying while the session is
not up yet (a pod may start before its coordinator), proves it holds the session's key and
checks that the session holds it too (``handshake.py``; the key from ``LLMSLO_WORKER_KEY``,
``--key-file``/``LLMSLO_WORKER_KEY_FILE`` or the default file, ``workerkey.py``), and then
serves the session's levels one after another (``worker.serve_level``), answering clock
probes between them, until the session closes the connection. A session of another
version, or one without the key, is named as such; a connection lost mid-level ends the
worker with an error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import ssl
import time
from collections.abc import Callable
from time import perf_counter_ns
from typing import TextIO

from ..errors import LoadError
from .handshake import join_session
from .linktls import TlsLink, client_context
from .protocol import PROTOCOL_VERSION, Hello, Ping, ProtocolError
from .remote import parse_address
from .wire import Link, WireError
from .worker import pong, serve_level
from .workerkey import worker_key

__all__ = ["add_arguments", "command", "connect", "default_name", "serve"]

_RETRY_S = 0.5


def default_name() -> str:
    """The worker's name: the pod's or host's name and the process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


def connect(address: str, timeout_s: float) -> socket.socket:
    """A connection to the session at ``address``, retried for up to ``timeout_s``."""
    host, port = parse_address(address, "--connect")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=min(timeout_s, 10.0))
            break
        except OSError as exc:
            if time.monotonic() + _RETRY_S > deadline:
                raise LoadError(
                    f"cannot connect to the session at {address} within {timeout_s:g} s "
                    f"({exc}): is it running with --worker-listen on an address reachable "
                    "from here?"
                ) from None
            time.sleep(_RETRY_S)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def serve(
    address: str,
    *,
    name: str | None = None,
    connect_timeout_s: float = 300.0,
    key_file: str | None = None,
    tls: ssl.SSLContext | None = None,
    say: Callable[[str], None] | None = None,
) -> int:
    """Connect to the session at ``address`` and serve its levels until it closes the
    connection; the number of levels served. ``tls``: the link in TLS
    (``linktls.client_context``), the session's name checked against its host."""
    name = name or default_name()
    key = worker_key(key_file)
    sock = connect(address, connect_timeout_s)
    if tls is not None:
        sock = _wrap(sock, tls, parse_address(address, "--connect")[0], connect_timeout_s)
    levels = 0
    try:
        join_session(sock, key.secret, name, first_answer_s=connect_timeout_s)
        conn = TlsLink(sock) if isinstance(sock, ssl.SSLSocket) else Link(sock)
        if say is not None:
            say(f"worker {name} joined the session at {address} (protocol {PROTOCOL_VERSION})")
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return levels  # the session ended
            except WireError as exc:
                raise LoadError(f"the session sent what is not a message: {exc}") from None
            received = perf_counter_ns()
            if isinstance(msg, Ping):
                pong(conn, msg, received)
            elif isinstance(msg, Hello):
                serve_level(conn, msg)
                levels += 1
                if say is not None:
                    say(f"worker {name}: level {levels} done")
            # A late Stop or Drain of a level that is over needs no answer.
    finally:
        with contextlib.suppress(OSError):
            sock.close()


def _wrap(sock: socket.socket, tls: ssl.SSLContext, host: str, timeout_s: float) -> ssl.SSLSocket:
    """``sock`` in TLS, the session's certificate checked (``ProtocolError`` if not)."""
    sock.settimeout(timeout_s)
    try:
        wrapped = tls.wrap_socket(sock, server_hostname=host)
    except (ssl.SSLError, OSError) as exc:
        sock.close()
        raise ProtocolError(
            f"TLS with the session at {host} failed ({exc}): is it listening with "
            "--slo-worker-tls-cert, signed by the --tls-ca given here, for this name?"
        ) from None
    wrapped.settimeout(None)
    return wrapped


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``llmslo worker``."""
    p.add_argument(
        "--connect",
        required=True,
        metavar="HOST:PORT",
        help="the address the session listens on (its --worker-listen)",
    )
    p.add_argument(
        "--name",
        default=None,
        help="how the session's reports name this worker (default: HOSTNAME:PID)",
    )
    p.add_argument(
        "--key-file",
        default=None,
        metavar="PATH",
        help="the file holding the session's key, readable by its owner alone (the session "
        "names its file when it listens; default: LLMSLO_WORKER_KEY, then "
        "LLMSLO_WORKER_KEY_FILE, then ~/.config/llmslo/worker.key)",
    )
    p.add_argument(
        "--tls-ca",
        default=None,
        metavar="PATH",
        help="TLS on the link: the CA (PEM) that signed the session's certificate "
        "(its --slo-worker-tls-cert); the session's name is checked too",
    )
    p.add_argument(
        "--tls-cert",
        default=None,
        metavar="PATH",
        help="this worker's certificate "
        "(PEM), for a session that asks for one (--slo-worker-tls-ca)",
    )
    p.add_argument("--tls-key", default=None, metavar="PATH", help="the key of --tls-cert")
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="how long to keep trying to reach a session that is not listening yet (default: 300)",
    )


def command(args: argparse.Namespace, err: TextIO) -> int:
    """``llmslo worker``: serve a session; 0 when it ended, 1 on an error (named)."""

    def say(text: str) -> None:
        print(f"llmslo worker: {text}", file=err, flush=True)

    try:
        tls = None
        if args.tls_ca is not None:
            tls = client_context(args.tls_ca, args.tls_cert, args.tls_key)
        elif args.tls_cert is not None or args.tls_key is not None:
            raise LoadError("--tls-cert/--tls-key need --tls-ca (the CA of the session's)")
        n = serve(
            args.connect,
            name=args.name,
            connect_timeout_s=args.connect_timeout,
            key_file=args.key_file,
            tls=tls,
            say=say,
        )
    except LoadError as exc:
        print(f"llmslo worker: error: {exc}", file=err, flush=True)
        return 1
    say(f"the session ended after {n} level(s)")
    return 0
