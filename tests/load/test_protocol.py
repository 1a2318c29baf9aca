"""The worker protocol: named messages that survive the wire (data-only frames), and a
version checked at the handshake on both sides, with both versions named when they differ."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, protocol
from pytest_llmslo.load.backlog import BatchBuilder
from pytest_llmslo.load.client import RawExchange
from pytest_llmslo.load.drive import WorkerResult
from pytest_llmslo.load.levelplan import Limits, plan_level
from pytest_llmslo.load.promptlengths import LengthModel
from pytest_llmslo.load.protocol import (
    PROTOCOL_VERSION,
    Drain,
    Failure,
    Go,
    ProtocolError,
    Raw,
    Ready,
    Result,
    Stop,
    Tally,
    check_version,
)
from pytest_llmslo.load.wire import Link, decode, encode
from pytest_llmslo.records import LoadLevel


def test_messages_are_named_and_survive_the_wire() -> None:
    raw = RawExchange()
    raw.sent_ns, raw.end_ns, raw.status = 1, 2, 200
    raw.times, raw.pieces = [5, 6], [b"data: x\n\n", b"data: [DONE]\n\n"]
    batch = BatchBuilder()
    batch.add(7, 8, 9, 0, raw, -1, 0)
    msgs = [
        Go(123, Limits(None, 0, None)),
        Drain(),
        Stop(),
        Ready(PROTOCOL_VERSION, 3),
        Raw(3, batch.take()),
        Tally(3, 10, 1, 2),
        Result(WorkerResult(3, warmup_done=4)),
        Failure("boom"),
    ]
    kinds = [m.kind for m in msgs]
    assert kinds == ["go", "drain", "stop", "ready", "raw", "tally", "result", "failure"]
    for m in msgs:
        back = decode(encode(m))
        assert type(back) is type(m) and back.kind == m.kind
        if not isinstance(m, Raw):
            assert back == m
    assert decode(encode(msgs[6])).result.warmup_done == 4  # type: ignore[union-attr]
    # A Raw message's columns come back as they went: each exchange's reads and bytes.
    back = decode(encode(msgs[4])).batch  # type: ignore[union-attr]
    job, scheduled, again = back.exchange(0, 0, 0)
    assert (job.index, job.isl, job.osl, scheduled) == (7, 8, 9, 0)
    assert again.times == raw.times and again.pieces == raw.pieces
    assert (again.sent_ns, again.end_ns, again.status) == (1, 2, 200)


def test_a_version_mismatch_names_both_versions() -> None:
    check_version(PROTOCOL_VERSION, ours_side="parent", their_side="worker")
    with pytest.raises(ProtocolError) as err:
        check_version(PROTOCOL_VERSION + 1, ours_side="parent", their_side="worker")
    text = str(err.value)
    assert f"worker speaks version {PROTOCOL_VERSION + 1}" in text
    assert f"parent version {PROTOCOL_VERSION}" in text


def test_a_worker_refuses_a_parent_of_another_version() -> None:
    parent, child = socket.socketpair()
    fd = child.fileno()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmslo.load.worker", str(fd)], pass_fds=(fd,)
    )
    child.close()
    conn = Link(parent)
    job = LoadJob(
        ClientSettings("http://127.0.0.1:9", "m"),
        WorkloadSpec(isl=8, osl=4, calibrate=False),
        LoadLevel.concurrency(1),
        requests=2,
    )
    plan = plan_level(job, LengthModel()).plans[0]
    try:
        conn.send(protocol.Hello(PROTOCOL_VERSION + 1, plan))
        parent.settimeout(60)
        msg = conn.recv()
    finally:
        conn.close()
        proc.wait(timeout=30)
    assert isinstance(msg, Failure)
    assert f"parent speaks version {PROTOCOL_VERSION + 1}" in msg.error
    assert f"the worker version {PROTOCOL_VERSION}" in msg.error
