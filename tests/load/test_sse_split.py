"""Properties of the SSE splitter: whatever the read boundaries and line sizes, it cuts the
same events as a reference that sees the whole body at once, dates each event by the read
that completed it, and stays linear in the size of a line."""

from __future__ import annotations

import random
import time

from pytest_llmslo.load.sse import parse_body, split_events


def reference(times: list[int], pieces: list[bytes]) -> tuple[list[int], list[bytes], bytes]:
    """The whole body at once: events are the text between blank lines; an event's time is
    that of the read holding the byte that completed its blank line."""
    body = b"".join(pieces)
    ends = []  # for each byte of the normalised body, the index of the read it came from
    norm = bytearray()
    owner = []
    for k, p in enumerate(pieces):
        owner.extend([k] * len(p))
    i = 0
    while i < len(body):
        if body[i : i + 2] == b"\r\n":
            norm += b"\n"
            ends.append(owner[i + 1])
            i += 2
        else:
            norm.append(body[i])
            ends.append(owner[i])
            i += 1
    ev_times: list[int] = []
    events: list[bytes] = []
    start = 0
    j = norm.find(b"\n\n")
    while j >= 0:
        if j > start:
            events.append(bytes(norm[start:j]))
            ev_times.append(times[ends[j + 1]])
        start = j + 2
        j = norm.find(b"\n\n", start)
    return ev_times, events, bytes(norm[start:])


def random_body(rng: random.Random) -> bytes:
    parts = []
    for _ in range(rng.randint(0, 12)):
        size = rng.choice([0, 1, 5, 40, 300, 5000])
        line = bytes(rng.choice(b'abc:{}" ') for _ in range(size))
        nl = rng.choice([b"\n", b"\r\n"])
        kind = rng.random()
        if kind < 0.6:
            parts.append(b"data: " + line + nl + nl)
        elif kind < 0.75:
            parts.append(b": ping" + nl + nl)
        elif kind < 0.9:
            parts.append(b"event: x" + nl + b"data: " + line + nl + nl)
        else:
            parts.append(b"data: " + line)  # an event cut short (the leftover)
    return b"".join(parts)


def random_cuts(rng: random.Random, body: bytes) -> list[bytes]:
    pieces = []
    i = 0
    while i < len(body):
        n = rng.choice([1, 1, 2, 3, 7, 64, 1000, 10**6])
        pieces.append(body[i : i + n])
        i += n
    return pieces


def test_split_matches_the_whole_body_reference_over_random_cuts() -> None:
    rng = random.Random(20261203)
    for _ in range(600):
        body = random_body(rng)
        pieces = random_cuts(rng, body)
        times = [1000 * (k + 1) for k in range(len(pieces))]
        assert split_events(times, pieces) == reference(times, pieces), (body, pieces)


def test_a_crlf_split_across_reads_is_one_line_end() -> None:
    pieces = [b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]
    times, events, rest = split_events([1, 2, 3], pieces)
    assert events == [b"data: a", b"data: b"] and times == [3, 3] and rest == b""


def test_a_trailing_cr_stays_in_the_leftover() -> None:
    _times, events, rest = split_events([1], [b"data: a\n\ndata: b\r"])
    assert events == [b"data: a"] and rest == b"data: b\r"


def test_ten_megabyte_line_in_small_reads_is_linear() -> None:
    line = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 10_000_000 + b'"}}]}'
    body = line + b"\n\n" + b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'
    body += b"data: [DONE]\n\n"
    pieces = [body[i : i + 1024] for i in range(0, len(body), 1024)]  # ~10,000 reads
    times = list(range(len(pieces)))
    t0 = time.process_time()
    result = parse_body(times, pieces)
    spent = time.process_time() - t0
    assert result.error_kind is None and len(result.chunk_ns) == 1
    # Quadratic splitting took about 2 minutes here; linear takes tens of milliseconds. The
    # bound is loose on purpose: it separates the two behaviours, not two machines.
    assert spent < 10.0, f"splitting a 10 MB line took {spent:.1f} s of CPU"
