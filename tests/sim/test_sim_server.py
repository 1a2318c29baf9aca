"""The sim engine over real HTTP on loopback: streaming format, usage, errors, metrics,
keep-alive, disconnects, and the token trace against what a client measured."""

from __future__ import annotations

import asyncio
import json
import socket
import statistics
from itertools import pairwise
from pathlib import Path
from time import perf_counter_ns
from urllib.parse import urlsplit

import httpx
import pytest
from sim_helpers import MODEL, SimProc, start_sim, wait_for

from pytest_llmslo.sim.tokens import chat_tokens, completion_tokens

PROMPT = "Explain continuous batching, chunked prefill and paged attention in two lines."


def chat_body(max_tokens: int = 8, **kw) -> dict:  # type: ignore[no-untyped-def]
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
        "min_tokens": max_tokens,
    }
    body.update(kw)
    return body


def stream_events(
    client: httpx.Client, path: str, body: dict
) -> tuple[list, list[int], httpx.Response]:  # type: ignore[type-arg]
    """POST a streamed request; (decoded events, arrival ns of each event, response)."""
    events: list = []  # type: ignore[type-arg]
    times: list[int] = []
    with client.stream("POST", path, json=body) as resp:
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            times.append(perf_counter_ns())
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events, times, resp


def test_health_version_models(sim: SimProc) -> None:
    assert httpx.get(sim.url + "/health").status_code == 200
    v = httpx.get(sim.url + "/version").json()
    assert v["version"] and v["profile"] == "llama3-70b-fp8-4xh100-vllm"
    models = httpx.get(sim.url + "/v1/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 4096


def test_chat_stream_format_and_usage(sim: SimProc) -> None:
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        events, _, resp = stream_events(c, "/v1/chat/completions", chat_body(8))
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [ch for ch in chunks if ch["choices"] and ch["choices"][0]["delta"].get("content")]
    assert len(content) == 8  # one token per chunk
    assert all(ch["object"] == "chat.completion.chunk" and ch["model"] == MODEL for ch in chunks)
    assert len({ch["id"] for ch in chunks}) == 1
    assert [ch["choices"][0]["finish_reason"] for ch in content] == [None] * 7 + ["length"]
    usage = chunks[-1]
    assert usage["choices"] == []
    expected_prompt = len(chat_tokens([{"role": "user", "content": PROMPT}]))
    assert usage["usage"] == {
        "prompt_tokens": expected_prompt,
        "completion_tokens": 8,
        "total_tokens": expected_prompt + 8,
    }
    text = "".join(ch["choices"][0]["delta"]["content"] for ch in content)
    assert len(text.split()) == 8


def test_completions_stream_and_continuous_usage(sim: SimProc) -> None:
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        events, _, resp = stream_events(c, "/v1/completions", body)
    assert resp.status_code == 200 and events[-1] == "[DONE]"
    toks = [e for e in events[:-1] if e["choices"]]
    assert len(toks) == 5 and all(e["object"] == "text_completion" for e in toks)
    assert [e["usage"]["completion_tokens"] for e in toks] == [1, 2, 3, 4, 5]
    assert events[-2]["usage"]["prompt_tokens"] == len(completion_tokens(PROMPT))


def test_non_streaming_responses(sim: SimProc) -> None:
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 4})
        assert r.status_code == 200
        body = r.json()
        assert body["object"] == "text_completion"
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 4
        assert len(body["choices"][0]["text"].split()) == 4
        r = c.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3},
        )
        assert r.status_code == 200  # no "model": the served one, as vLLM does
        msg = r.json()["choices"][0]["message"]
        assert msg["role"] == "assistant" and len(msg["content"].split()) == 3
        # Completions default to 16 tokens when max_tokens is absent.
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "hi"})
        assert r.json()["usage"]["completion_tokens"] == 16


def test_keep_alive_reuses_one_connection(sim: SimProc) -> None:
    with httpx.Client(base_url=sim.url, timeout=30, limits=httpx.Limits(max_connections=1)) as c:
        for _ in range(3):
            events, _, resp = stream_events(c, "/v1/chat/completions", chat_body(2))
            assert resp.status_code == 200 and events[-1] == "[DONE]"
            assert resp.headers["connection"] == "keep-alive"
            r = c.get("/health")
            assert r.status_code == 200


def error(resp: httpx.Response) -> dict:  # type: ignore[type-arg]
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert {"message", "type", "code"} <= set(err)
    assert err["code"] == resp.status_code
    return err  # type: ignore[no-any-return]


def test_errors_like_vllm(sim: SimProc) -> None:
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        r = c.post("/v1/chat/completions", json=chat_body(4, model="nope"))
        assert r.status_code == 404
        err = error(r)
        assert (
            err["type"] == "NotFoundError" and err["message"] == "The model `nope` does not exist."
        )

        r = c.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and error(r)["type"] == "BadRequestError"

        r = c.post("/v1/chat/completions", json={"model": MODEL, "max_tokens": 4})
        assert r.status_code == 400 and "messages" in error(r)["message"]
        r = c.post("/v1/completions", json={"model": MODEL, "max_tokens": 4})
        assert r.status_code == 400 and "prompt" in error(r)["message"]

        r = c.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 5000})
        assert r.status_code == 400
        msg = error(r)["message"]
        assert msg.startswith("This model's maximum context length is 4096 tokens.")
        assert "5000 in the completion" in msg

        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "word " * 5000})
        assert r.status_code == 400 and "input tokens" in error(r)["message"]

        r = c.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "max_tokens": 0})
        assert r.status_code == 400
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": "5"})
        assert r.status_code == 400
        r = c.post(
            "/v1/completions",
            json={"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}},
        )
        assert r.status_code == 400 and "stream=True" in error(r)["message"]

        r = c.get("/v1/nothing")
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
        r = c.get("/v1/chat/completions")
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        r = c.post("/health")
        assert r.status_code == 405
        # The connection survived all of that.
        assert c.get("/health").status_code == 200


def test_metrics_prometheus_text(sim: SimProc) -> None:
    before = sim.metrics()
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        stream_events(c, "/v1/chat/completions", chat_body(6))
    text = httpx.get(sim.url + "/metrics").text
    assert "# TYPE vllm:num_requests_running gauge" in text
    assert f'vllm:num_requests_running{{model_name="{MODEL}"}}' in text
    assert 'llmslo_sim_emit_lateness_seconds_bucket{model_name="sim-70b",le="+Inf"}' in text
    after = sim.metrics()
    for name in (
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "llmslo_sim_lateness_max_seconds",
        "llmslo_sim_behind_schedule",
    ):
        assert name in after
    assert (
        after["vllm:generation_tokens_total"] - before.get("vllm:generation_tokens_total", 0) >= 6
    )
    assert after["llmslo_sim_emit_lateness_seconds_count"] >= 6


def test_trace_matches_what_the_client_measured(sim: SimProc) -> None:
    assert sim.trace is not None
    n = 24
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        events, times, _ = stream_events(c, "/v1/chat/completions", chat_body(n))
    rid = events[0]["id"]
    # The client's arrival time of each content chunk (the role chunk shares a write).
    content_times = [
        t
        for e, t in zip(events, times, strict=True)
        if e != "[DONE]" and e["choices"] and e["choices"][0]["delta"].get("content")
    ]
    assert wait_for(lambda: sum(rid in ln for ln in sim.trace.read_text().splitlines()) >= n)  # type: ignore[union-attr]
    rows = [json.loads(ln) for ln in sim.trace.read_text().splitlines() if rid in ln]
    assert [r["i"] for r in rows] == list(range(n))
    # Written before received, and received soon after (same monotonic clock).
    delays = [(ct - r["t_ns"]) / 1e6 for ct, r in zip(content_times, rows, strict=True)]
    assert min(delays) >= 0
    assert statistics.median(delays) < 50
    # Gaps agree: the client's ITL is the server's.
    srv_gaps = [(b["t_ns"] - a["t_ns"]) / 1e6 for a, b in pairwise(rows)]
    cli_gaps = [(b - a) / 1e6 for a, b in pairwise(content_times)]
    assert abs(statistics.median(srv_gaps) - statistics.median(cli_gaps)) < 5
    # And the server kept to the model's schedule (generous for a busy machine).
    lateness = [(r["t_ns"] - r["sched_ns"]) / 1e6 for r in rows]
    assert statistics.median(lateness) < 25
    # The model's decode step for 70B FP8 on 4x H100: ~12 ms.
    sched_gaps = [(b["sched_ns"] - a["sched_ns"]) / 1e6 for a, b in pairwise(rows)]
    assert 8 < statistics.median(sched_gaps) < 20


def test_client_disconnect_aborts_the_request(sim: SimProc) -> None:
    before = sim.metrics().get("llmslo_sim_aborted_total", 0)
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        with c.stream("POST", "/v1/chat/completions", json=chat_body(2000)) as resp:
            for i, _line in enumerate(resp.iter_lines()):
                if i >= 4:
                    break
    assert wait_for(lambda: sim.metrics()["llmslo_sim_aborted_total"] > before)
    assert wait_for(lambda: sim.metrics()["vllm:num_requests_running"] == 0)
    assert httpx.get(sim.url + "/health").status_code == 200


def test_http10_close_delimited_stream(sim: SimProc) -> None:
    u = urlsplit(sim.url)
    body = json.dumps(chat_body(3)).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.0\r\nHost: {u.hostname}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(head + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head_out, _, payload = data.partition(b"\r\n\r\n")
    assert b"200 OK" in head_out and b"chunked" not in head_out.lower()
    assert payload.count(b"data: ") == 1 + 3 + 1 + 1  # role, tokens, usage, [DONE]
    assert payload.endswith(b"data: [DONE]\n\n")


def test_concurrent_streams_batch_together(sim: SimProc) -> None:
    async def one(client: httpx.AsyncClient) -> tuple[float, int]:
        t0 = perf_counter_ns()
        first = None
        n = 0
        async with client.stream("POST", "/v1/chat/completions", json=chat_body(16)) as r:
            async for line in r.aiter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    first = first or perf_counter_ns()
                    n += 1
        return ((first or t0) - t0) / 1e6, n

    async def main() -> list[tuple[float, int]]:
        async with httpx.AsyncClient(base_url=sim.url, timeout=60) as client:
            return await asyncio.gather(*(one(client) for _ in range(16)))

    steps0 = sim.metrics()["llmslo_sim_steps_total"]
    results = asyncio.run(main())
    assert all(n == 16 for _, n in results)
    # 16 requests x 16 tokens shared steps: far fewer steps than tokens.
    assert sim.metrics()["llmslo_sim_steps_total"] - steps0 < 16 * 16 / 2


def test_kv_pressure_preempts_and_every_request_completes(tmp_path: Path) -> None:
    # 40 blocks x 16 tokens; 4 requests that grow to ~150 tokens (10 blocks) each do not
    # all fit as they decode: some are preempted, recomputed, and still finish.
    with start_sim(tmp_path, "--num-gpu-blocks", "34", "--max-model-len", "512") as s:

        async def one(client: httpx.AsyncClient) -> int:
            n = 0
            body = chat_body(120)
            body["messages"] = [{"role": "user", "content": "x " * 20}]
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if '"content":"' in line and '"content":""' not in line:
                        n += 1
            return n

        async def main() -> list[int]:
            async with httpx.AsyncClient(base_url=s.url, timeout=60) as client:
                return await asyncio.gather(*(one(client) for _ in range(4)))

        assert asyncio.run(main()) == [120] * 4
        m = s.metrics()
        assert m["vllm:num_preemptions_total"] >= 1
        assert m["vllm:num_requests_running"] == 0 and m["vllm:kv_cache_usage_perc"] == 0


def test_cli_lists_profiles_and_rejects_bad_ones(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "pytest_llmslo.sim", "--list-profiles"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    for name in ("llama3-70b-fp8-4xh100-vllm", "llama3-70b-fp8-4xh100-sglang",
                 "llama3-70b-fp8-4xh100-trtllm", "llama3-8b-1xh100-vllm"):  # fmt: skip
        assert name in out
    bad = subprocess.run(
        [sys.executable, "-m", "pytest_llmslo.sim", "--profile", "nope"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert bad.returncode == 2 and "Valid profiles" in bad.stderr
    custom = tmp_path / "p.json"
    custom.write_text(
        json.dumps({"base": "llama3-8b-1xh100-vllm", "gpu": "h200", "engine": {"max_num_seqs": 7}})
    )
    shown = subprocess.run(
        [sys.executable, "-m", "pytest_llmslo.sim", "--profile-file", str(custom), "--tp", "2",
         "--show-profile"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    prof = json.loads(shown)
    assert prof["gpu"]["name"].startswith("H200") and prof["tp"] == 2
    assert prof["engine"]["max_num_seqs"] == 7


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/completions"])
def test_prompt_tokens_follow_the_documented_rule(sim: SimProc, endpoint: str) -> None:
    text = "one two, three! four"
    if endpoint.endswith("chat/completions"):
        body: dict = {"messages": [{"role": "user", "content": text}], "max_tokens": 1}  # type: ignore[type-arg]
        expected = 1 + 5 + 4 + 6  # bos, message markers, generation prompt, 4 words + 2 marks
    else:
        body = {"prompt": text, "max_tokens": 1}
        expected = 1 + 6
    r = httpx.post(sim.url + endpoint, json=body, timeout=30)
    assert r.json()["usage"]["prompt_tokens"] == expected


def test_shared_prefix_hits_the_prefix_cache(sim: SimProc) -> None:
    system = "You are a careful assistant. " * 60  # ~300 tokens shared by both requests
    before = sim.metrics()
    with httpx.Client(base_url=sim.url, timeout=30) as c:
        for question in ("What is a knee?", "What is goodput?"):
            body = chat_body(2)
            body["messages"] = [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ]
            events, _, _ = stream_events(c, "/v1/chat/completions", body)
            assert events[-1] == "[DONE]"
    after = sim.metrics()
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    # The second request found the system prompt's full 16-token blocks in the cache.
    assert hits >= 256


def test_reset_prefix_cache_empties_the_cache(sim: SimProc) -> None:
    # vLLM's dev-mode endpoint: the same prompt hits the cache again, until it is reset.
    body = chat_body(2)
    body["messages"] = [{"role": "user", "content": "You are a careful assistant. " * 60}]

    def hits_of_one_request(c: httpx.Client) -> float:
        before = sim.metrics()["vllm:prefix_cache_hits_total"]
        events, _, _ = stream_events(c, "/v1/chat/completions", body)
        assert events[-1] == "[DONE]"
        return sim.metrics()["vllm:prefix_cache_hits_total"] - before

    with httpx.Client(base_url=sim.url, timeout=30) as c:
        hits_of_one_request(c)
        assert hits_of_one_request(c) >= 256  # warm: served from the cache
        r = c.post("/reset_prefix_cache")
        assert r.status_code == 200
        assert r.json()["success"] is True and r.json()["evicted_blocks"] > 0
        assert hits_of_one_request(c) == 0  # cold again
        assert c.get("/reset_prefix_cache").status_code == 405


def test_expect_100_continue_is_answered(sim: SimProc) -> None:
    u = urlsplit(sim.url)
    body = json.dumps({"model": MODEL, "prompt": "word " * 400, "max_tokens": 1}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {u.hostname}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\n\r\n"
    ).encode()
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(head)
        assert s.recv(1024).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK") and b'"completion_tokens":1' in data
