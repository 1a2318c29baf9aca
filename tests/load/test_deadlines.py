"""Nothing hangs: every request has its deadlines (connect, first byte, idle, total) on both
transports, keep-alive comments do not keep a stalled stream alive, a level has one
wall-clock bound over calibration, warm-up and measurement, and a stream without output is
a failure, whatever its usage claims."""

from __future__ import annotations

import asyncio
import time

import pytest

from pytest_llmslo import metrics
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load
from pytest_llmslo.load.client import RawExchange, build_record, request_body
from pytest_llmslo.load.deadlines import Deadlines
from pytest_llmslo.load.transports import make_transport
from pytest_llmslo.records import LoadLevel, RequestRecord

from .conftest import chunk, read_request, scripted_server

TRANSPORTS = ["fast", "httpx"]
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


async def one_request(
    url: str, transport: str, max_tokens: int = 16, **kw: object
) -> RequestRecord:
    settings = ClientSettings(url, "m", transport=transport, **kw)  # type: ignore[arg-type]
    t = make_transport(settings, 4)
    raw = RawExchange()
    try:
        await t.send(request_body(settings, "hello", max_tokens), raw)
    finally:
        await t.aclose()
    return build_record(0, raw.sent_ns, raw)


def test_deadline_rules() -> None:
    d = Deadlines.of(1.0, 2.0, 0.5, 10.0)
    s = 1_000_000_000
    assert d.expired(s + s, s, 0) is None  # 1 s without data: below the first-byte 2 s
    assert "first-byte" in (d.expired(s + 3 * s, s, 0) or "")
    assert d.expired(s + 3 * s, s, s + 3 * s - s // 10) is None  # data 0.1 s ago
    assert "stream stalled" in (d.expired(s + 3 * s, s, s + 2 * s) or "")
    assert "--request-timeout" in (d.expired(s + 11 * s, s, s + 11 * s) or "")
    assert d.expired(5, 0, 0) is None  # not sent yet
    assert 0.005 <= d.sweep_interval_s <= 0.125


def test_a_stall_is_named_by_its_silence_since_the_last_data() -> None:
    # "after 0.0 s of response" read as if nothing had streamed, for a stream whose data
    # had all come within 50 ms.
    d = Deadlines.of(1.0, 2.0, 0.5, 10.0)
    s = 1_000_000_000
    why = d.expired(s + s, s, s + 35_000_000) or ""
    assert why.startswith("stream stalled: no data for 0.5 s since its last data (idle timeout")
    assert "0.0 s" not in why


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", ["ping-forever", "stall"])
async def test_a_stalled_stream_ends_as_a_timeout_naming_the_stall(
    misbehaving, transport: str, mode: str
) -> None:
    url = misbehaving(mode)
    t0 = time.monotonic()
    rec = await one_request(url, transport, idle_timeout_s=0.6)
    took = time.monotonic() - t0
    assert rec.error_kind == "timeout", rec.error
    assert "stream stalled: no data for 0.6 s" in (rec.error or "")
    assert "3 output chunk(s) had arrived" in (rec.error or "")
    assert len(rec.chunk_ns) == 3
    # With pings every second the byte stream never goes quiet: only counting data ends it.
    assert took < 30


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_no_first_byte_ends_as_a_timeout(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)  # headers, then nothing
        await writer.drain()
        await asyncio.sleep(30)

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport, first_byte_timeout_s=0.4)
    assert rec.error_kind == "timeout"
    assert "no response data within 0.4 s" in (rec.error or "")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stream_that_never_ends_hits_the_total_deadline(transport: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD)
        for _ in range(300):
            writer.write(chunk(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'))
            await writer.drain()
            await asyncio.sleep(0.05)

    async with scripted_server(handler) as url:
        rec = await one_request(url, transport, timeout_s=0.8)
    assert rec.error_kind == "timeout"
    assert "no complete response within 0.8 s" in (rec.error or "")
    assert len(rec.chunk_ns) >= 5  # what arrived is kept


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_usage_never_credits_tokens_that_were_not_streamed(
    misbehaving, transport: str
) -> None:
    rec = await one_request(misbehaving("empty-choices"), transport)
    assert rec.error_kind == "no_output"
    assert "usage says 16 tokens" in (rec.error or "") and not rec.ok


async def test_empty_choices_run_credits_no_throughput(misbehaving) -> None:
    url = misbehaving("empty-choices")
    client = ClientSettings(url, "m")
    run = await run_load(LoadJob(client, WorkloadSpec(isl=8, osl=16), LoadLevel.concurrency(4),
                         requests=12, warmup=0))  # fmt: skip
    s = metrics.summarize(run)
    assert s.completed == 0 and s.failures == {"no_output": 12}
    assert s.output_tok_s == 0.0 and s.output_tokens == 0


async def test_a_ten_megabyte_line_is_read_and_decoded(misbehaving) -> None:
    url = misbehaving("huge-line")
    client = ClientSettings(url, "m")
    run = await run_load(LoadJob(client, WorkloadSpec(isl=8, osl=4), LoadLevel.concurrency(1),
                         requests=2, warmup=0))  # fmt: skip
    assert all(r.ok for r in run.records)
    assert all(len(r.chunk_ns) == 1 for r in run.records)


async def test_level_bound_cuts_a_stalled_level_and_says_when(misbehaving) -> None:
    url = misbehaving("stall")
    client = ClientSettings(url, "m")
    t0 = time.monotonic()
    run = await run_load(LoadJob(client, WorkloadSpec(isl=8, osl=16), LoadLevel.concurrency(2),
                         requests=6, warmup=0, level_timeout_s=1.5))  # fmt: skip
    took = time.monotonic() - t0
    assert took < 10
    assert run.meta["level_timeout"]["phase"] == "measuring"
    assert run.records and all(r.error_kind == "cancelled" for r in run.records)
    assert "--level-timeout" in (run.records[0].error or "")
    assert metrics.summarize(run).level_timeout == "measuring"


async def test_level_bound_covers_calibration(misbehaving) -> None:
    # A server that answers nothing: the calibration probe waits for its first byte (300 s
    # by default), and the level's bound ends it.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(30)

    async with scripted_server(handler) as url:
        client = ClientSettings(url, "m")
        t0 = time.monotonic()
        run = await run_load(LoadJob(client, WorkloadSpec(isl=8, osl=4), LoadLevel.concurrency(1),
                             requests=4, warmup=2, level_timeout_s=1.0))  # fmt: skip
    assert time.monotonic() - t0 < 10
    assert run.records == ()
    assert run.meta["level_timeout"]["phase"] == "calibrating"


async def test_warmup_counts_against_the_level_bound(misbehaving) -> None:
    url = misbehaving("stall")
    client = ClientSettings(url, "m")
    run = await run_load(LoadJob(client, WorkloadSpec(isl=8, osl=16, calibrate=False),
                         LoadLevel.concurrency(2), requests=4, warmup=4,
                         level_timeout_s=1.0))  # fmt: skip
    assert run.records == ()
    assert run.meta["level_timeout"]["phase"] == "warm-up"


async def test_progress_names_the_phases(misbehaving) -> None:
    url = misbehaving("ok")
    seen: list[str] = []
    client = ClientSettings(url, "m")
    await run_load(LoadJob(client, WorkloadSpec(isl=8, osl=60), LoadLevel.concurrency(2),
                   requests=20, warmup=20, duration_s=0.3,
                   progress=lambda p: seen.append(p.phase)))  # fmt: skip
    assert seen[0] == "calibrating"
    assert "warm-up" in seen and seen[-1] in ("measuring", "draining")
