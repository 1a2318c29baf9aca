"""How a remote load worker and its session prove to each other that they share the key,
before a single message of the protocol is read.

Fixed-size binary records, each side a nonce of its own (``secrets``), and an HMAC-SHA256
of both nonces under the key as each side's proof (compared with
``hmac.compare_digest``); the labels differ, so neither side's proof can be replayed as
the other's:

    worker                                          session
    HELLO(b"LLMSLO-W", version, nonce_w)  ──────▶   magic and version checked
                                          ◀──────   HELLO(b"LLMSLO-S", version, nonce_s)
    HMAC(key, "worker" nonce_w nonce_s),
    name (at most 255 bytes)              ──────▶   proof checked
                                          ◀──────   OK, HMAC(key, "session" nonce_s nonce_w)
                                                    or REFUSED, why (at most 1 KiB)

Both sides send their version in the same place whatever it is: a session meeting a
worker of another version, and a worker meeting such a session, says so by name and
closes. A worker of version 3 (it spoke JSON first, ``multiprocessing`` framing) is
recognised by its first bytes and told, in its own terms, to upgrade.

Until a peer has proved the key the session reads at most ``_WORKER_BYTES`` bytes from it,
decodes nothing but these fixed fields, and gives it ``HANDSHAKE_S`` seconds in all (not
per read: a peer that trickles a byte at a time is cut at the same time). A port scan, a
health check, a wrong key, an old version or a slow peer ends in ``Refused`` (the hub logs
it and waits on).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import struct
import time
from collections.abc import Callable

from ..errors import LoadError
from .protocol import PROTOCOL_VERSION, ProtocolError

__all__ = ["HANDSHAKE_S", "Refused", "accept_worker", "join_session"]

HANDSHAKE_S = 5.0
MAGIC_WORKER = b"LLMSLO-W"
MAGIC_SESSION = b"LLMSLO-S"
_HELLO = struct.Struct("!8sI32s")
_PROOF = 32
_MAX_NAME = 255
_MAX_REASON = 1024
_OK, _REFUSED = 0, 1
#: The most a peer sends before it has proved the key.
_WORKER_BYTES = _HELLO.size + _PROOF + 1 + _MAX_NAME
#: How a worker of protocol version 3 began: a 4-byte length, then its JSON join.
_OLD_JOIN = b'{"tag": "llmslo-load-worker"'


class Refused(LoadError):
    """A peer the session turned away during the handshake (why: the message)."""


def _proof(key: bytes, label: bytes, first: bytes, second: bytes) -> bytes:
    return hmac.new(key, label + first + second, hashlib.sha256).digest()


def _read(sock: socket.socket, n: int, deadline: float | None, what: str) -> bytes:
    """Exactly ``n`` bytes before ``deadline`` (monotonic; None: no bound)."""
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Refused(f"only {len(buf)} of the {n} bytes of its {what} came in time")
            sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(buf))
        except TimeoutError:
            raise Refused(f"only {len(buf)} of the {n} bytes of its {what} came in time") from None
        if not chunk:
            raise EOFError(f"the connection ended within its {what}")
        buf += chunk
    return bytes(buf)


def _refuse(sock: socket.socket, reason: str) -> None:
    data = reason.encode()[:_MAX_REASON]
    try:
        sock.sendall(struct.pack("!BH", _REFUSED, len(data)) + data)
    except OSError:
        pass


def _refuse_old(sock: socket.socket) -> str:
    """An old worker's JSON join: told, in its own framing, which version to run."""
    reason = (
        f"this session speaks worker protocol version {PROTOCOL_VERSION}, this worker an "
        "older one: run the same version of pytest-llmslo on both sides"
    )
    answer = json.dumps(
        {"tag": "llmslo-load-worker", "version": PROTOCOL_VERSION, "refused": reason}
    )
    try:
        sock.sendall(struct.pack("!i", len(answer)) + answer.encode())
    except OSError:
        pass
    return "a worker of an older protocol version (told to upgrade)"


def accept_worker(
    sock: socket.socket,
    key: bytes,
    timeout_s: float = HANDSHAKE_S,
    full: Callable[[], str | None] | None = None,
) -> str:
    """The session's side on a new connection: the worker's name once it proved the key;
    ``Refused`` (or ``OSError``/``EOFError``) otherwise. ``full`` says why the session
    takes no more workers (None: it does), asked once the key is proved: the worker is
    then told so."""
    deadline = time.monotonic() + timeout_s
    head = _read(sock, _HELLO.size, deadline, "greeting")
    if head[4 : 4 + len(_OLD_JOIN)] == _OLD_JOIN:
        raise Refused(_refuse_old(sock))
    magic, version, nonce_w = _HELLO.unpack(head)
    if magic != MAGIC_WORKER:
        raise Refused(f"not a load worker (it began with {head[:8]!r})")
    nonce_s = secrets.token_bytes(32)
    sock.sendall(_HELLO.pack(MAGIC_SESSION, PROTOCOL_VERSION, nonce_s))
    if version != PROTOCOL_VERSION:
        raise Refused(
            f"a load worker of protocol version {version}, this session's is "
            f"{PROTOCOL_VERSION} (told so)"
        )
    proof = _read(sock, _PROOF + 1, deadline, "proof of the key")
    size = proof[_PROOF]
    name_bytes = _read(sock, size, deadline, "name") if size else b""
    if not hmac.compare_digest(proof[:_PROOF], _proof(key, b"worker", nonce_w, nonce_s)):
        _refuse(sock, "the worker's key is not the session's")
        raise Refused("a wrong key")
    name = "".join(c if c.isprintable() else "?" for c in name_bytes.decode("utf-8", "replace"))
    why = full() if full is not None else None
    if why is not None:
        _refuse(sock, why)
        raise Refused(why)
    sock.sendall(bytes([_OK]) + _proof(key, b"session", nonce_s, nonce_w))
    sock.settimeout(None)
    return name


def join_session(
    sock: socket.socket, key: bytes, name: str, first_answer_s: float | None = None
) -> None:
    """The worker's side: prove the key and check the session's proof; ``ProtocolError``
    naming what went wrong. ``first_answer_s`` bounds the wait for the session's greeting
    (it answers when it accepts, which may be after its engines started)."""
    nonce_w = secrets.token_bytes(32)
    first = None if first_answer_s is None else time.monotonic() + first_answer_s
    try:
        sock.sendall(_HELLO.pack(MAGIC_WORKER, PROTOCOL_VERSION, nonce_w))
        head = _read(sock, _HELLO.size, first, "greeting")
        magic, version, nonce_s = _HELLO.unpack(head)
        if magic != MAGIC_SESSION:
            raise ProtocolError(
                "the peer is not a load session of this protocol (or an older version of "
                "pytest-llmslo): run the same version on both sides"
            )
        if version != PROTOCOL_VERSION:
            raise ProtocolError(
                f"the session speaks worker protocol version {version}, this worker version "
                f"{PROTOCOL_VERSION}: run the same version of pytest-llmslo on both sides"
            )
        label = name.encode()[:_MAX_NAME]
        proof = _proof(key, b"worker", nonce_w, nonce_s)
        sock.sendall(proof + bytes([len(label)]) + label)
        deadline = time.monotonic() + 30.0
        verdict = _read(sock, 1, deadline, "verdict")[0]
        if verdict == _REFUSED:
            (size,) = struct.unpack("!H", _read(sock, 2, deadline, "reason"))
            why = _read(sock, min(size, _MAX_REASON), deadline, "reason")
            raise ProtocolError(
                f"the session refused this worker: {why.decode('utf-8', 'replace')}"
            )
        theirs = _read(sock, _PROOF, deadline, "proof of the key")
    except (EOFError, OSError, Refused) as exc:
        raise ProtocolError(
            f"the session ended the handshake ({exc}): a wrong key, or another version of "
            "pytest-llmslo"
        ) from None
    if verdict != _OK or not hmac.compare_digest(theirs, _proof(key, b"session", nonce_s, nonce_w)):
        raise ProtocolError(
            "the session could not prove it holds this worker's key: it is not the session "
            "you meant to join"
        )
    sock.settimeout(None)
