"""Kernel receive stamps (``stamped.py``): a read is dated when its bytes arrived, however
late the process read them; reads that gathered several packets carry the last one's
stamp; writes that do not fit the socket buffer are finished later; a server side accepts
connections whose requests are dated the same way."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable
from time import perf_counter_ns

import pytest

from pytest_llmslo import stamped

pytestmark = pytest.mark.skipif(not stamped.AVAILABLE, reason="kernel stamps need Linux")


class Recorder:
    def __init__(self) -> None:
        self.reads: list[tuple[bytes, int]] = []
        self.lost: list[Exception | None] = []
        self.transport: stamped.StampedSocket | None = None

    def connection_made(self, transport: stamped.StampedSocket) -> None:
        self.transport = transport

    def received(self, data: bytes, ts: int) -> None:
        self.reads.append((data, ts))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)


async def until(cond: Callable[[], object], timeout_s: float = 0.25) -> None:
    """Let the loop run until ``cond()`` holds (or the timeout passes)."""
    for _ in range(int(timeout_s / 0.005)):
        await asyncio.sleep(0.005)
        if cond():
            return


def listener() -> socket.socket:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    return srv


async def connected(host: str) -> tuple[socket.socket, Recorder, socket.socket]:
    """A listener, a stamped connection to it from ``host``, and the accepted peer."""
    srv = listener()
    proto = Recorder()
    await stamped.open_stamped(host, srv.getsockname()[1], lambda: proto)
    peer, _ = srv.accept()
    return srv, proto, peer


def send_at(sock: socket.socket, when: list[tuple[float, bytes]], sent: list[int]) -> None:
    """From a thread: send each payload at its perf_counter time (s), noting when."""
    for at, data in when:
        time.sleep(max(at - time.perf_counter(), 0))
        sent.append(perf_counter_ns())
        sock.sendall(data)


async def test_a_read_is_dated_when_its_bytes_arrived_not_when_it_was_read() -> None:
    srv, proto, peer = await connected("127.0.0.1")
    sent: list[int] = []
    t0 = time.perf_counter()
    th = threading.Thread(target=send_at, args=(peer, [(t0 + 0.05, b"one")], sent))
    th.start()
    time.sleep(0.3)  # the loop is blocked: the bytes wait 250 ms to be read
    read_from = perf_counter_ns()
    th.join()
    await until(lambda: proto.reads)
    ((data, ts),) = proto.reads
    assert data == b"one"
    assert abs(ts - sent[0]) < 5_000_000, (ts - sent[0]) / 1e6  # within 5 ms of the send
    assert read_from - ts > 200_000_000  # and not when it was read
    # Packets that arrived while the loop was away come back in one read, stamped with
    # the last one's arrival.
    sent.clear()
    t0 = time.perf_counter()
    th = threading.Thread(
        target=send_at, args=(peer, [(t0 + 0.02, b"two"), (t0 + 0.1, b"three")], sent)
    )
    th.start()
    time.sleep(0.3)
    th.join()
    await until(lambda: len(proto.reads) > 1)
    data, ts = proto.reads[1]
    assert data == b"twothree" and abs(ts - sent[1]) < 5_000_000
    # The peer closes: the protocol hears of it once.
    peer.close()
    await until(lambda: proto.lost)
    assert proto.lost == [None] and proto.transport is not None and proto.transport.is_closing()
    srv.close()


async def test_writes_larger_than_the_socket_buffer_are_finished_later() -> None:
    srv, proto, peer = await connected("127.0.0.1")
    payload = bytes(range(256)) * (32 * 1024)  # 8 MiB, far over the buffers
    assert proto.transport is not None
    proto.transport.write(payload)
    proto.transport.write(b"end")
    got = bytearray()

    def drain() -> None:
        while len(got) < len(payload) + 3:
            got.extend(peer.recv(1 << 20))

    await asyncio.get_running_loop().run_in_executor(None, drain)
    assert bytes(got) == payload + b"end"
    proto.transport.close()
    await asyncio.sleep(0.01)
    assert proto.lost == [None]
    peer.close()
    srv.close()


async def test_a_host_name_is_resolved() -> None:
    srv, proto, peer = await connected("localhost")
    peer.sendall(b"hi")
    await until(lambda: proto.reads)
    assert proto.reads[0][0] == b"hi"
    assert proto.transport is not None
    proto.transport.close()
    peer.close()
    srv.close()


async def test_nothing_listening_is_an_os_error() -> None:
    srv = listener()
    port = srv.getsockname()[1]
    srv.close()
    with pytest.raises(OSError):
        await stamped.open_stamped("127.0.0.1", port, Recorder)


async def test_a_server_dates_requests_by_their_arrival() -> None:
    srv = listener()
    srv.setblocking(False)
    protos: list[Recorder] = []

    def make() -> Recorder:
        protos.append(Recorder())
        return protos[-1]

    stop = stamped.serve_stamped(srv, make)
    client = socket.create_connection(srv.getsockname())
    await asyncio.sleep(0.02)  # accepted
    sent = perf_counter_ns()
    client.sendall(b"GET / HTTP/1.1\r\n\r\n")
    time.sleep(0.2)  # the server's loop is busy
    await until(lambda: protos and protos[0].reads)
    ((data, ts),) = protos[0].reads
    assert data.startswith(b"GET") and abs(ts - sent) < 5_000_000
    assert protos[0].transport is not None
    protos[0].transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert client.recv(100).startswith(b"HTTP/1.1 200")
    stop()  # closes what is still open
    await asyncio.sleep(0.01)
    assert protos[0].lost == [None]
    assert client.recv(100) == b""
    client.close()
    srv.close()
