"""The worker protocol's decoder against thousands of malformed frames: every one is a
``WireError`` (or a message, for the rare mutation that is still one), never another
exception, never code run (the frames are data: there is nothing in them to run)."""

from __future__ import annotations

import random

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec
from pytest_llmslo.load.arraydata import DataError
from pytest_llmslo.load.backlog import BatchBuilder
from pytest_llmslo.load.client import RawExchange
from pytest_llmslo.load.drive import WorkerResult
from pytest_llmslo.load.levelplan import Limits, plan_level
from pytest_llmslo.load.promptlengths import LengthModel
from pytest_llmslo.load.protocol import (
    PROTOCOL_VERSION,
    Go,
    Hello,
    Ping,
    Pong,
    Raw,
    Ready,
    Result,
    Tally,
)
from pytest_llmslo.load.rawbatch import decode_batch, encode_batch
from pytest_llmslo.load.wire import WireError, decode, encode
from pytest_llmslo.records import LoadLevel


def _batch(rows: int = 6) -> object:
    b = BatchBuilder()
    for i in range(rows):
        raw = RawExchange()
        raw.sent_ns, raw.end_ns, raw.status = i, i + 9, 200
        raw.times, raw.pieces = [i + 1, i + 2], [b"data: {}\n\n", b"data: [DONE]\n\n"]
        if i == 2:
            raw.kind, raw.error = "timeout", "cut"
        b.add(i, 8, 4, i, raw)
    return b.take()


def _frames() -> list[bytes]:
    job = LoadJob(
        ClientSettings("http://127.0.0.1:9", "m", extra_body={"a": [1]}),
        WorkloadSpec(isl=8, osl=4, calibrate=False),
        LoadLevel.rate(20, "poisson", 1),
        requests=30,
        warmup=0,
    )
    plan = plan_level(job, LengthModel(), workers=2).plans[0]
    msgs = [
        Hello(PROTOCOL_VERSION, plan),
        Go(5, Limits(1, 2, 3)),
        Ping(1),
        Pong(1, 2, 3),
        Ready(PROTOCOL_VERSION, 0),
        Raw(0, _batch()),  # type: ignore[arg-type]
        Tally(0, 1, 2, 3),
        Result(WorkerResult(0, stalls=[(1, 2)], wall_s=1.5)),
    ]
    return [encode(m) for m in msgs]


FRAMES = _frames()


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    op = rng.randrange(5)
    if op == 0 and data:  # flip bits
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif op == 1:  # truncate
        del data[rng.randrange(len(data) + 1) :]
    elif op == 2:  # random bytes spliced in
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randint(1, 32))
    elif op == 3:  # a byte overwritten with a MessagePack type marker
        if data:
            data[rng.randrange(len(data))] = rng.choice([0xC1, 0xDD, 0xDF, 0xC6, 0xDB, 0x92, 0xA4])
    else:  # pure noise
        data = bytearray(rng.randbytes(rng.randint(0, 256)))
    return bytes(data)


def test_ten_thousand_malformed_frames_are_refused_by_name() -> None:
    rng = random.Random(33)
    refused = 0
    for _ in range(10_000):
        frame = _mutate(rng, rng.choice(FRAMES))
        try:
            decode(frame)
        except WireError as exc:
            assert str(exc)
            refused += 1
    assert refused > 9_000  # nearly every mutation is caught; the rest are still messages


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
def test_any_bytes_decode_to_a_message_or_a_wire_error(data: bytes) -> None:
    try:
        decode(data)
    except WireError:
        pass


_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=16),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(["hello", "go", "raw", "result", "pong", "nope"]), _VALUES)
def test_well_formed_msgpack_of_the_wrong_shape_is_a_wire_error(kind: str, body: object) -> None:
    try:
        decode(msgspec.msgpack.encode([kind, body]))
    except WireError:
        pass


def test_a_batch_whose_columns_disagree_is_refused() -> None:
    good = _batch()
    assert len(decode_batch(encode_batch(good))) == 6  # type: ignore[arg-type]
    bad = msgspec.msgpack.decode(encode_batch(good))  # type: ignore[arg-type]
    bad["body"] = bad["body"][:-1]  # the reads' lengths add up to one more byte
    try:
        decode_batch(msgspec.msgpack.encode(bad))
    except DataError as exc:
        assert "do not add up" in str(exc)
    else:
        raise AssertionError("a batch with a byte missing was read")
