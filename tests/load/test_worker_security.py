"""The remote workers' port under attack (docs/security.md): what is not a worker holding
the session's key is turned away before a byte of the protocol is decoded, a joined
worker's malformed frame costs that worker alone, and nothing a peer sends runs code."""

from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from time import perf_counter_ns

import pytest

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.load.handshake import MAGIC_WORKER, join_session
from pytest_llmslo.load.protocol import PROTOCOL_VERSION, Go, Hello, Ping, Pong, Ready
from pytest_llmslo.load.remote import WorkerHub, parse_address
from pytest_llmslo.load.wire import Link, WireError
from pytest_llmslo.load.workerkey import WorkerKey
from pytest_llmslo.records import LoadLevel

from .conftest import fixed_server
from .remote_helpers import workers

SERVER = ("--ttft-ms", "20", "--itl-ms", "5", "--tokens", "10", "--loop", "asyncio")
KEY = WorkerKey(b"k" * 32)


class _Payload:
    """A pickle that, unpickled, writes a file: what the attack of old sent."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.path}",))


def _old_frame(obj: object) -> bytes:
    """``obj`` pickled in ``multiprocessing.connection``'s framing (protocol version 3)."""
    data = pickle.dumps(obj)
    return struct.pack("!i", len(data)) + data


def _connect(hub: WorkerHub) -> socket.socket:
    return socket.create_connection(parse_address(hub.address), timeout=10)


def _keyed(hub: WorkerHub, name: str = "mallory") -> tuple[socket.socket, Link]:
    """A peer that holds the key (a compromised worker) and joined."""
    sock = _connect(hub)
    join_session(sock, KEY.secret, name)
    return sock, Link(sock)


def _wait(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.02)


def test_attacks_run_nothing_and_real_workers_still_measure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="pytest_llmslo.load.remote")
    marker = tmp_path / "pwned"
    monkeypatch.setenv("LLMSLO_WORKER_KEY", KEY.secret.decode())
    with fixed_server(*SERVER) as url:
        hub = WorkerHub("127.0.0.1:0", 1, wait_s=60, key=KEY)
        hub.handshake_s = 1.0
        hub.open()
        peers: list[socket.socket] = []
        try:
            # 1. The attack of old: a JSON join, then a pickle that runs a command.
            s = _connect(hub)
            join = b'{"tag": "llmslo-load-worker", "version": 3, "name": "x"}'
            s.sendall(struct.pack("!i", len(join)) + join + _old_frame(_Payload(marker)))
            peers.append(s)
            # 2. The pickle as the very first bytes.
            s = _connect(hub)
            s.sendall(_old_frame(_Payload(marker)))
            peers.append(s)
            # 3. A wrong key.
            s = _connect(hub)
            with pytest.raises(Exception, match="refused this worker"):
                join_session(s, b"w" * 32, "wrong")
            peers.append(s)
            # 4. An old protocol version.
            s = _connect(hub)
            s.sendall(MAGIC_WORKER + struct.pack("!I", PROTOCOL_VERSION - 1) + bytes(32))
            peers.append(s)
            # 5. A frame of 1 GiB declared length, first thing.
            s = _connect(hub)
            s.sendall(struct.pack("!I", 1 << 30) + b"\0" * 64)
            peers.append(s)
            # 6. A slow loris: a byte every 0.2 s, for longer than the handshake may take.
            loris = _connect(hub)
            peers.append(loris)
            stop = threading.Event()

            def trickle() -> None:
                for b in MAGIC_WORKER * 4:
                    if stop.wait(0.2):
                        return
                    try:
                        loris.sendall(bytes([b]))
                    except OSError:
                        return

            t = threading.Thread(target=trickle)
            t.start()
            # 7. Random bytes.
            s = _connect(hub)
            s.sendall(os.urandom(4096))
            peers.append(s)
            _wait(lambda: hub.turned_away >= 7)
            stop.set()
            t.join(5)
            assert not hub.links
            # The real worker joins and measures, as before.
            with workers(hub.address, [None]):
                run = run_load_sync(
                    LoadJob(
                        ClientSettings(url, "fixed"),
                        WorkloadSpec(isl=8, osl=10, calibrate=False, seed=3),
                        LoadLevel.concurrency(2),
                        requests=20,
                        warmup=2,
                        workers=hub,
                    )
                )
            assert sorted(r.index for r in run.records) == list(range(2, 22))
            assert all(r.ok for r in run.records)
            assert not run.meta["remote"]["lost"]
        finally:
            for s in peers:
                s.close()
            hub.close()
    assert not marker.exists()
    text = caplog.text
    for why in ("older protocol version", "not a load worker", "a wrong key", "in time"):
        assert why in text, why
    assert f"protocol version {PROTOCOL_VERSION - 1}" in text


def test_a_joined_worker_that_sends_a_pickle_is_lost_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hub = WorkerHub("127.0.0.1:0", 1, wait_s=20, key=KEY)
    hub.open()
    try:
        sock, link = _keyed(hub)
        (joined,) = hub.ensure()
        got: list[object] = []
        joined.attach(got.append)
        link.send_bytes(pickle.dumps(_Payload(marker)))
        _wait(lambda: got)  # the level is told: the worker is lost
        assert got[0].kind == "lost"  # type: ignore[attr-defined]
        assert "not a message of the protocol" in (joined.lost or "")
        sock.close()
    finally:
        hub.close()
    assert not marker.exists()


def test_a_frame_declaring_1_gib_is_refused_before_it_is_read() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack("!I", 1 << 30) + b"\0" * 1024)
        tracemalloc.start()
        try:
            with pytest.raises(WireError, match="declared a frame of 1073741824 bytes"):
                Link(b).recv()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20


def test_a_truncated_frame_is_the_end_of_the_connection() -> None:
    a, b = socket.socketpair()
    with b:
        a.sendall(struct.pack("!I", 100) + b"\x92")
        a.close()
        with pytest.raises(EOFError, match="within a frame"):
            Link(b).recv()


class _FakeWorker(threading.Thread):
    """A worker holding the key that follows the protocol until its level starts, then
    sends ``frame`` (a compromised or broken worker)."""

    def __init__(self, hub: WorkerHub, frame: bytes) -> None:
        super().__init__(daemon=True)
        self.sock, self.link = _keyed(hub, "broken")
        self.frame = frame

    def run(self) -> None:
        try:
            while True:
                msg = self.link.recv()
                if isinstance(msg, Hello):
                    self.link.send(Ready(PROTOCOL_VERSION, msg.plan.worker))
                elif isinstance(msg, Ping):
                    now = perf_counter_ns()
                    self.link.send(Pong(msg.seq, now, now))
                elif isinstance(msg, Go):
                    time.sleep(0.5)
                    self.link.send_bytes(self.frame)
        except (OSError, EOFError, WireError):
            return


def test_a_malformed_frame_mid_level_loses_that_worker_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMSLO_WORKER_KEY", KEY.secret.decode())
    with fixed_server(*SERVER) as url:
        hub = WorkerHub("127.0.0.1:0", 2, wait_s=60, key=KEY)
        hub.open()
        try:
            fake = _FakeWorker(hub, b"\x92\xa3raw\xc1")  # 0xc1: never valid MessagePack
            fake.start()
            with workers(hub.address, [None]):
                run = run_load_sync(
                    LoadJob(
                        ClientSettings(url, "fixed"),
                        WorkloadSpec(isl=8, osl=10, calibrate=False, seed=3),
                        LoadLevel.concurrency(4),
                        None,
                        duration_s=2.0,
                        grace_s=1.0,
                        warmup=0,
                        workers=hub,
                    )
                )
            lost = run.meta["remote"]["lost"]
            assert len(lost) == 1 and "broken" in next(iter(lost))
            assert "not a message of the protocol" in next(iter(lost.values()))
            assert not run.health.valid
            kept = [r for r in run.records if r.ok]
            assert len(kept) > 10  # the real worker's share is measured and kept
        finally:
            hub.close()
            fake.sock.close()


def test_a_worker_past_the_number_asked_for_is_told_so() -> None:
    hub = WorkerHub("127.0.0.1:0", 1, wait_s=20, key=KEY)
    hub.open()
    try:
        first, _ = _keyed(hub, "first")
        hub.ensure()
        extra = _connect(hub)
        with pytest.raises(Exception, match="the session has all its 1 workers"):
            join_session(extra, KEY.secret, "extra")
        assert [link.name for link in hub.links] == ["first"]
        first.close()
        extra.close()
    finally:
        hub.close()
