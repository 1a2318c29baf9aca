"""The engine loop on the wall clock, in process: tokens at their scheduled times, and
honest reporting when the host makes it late."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from typing import Any

import pytest

from pytest_llmslo.sim.engineloop import EngineLoop, TraceWriter
from pytest_llmslo.sim.httpd import HttpRequest
from pytest_llmslo.sim.profiles import Profile, get_profile
from pytest_llmslo.sim.scheduler import SimRequest
from pytest_llmslo.sim.server import SimServer
from pytest_llmslo.sim.stream import Stream, StreamShape


class FakeConn:
    """Stands in for an HTTP connection: records what was written and when."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, bytes]] = []
        self.ended = False
        self.closed = False
        self.sent: list[Any] = []
        self.on_close: list[Any] = []
        self.started = False

    def start_stream(self) -> None:
        self.started = True

    def write_chunk(self, data: bytes) -> bool:
        if self.closed:
            return False
        self.chunks.append((time.perf_counter_ns(), data))
        return True

    def end_stream(self) -> None:
        self.ended = True

    def send_json(self, status: int, obj: Any, headers: Any = ()) -> None:
        self.sent.append((status, obj))


def make_stream(
    conn: FakeConn, rid: str, max_tokens: int, stream: bool = True, prompt: int = 64
) -> Stream:
    req = SimRequest(rid, prompt, max_tokens)
    return Stream(
        conn,  # type: ignore[arg-type]
        req,
        StreamShape(chat=True, model="m", stream=stream, include_usage=True),
        seed=1,
    )


def scheduler_of(loop: EngineLoop):  # type: ignore[no-untyped-def]
    """The scheduler of a plain (one-instance) profile's engine."""
    (instance,) = loop.cluster.instances
    return instance.scheduler


async def run_until_done(loop: EngineLoop, streams: list[Stream], block_s: float = 0.0) -> None:
    task = asyncio.get_running_loop().create_task(loop.run())
    try:
        for st in streams:
            loop.submit(st)
        if block_s:
            await asyncio.sleep(0.03)
            time.sleep(block_s)  # the host stalls the process: the loop falls behind
        await asyncio.wait_for(asyncio.gather(*(st.done for st in streams)), 30)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_tokens_leave_at_their_scheduled_times(tmp_path) -> None:  # type: ignore[no-untyped-def]
    trace = TraceWriter(str(tmp_path / "t.jsonl"))
    loop = EngineLoop(get_profile("llama3-8b-1xh100-vllm"), trace=trace)
    conn = FakeConn()
    st = make_stream(conn, "r1", 10)
    await run_until_done(loop, [st])
    trace.close()
    assert len(conn.chunks) == 10 and conn.ended
    assert b'"role":"assistant"' in conn.chunks[0][1]
    assert conn.chunks[-1][1].endswith(b"data: [DONE]\n\n")
    assert b'"completion_tokens":10' in conn.chunks[-1][1]
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert len(lines) == 10
    # Lateness is measured for every write and small when nothing stalls the process.
    assert loop.lateness.count == 10
    assert loop.lateness.total / loop.lateness.count < 0.05
    assert scheduler_of(loop).stats.finished == 1 and not loop.streams


async def test_non_streamed_request_gets_one_response() -> None:
    loop = EngineLoop(get_profile("llama3-8b-1xh100-vllm"))
    conn = FakeConn()
    st = make_stream(conn, "r2", 5, stream=False)
    await run_until_done(loop, [st])
    assert conn.chunks == []
    ((status, body),) = conn.sent
    assert status == 200 and body["usage"]["completion_tokens"] == 5
    assert len(body["choices"][0]["message"]["content"].split()) == 5


async def test_a_stalled_host_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    loop = EngineLoop(get_profile("llama3-8b-1xh100-vllm"), lag_warn_s=0.02)
    conn = FakeConn()
    streams = [make_stream(conn, f"s{i}", 30) for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="pytest_llmslo.sim"):
        await run_until_done(loop, streams, block_s=0.15)
    lat = loop.lateness
    assert lat.max >= 0.1
    assert lat.late >= 1
    assert any("behind schedule" in r.getMessage() for r in caplog.records)
    # No resync for a 150 ms stall: the schedule is kept, tokens catch up.
    assert lat.resyncs == 0


async def test_far_behind_moves_the_simulated_clock() -> None:
    loop = EngineLoop(get_profile("llama3-8b-1xh100-vllm"), lag_warn_s=0.01, resync_s=0.05)
    conn = FakeConn()
    await run_until_done(loop, [make_stream(conn, "x", 30)], block_s=0.2)
    assert loop.lateness.resyncs >= 1


async def test_client_gone_aborts_and_frees_blocks() -> None:
    loop = EngineLoop(get_profile("llama3-8b-1xh100-vllm"))
    conn = FakeConn()
    st = make_stream(conn, "gone", 1000)
    task = asyncio.get_running_loop().create_task(loop.run())
    try:
        loop.submit(st)
        await asyncio.sleep(0.1)
        conn.closed = True  # the next write fails: the request is dropped
        await asyncio.wait_for(st.done, 5)
        sched = scheduler_of(loop)
        assert sched.stats.aborted == 1
        assert sched.blocks.used == 0 and not sched.has_work
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_metrics_text_is_prometheus() -> None:
    async def main() -> str:
        server = SimServer(dataclasses.replace(get_profile("llama3-8b-1xh100-vllm")), "m")
        return server.metrics_text()

    text = asyncio.run(main())
    for line in text.splitlines():
        if line.startswith("#"):
            assert line.startswith(("# HELP ", "# TYPE "))
            continue
        name, value = line.rsplit(" ", 1)
        float(value)
        assert name.split("{")[0].replace(":", "_").replace("_", "a").isalnum()


def no_chunked_prefill(budget: int) -> Profile:
    """The 8B vLLM-like profile without chunked prefill (a valid one: budget = context)."""
    p = get_profile("llama3-8b-1xh100-vllm")
    engine = dataclasses.replace(p.engine, chunked_prefill=False, max_num_batched_tokens=budget)
    return dataclasses.replace(p, engine=engine, max_model_len=budget)


async def test_a_request_that_can_never_run_fails_instead_of_spinning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = EngineLoop(no_chunked_prefill(256))
    conn, stuck_conn = FakeConn(), FakeConn()
    stuck = make_stream(stuck_conn, "stuck", 4, prompt=300)
    behind = make_stream(conn, "behind", 5)
    task = asyncio.get_running_loop().create_task(loop.run())
    cpu0 = time.process_time()
    try:
        with caplog.at_level(logging.ERROR, logger="pytest_llmslo.sim"):
            # Past the checks of submit(), as a broken invariant would leave it.
            scheduler_of(loop).waiting.append(stuck.req)
            loop.streams[stuck.req] = stuck
            loop.submit(behind)
            # FCFS: "behind" only runs once the stuck head of the queue is gone.
            await asyncio.wait_for(asyncio.gather(stuck.done, behind.done), 5)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert time.process_time() - cpu0 < 2.0  # no busy loop on empty steps
    assert any("can never be scheduled" in r.getMessage() for r in caplog.records)
    ((_, data),) = stuck_conn.chunks
    event, done = data.split(b"\n\n", 1)
    assert event.startswith(b"data: ") and done == b"data: [DONE]\n\n"
    err = json.loads(event[len(b"data: ") :])["error"]
    assert err["code"] == 500 and "max_num_batched_tokens=256" in err["message"]
    assert stuck_conn.ended and conn.ended and len(conn.chunks) == 5
    st = scheduler_of(loop).stats
    assert st.failed == 1 and st.finished == 1 and not scheduler_of(loop).has_work


async def test_a_prompt_over_the_budget_is_refused_with_400_like_vllm() -> None:
    server = SimServer(no_chunked_prefill(8192), "m")
    sched = scheduler_of(server.engine)
    # Defence in depth: a budget the profile check would refuse, as a bug could leave it.
    sched.config = dataclasses.replace(sched.config, max_num_batched_tokens=64)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "word " * 100}],
        "max_tokens": 4,
        "stream": True,
    }
    conn = FakeConn()
    req = HttpRequest("POST", "/v1/chat/completions", "", "HTTP/1.1", {}, json.dumps(body).encode())
    await asyncio.wait_for(server.handle(req, conn), 5)  # type: ignore[arg-type]
    ((status, answer),) = conn.sent
    assert status == 400 and not conn.started
    err = answer["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "BadRequestError" and err["code"] == 400
    assert "max_num_batched_tokens is 64" in err["message"]
    assert not sched.has_work
