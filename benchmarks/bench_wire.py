"""The worker protocol's encoding on its hot path: a ``Raw`` batch (what a worker ships
every 50 ms) encoded and decoded as data (``load/wire.py``, msgspec MessagePack with the
columns as raw buffers) against pickle (what protocol version 3 sent), per streamed token.

    .venv/bin/python benchmarks/bench_wire.py [--streams 512] [--tokens 5] [--repeat 200]
    .venv/bin/python benchmarks/bench_wire.py --link    # also over loopback, plain and TLS

A batch holds ``--streams`` finished exchanges of ``--tokens`` reads of ~90 bytes each
(an SSE chunk). Prints the fastest of five rounds of ``--repeat`` encode+decode round
trips for each codec, in microseconds per batch and nanoseconds per token, and the frame
sizes. CPU-bound and single-threaded: on a shared machine the fastest round is the
figure to read. ``--link`` also sends the frames over a loopback TCP connection, plain
(``wire.Link``) and in TLS (``linktls.TlsLink``, a certificate made with ``openssl``),
and prints the process CPU per token of sending, receiving and decoding them.
"""

from __future__ import annotations

import argparse
import pickle
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_llmslo.load.backlog import BatchBuilder, RawBatch
from pytest_llmslo.load.client import RawExchange
from pytest_llmslo.load.linktls import TlsLink, client_context, server_context
from pytest_llmslo.load.protocol import Raw
from pytest_llmslo.load.wire import Link, decode, encode

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


def _pair(tls: bool, d: Path) -> tuple[Link, Link]:
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname())
    acc, _ = srv.accept()
    srv.close()
    if not tls:
        return Link(cli), Link(acc)
    sctx = server_context(str(d / "c.pem"), str(d / "c.key"))
    cctx = client_context(str(d / "c.pem"))
    out: list[ssl.SSLSocket] = []
    t = threading.Thread(target=lambda: out.append(sctx.wrap_socket(acc, server_side=True)))
    t.start()
    c = cctx.wrap_socket(cli, server_hostname="localhost")
    t.join()
    return TlsLink(c), TlsLink(out[0])


def over_link(msg: Raw, frames: int, tls: bool, d: Path) -> float:
    """Process CPU seconds to send, receive and decode ``frames`` frames."""
    a, b = _pair(tls, d)
    payload = encode(msg)
    sender = threading.Thread(target=lambda: [a.send_bytes(payload) for _ in range(frames)])
    cpu0 = time.process_time()
    sender.start()
    for _ in range(frames):
        decode(b.recv_bytes())
    sender.join()
    cpu = time.process_time() - cpu0
    a.close()
    b.close()
    return cpu


def links(msg: Raw, n_tokens: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "c.key",
             "-out", "c.pem", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost"],
            cwd=d, check=True, capture_output=True,
        )  # fmt: skip
        print(f"{'link':>8} {'us/batch':>9} {'ns/token':>9}  (process CPU, send+recv+decode)")
        for name, tls in (("plain", False), ("tls", True)):
            cpu = min(over_link(msg, repeat, tls, d) for _ in range(3)) / repeat
            print(f"{name:>8} {cpu * 1e6:>9.1f} {cpu / n_tokens * 1e9:>9.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=5, help="reads per exchange in the batch")
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--link", action="store_true", help="also over loopback, plain and TLS")
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
    if args.link:
        links(msg, n_tokens, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
