"""Bounded exchanges: a body that never ends, or trickles, ends the probe at its size
bound or total deadline instead of holding it (httpx alone bounds each read only)."""

from __future__ import annotations

import gzip
import itertools
import time
from collections.abc import Iterator

import httpx
import pytest

from pytest_llmslo.probe import BodyTooLarge, ExchangeTooSlow, fetch


def client(stream: Iterator[bytes], headers: dict[str, str] | None = None) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers or {}, content=stream)

    return httpx.Client(transport=httpx.MockTransport(handler), timeout=5.0)


def test_an_endless_body_stops_at_the_size_bound() -> None:
    endless = itertools.repeat(b"x" * 65536)
    with client(endless) as c, pytest.raises(BodyTooLarge, match="is over 1 MiB"):
        fetch(c, "http://engine/metrics", max_bytes=1024 * 1024)


def test_a_trickling_body_stops_at_the_total_deadline() -> None:
    def trickle() -> Iterator[bytes]:
        while True:
            time.sleep(0.02)
            yield b"#"

    with client(trickle()) as c, pytest.raises(ExchangeTooSlow, match=r"did not end within 0\.2 s"):
        fetch(c, "http://engine/metrics", total_s=0.2)


def test_a_decompressed_body_counts_against_the_bound() -> None:
    bomb = gzip.compress(b"\0" * (4 * 1024 * 1024))  # a few kB on the wire
    with (
        client(iter([bomb]), {"Content-Encoding": "gzip"}) as c,
        pytest.raises(BodyTooLarge),
    ):
        fetch(c, "http://engine/metrics", max_bytes=1024 * 1024)


def test_a_finished_body_is_an_ordinary_response() -> None:
    body = gzip.compress(b'{"data": [{"id": "m"}]}')
    with client(iter([body[:5], body[5:]]), {"Content-Encoding": "gzip"}) as c:
        r = fetch(c, "http://engine/v1/models")
    assert r.status_code == 200 and r.json() == {"data": [{"id": "m"}]}
