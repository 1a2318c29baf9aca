"""Remote workers without a server: the clock's arithmetic, the split of a level, and the
session's listener refusing what is not a worker of its version (by name)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import threading
from array import array

import numpy as np
import pytest

from pytest_llmslo.errors import LoadError
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec
from pytest_llmslo.load.clock import ClockLink, ClockSample, best_offset, shift_record
from pytest_llmslo.load.drive import WorkerResult
from pytest_llmslo.load.fleet import with_workers
from pytest_llmslo.load.handshake import MAGIC_SESSION, MAGIC_WORKER, join_session
from pytest_llmslo.load.health import HealthThresholds
from pytest_llmslo.load.jobsource import JobSource
from pytest_llmslo.load.levelplan import plan_level
from pytest_llmslo.load.promptlengths import LengthModel
from pytest_llmslo.load.protocol import PROTOCOL_VERSION
from pytest_llmslo.load.remote import WorkerHub, parse_address
from pytest_llmslo.load.remote_pool import RemoteLevel
from pytest_llmslo.load.schedule import arrival_offsets_ns
from pytest_llmslo.load.workerkey import KEY_ENV
from pytest_llmslo.records import LoadLevel, RequestRecord, Run

from .remote_helpers import ROOT, worker_cmd

# -- the clock ---------------------------------------------------------------------------


def _probe(t1: int, offset: int, up: int, down: int, hold: int = 1_000) -> ClockSample:
    """A probe sent at ``t1`` to a worker ``offset`` ahead, ``up``/``down`` ns each way."""
    t2 = t1 + up + offset
    return ClockSample(t1, t2, t2 + hold, t1 + up + hold + down)


def test_the_offset_is_the_minimum_round_trip_probes_within_its_uncertainty() -> None:
    offset = 7_000_000_000_123
    # Queued probes with lopsided delays, and one quick one.
    samples = [
        _probe(0, offset, 900_000, 50_000),
        _probe(10_000_000, offset, 40_000, 2_000_000),
        _probe(20_000_000, offset, 30_000, 50_000),
    ]
    got = best_offset(samples)
    assert got.rtt_ns == 80_000 and got.uncertainty_ns == 40_000
    assert abs(got.offset_ns - offset) <= got.uncertainty_ns
    assert got.samples == 3
    # Every probe's own error stays within its half round trip, as NTP promises.
    for s in samples:
        assert abs(s.offset_ns - offset) <= s.rtt_ns / 2


def test_a_drifting_clock_is_followed_between_the_two_measurements() -> None:
    before = best_offset([_probe(1_000_000_000, 5_000, 10_000, 10_000)])
    after = best_offset([_probe(11_000_000_000, 5_000 + 2_000_000, 10_000, 10_000)])
    link = ClockLink(before, after)
    assert link.drift_ns == 2_000_000
    mid_worker = 6_000_000_000 + 10_000 + 5_000 + 1_000_000
    assert abs(link.to_parent(mid_worker) - 6_000_010_000) < 5_000
    assert link.to_parent(before.at_ns + before.offset_ns) == before.at_ns
    assert link.to_worker(123) == 123 + before.offset_ns
    assert link.uncertainty_ns == max(before.uncertainty_ns, after.uncertainty_ns)


def test_a_record_moves_to_the_parents_clock_with_its_latencies_unchanged() -> None:
    rec = RequestRecord(
        index=3, scheduled_ns=1_000, sent_ns=1_500, end_ns=9_000,
        chunk_ns=array("q", [4_000, 5_000, 8_000]), first_content_ns=4_000, status=200,
    )  # fmt: skip
    moved = shift_record(rec, 700)
    assert (moved.scheduled_ns, moved.sent_ns, moved.end_ns) == (300, 800, 8_300)
    assert list(moved.chunk_ns) == [3_300, 4_300, 7_300] and moved.first_content_ns == 3_300
    assert np.diff(moved.chunk_ns).tolist() == np.diff(rec.chunk_ns).tolist()
    assert shift_record(rec, 0) is rec


# -- the split ---------------------------------------------------------------------------


def _job(level: LoadLevel, requests: int, workload: WorkloadSpec | None = None) -> LoadJob:
    return LoadJob(
        ClientSettings("http://127.0.0.1:9", "m"),
        workload or WorkloadSpec(isl=8, osl=4, calibrate=False, seed=2),
        level,
        requests=requests,
        warmup=0,
    )


def test_an_open_loop_split_over_workers_is_exactly_its_schedule() -> None:
    level = LoadLevel.rate(50, "poisson", 9)
    planned = plan_level(_job(level, 301), LengthModel(), workers=3)
    assert planned.processes == 3
    offsets = [o for p in planned.plans for o in p.jobs.offsets.tolist()]  # type: ignore[union-attr]
    assert sorted(offsets) == arrival_offsets_ns(level, 301)
    indices = sorted(j.index for p in planned.plans for j in JobSource(p.jobs))
    assert indices == list(range(301))


def test_a_closed_loop_is_split_by_concurrency() -> None:
    planned = plan_level(_job(LoadLevel.concurrency(10), 50), LengthModel(), workers=3)
    assert [p.slots for p in planned.plans] == [4, 3, 3]


def test_conversations_stay_on_one_worker_dealt_by_a_hash_of_their_id() -> None:
    wl = WorkloadSpec(isl=8, osl=4, calibrate=False, seed=4, turns=3)
    level = LoadLevel.rate(5, "poisson", 1)
    planned = plan_level(_job(level, 3 * 40, wl), LengthModel(), workers=3)
    mine = []
    for p in planned.plans:
        src = JobSource(p.jobs)
        convs = []
        while (got := src.next_conversation()) is not None:
            convs.append(got[0].index)
        assert len(convs) == len(p.jobs.offsets)  # type: ignore[arg-type]
        mine.append(convs)
    assert sorted(i for m in mine for i in m) == list(range(40))
    assert all(m for m in mine) and len({tuple(m) for m in mine}) == 3
    # The arrivals went with their conversations: their union is the schedule.
    offsets = sorted(o for p in planned.plans for o in p.jobs.offsets.tolist())  # type: ignore[union-attr]
    assert offsets == arrival_offsets_ns(level, 40)


# -- the listener ------------------------------------------------------------------------


def test_addresses_are_host_and_port() -> None:
    assert parse_address("0.0.0.0:7070") == ("0.0.0.0", 7070)
    assert parse_address("[::1]:0") == ("::1", 0)
    for bad in ("7070", "host:", "host:http", "h:70000"):
        with pytest.raises(LoadError, match="HOST:PORT"):
            parse_address(bad)


def test_the_wait_for_workers_is_bounded_and_says_how_many_came() -> None:
    hub = WorkerHub("127.0.0.1:0", 2, wait_s=0.3)
    try:
        with pytest.raises(LoadError, match=r"only 0 of 2 remote load workers .* within 0.3 s"):
            hub.ensure()
    finally:
        hub.close()


def _hello(version: int) -> bytes:
    return MAGIC_WORKER + struct.pack("!I", version) + bytes(32)


def test_a_worker_of_another_version_is_told_so_and_the_wait_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = WorkerHub("127.0.0.1:0", 1, wait_s=20)
    hub.open()
    with socket.create_connection(parse_address(hub.address), timeout=10) as peer:
        peer.sendall(_hello(99))
        answer = peer.recv(44)
        assert answer[:8] == MAGIC_SESSION  # the session's version, where any version reads it
        assert struct.unpack("!I", answer[8:12])[0] == PROTOCOL_VERSION
        assert peer.recv(1) == b""  # and then it closed
    links = _join_in_thread(hub, "real")
    try:
        assert [link.name for link in links] == ["real"]
    finally:
        hub.close()
    assert "protocol version 99" in caplog.text and "turned away" in caplog.text


def test_a_worker_of_version_3_is_told_to_upgrade_in_its_own_terms() -> None:
    hub = WorkerHub("127.0.0.1:0", 1, wait_s=20)
    hub.open()
    try:
        with socket.create_connection(parse_address(hub.address), timeout=10) as peer:
            join = json.dumps({"tag": "llmslo-load-worker", "version": 3, "name": "old"}).encode()
            peer.sendall(struct.pack("!i", len(join)) + join)  # what version 3 sent first
            size = struct.unpack("!i", peer.recv(4))[0]
            answer = json.loads(peer.recv(size))
        assert answer["version"] == PROTOCOL_VERSION
        assert "run the same version of pytest-llmslo on both sides" in answer["refused"]
    finally:
        hub.close()


def _join_in_thread(hub: WorkerHub, name: str) -> list:
    """A worker that joins ``hub`` with its key (in a thread); the hub's links."""
    assert hub.key is not None
    socks: list[socket.socket] = []

    def worker() -> None:
        sock = socket.create_connection(parse_address(hub.address), timeout=10)
        socks.append(sock)
        join_session(sock, hub.key.secret, name)  # type: ignore[union-attr]

    t = threading.Thread(target=worker)
    t.start()
    try:
        return hub.ensure()
    finally:
        t.join(10)
        for sock in socks:
            sock.close()


def test_what_is_not_a_worker_is_turned_away_and_the_wait_goes_on() -> None:
    hub = WorkerHub("127.0.0.1:0", 1, wait_s=20)
    hub.open()
    address = parse_address(hub.address)
    stray = socket.create_connection(address)
    stray.sendall(b"GET / HTTP/1.1\r\n\r\n")  # a health check
    mute = socket.create_connection(address)  # says nothing at all
    try:
        (link,) = _join_in_thread(hub, "real")
        assert link.name == "real"
    finally:
        stray.close()
        mute.close()
        hub.close()


def _run_worker(address: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = worker_cmd(address, "w-test")
    cmd[cmd.index("60")] = "3"  # --connect-timeout
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)


def test_a_worker_told_another_version_by_its_session_says_so() -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{srv.getsockname()[1]}"

    def session() -> None:
        sock, _ = srv.accept()
        with sock:
            sock.recv(44)
            sock.sendall(MAGIC_SESSION + struct.pack("!I", PROTOCOL_VERSION + 5) + bytes(32))

    t = threading.Thread(target=session)
    t.start()
    try:
        out = _run_worker(address, {KEY_ENV: "k" * 32})
    finally:
        t.join(10)
        srv.close()
    assert out.returncode == 1
    assert f"the session speaks worker protocol version {PROTOCOL_VERSION + 5}" in out.stderr
    assert f"this worker version {PROTOCOL_VERSION}" in out.stderr


def test_a_worker_that_cannot_connect_names_the_address() -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    srv.close()  # nothing listens there now
    out = _run_worker(f"127.0.0.1:{port}", {KEY_ENV: "k" * 32})
    assert out.returncode == 1
    assert f"cannot connect to the session at 127.0.0.1:{port} within 3 s" in out.stderr


def test_only_a_worker_that_knows_the_key_joins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "s3cret-s3cret-s3cret")
    hub = WorkerHub("127.0.0.1:0", 1, wait_s=60)
    hub.open()
    links: list = []
    waiting = threading.Thread(target=lambda: links.extend(hub.ensure()))
    waiting.start()
    try:
        # The wrong key is turned away, and the session goes on waiting.
        wrong = _run_worker(hub.address, {KEY_ENV: "another-key-of-its-own"})
        assert wrong.returncode == 1
        assert "the session refused this worker: the worker's key is not the session's" in (
            wrong.stderr
        )
        with subprocess.Popen(
            worker_cmd(hub.address, "keyed"),
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.DEVNULL,
        ) as right:
            waiting.join(60)
            assert [link.name for link in links] == ["keyed"]
            hub.close()
            assert right.wait(timeout=20) == 0
    finally:
        hub.close()
        waiting.join(10)


# -- health across hosts -------------------------------------------------------------------


def _worker_result(worker: int, cpu_s: float) -> WorkerResult:
    recs = [
        RequestRecord(
            index=worker * 10 + i, scheduled_ns=i * 1_000_000, sent_ns=i * 1_000_000,
            end_ns=i * 1_000_000 + 500_000, chunk_ns=array("q", [i * 1_000_000 + 100_000]),
            status=200, finish_reason="length", worker=worker,
        )
        for i in range(10)
    ]  # fmt: skip
    return WorkerResult(worker, records=recs, cpu_s=cpu_s, wall_s=1.0, closed=True, slots=1)


def _level(uncertainty_ns: int) -> RemoteLevel:
    off = best_offset([_probe(0, 5_000, uncertainty_ns, uncertainty_ns, hold=0)])
    return RemoteLevel(
        names={0: "remote load worker a (h1:1)", 1: "remote load worker b (h2:1)"},
        clocks={0: ClockLink(off, off), 1: ClockLink(off, off)},
    )


def test_a_busy_worker_makes_the_level_invalid_and_is_named() -> None:
    results = [_worker_result(0, 0.2), _worker_result(1, 0.97)]
    run = Run(LoadLevel.concurrency(2), (), 0, 1, meta={})
    out = with_workers(run, results, _level(10_000), HealthThresholds(min_load_share=0))
    assert not out.health.valid
    (why,) = out.health.reasons
    assert why.startswith("remote load worker b (h2:1) was the bottleneck: client CPU 97%")
    lines = out.meta["traffic"]["workers"]
    assert [w["valid"] for w in lines] == [True, False]
    assert lines[0]["uncertainty_ms"] == pytest.approx(0.01)


def test_a_clock_known_too_loosely_makes_the_level_invalid() -> None:
    results = [_worker_result(0, 0.2), _worker_result(1, 0.2)]
    run = Run(LoadLevel.concurrency(2), (), 0, 1, meta={})
    th = HealthThresholds(min_load_share=0, max_clock_uncertainty_ms=1.0)
    assert with_workers(run, results, _level(900_000), th).health.valid
    out = with_workers(run, results, _level(3_000_000), th)
    assert not out.health.valid and len(out.health.reasons) == 2
    assert (
        "its clock offset is known to ±3.000 ms (> 1 ms, --client-max-clock)"
        in (out.health.reasons[0])
    )
