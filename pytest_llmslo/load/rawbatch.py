"""A worker's finished exchanges as columns (``RawBatch``), how they are gathered
(``BatchBuilder``), and how a batch is written and read back as data alone
(``encode_batch``, ``decode_batch``: MessagePack with the columns as declared raw
buffers, ``arraydata.py``).

A batch read back, from a worker over the network (``wire.py``) or from a backlog's spill
file, is checked before anything reads it by position (``check_batch``): its columns must
agree with each other, or ``RawBatch.exchange`` could be made to read past them.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from ..records import FailureKind
from .arraydata import DataError, from_data, to_data
from .client import RawExchange

__all__ = [
    "DTYPES",
    "RAW_FIXED",
    "BatchBuilder",
    "Finished",
    "RawBatch",
    "array_hooks",
    "check_batch",
    "decode_batch",
    "encode_batch",
]


@dataclass(frozen=True, slots=True)
class Finished:
    """What a record needs of its job besides the exchange."""

    index: int
    isl: int
    osl: int
    session: int = -1
    turn: int = 0


#: The fixed fields of one finished exchange in a ``RawBatch``.
RAW_FIXED = np.dtype(
    [
        ("index", np.int64),
        ("isl", np.int64),
        ("osl", np.int64),
        ("scheduled_ns", np.int64),
        ("sent_ns", np.int64),
        ("end_ns", np.int64),
        ("session", np.int64),
        ("status", np.int32),
        ("turn", np.int32),
        ("pieces", np.int32),
    ]
)


@dataclass(frozen=True, slots=True)
class RawBatch:
    """Finished exchanges of one worker as columns, not decoded: ``fixed`` (``RAW_FIXED``,
    one row each), the failure ``kinds`` and ``errors`` the transport saw (None for
    most), and every read of every exchange flat: its arrival time (``times``, int64 ns),
    its length (``lengths``, uint32) and its bytes, joined (``body``). Pickling it copies
    a few buffers whatever the number of reads."""

    fixed: np.ndarray
    kinds: list[FailureKind | None]
    errors: list[str | None]
    times: np.ndarray
    lengths: np.ndarray
    body: bytes

    def __len__(self) -> int:
        return len(self.fixed)

    @property
    def nbytes(self) -> int:
        return self.fixed.nbytes + self.times.nbytes + self.lengths.nbytes + len(self.body)

    def exchange(self, i: int, reads: int, at: int) -> tuple[Finished, int, RawExchange]:
        """Exchange ``i``, whose reads start at read ``reads`` and byte ``at``."""
        index, isl, osl, scheduled, sent, end, ses, status, turn, n = self.fixed[i].tolist()
        raw = RawExchange()
        raw.sent_ns, raw.end_ns, raw.status = sent, end, status
        raw.kind, raw.error = self.kinds[i], self.errors[i]
        raw.times = self.times[reads : reads + n].tolist()
        pieces = []
        body = self.body
        for size in self.lengths[reads : reads + n].tolist():
            pieces.append(body[at : at + size])
            at += size
        raw.pieces = pieces
        return Finished(index, isl, osl, ses, turn), scheduled, raw


class BatchBuilder:
    """A worker's finished exchanges gathered into a ``RawBatch`` (``take``): per
    exchange a row, its reads' times and lengths appended to packed arrays and its
    bytes joined once, about what pickling it costs."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.rows: list[tuple[int, ...]] = []
        self.kinds: list[FailureKind | None] = []
        self.errors: list[str | None] = []
        self.times = array("q")
        self.lengths = array("I")
        self.bodies: list[bytes] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(
        self,
        index: int,
        isl: int,
        osl: int,
        scheduled_ns: int,
        raw: RawExchange,
        session: int = -1,
        turn: int = 0,
    ) -> None:
        pieces = raw.pieces
        self.rows.append(
            (index, isl, osl, scheduled_ns, raw.sent_ns, raw.end_ns, session, raw.status, turn,
             len(pieces))
        )  # fmt: skip
        self.kinds.append(raw.kind)
        self.errors.append(raw.error)
        self.times.extend(raw.times)
        self.lengths.extend(map(len, pieces))
        self.bodies.append(b"".join(pieces))

    def take(self) -> RawBatch:
        """What was added, as one batch; the builder starts again empty."""
        batch = RawBatch(
            np.array(self.rows, dtype=RAW_FIXED),
            self.kinds,
            self.errors,
            np.frombuffer(self.times, dtype=np.int64),
            np.frombuffer(self.lengths, dtype=np.uint32),
            b"".join(self.bodies),
        )
        self._reset()
        return batch


#: The dtypes an array of a message or a batch may declare, by the name it travels under.
DTYPES: dict[str, np.dtype[Any]] = {
    "i8": np.dtype("<i8"),
    "u4": np.dtype("<u4"),
    "i4": np.dtype("<i4"),
    "f8": np.dtype("<f8"),
    "raw_fixed": RAW_FIXED.newbyteorder("<"),
}
_NAMES = {dt: name for name, dt in DTYPES.items()}


def _enc_hook(obj: object) -> object:
    if isinstance(obj, np.ndarray):
        return to_data(obj, _NAMES)
    raise NotImplementedError(f"{type(obj).__name__} cannot be sent as data")


def _dec_hook(typ: type, obj: Any) -> object:
    if typ is np.ndarray:
        return from_data(obj, DTYPES)
    raise NotImplementedError(f"no decoder for {typ!r}")


def array_hooks() -> tuple[Any, Any]:
    """msgspec's ``enc_hook`` and ``dec_hook`` for the arrays of ``DTYPES``."""
    return _enc_hook, _dec_hook


_ENCODER = msgspec.msgpack.Encoder(enc_hook=_enc_hook)
_DECODER = msgspec.msgpack.Decoder(RawBatch, dec_hook=_dec_hook)


def encode_batch(batch: RawBatch) -> bytes:
    """``batch`` as data (a backlog's spill file)."""
    return _ENCODER.encode(batch)


def decode_batch(data: bytes | bytearray | memoryview) -> RawBatch:
    """A batch ``encode_batch`` wrote, checked (``check_batch``); ``DataError`` if not."""
    try:
        batch = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise DataError(f"a malformed batch of finished requests ({exc})") from None
    check_batch(batch)
    return batch


def check_batch(b: RawBatch) -> None:
    """``DataError`` unless the columns of ``b`` agree with each other."""
    rows = len(b.fixed)
    if b.fixed.ndim != 1 or b.fixed.dtype != RAW_FIXED:
        raise DataError("a batch's rows are not one column of its fixed fields")
    if b.times.ndim != 1 or b.times.dtype != np.int64 or b.lengths.dtype != np.uint32:
        raise DataError("a batch's reads are not int64 times and uint32 lengths")
    if b.lengths.ndim != 1:
        raise DataError("a batch's read lengths are not one column")
    if len(b.kinds) != rows or len(b.errors) != rows:
        raise DataError(f"a batch of {rows} rows with {len(b.kinds)} kinds, {len(b.errors)} errors")
    pieces = b.fixed["pieces"]
    if rows and int(pieces.min()) < 0:
        raise DataError("a batch's row counts fewer than no reads")
    reads = int(pieces.sum(dtype=np.int64))
    if reads != len(b.times) or reads != len(b.lengths):
        raise DataError(
            f"a batch whose rows count {reads} reads, with {len(b.times)} times and "
            f"{len(b.lengths)} lengths"
        )
    if int(b.lengths.sum(dtype=np.int64)) != len(b.body):
        raise DataError("a batch whose reads' lengths do not add up to its bytes")
