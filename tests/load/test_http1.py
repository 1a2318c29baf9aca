"""The fast client's response parser fed the same response split at every byte."""

from __future__ import annotations

import asyncio

import pytest

from pytest_llmslo.load.client import RawExchange
from pytest_llmslo.load.http1 import _Conn


class _FakeTransport:
    def __init__(self) -> None:
        self.closed = False

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


PAYLOADS = [b'data: {"a": 1}\n\n', b'data: {"b": 22}\n\n']
DONE = b"data: [DONE]\n\n"
CHUNKED = (
    b"HTTP/1.1 100 Continue\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in PAYLOADS)
    + b"5;ext=1\r\nabcde\r\n"
    + b"%x\r\n%s\r\n" % (len(DONE), DONE)
    + b"0\r\nTrailer: x\r\n\r\n"
)


def feed(response: bytes, cuts: list[int]) -> tuple[RawExchange, _Conn, bool]:
    loop = asyncio.new_event_loop()
    try:
        conn = _Conn()
        conn.connection_made(_FakeTransport())  # type: ignore[arg-type]
        ex = RawExchange()
        fut: asyncio.Future[None] = loop.create_future()
        conn.start(ex, fut, b"")
        prev = 0
        for c in [*cuts, len(response)]:
            if c > prev:
                conn.data_received(response[prev:c])
            prev = c
        return ex, conn, fut.done()
    finally:
        loop.close()


@pytest.mark.parametrize("cut", range(1, len(CHUNKED)))
def test_chunked_split_anywhere(cut: int) -> None:
    ex, conn, done = feed(CHUNKED, [cut])
    assert done and ex.kind is None and ex.status == 200
    assert b"".join(ex.pieces) == b"".join(PAYLOADS) + b"abcde" + DONE
    assert conn.keep


def test_chunked_byte_by_byte() -> None:
    ex, _, done = feed(CHUNKED, list(range(1, len(CHUNKED))))
    assert done and b"".join(ex.pieces) == b"".join(PAYLOADS) + b"abcde" + DONE


def test_content_length_and_connection_close() -> None:
    body = b"".join(PAYLOADS)
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (
        len(body),
        body,
    )
    for cut in range(1, len(resp)):
        ex, conn, done = feed(resp, [cut])
        assert done and b"".join(ex.pieces) == body and not conn.keep


def test_bad_chunk_size_is_malformed() -> None:
    resp = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"
    ex, _, done = feed(resp, [])
    assert done and ex.kind == "malformed"
