"""The common-shape decoder (``ssefast``) against the general one it shortcuts: over
thousands of generated streams, valid and broken, split at any byte, the two give the same
``StreamResult`` (every field, error kinds and texts included) and the same record."""

from __future__ import annotations

import gzip
import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmslo.load.client import RawExchange, build_record
from pytest_llmslo.load.sse import decode_stream, parse_body, split_events
from pytest_llmslo.load.ssefast import plain_body, plain_data, plain_events, read_plain

_TEXTS = ["tok ", "", "h\u00e9llo", "\u4f60\u597d", 'q"uote\\', "\n", "\U0001f600", "a" * 40]
_ODD = [None, 0, 1, True, 2.5, "", "x", [], [1], {}, {"a": 1}, 10**30]


class _Rng(random.Random):
    """Seeded; ``odd`` scales how often a field or a chunk is out of the ordinary (per
    stream: most streams are clean, as most real ones are, some are full of oddities)."""

    odd = 1.0


def _pick(rng: _Rng, common: Any, odd: float = 0.1, among: list[Any] = _ODD) -> Any:
    return rng.choice(among) if rng.random() < odd * rng.odd else common


def _delta(rng: _Rng) -> Any:
    kind = rng.random()
    d: dict[str, Any] = {}
    if kind < 0.6:
        d["content"] = _pick(rng, rng.choice(_TEXTS))
    elif kind < 0.7:
        d["role"] = "assistant"
        d["content"] = ""
    elif kind < 0.8:
        d[rng.choice(["reasoning_content", "reasoning"])] = _pick(rng, rng.choice(_TEXTS))
        if rng.random() < 0.3:
            d["reasoning"] = _pick(rng, "r")
    elif kind < 0.9:
        d["tool_calls"] = _pick(rng, rng.choice([[], [{"index": 0, "function": {"a": "{"}}]]))
        if rng.random() < 0.3:
            d["function_call"] = _pick(rng, rng.choice([{}, {"name": "f"}]))
    if rng.random() < 0.05:
        d["token_ids"] = _pick(rng, [1, 2])
    return _pick(rng, d, 0.03)


def _chunk(rng: _Rng, chat: bool, usage: bool) -> Any:
    ch: dict[str, Any] = {"index": 0, "finish_reason": None, "logprobs": None}
    if chat:
        ch["delta"] = _delta(rng)
    else:
        ch["text"] = _pick(rng, rng.choice(_TEXTS))
    if rng.random() < 0.05:
        ch["token_ids"] = _pick(rng, [7] * rng.randint(0, 3))
    if rng.random() < 0.05:
        ch["finish_reason"] = _pick(rng, "stop")
    obj: dict[str, Any] = {"id": "x", "object": "chat.completion.chunk", "model": "m"}
    obj["choices"] = _pick(rng, [ch] * rng.choice([1, 1, 1, 2, 0]), 0.03)
    if usage or rng.random() < 0.03:
        n = rng.randint(0, 50)
        obj["usage"] = _pick(
            rng, {"prompt_tokens": _pick(rng, 5), "completion_tokens": _pick(rng, n)}
        )
    r = rng.random()
    if r < 0.01:
        obj["error"] = _pick(rng, {"message": "boom", "type": "BadRequestError", "code": 400})
    elif r < 0.02:
        obj = {"object": "error", "message": "bad", "type": "X", "code": 500}
    elif r < 0.03:
        obj["object"] = _pick(rng, "error", 0.5)
    return _pick(rng, obj, 0.01)


def _data(rng: _Rng, obj: Any) -> bytes:
    text = json.dumps(
        obj, ensure_ascii=rng.random() < 0.5, separators=rng.choice([None, (",", ":")])
    )
    raw = text.encode("utf-8", "surrogatepass")
    r = rng.random() / rng.odd
    if r < 0.01:  # a byte changed anywhere
        i = rng.randrange(len(raw))
        raw = raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1 :]
    elif r < 0.02:
        raw = rng.choice(
            [
                b"",
                b"garbage",
                b"{",
                b'{"x": NaN}',
                b'{"x": "\xff"}',
                b'{"x": "\xed\xa0\x80"}',
                b'{"x": "\\ud800"}',
                b'{"a":1,"a":2}',
                b"[1],[2]",
                b'{"x": ' + b"9" * 1200 + b"}",
                b'{"x": ' + b"[" * 994 + b"]" * 994 + b"}",
                b'{"choices": [{"delta": {"content": "a"}}], "choices": null}',
                b'{"usage": {"prompt_tokens": 1.0}}',
                b"\x00",
                b"1,2",
            ]
        )
    return raw


def _events(rng: _Rng) -> list[bytes]:
    chat = rng.random() < 0.7
    cont = rng.random() < 0.2
    events = []
    n = rng.choice([0, 1, 3, 20, 100])
    if chat and rng.random() < 0.8:
        events.append(b"data: " + _data(rng, _chunk(rng, chat, cont)))
    for _ in range(n):
        events.append(b"data: " + _data(rng, _chunk(rng, chat, cont)))
        r = rng.random() / rng.odd
        if r < 0.01:
            events.append(
                rng.choice([b": ping", b"id: 3", b"hello", b"event: error\ndata: {}", b"retry: 1"])
            )
        elif r < 0.02:
            events.append(b"event: error\ndata: " + _data(rng, {"error": {"message": "m"}}))
        elif r < 0.03:
            events.append(b"data: {\ndata: }")
    fin = {"choices": [{"index": 0, "delta": {}, "finish_reason": _pick(rng, "length")}]}
    if rng.random() < 0.9:
        events.append(b"data: " + _data(rng, fin))
    if rng.random() < 0.7:
        events.append(
            b"data: "
            + _data(rng, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}})
        )
    if rng.random() < 0.9:
        events.append(rng.choice([b"data: [DONE]"] * 8 + [b"data:[DONE]", b"data: [DONE] "]))
    if rng.random() < 0.05:
        events.append(b"data: {}")
    return events


def _body(rng: _Rng) -> bytes:
    events = _events(rng)
    seps = [b"\r\n\r\n", b"\n\n\n", b"\n\n\n\n", b"\n\r\n"]
    body = b"".join(e + _pick(rng, b"\n\n", 0.05, seps) for e in events)
    if rng.random() < 0.05:
        body = body.replace(b"\n", b"\r\n")
    if rng.random() < 0.05 and body:
        body = body[: rng.randrange(len(body))]  # cut
    r = rng.random()
    if r < 0.01:
        body = gzip.compress(body)
    elif r < 0.02:
        body = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    return body


def _pieces(rng: _Rng, body: bytes) -> list[bytes]:
    r = rng.random()
    if r < 0.6:  # one event a read, as a quiet server sends them
        parts = body.split(b"\n\n")
        pieces = [p + b"\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])
    elif r < 0.9:  # reads cut at arbitrary bytes (a busy client, a proxy)
        cuts = sorted(rng.randrange(len(body) + 1) for _ in range(rng.randint(0, 40)))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    else:
        pieces = [body]
    if rng.random() < 0.05:
        pieces.insert(rng.randrange(len(pieces) + 1), b"")
    return pieces


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # the same exception from both paths counts as the same result
        return type(exc), str(exc)


def _check(times: list[int], pieces: list[bytes]) -> bool:
    """Both paths agree on this body; True when the fast JSON path was the one that ran."""
    assert _outcome(split_events, times, pieces) == _outcome(
        split_events, times, pieces, fast=False
    )
    assert _outcome(parse_body, times, pieces) == _outcome(parse_body, times, pieces, fast=False)
    ev_times, events, _ = split_events(times, pieces, fast=False)
    fast = _outcome(decode_stream, ev_times, events)
    assert fast == _outcome(decode_stream, ev_times, events, fast=False)
    for status, kind in ((200, None), (200, "timeout"), (500, None)):
        raw = RawExchange()
        raw.times, raw.pieces, raw.status, raw.kind, raw.sent_ns = times, pieces, status, kind, 0
        if kind:
            raw.error = "stream stalled for 1 s"
        a = _outcome(build_record, 0, 0, raw)
        b = _outcome(_general_record, raw)
        assert a == b
    plain = plain_data(ev_times, events)
    return plain is not None and read_plain(plain[0], plain[1]) is not None


def _general_record(raw: RawExchange) -> Any:
    import pytest_llmslo.load.client as client

    saved = client.parse_body, client.decode_stream, client.split_events
    client.parse_body = lambda t, p: parse_body(t, p, fast=False)  # type: ignore[assignment]  # the general path, for comparison
    client.decode_stream = lambda t, e: decode_stream(t, e, fast=False)  # type: ignore[assignment]  # the general path, for comparison
    client.split_events = lambda t, p: split_events(t, p, fast=False)  # type: ignore[assignment]  # the general path, for comparison
    try:
        return build_record(0, 0, raw)
    finally:
        client.parse_body, client.decode_stream, client.split_events = saved


@pytest.mark.parametrize("seed", range(4))
def test_generated_streams_decode_the_same_both_ways(seed: int) -> None:
    rng = _Rng(seed)
    fast_hits = 0
    for _ in range(750):
        rng.odd = rng.choice([1e-9, 1e-9, 0.01, 0.1, 1.0])
        body = _body(rng)
        pieces = _pieces(rng, body)
        times = sorted(rng.randrange(10**9) for _ in pieces)
        fast_hits += _check(times, pieces)
    assert fast_hits > 250  # the common shape is common here too: the fast path was tested


def test_the_common_stream_takes_the_fast_path() -> None:
    events = [b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}']
    events += [b'data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}'] * 5
    events += [b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}']
    events += [b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}']
    events += [b"data: [DONE]"]
    pieces = [e + b"\n\n" for e in events]
    times = list(range(10, 10 + len(pieces)))
    split = plain_events(times, pieces)
    assert split == (times, events, b"")
    data = plain_data(times, events)
    assert data is not None and data[2] is True
    assert plain_body(times, pieces) == data
    plain = read_plain(data[0], data[1])
    assert plain is not None and plain.chunk_ns == [11, 12, 13, 14, 15]
    result = parse_body(times, pieces)
    assert result == parse_body(times, pieces, fast=False)
    assert (result.prompt_tokens, result.completion_tokens, result.finish_reason) == (
        3,
        5,
        "length",
    )


@pytest.mark.parametrize(
    "data",
    [
        b'{"choices":[{"delta":{"content":"a"}}],"x":"\xff"}',  # msgspec skips it unchecked
        b'{"choices":[{"delta":{"content":"a"}}],"x":"\xed\xa0\x80"}',  # json: surrogatepass
        b'{"choices":[{"delta":{"content":"a"}}],"x":' + b"[" * 994 + b"]" * 994 + b"}",
        b'{"choices":[{"delta":{"content":"a"}}],"x":' + b"7" * 4400 + b"}",
        b'{"choices":[{"delta":{"content":"a"}}],"x":NaN}',
        b'{"choices":[{"delta":{"content":"\\ud800"}}]}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":true}}',
        b'{"choices":[{"delta":{"content":"a"}}]},{"choices":[]}',
        b'{"choices":[{"delta":{"content":"a"}}]}\r',
        b'\t {"choices":[{"delta":{"content":"a"}}]}\x0c',
        b'{"choices":[{"delta":{"content":"\\ud83d\\ude00"}}],"x":"\x7f"}',
        b'{"choices":[{"delta":{"\\u0063ontent":"a"}}],"choices":[{"delta":{}}]}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":"\\u0073top"}]}',
    ],
)
def test_json_the_two_decoders_disagree_on_goes_the_general_way(data: bytes) -> None:
    pieces = [b"data: " + data + b"\n\n", b"data: [DONE]\n\n"]
    assert _outcome(parse_body, [1, 2], pieces) == _outcome(parse_body, [1, 2], pieces, fast=False)


_SSE_BYTES = st.sampled_from(
    [
        b"data: ",
        b"data:",
        b"\n",
        b"\r",
        b"\n\n",
        b"[DONE]",
        b"event: error\n",
        b": c\n",
        b"{}",
        b'{"choices":[{"delta":{"content":"x"}}]}',
        b'{"choices":[]',
        b',"usage":{"completion_tokens":2}}',
        b'{"choices":[{"text":"t","finish_reason":"stop"}]}',
        b'{"error":{"message":"e"}}',
        b"\xff",
        b"x",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_SSE_BYTES, max_size=8).map(b"".join), max_size=12))
def test_any_pieces_decode_the_same_both_ways(pieces: list[bytes]) -> None:
    _check(list(range(len(pieces))), pieces)


_TOKENS = [
    *(b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b" ", b"\t", b"\r", b"\x0c", b"\x00"),
    *(b"\x7f", b"\xff", b"\xc3", b"\xa9", b"\xed", b"1", b"e", b"-", b".", b"n", b"0", b"N"),
    *(b"+", b"\\u", b"\\ud800", b"null", b"true", b"1e999", b"9" * 25, b'"error"'),
    *(b'"object"', b'"usage"', b'"content"', b'"text"', b'"delta"', b'"finish_reason"'),
    *(b'"token_ids"', b'"tool_calls"', b'"reasoning"', b'"choices"', b'"completion_tokens"'),
]
_COMMON = [
    b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":'
    b'"assistant","content":""},"finish_reason":null}]}',
    b'{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":'
    b'"tok "},"finish_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":1}}',
    b'{"id":"c","object":"text_completion","choices":[{"index":0,"text":"tok ","logprobs":'
    b'null,"finish_reason":null}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"r","tool_calls":[]},'
    b'"finish_reason":null}]}',
    b'{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}',
    b'{"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}',
]


def test_mutated_common_chunks_decode_the_same_both_ways() -> None:
    """Common chunks with one to three JSON-significant edits (a quote, an escape, a
    number, a key, a byte that is not UTF-8): wherever the typed decode still accepts the
    stream, it must say what json.loads says."""
    rng = random.Random(7)
    accepted = 0
    for _ in range(5000):
        datas = [rng.choice(_COMMON) for _ in range(rng.randint(1, 6))]
        k = rng.randrange(len(datas))
        d = datas[k]
        for _ in range(rng.randint(1, 3)):
            j, op = rng.randrange(len(d) + 1), rng.random()
            tail = d[j:] if op < 0.4 else d[j + 1 :]
            d = d[:j] + (rng.choice(_TOKENS) if op < 0.7 else b"") + tail
        datas[k] = d.replace(b"\n", b"")
        pieces = [b"data: " + x + b"\n\n" for x in datas] + [b"data: [DONE]\n\n"]
        times = list(range(len(pieces)))
        fast = _outcome(parse_body, times, pieces)
        assert fast == _outcome(parse_body, times, pieces, fast=False), datas[k]
        accepted += read_plain(datas, times[: len(datas)]) is not None
    assert accepted > 500  # the edits the typed decode lets through were compared too
