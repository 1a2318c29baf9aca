"""The worker protocol's encoding on its hot path: a ``Raw`` batch (what a worker ships
every 50 ms) encoded and decoded as data (``load/wire.py``, msgspec MessagePack with the
columns as raw buffers) against pickle (what protocol version 3 sent), per streamed token.

    .venv/bin/python benchmarks/bench_wire.py [--streams 512] [--tokens 5] [--repeat 200]

A batch holds ``--streams`` finished exchanges of ``--tokens`` reads of ~90 bytes each
(an SSE chunk). Prints the fastest of five rounds of ``--repeat`` encode+decode round
trips for each codec, in microseconds per batch and nanoseconds per token, and the frame
sizes. CPU-bound and single-threaded: on a shared machine the fastest round is the
figure to read.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_llmslo.load.backlog import BatchBuilder, RawBatch
from pytest_llmslo.load.client import RawExchange
from pytest_llmslo.load.protocol import Raw
from pytest_llmslo.load.wire import decode, encode

CHUNK = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":" tok"}}],"x":123456}\n\n'


def batch(streams: int, tokens: int) -> RawBatch:
    b = BatchBuilder()
    for i in range(streams):
        raw = RawExchange()
        raw.sent_ns, raw.end_ns, raw.status = i, i + 1_000_000, 200
        raw.times = [i + k for k in range(tokens)]
        raw.pieces = [CHUNK] * tokens
        b.add(i, 64, tokens, i, raw)
    return b.take()


def best(fn: object, repeat: int) -> float:
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()  # type: ignore[operator]
        rounds.append((time.perf_counter() - t0) / repeat)
    return min(rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=5, help="reads per exchange in the batch")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    msg = Raw(0, batch(args.streams, args.tokens))
    n_tokens = args.streams * args.tokens
    wire_frame = encode(msg)
    pickle_frame = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
    t_wire = best(lambda: decode(encode(msg)), args.repeat)
    t_pickle = best(lambda: pickle.loads(pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)), args.repeat)
    print(f"batch: {args.streams} exchanges x {args.tokens} reads ({n_tokens} tokens)")
    print(f"{'codec':>8} {'bytes':>9} {'us/batch':>9} {'ns/token':>9}")
    for name, frame, t in (("wire", wire_frame, t_wire), ("pickle", pickle_frame, t_pickle)):
        print(f"{name:>8} {len(frame):>9} {t * 1e6:>9.1f} {t / n_tokens * 1e9:>9.1f}")
    print(f"wire / pickle: {t_wire / t_pickle:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
