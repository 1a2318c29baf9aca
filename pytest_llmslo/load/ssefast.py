"""The common stream shape, decoded without the general path's per-event work.

Almost every stream is the same: events of one ``data: {json}`` line each, ``\\n`` line
ends, one event per read, chunks whose only fields that matter are a string ``content``
(or ``text``), a ``finish_reason`` and integer ``usage``. ``sse.py`` decodes any body, one
event and one chunk at a time; at the end of a level at c512 that is hundreds of thousands
of chunks, most of the time between a stop signal and the results document. Each function
here takes that shape in a few C-level calls and answers ``None`` for anything else (a
``\\r``, a comment, an error, a field of another type, ...): the caller then runs the
general path, so the result is the same whatever the input.

JSON: one typed ``msgspec`` decode of the whole stream instead of ``json.loads`` (it builds
no dicts). It only answers where ``json.loads`` would have accepted the same array with the
same values; the differences it must not see are kept out before it runs:

- invalid UTF-8 in a field the types do not name (``msgspec`` skips it unchecked;
  ``json.loads`` rejects it) and encoded surrogates (``json.loads`` accepts them through
  ``surrogatepass``): the array must decode as strict UTF-8;
- nesting near the recursion limit (``msgspec`` goes three levels deeper) and integers of
  4,300 digits or more (``json.loads`` refuses them): no chunk may exceed
  ``_MAX_CHUNK`` bytes, which bounds both;
- ``NaN``/``Infinity`` (``json.loads`` accepts them), lone surrogate escapes, a ``bool``
  or a ``float`` where an integer is expected: ``msgspec`` rejects them, and the general
  path decides.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from operator import add
from typing import Any, NamedTuple

import msgspec

_DONE = b"[DONE]"
_DATA = b"data: "
_SEP = b"\n\ndata: "
_MAX_CHUNK = 1024  # bytes of one chunk: nesting <= 512 levels, numbers < 1,025 digits


def _dated(times: Sequence[int], pieces: Sequence[bytes], ends: list[int]) -> list[int]:
    """The read time of each event of the joined ``pieces`` whose last byte is at offset
    ``ends[i] - 1``: the time of the piece that holds it."""
    piece_ends = list(accumulate(map(len, pieces)))
    if ends == piece_ends[: len(ends)]:
        return list(times[: len(ends)])  # one event per piece: the usual read
    return [times[bisect_right(piece_ends, e - 1)] for e in ends]


def plain_events(
    times: Sequence[int], pieces: Sequence[bytes]
) -> tuple[list[int], list[bytes], bytes] | None:
    """``split_events`` of a body without ``\\r``: the body joined once and split on blank
    lines, each event dated by the piece holding the second byte of its blank line."""
    if len(times) != len(pieces):
        return None
    body = b"".join(pieces)
    if b"\r" in body:
        return None
    events = body.split(b"\n\n")
    rest = events.pop()
    n = len(events)
    # Where each event's blank line ends: its text and the blank lines before it.
    ends = list(map(add, accumulate(map(len, events)), range(2, 2 * n + 2, 2)))
    ev_times = _dated(times, pieces, ends)
    if b"" in events:  # a run of blank lines: no event between them
        kept = [(t, e) for t, e in zip(ev_times, events, strict=True) if e]
        ev_times = [t for t, _ in kept]
        events = [e for _, e in kept]
    return ev_times, events, rest


def plain_data(
    ev_times: Sequence[int], events: Sequence[bytes]
) -> tuple[list[bytes], list[int], bool] | None:
    """(data, times, done) when every event is one ``data: `` line: ``_data_events`` of
    that shape, read up to ``[DONE]``."""
    if not events or len(ev_times) != len(events):
        return None
    joined = b"\n\n".join(events)
    if joined[:6] != _DATA or joined.count(b"\n") != 2 * joined.count(_SEP):
        return None
    datas = joined[6:].split(_SEP)
    if len(datas) != len(events):
        return None
    try:
        end = datas.index(_DONE)
    except ValueError:
        return datas, list(ev_times), False
    return datas[:end], list(ev_times[:end]), True


def plain_body(
    times: Sequence[int], pieces: Sequence[bytes]
) -> tuple[list[bytes], list[int], bool] | None:
    """``plain_data(*plain_events(...))`` of a whole body in one pass: a body of
    ``data: `` lines each followed by one blank line, no ``\\r``, nothing after the last
    blank line (what ``parse_body`` sees from almost every server)."""
    if len(times) != len(pieces):
        return None
    body = b"".join(pieces)
    if body[:6] != _DATA or body[-2:] != b"\n\n" or b"\r" in body:
        return None
    n = body.count(_SEP) + 1
    if body.count(b"\n") != 2 * n:  # a newline elsewhere: another line, a blank-line run
        return None
    datas = body[6:-2].split(_SEP)
    ends = list(map(add, accumulate(map(len, datas)), range(8, 8 * n + 8, 8)))
    data_ns = _dated(times, pieces, ends)
    try:
        end = datas.index(_DONE)
    except ValueError:
        return datas, data_ns, False
    return datas[:end], data_ns[:end], True


class _Usage(msgspec.Struct, gc=False):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    token_ids: None = None
    tool_calls: list[Any] | None = None
    function_call: dict[str, Any] | None = None


class _Choice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    text: str | None = None
    token_ids: None = None
    finish_reason: str | None = None


class _Chunk(msgspec.Struct, gc=False):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: None = None
    object: str | None = None


_DECODER = msgspec.json.Decoder(list[_Chunk])


class PlainChunks(NamedTuple):
    """What the chunks said, as ``sse._Chunks`` reads it (no token ids on this path)."""

    chunk_ns: list[int]
    chunk_cum: list[int | None]
    cum_before: int
    first_content: int | None
    prompt_tokens: int | None
    completion_tokens: int | None
    finish: str | None


def _decode(datas: list[bytes]) -> list[_Chunk] | None:
    if max(map(len, datas)) > _MAX_CHUNK:
        return None
    joined = b"[" + b",".join(datas) + b"]"
    if not joined.isascii():
        try:
            joined.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        chunks = _DECODER.decode(joined)
    except (msgspec.DecodeError, RecursionError):
        return None
    return chunks if len(chunks) == len(datas) else None


def read_plain(datas: list[bytes], data_ns: Sequence[int]) -> PlainChunks | None:
    """``sse._Chunks.read`` of chunks that all have the common shape and none of which is
    an error; None otherwise (or when the JSON is for the general path to judge)."""
    if not datas:
        return None
    chunks = _decode(datas)
    if chunks is None:
        return None
    chunk_ns: list[int] = []
    chunk_cum: list[int | None] = []
    cum_before = 0
    first: int | None = None
    pt: int | None = None
    ct_all: int | None = None
    finish: str | None = None
    for ts, chunk in zip(data_ns, chunks, strict=False):
        if chunk.object == "error":
            return None
        content = False
        output = False
        choices = chunk.choices
        if choices:
            c0 = choices[0]
            d = c0.delta
            if d is not None:
                content = bool(d.content or d.tool_calls or d.function_call)
                output = content or bool(d.reasoning_content or d.reasoning)
            else:
                content = output = bool(c0.text)
            if c0.finish_reason:
                finish = c0.finish_reason
        ct: int | None = None
        usage = chunk.usage
        if usage is not None:
            if usage.prompt_tokens is not None:
                pt = usage.prompt_tokens
            ct = usage.completion_tokens
            if ct is not None:
                ct_all = ct
        if not output:
            if ct is not None and not chunk_ns:
                cum_before = ct
            continue
        chunk_ns.append(ts)
        chunk_cum.append(ct)
        if content and first is None:
            first = ts
    return PlainChunks(chunk_ns, chunk_cum, cum_before, first, pt, ct_all, finish)
