"""The post-run decode of finished streams (``load/sse.py``), per streamed token: the
general path (``fast=False``: event by event, ``json.loads``) against the common-shape path
(``load/ssefast.py``) on the same bodies, side by side in one run.

    .venv/bin/python benchmarks/bench_decode.py [--streams 2000] [--tokens 100] [--rounds 7]

Bodies are what the truth server (``sim/truth_server.py``) sends, as the client stores
them (one read per event, de-chunked): a role chunk, ``--tokens`` chunks of one token, an
empty finish chunk, a usage chunk and ``[DONE]``. Shapes: ``chat``, ``completions``,
``chat+usage`` (usage on every chunk, vLLM ``continuous_usage_stats``), ``chat, cut
reads`` (reads cut at random bytes, a busy client) and ``chat, cancelled`` (the transport
failure path of ``client.build_record``: split, no leftover, decode). Each round decodes
every body both ways, alternating which goes first; prints the fastest and the median
round in microseconds per token and their ratio. CPU-bound and single-threaded: on a
shared machine the fastest round is the figure to read, with ``uptime`` beside it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_llmslo.load.sse import decode_stream, parse_body, split_events

Body = tuple[list[int], list[bytes]]


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def stream(tokens: int, chat: bool, continuous: bool) -> list[bytes]:
    """One body in the truth server's chunk format, one event a read."""
    if chat:
        base = {"id": "chatcmpl-fixed", "object": "chat.completion.chunk", "created": 0}
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        tok = {"index": 0, "delta": {"content": "tok "}, "finish_reason": None}
        fin = {"index": 0, "delta": {}, "finish_reason": "length"}
    else:
        base = {"id": "cmpl-fixed", "object": "text_completion", "created": 0}
        tok = {"index": 0, "text": "tok ", "logprobs": None, "finish_reason": None}
        fin = {"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}
    base["model"] = "truth"
    pieces = [_sse({**base, "choices": [role]})] if chat else []
    for k in range(1, tokens + 1):
        obj: dict[str, Any] = {**base, "choices": [tok]}
        if continuous:
            obj["usage"] = {"prompt_tokens": 64, "completion_tokens": k, "total_tokens": 64 + k}
        pieces.append(_sse(obj))
    pieces.append(_sse({**base, "choices": [fin]}))
    usage = {"prompt_tokens": 64, "completion_tokens": tokens, "total_tokens": 64 + tokens}
    pieces.append(_sse({**base, "choices": [], "usage": usage}))
    pieces.append(b"data: [DONE]\n\n")
    return pieces


def cut(pieces: list[bytes], rng: random.Random) -> list[bytes]:
    """The same body in reads cut at random bytes (one to three events a read)."""
    body = b"".join(pieces)
    cuts = sorted(rng.sample(range(1, len(body)), len(pieces) // 2))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


def bodies(streams: int, tokens: int, shape: str) -> list[Body]:
    rng = random.Random(1)
    out = []
    for i in range(streams):
        pieces = stream(tokens, shape != "completions", shape == "chat+usage")
        if shape == "chat, cut reads":
            pieces = cut(pieces, rng)
        t0 = i * 1_000_000
        out.append(([t0 + k * 10_000 for k in range(len(pieces))], pieces))
    return out


def _cancelled(times: list[int], pieces: list[bytes], fast: bool) -> object:
    ev_times, events, _ = split_events(times, pieces, fast=fast)
    return decode_stream(ev_times, events, fast=fast)


def _parse(times: list[int], pieces: list[bytes], fast: bool) -> object:
    return parse_body(times, pieces, fast=fast)


def rounds(data: list[Body], decode: Callable[..., object], n: int) -> dict[bool, list[float]]:
    """Seconds per round, general (False) and fast (True), alternating which runs first."""
    for times, pieces in data[:50]:
        assert decode(times, pieces, False) == decode(times, pieces, True)
    out: dict[bool, list[float]] = {False: [], True: []}
    for r in range(n):
        for fast in (r % 2 == 1, r % 2 == 0):
            t0 = time.perf_counter()
            for times, pieces in data:
                decode(times, pieces, fast)
            out[fast].append(time.perf_counter() - t0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    shapes = ["chat", "completions", "chat+usage", "chat, cut reads", "chat, cancelled"]
    n_tok = args.streams * args.tokens
    print(f"{args.streams} streams x {args.tokens} tokens, {args.rounds} rounds; us/token")
    print(f"{'shape':18} {'general best/median':>21} {'fast best/median':>18} {'ratio (best)':>13}")
    for shape in shapes:
        data = bodies(args.streams, args.tokens, "chat" if shape == "chat, cancelled" else shape)
        decode = _cancelled if shape == "chat, cancelled" else _parse
        res = rounds(data, decode, args.rounds)
        g_best, f_best = min(res[False]) / n_tok * 1e6, min(res[True]) / n_tok * 1e6
        g_med = statistics.median(res[False]) / n_tok * 1e6
        f_med = statistics.median(res[True]) / n_tok * 1e6
        print(
            f"{shape:18} {g_best:10.3f} / {g_med:7.3f} {f_best:8.3f} / {f_med:7.3f}"
            f" {g_best / f_best:12.2f}x"
        )


if __name__ == "__main__":
    main()
