"""The worker protocol: the named messages a parent and its load workers exchange.

One conversation per worker and level, over one connection: a socketpair to a child
process, or TCP to a remote worker (``remote.py``, ``llmslo worker --connect``), which
serves level after level on its connection:

    parent                                  worker
    Hello(version, plan)          ──────▶   builds its requests, makes its transport
                                  ◀──────   Ready(version, worker, eval digest)
    Ping(seq)  (remote, 16 times) ──────▶   stamps its receipt and its answer
                                  ◀──────   Pong(seq, received_ns, sent_ns)
    Go(t0_ns, limits)             ──────▶   runs from the shared t0 (on its own clock)
                                  ◀──────   Raw(worker, batch)        every ~50 ms
                                  ◀──────   Tally(worker, ...)        every ~250 ms
    Drain()  (early stop)         ──────▶   sends nothing more; what is in flight ends
    Stop()   (interrupt, or done) ──────▶   cuts what is in flight
                                  ◀──────   Result(result) or Failure(traceback)
    Ping(seq)  (remote, again)    ──────▶   the clock after the level
                                  ◀──────   Pong(seq, received_ns, sent_ns)

A remote worker first proves it holds the session's key, and the session that it holds
it, in a handshake of fixed-size binary fields (``handshake.py``) that also compares
their versions: nothing of a peer is decoded before that. Its timestamps are on its own
monotonic clock; ``Ping``/``Pong`` measure the offset (``clock.py``), ``Go``'s times are
sent translated to the worker's clock and its records are put back on the parent's.

Each side checks the other's ``version`` against ``PROTOCOL_VERSION`` at the handshake
(``check_version``): a worker of another version of the package fails at once, with both
versions named, rather than misreading a message later. Messages are small frozen records
with a ``kind``, sent as typed data (``wire.py``: MessagePack, numpy columns as declared
raw buffers; nothing that can name code to run); a ``Raw`` message carries the finished exchanges of
the last ~50 ms as columns (``backlog.RawBatch``: a row of fixed fields each, and every
read's time, length and bytes in three flat buffers), so a message costs a few buffer
copies however many requests and chunks it holds, and the parent keeps it packed until it
decodes it. Change ``PROTOCOL_VERSION`` whenever a message, a ``WorkerPlan`` or a
``WorkerResult`` changes shape (version 5: a ``Result`` carries no eval answers, which
the parent scores from the ``Raw`` streams, ``Ready`` the fingerprint of the worker's eval
rows, and a plan's workload may name a Hugging Face eval dataset; version 4: the key
handshake and data-only frames, where 3 pickled; version 2: ``Raw`` carries a
``RawBatch``, version 1 a list of tuples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import LoadError
from .backlog import RawBatch
from .drive import WorkerResult
from .levelplan import Limits, WorkerPlan

__all__ = [
    "PROTOCOL_VERSION",
    "Drain",
    "Failure",
    "Go",
    "Hello",
    "Message",
    "Ping",
    "Pong",
    "ProtocolError",
    "Raw",
    "Ready",
    "Result",
    "Stop",
    "Tally",
    "check_version",
]

#: The version of the messages below; both sides must speak the same one.
PROTOCOL_VERSION = 5


class ProtocolError(LoadError):
    """A worker and its parent do not speak the same protocol."""


def check_version(theirs: object, *, ours_side: str, their_side: str) -> None:
    """Raise ``ProtocolError`` unless ``theirs`` is this side's ``PROTOCOL_VERSION``."""
    if theirs != PROTOCOL_VERSION:
        raise ProtocolError(
            f"load worker protocol mismatch: the {their_side} speaks version {theirs!r}, "
            f"the {ours_side} version {PROTOCOL_VERSION} (the same version of pytest-llmslo "
            "must run on both sides)"
        )


# -- parent to worker ------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """The first message: the protocol version and the worker's plan."""

    kind: ClassVar[str] = "hello"
    version: int
    plan: WorkerPlan


@dataclass(frozen=True)
class Go:
    """Start at ``t0_ns`` (the shared monotonic clock), within ``limits``."""

    kind: ClassVar[str] = "go"
    t0_ns: int
    limits: Limits


@dataclass(frozen=True)
class Drain:
    """Send nothing more; the requests in flight finish and are measured (early stop)."""

    kind: ClassVar[str] = "drain"


@dataclass(frozen=True)
class Stop:
    """Cut the requests in flight and report (an interrupt; or the parent is done)."""

    kind: ClassVar[str] = "stop"


@dataclass(frozen=True)
class Ping:
    """A clock probe (``clock.py``): the parent stamps its send and the answer's arrival."""

    kind: ClassVar[str] = "ping"
    seq: int


# -- worker to parent ------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The worker built its requests and its transport, and waits for ``Go``;
    ``eval_digest``: the fingerprint of the eval rows it builds its eval requests from (a
    user's file or dataset, ``EvalSource.fingerprint``; empty for none or a built-in task),
    which a session of remote workers compares with its own copy's."""

    kind: ClassVar[str] = "ready"
    version: int
    worker: int
    eval_digest: str = ""


@dataclass(frozen=True)
class Raw:
    """A batch of finished exchanges as columns, not decoded (``backlog.RawBatch``)."""

    kind: ClassVar[str] = "raw"
    worker: int
    batch: RawBatch


@dataclass(frozen=True)
class Tally:
    """The worker's counts so far, for the progress reports."""

    kind: ClassVar[str] = "tally"
    worker: int
    done: int
    failed: int
    warm_done: int


@dataclass(frozen=True)
class Result:
    """The worker's last message: what it measured (its records travelled as ``Raw``)."""

    kind: ClassVar[str] = "result"
    result: WorkerResult


@dataclass(frozen=True)
class Failure:
    """The worker failed; ``error`` is its traceback."""

    kind: ClassVar[str] = "failure"
    error: str


@dataclass(frozen=True)
class Pong:
    """The answer to ``Ping``: when the worker received it and when it answered, on the
    worker's own monotonic clock."""

    kind: ClassVar[str] = "pong"
    seq: int
    received_ns: int
    sent_ns: int


Message = Hello | Go | Drain | Stop | Ping | Ready | Raw | Tally | Result | Failure | Pong
