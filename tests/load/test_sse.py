"""SSE splitting and decoding on hand-built byte streams: every parse case."""

from __future__ import annotations

import json

from pytest_llmslo.load.client import RawExchange, build_record
from pytest_llmslo.load.sse import decode_stream, error_excerpt, parse_body, split_events


def chat(content=None, *, role=None, reasoning=None, finish=None, usage=None, ids=None):
    delta = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    if ids is not None:
        choice["token_ids"] = ids
    obj = {"id": "x", "object": "chat.completion.chunk", "choices": [choice]}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def usage_chunk(pt, ct):
    obj = {"choices": [], "usage": {"prompt_tokens": pt, "completion_tokens": ct}}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def parse(*pieces, times=None):
    times = times or list(range(1000, 1000 + 1000 * len(pieces), 1000))
    return parse_body(times, list(pieces))


def test_basic_stream_role_only_and_usage_chunk():
    r = parse(
        chat("", role="assistant"),
        chat("Hi"),
        chat(" there"),
        chat(finish="stop"),
        usage_chunk(7, 2),
        DONE,
    )
    assert r.error_kind is None and r.done
    assert r.chunk_ns == (2000, 3000)  # role-only and empty finish chunks are not output
    assert r.first_content_ns == 2000
    assert r.prompt_tokens == 7 and r.completion_tokens == 2
    assert r.finish_reason == "stop"
    assert r.chunk_tokens == (1, 1) and not r.tokens_exact


def test_usage_on_the_finish_chunk_is_a_total_not_a_delta():
    r = parse(
        chat("a"),
        chat("b"),
        chat("c", finish="length", usage={"prompt_tokens": 3, "completion_tokens": 3}),
        DONE,
    )
    assert r.completion_tokens == 3 and r.prompt_tokens == 3
    assert r.chunk_tokens == (1, 1, 1) and not r.tokens_exact
    assert r.finish_reason == "length"


def test_continuous_usage_gives_exact_multi_token_chunks():
    u = lambda ct: {"prompt_tokens": 5, "completion_tokens": ct}  # noqa: E731
    r = parse(
        chat("", role="assistant", usage=u(0)),
        chat("ab", usage=u(2)),
        chat("cde", usage=u(5)),
        chat("f", usage=u(6)),
        chat(finish="length", usage=u(6)),
        usage_chunk(5, 6),
        DONE,
    )
    assert r.chunk_tokens == (2, 3, 1) and r.tokens_exact
    assert r.completion_tokens == 6


def test_token_ids_give_exact_counts():
    r = parse(chat("ab", ids=[1, 2]), chat("c", ids=[3]), chat(finish="stop"), DONE)
    assert r.chunk_tokens == (2, 1) and r.tokens_exact


def test_token_ids_without_text_still_count_as_output():
    r = parse(chat("", ids=[1, 2]), chat(None, ids=[3]), chat(finish="stop"), DONE)
    assert r.chunk_ns == (1000, 2000) and r.chunk_tokens == (2, 1)


def test_reasoning_counts_for_ttft_but_not_first_content():
    obj = {"choices": [{"index": 0, "delta": {"reasoning": "hmm"}, "finish_reason": None}]}
    alt = b"data: " + json.dumps(obj).encode() + b"\n\n"
    r = parse(chat(reasoning="think"), alt, chat("answer"), chat(finish="stop"), DONE)
    assert r.chunk_ns == (1000, 2000, 3000)
    assert r.first_content_ns == 3000


def test_several_events_in_one_read_share_its_arrival_time():
    r = parse_body([10, 20], [chat("a") + chat("b") + chat("c"), chat(finish="stop") + DONE])
    assert r.chunk_ns == (10, 10, 10)


def test_event_split_across_reads_takes_the_time_of_the_completing_read():
    ev = chat("hello")
    r = parse_body([10, 20, 30], [ev[:7], ev[7:-1], ev[-1:] + chat(finish="stop") + DONE])
    assert r.chunk_ns == (30,)


def test_crlf_line_endings_even_split_between_reads():
    ev = chat("x").replace(b"\n", b"\r\n")
    done = DONE.replace(b"\n", b"\r\n")
    fin = chat(finish="stop").replace(b"\n", b"\r\n")
    r = parse_body([1, 2, 3], [ev[:-1], ev[-1:] + fin, done])
    assert r.chunk_ns == (2,) and r.done and r.error_kind is None


def test_comments_and_id_lines_are_ignored():
    r = parse(b": keep-alive\n\n", b"id: 1\n" + chat("a"), chat(finish="stop"), DONE)
    assert r.chunk_ns == (2000,) and r.error_kind is None


def test_completions_text_chunks():
    def comp(text, finish=None):
        o = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
        return b"data: " + json.dumps(o).encode() + b"\n\n"

    r = parse(comp("a"), comp(""), comp("b", "length"), usage_chunk(1, 2), DONE)
    assert r.chunk_ns == (1000, 3000) and r.first_content_ns == 1000
    assert r.completion_tokens == 2 and r.finish_reason == "length"


def test_error_event():
    r = parse(chat("a"), b'event: error\ndata: {"message": "overloaded"}\n\n')
    assert r.error_kind == "stream_error" and "overloaded" in (r.error or "")
    assert r.chunk_ns == (1000,)


def test_error_object_in_stream():
    err = b'data: {"error": {"message": "KV cache full", "code": 503}}\n\n'
    r = parse(chat("a"), err, DONE)
    assert r.error_kind == "stream_error" and "KV cache full" in (r.error or "")


def test_vllm_bare_error_response_in_stream():
    # vLLM's ErrorResponse shape, then [DONE]: a failure, not a skipped chunk.
    err = b'data: {"object":"error","message":"boom","type":"BadRequestError","code":400}\n\n'
    r = parse(chat("", role="assistant"), chat("a"), err, DONE)
    assert r.error_kind == "stream_error" and r.error == "BadRequestError: boom"
    assert r.chunk_ns == (2000,)
    rec = build_record(0, 0, raw_of(200, [chat("a"), err, DONE]))
    assert not rec.ok and rec.error_kind == "stream_error" and "boom" in (rec.error or "")
    # Alone in the stream too, and without a code.
    r = parse(b'data: {"object": "error", "message": "engine dead"}\n\n', DONE)
    assert r.error_kind == "stream_error" and r.error == "engine dead"
    # The same object as an HTTP error body: a code that repeats the status is left out.
    assert error_excerpt([b'{"object":"error","message":"too long","code":400}']) == (
        "400: too long"
    )
    assert error_excerpt([b'{"object":"error","message":"too long","code":400}'], 400) == (
        "too long"
    )


def raw_of(status, pieces):
    raw = RawExchange()
    raw.sent_ns, raw.status, raw.end_ns = 1, status, 10 * len(pieces)
    raw.times = [10 * (i + 1) for i in range(len(pieces))]
    raw.pieces = list(pieces)
    return raw


def test_truncated_stream_without_done_or_finish():
    r = parse(chat("a"), chat("b"))
    assert r.error_kind == "truncated" and r.chunk_ns == (1000, 2000)


def test_finish_reason_without_done_is_complete():
    r = parse(chat("a"), chat(finish="stop"))
    assert r.error_kind is None and not r.done


def test_missing_final_blank_line_after_done():
    r = parse(chat("a"), chat(finish="stop"), b"data: [DONE]")
    assert r.error_kind is None and r.done


def test_malformed_json():
    r = parse(chat("a"), b"data: {not json\n\n", chat("b"), DONE)
    assert r.error_kind == "malformed" and "not JSON" in (r.error or "")


def test_wrong_shape():
    r = parse(b'data: {"choices": "nope"}\n\n', DONE)
    assert r.error_kind == "malformed"


def test_not_an_event_stream_at_all():
    r = parse(b'{"id": "x", "choices": [{"message": {"content": "hi"}}]}')
    assert r.error_kind == "malformed"


def test_empty_body_is_truncated():
    r = parse_body([], [])
    assert r.error_kind == "truncated" and r.chunk_ns == ()


def test_multi_line_data_is_joined():
    ev = b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "x"}}]}\n\n'
    r = parse(ev, chat(finish="stop"), DONE)
    assert r.chunk_ns == (1000,)


def test_split_events_leftover():
    _times, events, rest = split_events([1], [b"data: a\n\ndata: b"])
    assert events == [b"data: a"] and rest == b"data: b"
    assert decode_stream([], []).error_kind == "truncated"


def test_error_excerpt_prefers_message():
    assert "bad model" in error_excerpt([b'{"error": {"message": "bad model", "code": 404}}'])
    assert error_excerpt([b"plain text " * 100]).endswith("...")
    assert error_excerpt([]) == ""


def test_build_record_http_error_keeps_status_and_body():
    raw = RawExchange()
    raw.sent_ns, raw.status = 5, 500
    raw.times, raw.pieces = [9], [b'{"error": {"message": "boom"}}']
    rec = build_record(3, 1, raw, requested_prompt_tokens=10, requested_output_tokens=20)
    assert rec.error_kind == "http" and rec.status == 500 and "boom" in (rec.error or "")
    assert rec.end_ns == 9 and not rec.ok and rec.requested_output_tokens == 20


def test_build_record_transport_failure_keeps_partial_chunks():
    raw = RawExchange()
    raw.sent_ns, raw.status, raw.kind, raw.error = 5, 200, "reset", "ConnectionResetError"
    raw.times, raw.pieces = [10, 20], [chat("a"), chat("b")]
    rec = build_record(0, 1, raw)
    assert rec.error_kind == "reset" and tuple(rec.chunk_ns) == (10, 20)


def test_build_record_ok():
    raw = RawExchange()
    raw.sent_ns, raw.status = 5, 200
    raw.times, raw.pieces = [10, 20], [chat("a"), chat(finish="stop") + usage_chunk(4, 1) + DONE]
    rec = build_record(0, 1, raw)
    assert rec.ok and rec.end_ns == 20 and rec.prompt_tokens == 4 and rec.output_tokens == 1


def _gzip(data: bytes) -> bytes:
    import zlib

    z = zlib.compressobj(wbits=31)
    return z.compress(data) + z.flush()


def test_a_gzip_error_body_is_read_not_dumped_as_bytes() -> None:
    # A server (or proxy) that compresses though the client asked for identity: the error
    # message used to be the compressed bytes decoded as text.
    body = _gzip(b'{"error": {"message": "engine overloaded", "type": "Busy"}}')
    assert error_excerpt([body[:7], body[7:]], 503) == "Busy: engine overloaded"
    assert error_excerpt([b"\x1f\x8b\x08garbage"]) == "gzip body (10 bytes, not decompressible)"
    assert error_excerpt([bytes(range(256))]) == "binary body (256 bytes)"
    assert error_excerpt(["caf\u00e9".encode()[:-1]]) == "caf\ufffd"  # a character cut at the end


def test_a_gzip_stream_is_malformed_and_says_so() -> None:
    r = parse(_gzip(chat("a") + chat(finish="stop") + DONE))
    assert r.error_kind == "malformed" and not r.chunk_ns
    assert r.error is not None and r.error.startswith("gzip-compressed body (")
    assert "\ufffd" not in r.error


def test_tool_call_deltas_are_output() -> None:
    # vLLM streams a tool call as delta.tool_calls: the name first, then pieces of the
    # JSON arguments, with no content at all; it used to be a no_output failure.
    def tool(piece):
        obj = {"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]}
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    first = {"index": 0, "id": "call-0", "type": "function", "function": {"name": "f"}}
    r = parse(
        chat(role="assistant", content=""),
        tool(first),
        tool({"index": 0, "function": {"arguments": '{"x": 1}'}}),
        chat(finish="tool_calls"),
        usage_chunk(5, 4),
        DONE,
    )
    assert r.error_kind is None and r.chunk_ns == (2000, 3000)
    assert r.first_content_ns == 2000  # TTFT and TTFOT at the first tool-call delta
    legacy = {"choices": [{"index": 0, "delta": {"function_call": {"name": "f"}}}]}
    r = parse(b"data: " + json.dumps(legacy).encode() + b"\n\n", chat(finish="stop"), DONE)
    assert r.error_kind is None and len(r.chunk_ns) == 1
    # An empty list is no output (vLLM's default on a content delta).
    empty = {"choices": [{"index": 0, "delta": {"tool_calls": []}, "finish_reason": "stop"}]}
    r = parse(b"data: " + json.dumps(empty).encode() + b"\n\n", DONE)
    assert r.error_kind == "no_output"
