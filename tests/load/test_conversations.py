"""Multi-turn conversations: what each turn sends (the history with the replies really
streamed), think times, session headers, a failed turn, and the figures by turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pytest_llmslo.errors import WorkloadError
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load
from pytest_llmslo.load.client import request_body
from pytest_llmslo.load.sse import stream_text
from pytest_llmslo.load.workload import PromptSource
from pytest_llmslo.metrics.traffic import by_session, by_turn
from pytest_llmslo.records import LoadLevel, RequestRecord, Run

from .conftest import chunk, read_request, scripted_server


def test_synthetic_conversations_are_seeded_and_shaped() -> None:
    spec = WorkloadSpec(isl=20, osl=5, turns=3, think_time_s=2.0, think_distribution="uniform")
    src = PromptSource(spec)
    a, b = src.conversation(4), PromptSource(spec).conversation(4)
    assert a == b and a != src.conversation(5)
    assert len(a.turns) == 3 and all(len(t.text.split()) == 20 and t.osl == 5 for t in a.turns)
    assert len({t.text for t in a.turns}) == 3
    assert a.think_s[0] == 0.0 and all(0 <= s <= 4.0 for s in a.think_s[1:])
    fixed = PromptSource(WorkloadSpec(isl=5, osl=5, turns=2, think_time_s=1.5)).conversation(0)
    assert fixed.think_s == (0.0, 1.5)
    # A shared prefix opens the first turn only.
    sp = WorkloadSpec(kind="shared_prefix", isl=30, osl=4, num_prefixes=1, prefix_len=10, turns=2)
    conv = PromptSource(sp).conversation(0)
    first = PromptSource(sp).prompt(0).text
    assert conv.turns[0].text == first and not conv.turns[1].text.startswith(first[:30])


def test_sharegpt_keeps_every_human_turn(tmp_path: Path) -> None:
    data = [
        {"conversations": [
            {"from": "human", "value": "one two three"}, {"from": "gpt", "value": "a b"},
            {"from": "human", "value": "four five"}, {"from": "gpt", "value": "c d e f"},
            {"from": "human", "value": "six"},
        ]},
        {"conversations": [{"from": "gpt", "value": "nothing asked"}]},
    ]  # fmt: skip
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(data))
    conv = PromptSource(WorkloadSpec(kind="sharegpt", path=str(p), osl=9, turns=8)).conversation(0)
    assert [t.text for t in conv.turns] == ["one two three", "four five", "six"]
    assert [t.osl for t in conv.turns] == [2, 4, 9]  # the last has no reply: the spec's OSL
    two = PromptSource(WorkloadSpec(kind="sharegpt", path=str(p), turns=2)).conversation(0)
    assert len(two.turns) == 2
    with pytest.raises(WorkloadError, match="multi-turn"):
        WorkloadSpec(kind="jsonl", path=str(p), turns=2)


def test_history_in_the_request_body() -> None:
    s = ClientSettings(base_url="http://127.0.0.1:1", model="m")
    body = json.loads(request_body(s, "q2", 4, history=[("q1", "a1")]))
    assert body["messages"] == [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
    ]
    c = ClientSettings(base_url="http://127.0.0.1:1", model="m", endpoint="completions")
    assert json.loads(request_body(c, "q2", 4, history=[("q1", "a1")]))["prompt"] == "q1\na1\nq2"


def test_stream_text_joins_the_content() -> None:
    pieces = [
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n',
        b'data: {"choices":[{"delta":{"content":"Hel"}}]}\n\ndata: {"choices":[{"delta"',
        b':{"content":"lo","reasoning_content":"x"}}]}\n\n: ping\n\n',
        b'data: {"choices":[{"text":"!"}]}\n\ndata: [DONE]\n\n',
    ]
    assert stream_text(pieces) == "Hello!"
    assert stream_text([]) == ""


def _reply(words: list[str]) -> bytes:
    out = b""
    for w in words:
        out += chunk(b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % w.encode())
    out += chunk(b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n')
    return out + chunk(b"data: [DONE]\n\n") + chunk(b"")


async def test_each_turn_carries_the_replies_streamed_and_the_session_header() -> None:
    seen: list[tuple[dict, dict[str, str]]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            headers = {}
            for line in head.split(b"\r\n")[1:]:
                if b":" in line:
                    k, v = line.split(b":", 1)
                    headers[k.decode().lower()] = v.decode().strip()
                    if k.lower() == b"content-length":
                        length = int(v)
            body = json.loads(await reader.readexactly(length))
            seen.append((body, headers))
            n = len(body["messages"])
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" + _reply([f"r{n}a", f" r{n}b"])
            )
            await writer.drain()

    async with scripted_server(handler) as url:
        client = ClientSettings(base_url=url, model="m", session_header="X-Session-ID")
        wl = WorkloadSpec(isl=3, osl=2, turns=3, think_time_s=0.05, calibrate=False)
        run = await run_load(LoadJob(client, wl, LoadLevel.concurrency(1), requests=6, warmup=0))
    assert [(r.session, r.turn) for r in run.records] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
    ]
    assert all(r.ok for r in run.records)
    first, second, third = (b for b, _ in seen[:3])
    assert len(first["messages"]) == 1
    assert second["messages"][0] == first["messages"][0]
    assert second["messages"][1] == {"role": "assistant", "content": "r1a r1b"}
    assert third["messages"][3] == {"role": "assistant", "content": "r3a r3b"}
    assert len(third["messages"]) == 5
    ids = [h["x-session-id"] for _, h in seen]
    assert ids[0] == ids[1] == ids[2] != ids[3]
    # Think time: the next turn leaves ~50 ms after the previous one ended.
    gap = (run.records[1].sent_ns - run.records[0].end_ns) / 1e6
    assert 45 <= gap < 150
    turns = by_turn(run)
    assert [t["requests"] for t in turns] == [2, 2, 2]
    ses = by_session(run)
    assert ses is not None and ses["sessions"] == 2 and ses["completed"] == 2
    assert run.meta["traffic"]["sessions_finished"] == 2


async def test_a_failed_turn_ends_its_conversation() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            body = json.loads(await read_request(reader))
            if len(body["messages"]) >= 3:
                msg = b'{"error": "context too long"}'
                writer.write(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg)
                )
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + _reply(["ok"])
                )
            await writer.drain()

    async with scripted_server(handler) as url:
        client = ClientSettings(base_url=url, model="m")
        wl = WorkloadSpec(isl=3, osl=2, turns=4, calibrate=False)
        run = await run_load(LoadJob(client, wl, LoadLevel.concurrency(2), requests=8, warmup=0))
    # Turn 2 fails in each conversation; turns 3 and 4 are never sent.
    assert sorted((r.session, r.turn, r.ok) for r in run.records) == [
        (0, 0, True), (0, 1, False), (1, 0, True), (1, 1, False)
    ]  # fmt: skip
    assert run.meta["traffic"] == {"sessions_started": 2, "sessions_finished": 0}


def test_figures_by_turn_and_session() -> None:
    def rec(s: int, k: int, sent: int, ttft: int, ok: bool = True) -> RequestRecord:
        return RequestRecord(
            index=s * 2 + k, scheduled_ns=sent, sent_ns=sent, end_ns=sent + ttft + 20_000_000,
            chunk_ns=[sent + ttft, sent + ttft + 10_000_000, sent + ttft + 20_000_000],
            status=200 if ok else 500, error_kind=None if ok else "http",
            prompt_tokens=100 * (k + 1), session=s, turn=k,
        )  # fmt: skip

    ms = 1_000_000
    recs = (
        rec(0, 0, 0, 100 * ms), rec(0, 1, 1000 * ms, 40 * ms),
        rec(1, 0, 0, 200 * ms), rec(1, 1, 2000 * ms, 60 * ms, ok=False),
    )  # fmt: skip
    run = Run(level=LoadLevel.concurrency(2), records=recs, start_ns=0, end_ns=3000 * ms)
    t0, t1 = by_turn(run)
    assert t0["ttft_p50_ms"] == pytest.approx(150) and t0["completed"] == 2
    assert t1["ttft_p50_ms"] == pytest.approx(40) and t1["completed"] == 1
    assert t0["itl_p50_ms"] == pytest.approx(10) and t1["prompt_tokens_mean"] == 200
    ses = by_session(run)
    assert ses is not None
    assert ses["sessions"] == 2 and ses["completed"] == 1
    assert ses["duration_p50_s"] == pytest.approx(1.06)
