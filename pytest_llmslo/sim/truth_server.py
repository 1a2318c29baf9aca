"""A lean streaming server with known timing, to check the load generator against truth.

``python -m pytest_llmslo.sim.truth_server --port P --ttft-ms 50 --itl-ms 10 --tokens 100``

Every request gets an immediate role-only chunk, its first token ``ttft_ms`` after the
request was read, then one chunk every ``itl_ms * tokens_per_chunk`` carrying
``tokens_per_chunk`` tokens, then an empty finish chunk (``finish_reason: "length"``), a
usage chunk and ``data: [DONE]``. ``max_tokens`` in the body, when given, replaces
``--tokens``. ``stream_options.continuous_usage_stats`` adds cumulative usage to every
chunk (as vLLM does). ``prompt_tokens`` is the prompt's word count.

Built to not be the bottleneck of what it measures: a raw asyncio Protocol (HTTP/1.1,
keep-alive, chunked), chunk bytes precomputed, and one timer for all streams — a heap of
due times; each wake writes every stream that is due. A request's clock starts when it
reached the host: the kernel's receive stamp on Linux (``stamped.py``), so the time it
waited for this process to read it counts as the server's lateness, as it would in a
real engine's TTFT. It measures its own lateness
(write time − due time) for every token and reports it at ``GET /stats`` (``POST
/stats/reset`` clears it) and on exit, so a benchmark can tell the truth
(``ttft_ms`` + first-token lateness) from the server's own slip (``lateness.py``: the
histograms, and the block that several ``--workers`` processes share; ``prefork.py``:
how those processes share the port).

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (stream or not),
``GET /v1/models``, ``GET /health``, ``GET /stats``, ``POST /stats/reset`` (each
connection read and answered by ``truth_http.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import resource
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from .. import stamped
from .lateness import HIST_BIN_NS, HIST_BINS, LatenessHistogram, SharedStats
from .prefork import listen_socket, prefork
from .truth_http import TruthConnection


def _frame(event: bytes) -> bytes:
    """One HTTP chunk holding one SSE event."""
    return b"%x\r\n%s\r\n" % (len(event), event)


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@dataclass
class _Templates:
    role: bytes
    token: bytes
    token_usage_fmt: bytes  # %d placeholders: prompt, completion, total
    tail_fmt: bytes  # finish chunk + usage chunk + [DONE] + last chunk


def _templates(model: str, chat: bool, text: str) -> _Templates:
    if chat:
        base = {"id": "chatcmpl-fixed", "object": "chat.completion.chunk", "created": 0}
        role = _frame(
            _sse(
                {
                    **base,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "finish_reason": None,
                        }
                    ],
                }
            )
        )
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
        finish = {"index": 0, "delta": {}, "finish_reason": "length"}
    else:
        base = {"id": "cmpl-fixed", "object": "text_completion", "created": 0}
        role = b""
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None}
        finish = {"index": 0, "text": "", "logprobs": None, "finish_reason": "length"}
    tok_obj = {**base, "model": model, "choices": [choice]}
    token = _frame(_sse(tok_obj))
    usage_ph = '{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}'
    tok_json = json.dumps(tok_obj, separators=(",", ":"))
    tok_usage = ("data: " + tok_json[:-1] + ',"usage":' + usage_ph + "}\n\n").encode()
    fin_json = json.dumps({**base, "model": model, "choices": [finish]}, separators=(",", ":"))
    usage_json = json.dumps({**base, "model": model, "choices": []}, separators=(",", ":"))
    tail = ("data: " + fin_json + "\n\n").encode()
    tail += ("data: " + usage_json[:-1] + ',"usage":' + usage_ph + "}\n\n").encode()
    tail += b"data: [DONE]\n\n"
    return _Templates(role, token, tok_usage, tail)


class _Stream:
    __slots__ = (
        "conn",
        "done",
        "due_ns",
        "emitted",
        "prompt_tokens",
        "seq",
        "t",
        "total",
        "usage",
        "write",
    )

    def __init__(
        self, conn: TruthConnection, t: _Templates, total: int, prompt_tokens: int, usage: bool
    ) -> None:
        self.conn = conn
        self.t = t
        self.total = total
        self.prompt_tokens = prompt_tokens
        self.usage = usage
        self.emitted = 0
        self.done = False
        self.due_ns = 0
        self.seq = 0
        self.write = conn.write


class TruthServer:
    """The timing engine: one heap of due streams, one timer."""

    def __init__(
        self,
        ttft_ms: float = 50.0,
        itl_ms: float = 10.0,
        tokens: int = 100,
        tokens_per_chunk: int = 1,
        model: str = "fixed",
        shared: SharedStats | None = None,
        worker: int = 0,
        request_stamps: str = "kernel",
    ) -> None:
        self.shared = shared
        self.worker = worker
        # "kernel": a request's clock starts at its arrival stamp (where the platform has
        # one); "read": when this process read it.
        self.request_stamps = request_stamps
        self.gen = 0
        self.ttft_ns = int(ttft_ms * 1e6)
        self.itl_ns = int(itl_ms * 1e6)
        self.tokens = tokens
        self.per_chunk = max(1, tokens_per_chunk)
        self.model = model
        text = "tok " * self.per_chunk
        self.chat = _templates(model, True, text)
        self.completions = _templates(model, False, text)
        self.heap: list[tuple[int, int, _Stream]] = []
        self.seq = 0
        self.timer: asyncio.TimerHandle | None = None
        self.timer_due = 0
        self.lateness = LatenessHistogram()
        self.first_lateness = LatenessHistogram()
        self.requests = 0
        self.active = 0
        self.cpu0 = time.process_time()
        self.sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        self.wall0 = perf_counter_ns()
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- scheduling -------------------------------------------------------------------
    def _push(self, s: _Stream, due: int) -> None:
        s.due_ns = due
        heapq.heappush(self.heap, (due, s.seq, s))
        if self.timer is None or due < self.timer_due:
            self._arm(due)

    def _arm(self, due: int) -> None:
        if self.timer is not None:
            self.timer.cancel()
        loop = self.loop or asyncio.get_running_loop()
        self.timer_due = due
        self.timer = loop.call_later(max(due - perf_counter_ns(), 0) / 1e9, self._tick)

    def _tick(self) -> None:
        # The hot loop of the server: everything bound to locals, one heap operation per
        # token (heapreplace), the lateness histogram updated inline.
        self.timer = None
        heap = self.heap
        pc = perf_counter_ns
        replace, pop = heapq.heapreplace, heapq.heappop
        step = self.itl_ns * self.per_chunk
        per_chunk = self.per_chunk
        late = self.lateness
        hist = late.hist
        last_bin = HIST_BINS - 1
        n_lat = 0
        sum_lat = 0
        max_lat = late.max_ns
        now = pc()
        while heap:
            due, seq, s = heap[0]
            if due > now:
                break
            if s.done:
                pop(heap)
                continue
            lat = now - due
            n_lat += 1
            sum_lat += lat
            if lat > max_lat:
                max_lat = lat
            b = lat // HIST_BIN_NS
            hist[b if b < last_bin else last_bin] += 1
            if s.emitted == 0:
                self.first_lateness.add(lat)
            n = s.total - s.emitted
            if n > per_chunk:
                n = per_chunk
            s.emitted += n
            t = s.t
            if s.usage:
                ev = t.token_usage_fmt % (s.prompt_tokens, s.emitted, s.prompt_tokens + s.emitted)
                data = _frame(ev if n == per_chunk else self._cut(ev, n))
            elif n == per_chunk:
                data = t.token
            else:
                data = _frame(self._cut(t.token.split(b"\r\n", 1)[1][:-2], n))
            if s.emitted >= s.total:
                tail = t.tail_fmt % (s.prompt_tokens, s.emitted, s.prompt_tokens + s.emitted)
                s.write(data + _frame(tail) + b"0\r\n\r\n")
                s.done = True
                self.active -= 1
                pop(heap)
                s.conn.stream_done()
            else:
                s.write(data)
                s.due_ns = due + step
                replace(heap, (s.due_ns, seq, s))
            now = pc()
        late.count += n_lat
        late.sum_ns += sum_lat
        late.max_ns = max_lat
        if heap:
            self._arm(heap[0][0])

    def _cut(self, event: bytes, n: int) -> bytes:
        """The last, shorter chunk of a multi-token stream: n tokens, not per_chunk."""
        full = b'"' + b"tok " * self.per_chunk + b'"'
        return event.replace(full, b'"' + b"tok " * n + b'"', 1)

    def start_stream(
        self, conn: TruthConnection, body: dict[str, Any], chat: bool, recv_ns: int
    ) -> None:
        self.requests += 1
        total = body.get("max_tokens") or body.get("max_completion_tokens") or self.tokens
        total = max(1, int(total))
        prompt_tokens = _prompt_words(body, chat)
        opts = body.get("stream_options") or {}
        usage = bool(opts.get("continuous_usage_stats"))
        t = self.chat if chat else self.completions
        s = _Stream(conn, t, total, prompt_tokens, usage)
        self.seq += 1
        s.seq = self.seq
        if conn.transport is not None:
            s.write = conn.transport.write
        conn.stream = s
        self.active += 1
        conn.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n" + t.role
        )
        self._push(s, recv_ns + self.ttft_ns)

    def complete(
        self, conn: TruthConnection, body: dict[str, Any], chat: bool, recv_ns: int
    ) -> None:
        """A non-streaming request: one JSON body when the last token would be due."""
        self.requests += 1
        total = max(1, int(body.get("max_tokens") or self.tokens))
        prompt_tokens = _prompt_words(body, chat)
        text = "tok " * total
        choice: dict[str, Any]
        if chat:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length"}
        payload = json.dumps(
            {
                "id": "fixed",
                "object": "chat.completion" if chat else "text_completion",
                "created": 0,
                "model": self.model,
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": total,
                    "total_tokens": prompt_tokens + total,
                },
            }
        ).encode()
        due = recv_ns + self.ttft_ns + (total - 1) * self.itl_ns
        loop = self.loop or asyncio.get_running_loop()
        loop.call_later(
            max(due - perf_counter_ns(), 0) / 1e9, conn.respond, 200, payload, "application/json"
        )

    def publish(self) -> None:
        """Write this worker's cumulative stats into the shared block (several workers)."""
        sh = self.shared
        if sh is None:
            return
        late, first = self.lateness, self.first_lateness
        gen = sh.generation
        if gen != self.gen:
            self.gen = gen
            late.max_ns = first.max_ns = 0
        sh.publish(self.worker, late, first, self.requests, self.active)

    def _publish_soon(self) -> None:
        self.publish()
        loop = self.loop or asyncio.get_running_loop()
        loop.call_later(0.1, self._publish_soon)

    def stats(self) -> dict[str, Any]:
        wall = (perf_counter_ns() - self.wall0) / 1e9
        if self.shared is not None:
            self.publish()
            return {
                "ttft_ms": self.ttft_ns / 1e6,
                "itl_ms": self.itl_ns / 1e6,
                "tokens": self.tokens,
                "tokens_per_chunk": self.per_chunk,
                "workers": self.shared.workers,
                **self.shared.totals(),
            }
        cpu = time.process_time() - self.cpu0
        sys_s = resource.getrusage(resource.RUSAGE_SELF).ru_stime - self.sys0
        return {
            "ttft_ms": self.ttft_ns / 1e6,
            "itl_ms": self.itl_ns / 1e6,
            "tokens": self.tokens,
            "tokens_per_chunk": self.per_chunk,
            "workers": 1,
            "requests": self.requests,
            "active": self.active,
            "lateness": self.lateness.to_dict(),
            "first_token_lateness": self.first_lateness.to_dict(),
            "cpu_s": cpu,
            "sys_s": sys_s,
            "cpu_util": cpu / wall if wall > 0 else 0.0,
        }

    def reset_all(self) -> None:
        """``POST /stats/reset``: this worker now, the others at their next publish."""
        sh = self.shared
        if sh is None:
            self.reset_stats()
            return
        self.publish()
        sh.reset()

    def reset_stats(self) -> None:
        self.lateness.reset()
        self.first_lateness.reset()
        self.requests = 0
        self.cpu0 = time.process_time()
        self.sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        self.wall0 = perf_counter_ns()


def _prompt_words(body: dict[str, Any], chat: bool) -> int:
    if chat:
        msgs = body.get("messages") or []
        n = 0
        for m in msgs:
            c = m.get("content") if isinstance(m, dict) else None
            if isinstance(c, str):
                n += len(c.split())
        return n
    p = body.get("prompt")
    if isinstance(p, str):
        return len(p.split())
    if isinstance(p, list):
        return sum(len(x.split()) if isinstance(x, str) else 1 for x in p)
    return 0


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready: asyncio.Future[int] | None = None,
    stop: asyncio.Event | None = None,
    sock: socket.socket | None = None,
    **kwargs: Any,
) -> TruthServer:
    """Serve until ``stop`` is set (or forever); ``ready`` gets the bound port."""
    srv = TruthServer(**kwargs)
    loop = asyncio.get_running_loop()
    srv.loop = loop
    if srv.shared is not None:
        srv._publish_soon()
    kernel = stamped.AVAILABLE and srv.request_stamps == "kernel"
    if kernel:
        # Requests dated by the kernel's arrival stamp (``TruthConnection.received``).
        listener = sock if sock is not None else listen_socket(host, port, False)
        listener.listen(4096)
        close: Callable[[], None] = stamped.serve_stamped(listener, lambda: TruthConnection(srv))
        bound = listener.getsockname()[1]
    else:
        if sock is not None:
            server = await loop.create_server(lambda: TruthConnection(srv), sock=sock, backlog=4096)
        else:
            server = await loop.create_server(
                lambda: TruthConnection(srv), host, port, backlog=4096
            )
        close = server.close
        bound = server.sockets[0].getsockname()[1]
    if ready is not None:
        ready.set_result(bound)
    try:
        if stop is None:
            await asyncio.Event().wait()
        else:
            await stop.wait()
    finally:
        close()
        if kernel and sock is None:
            listener.close()
    return srv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m pytest_llmslo.sim.truth_server",
        description="Streaming OpenAI-compatible server with fixed, known timing.",
    )
    ap.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    ap.add_argument("--port", type=int, default=8000, help="port, 0 = any (default: 8000)")
    ap.add_argument("--ttft-ms", type=float, default=50.0, help="time to first token (default: 50)")
    ap.add_argument("--itl-ms", type=float, default=10.0, help="gap between tokens (default: 10)")
    ap.add_argument("--tokens", type=int, default=100, help="output tokens (default: 100)")
    ap.add_argument(
        "--tokens-per-chunk", type=int, default=1, help="tokens in one chunk (default: 1)"
    )
    ap.add_argument("--model", default="fixed", help="model name (default: fixed)")
    ap.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop; auto = uvloop when installed (default: auto)",
    )
    ap.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port with SO_REUSEPORT (default: 1)",
    )
    ap.add_argument(
        "--request-stamps",
        choices=("kernel", "read"),
        default="kernel",
        help="a request's clock starts at the kernel's arrival stamp of its bytes (Linux), or "
        "when this process read them (default: kernel)",
    )
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error("--workers must be >= 1")
    kwargs = {
        "ttft_ms": args.ttft_ms,
        "itl_ms": args.itl_ms,
        "tokens": args.tokens,
        "tokens_per_chunk": args.tokens_per_chunk,
        "model": args.model,
        "request_stamps": args.request_stamps,
    }
    shared = SharedStats(args.workers) if args.workers > 1 else None

    def run(
        sock: socket.socket, worker: int, ready: asyncio.Future[int], stop: asyncio.Event
    ) -> Coroutine[Any, Any, TruthServer]:
        return serve(ready=ready, stop=stop, sock=sock, shared=shared, worker=worker, **kwargs)

    def on_ready(kind: str, port: int) -> None:
        print(f"llmslo fixed server ({kind}) ready on http://{args.host}:{port}", flush=True)

    srv = prefork(args.host, args.port, args.workers, args.loop, run, on_ready)
    print(json.dumps({"stats": srv.stats()}), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
