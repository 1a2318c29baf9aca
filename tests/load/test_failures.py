"""Failure injection through a scripted local server: every failure is a record with the
right kind, never an exception and never a silent drop, on both transports."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load
from pytest_llmslo.load.client import RawExchange, build_record, request_body
from pytest_llmslo.load.transports import make_transport
from pytest_llmslo.records import LoadLevel, RequestRecord

from .conftest import chunk, read_request, reset, scripted_server

TRANSPORTS = ["fast", "httpx"]
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def ev(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


async def one_request(url: str, transport: str, **kw: object) -> RequestRecord:
    settings = ClientSettings(url, "m", transport=transport, **kw)  # type: ignore[arg-type]
    t = make_transport(settings, 4)
    raw = RawExchange()
    try:
        await t.send(request_body(settings, "hello", 4), raw)
    finally:
        await t.aclose()
    return build_record(0, raw.sent_ns, raw)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_http_500_records_status_and_body(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        body = b'{"error": {"message": "engine exploded", "code": 500}}'
        writer.write(
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport)
    assert rec.error_kind == "http" and rec.status == 500
    assert "engine exploded" in (rec.error or "") and not rec.ok


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_error_event_mid_stream(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")))
        writer.write(chunk(b'event: error\ndata: {"message": "preempted"}\n\n') + b"0\r\n\r\n")
        await writer.drain()

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport)
    assert rec.error_kind == "stream_error" and "preempted" in (rec.error or "")
    assert rec.status == 200 and len(rec.chunk_ns) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_truncated_stream_without_done(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")) + chunk(ev("b")) + b"0\r\n\r\n")
        await writer.drain()

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport)
    assert rec.error_kind == "truncated" and len(rec.chunk_ns) == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_connection_reset_mid_stream(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")))
        await writer.drain()
        await asyncio.sleep(0.05)
        reset(writer)

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport)
    assert rec.error_kind == "reset" and len(rec.chunk_ns) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_closed_mid_body_is_reset(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")) + b"40\r\npartial")
        await writer.drain()
        writer.close()

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport)
    assert rec.error_kind == "reset"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_read_timeout(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")))
        await writer.drain()
        await asyncio.sleep(5)

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport, timeout_s=0.4)
    assert rec.error_kind == "timeout" and len(rec.chunk_ns) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_connection_refused(transport: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rec = await one_request(f"http://127.0.0.1:{port}", transport)
    assert rec.error_kind == "connect" and rec.status == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_malformed_chunk(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")) + chunk(b"data: {oops\n\n") + chunk(DONE))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport)
    assert rec.error_kind == "malformed"


async def test_not_http_at_all_is_malformed() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    async with scripted_server(handler) as url:
        rec = await one_request(url, "fast")
    assert rec.error_kind == "malformed"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_content_length_and_close_delimited_bodies(transport: str) -> None:
    body = ev("a") + ev(finish="stop") + DONE

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    async with scripted_server(handler) as url:
        settings = ClientSettings(url, "m", transport=transport)  # type: ignore[arg-type]
        t = make_transport(settings, 1)
        recs = []
        for _ in range(2):
            raw = RawExchange()
            await t.send(request_body(settings, "x", 2), raw)
            recs.append(build_record(0, raw.sent_ns, raw))
        await t.aclose()
    assert all(r.ok and len(r.chunk_ns) == 1 for r in recs), recs


async def test_stale_keepalive_connection_is_retried() -> None:
    body = ev("a") + ev(finish="stop") + DONE
    conns = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(body) + b"0\r\n\r\n")
        await writer.drain()
        writer.close()  # keep-alive announced, then closed: the idle connection goes stale

    async with scripted_server(handler) as url:
        settings = ClientSettings(url, "m", transport="fast")
        t = make_transport(settings, 1)
        recs = []
        for _ in range(2):
            raw = RawExchange()
            await t.send(request_body(settings, "x", 2), raw)
            recs.append(build_record(0, raw.sent_ns, raw))
            await asyncio.sleep(0.05)
        await t.aclose()
    assert all(r.ok for r in recs), recs
    assert conns == 2


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_api_key_from_environment_is_sent_and_never_in_meta(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMSLO_TEST_KEY", "sk-secret-123")
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            seen.append(head)
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            body = ev("a") + ev(finish="stop") + DONE
            writer.write(SSE_HEAD + chunk(body) + b"0\r\n\r\n")
            await writer.drain()

    async with scripted_server(handler) as url:
        cs = ClientSettings(
            url, "m", transport=transport, api_key_env="LLMSLO_TEST_KEY", processes=1
        )  # type: ignore[arg-type]
        run = await run_load(
            LoadJob(
                cs,
                WorkloadSpec(isl=4, osl=2, calibrate=False),
                LoadLevel.concurrency(1),
                requests=2,
                warmup=0,
            )
        )
    assert all(r.ok for r in run.records)
    assert seen and all(b"Bearer sk-secret-123" in h for h in seen)
    assert "sk-secret-123" not in json.dumps(run.to_dict())


async def test_failures_are_counted_in_a_run() -> None:
    n = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal n
        while True:
            await read_request(reader)
            n += 1
            if n % 2:
                writer.write(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy")
            else:
                writer.write(SSE_HEAD + chunk(ev("a") + ev(finish="stop") + DONE) + b"0\r\n\r\n")
            await writer.drain()

    async with scripted_server(handler) as url:
        cs = ClientSettings(url, "m", processes=1)
        run = await run_load(
            LoadJob(
                cs,
                WorkloadSpec(isl=4, osl=2, calibrate=False),
                LoadLevel.concurrency(1),
                requests=6,
                warmup=0,
            )
        )
    assert len(run.records) == 6
    assert sum(r.ok for r in run.records) == 3
    assert {r.error_kind for r in run.failed_records} == {"http"}


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory: pytest.TempPathFactory) -> object:
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    return ctx


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_https_with_verification_off(transport: str, tls_context: object) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a") + ev(finish="stop") + DONE) + b"0\r\n\r\n")
        await writer.drain()

    async with scripted_server(handler, tls_context) as url:
        assert url.startswith("https://")
        ok = await one_request(url, transport, verify_tls=False)
        bad = await one_request(url, transport)  # self-signed: refused when verifying
    assert ok.ok and len(ok.chunk_ns) == 1
    assert not bad.ok and bad.error_kind in ("connect", "reset")


# -- when a request ended --------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("how", ["reset", "idle"])
async def test_a_failure_ends_when_it_was_detected_not_at_its_last_data(
    transport: str, how: str
) -> None:
    # Dated at its last data, the 300 ms until the reset (or the idle deadline) read as
    # the client's turnaround in a closed loop, and blamed the client for the server.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")))
        await writer.drain()
        await asyncio.sleep(0.3 if how == "reset" else 5)
        reset(writer)

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport, idle_timeout_s=0.3 if how == "idle" else 10)
    assert rec.error_kind == ("reset" if how == "reset" else "timeout"), rec.error
    assert rec.end_ns - rec.chunk_ns[-1] >= 250_000_000, (rec.end_ns - rec.chunk_ns[-1]) / 1e6


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_truncated_body_ends_when_the_body_ended(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a")))
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.write(b"0\r\n\r\n")  # the body ends without a finish or [DONE]
        await writer.drain()

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport)
    assert rec.error_kind == "truncated"
    assert rec.end_ns - rec.chunk_ns[-1] >= 250_000_000


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stream_is_over_at_its_done_even_when_the_body_is_held_open(
    transport: str,
) -> None:
    # The server sends [DONE] and never ends the HTTP body: the request used to wait for
    # the idle deadline and fail as "stream stalled: ... after 0.0 s of response".
    conns = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(ev("a") + ev(finish="stop")))
        await writer.drain()
        writer.write(chunk(DONE))
        await writer.drain()
        await asyncio.sleep(30)

    async with scripted_server(handler) as url:
        settings = ClientSettings(url, "m", transport=transport, idle_timeout_s=20)  # type: ignore[arg-type]
        t = make_transport(settings, 1)
        recs = []
        try:
            for _ in range(2):
                raw = RawExchange()
                await asyncio.wait_for(t.send(request_body(settings, "x", 2), raw), 10)
                recs.append(build_record(0, raw.sent_ns, raw))
        finally:
            await t.aclose()
    assert all(r.ok for r in recs), [r.error for r in recs]
    # Dated at the [DONE], which came with the last data.
    assert all(r.end_ns - r.chunk_ns[-1] < 1_000_000_000 for r in recs)
    assert conns == 2  # the held connection is not reused


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_body_that_ends_after_its_done_keeps_its_connection(transport: str) -> None:
    conns = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal conns
        conns += 1
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(ev("a") + ev(finish="stop")) + chunk(DONE))
            await writer.drain()
            await asyncio.sleep(0.01)  # the last chunk in a write of its own, a little later
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async with scripted_server(handler) as url:
        settings = ClientSettings(url, "m", transport=transport)  # type: ignore[arg-type]
        t = make_transport(settings, 1)
        recs = []
        try:
            for _ in range(3):
                raw = RawExchange()
                await t.send(request_body(settings, "x", 2), raw)
                recs.append(build_record(0, raw.sent_ns, raw))
                await asyncio.sleep(0.05)
        finally:
            await t.aclose()
    assert all(r.ok for r in recs), [r.error for r in recs]
    assert conns == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_gzip_bodies_and_tool_call_streams_from_a_server(misbehaving, transport: str) -> None:
    err = await one_request(misbehaving("gzip-error"), transport)
    assert err.error == "HTTP 500: engine overloaded", err.error
    stream = await one_request(misbehaving("gzip-stream"), transport)
    assert stream.error_kind == "malformed" and "gzip-compressed body" in (stream.error or "")
    tools = await one_request(misbehaving("tool-calls"), transport)
    assert tools.ok and len(tools.chunk_ns) == 3, tools.error
    assert tools.first_content_ns == tools.chunk_ns[0]


async def test_a_connection_closed_before_its_request_is_a_reset_not_a_hang() -> None:
    # A server that accepts and drops at once (a proxy cutting every connection): the
    # close can come between the connect and the request's start.
    from pytest_llmslo.load.http1 import _Conn

    conn = _Conn()
    conn.connection_lost(None)  # nothing in flight yet
    raw = RawExchange()
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    conn.start(raw, fut, b"POST / HTTP/1.1\r\n\r\n")
    assert fut.done()
    assert raw.kind == "reset" and raw.error == "connection closed before the response was complete"
