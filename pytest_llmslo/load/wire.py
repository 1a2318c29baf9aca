"""The worker protocol on the wire: framed, typed, data-only messages.

Every message of ``protocol.py`` travels as one frame: a 4-byte big-endian length, then
a MessagePack array ``[kind, body]`` (msgspec), whose body is decoded into the message
class its kind names, field by field and type by type. Nothing in a frame can name code
to run (no pickle): a peer can at worst send values, and a value of the wrong type, a kind
no message has, or a frame that ends early is a ``WireError`` naming what was wrong.

numpy arrays (a plan's schedule, a ``RawBatch``'s columns) travel as their raw
little-endian bytes with their dtype (one of a short list) and shape declared; the
decoder checks that the bytes are exactly what the dtype and shape declare, and a
``RawBatch``'s columns that they agree with each other (as many rows as kinds and
errors, as many reads as the rows count, as many bytes as the reads' lengths add up to),
so what a worker sends cannot make the parent's decoder read past a buffer.

A frame is at most ``MAX_FRAME`` bytes: a peer that declares more is cut off before a
byte of it is read (``Link.recv``), so a declared length of 1 GiB costs nothing.
``Link`` is one connection's framing over a socket (a socketpair to a local worker
process, TCP or TLS to a remote one); its sends are serialised by a lock (a worker's
outbox thread and its clock answers share it).
"""

from __future__ import annotations

import dataclasses
import re
import socket
import struct
import threading
import typing
from typing import Any

import msgspec
import numpy as np

from ..errors import LlmSloError
from .arraydata import DataError
from .drive import WorkerResult
from .levelplan import WorkerPlan
from .protocol import (
    Drain,
    Failure,
    Go,
    Hello,
    Message,
    Ping,
    Pong,
    Raw,
    Ready,
    Result,
    Stop,
    Tally,
)
from .rawbatch import array_hooks, check_batch

__all__ = ["MAX_FRAME", "Link", "WireError", "decode", "encode"]

#: The largest frame read (a plan with a long trace's schedule fits many times over).
MAX_FRAME = 256 * 1024 * 1024
_HEADER = struct.Struct("!I")
_DIGEST = re.compile(r"[0-9a-f]{0,64}")
_JOIN_BELOW = 64 * 1024  # a frame smaller than this is sent with its header in one write


class WireError(DataError):
    """A frame that is not a message of this protocol (malformed, oversized, truncated)."""


# -- messages ----------------------------------------------------------------------------


#: ``WorkerResult`` fields that never travel: the records go as ``Raw`` batches, and the
#: eval answers are in them (the parent decodes their streams and scores them itself: a
#: worker's own ``AnswerBook`` would be a peer naming an eval file to read and a scorer
#: module to import, so a result that carries one is malformed).
_NOT_SENT = ("records", "answers")


def _result_body() -> type[msgspec.Struct]:
    """``WorkerResult`` without its records and answers (``_NOT_SENT``), as a typed record
    of its own: its other fields, their types and defaults."""
    hints = typing.get_type_hints(WorkerResult)
    fields: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(WorkerResult):
        if f.name in _NOT_SENT:
            continue
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = msgspec.field(default_factory=f.default_factory)
        else:
            fields.append((f.name, hints[f.name], msgspec.NODEFAULT))
            continue
        fields.append((f.name, hints[f.name], default))
    return msgspec.defstruct("ResultBody", fields, forbid_unknown_fields=True)


_ResultBody = _result_body()
_RESULT_FIELDS = _ResultBody.__struct_fields__
_KINDS: dict[str, type[Any]] = {
    cls.kind: cls for cls in (Hello, Go, Drain, Stop, Ping, Ready, Raw, Tally, Failure, Pong)
}
_KINDS[Result.kind] = _ResultBody
_enc_hook, _dec_hook = array_hooks()
_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_HEAD = msgspec.msgpack.Decoder(tuple[str, msgspec.Raw])
_BODIES = {kind: msgspec.msgpack.Decoder(cls, dec_hook=_dec_hook) for kind, cls in _KINDS.items()}


def encode(msg: Message) -> bytes:
    """``msg`` as a frame's payload."""
    if isinstance(msg, Result):
        # The records (and in them the eval answers) travelled as ``Raw`` batches.
        res = msg.result
        return _ENCODER.encode((msg.kind, {name: getattr(res, name) for name in _RESULT_FIELDS}))
    return _ENCODER.encode((msg.kind, msg))


def decode(data: bytes | bytearray | memoryview) -> Message:
    """The message a frame's payload holds; ``WireError`` saying why when it holds none."""
    try:
        kind, body = _HEAD.decode(data)
    except (msgspec.DecodeError, ValueError) as exc:
        raise WireError(f"a frame that is not [kind, message] ({exc})") from None
    dec = _BODIES.get(kind)
    if dec is None:
        raise WireError(f"a message of unknown kind {kind!r:.40}")
    try:
        msg: Message = dec.decode(body)
    except (
        msgspec.DecodeError,
        msgspec.ValidationError,
        DataError,
        LlmSloError,  # a message's own checks (a WorkloadSpec's __post_init__, say)
        ValueError,
        TypeError,
    ) as exc:
        raise WireError(f"a malformed {kind!r} message ({exc})") from None
    if isinstance(msg, _ResultBody):
        msg = Result(WorkerResult(**msgspec.structs.asdict(msg)))
    try:
        _check(msg)
    except DataError as exc:
        raise WireError(f"a malformed {kind!r} message ({exc})") from None
    return msg


def _check(msg: Message) -> None:
    if isinstance(msg, Raw):
        check_batch(msg.batch)
    elif isinstance(msg, Hello):
        _check_plan(msg.plan)
    elif isinstance(msg, Result):
        _check_result(msg.result)
    elif isinstance(msg, Ready) and not _DIGEST.fullmatch(msg.eval_digest):
        raise WireError("a ready message whose eval digest is not 0 to 64 hex digits")


def _check_plan(plan: WorkerPlan) -> None:
    offsets = plan.jobs.offsets
    if offsets is not None and (offsets.ndim != 1 or offsets.dtype != np.int64):
        raise WireError("a plan's schedule is not one column of int64 offsets")
    if plan.worker < 0 or plan.slots < 0 or plan.jobs.step < 1:
        raise WireError("a plan with a negative worker, negative slots or a step below 1")
    if not 0 <= plan.jobs.spares <= plan.slots:
        raise WireError("a plan whose spare requests are not between 0 and its slots")


def _check_result(res: WorkerResult) -> None:
    if res.worker < 0:
        raise WireError("a result of a negative worker")


# -- framing -----------------------------------------------------------------------------


class Link:
    """One connection's frames over ``sock`` (see the module docstring)."""

    def __init__(self, sock: socket.socket, max_frame: int = MAX_FRAME) -> None:
        self.sock = sock
        self.max_frame = max_frame
        self._send_lock = threading.Lock()

    def fileno(self) -> int:
        return self.sock.fileno()

    def send_bytes(self, payload: bytes) -> None:
        if len(payload) > self.max_frame:
            raise WireError(f"a frame of {len(payload)} bytes, over the {self.max_frame} allowed")
        header = _HEADER.pack(len(payload))
        with self._send_lock:
            if len(payload) < _JOIN_BELOW:
                self._sendall(header + payload)  # one write for a small frame
            else:
                self._sendall(header)  # no copy of a large one
                self._sendall(payload)

    def _sendall(self, data: bytes | memoryview) -> None:
        self.sock.sendall(data)

    def _recv_into(self, view: memoryview) -> int:
        return self.sock.recv_into(view)

    def send(self, msg: Message) -> None:
        self.send_bytes(encode(msg))

    def recv_bytes(self) -> bytearray:
        """The next frame's payload; ``EOFError`` at the end of the stream (or within a
        frame: truncated), ``WireError`` for a declared length over ``max_frame``."""
        (size,) = _HEADER.unpack(self._read(_HEADER.size, at_start=True))
        if size > self.max_frame:
            raise WireError(
                f"the peer declared a frame of {size} bytes, over the {self.max_frame} a "
                "frame may hold"
            )
        return self._read(size, at_start=False)

    def recv(self) -> Message:
        return decode(self.recv_bytes())

    def _read(self, n: int, *, at_start: bool) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._recv_into(view[got:])
            if k == 0:
                if at_start and got == 0:
                    raise EOFError("the connection ended")
                raise EOFError(f"the connection ended within a frame ({got} of {n} bytes)")
            got += k
        return buf

    def shutdown(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
