"""A lean streaming server with known timing, to check the load generator against truth.

``python -m pytest_llmslo.sim.fixed --port P --ttft-ms 50 --itl-ms 10 --tokens 100``

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
(``ttft_ms`` + first-token lateness) from the server's own slip.

Endpoints: ``POST /v1/chat/completions``, ``POST /v1/completions`` (stream or not),
``GET /v1/models``, ``GET /health``, ``GET /stats``, ``POST /stats/reset``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import mmap
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

from .. import stamped

_HIST_BIN_NS = 100_000  # 0.1 ms
_HIST_BINS = 2000  # up to 200 ms; later ones land in the last bin


class LatenessStats:
    """Write time − due time of tokens, as a histogram (cheap per token)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.sum_ns = 0
        self.max_ns = 0
        self.hist = [0] * _HIST_BINS

    def add(self, lat_ns: int) -> None:
        self.count += 1
        self.sum_ns += lat_ns
        if lat_ns > self.max_ns:
            self.max_ns = lat_ns
        b = lat_ns // _HIST_BIN_NS
        self.hist[b if 0 <= b < _HIST_BINS else (_HIST_BINS - 1 if b > 0 else 0)] += 1

    def percentile_ms(self, q: float) -> float:
        if not self.count:
            return 0.0
        target = q / 100.0 * self.count
        acc = 0
        for i, c in enumerate(self.hist):
            acc += c
            if acc >= target:
                return (i + 0.5) * _HIST_BIN_NS / 1e6
        return self.max_ns / 1e6

    def to_dict(self) -> dict[str, float]:
        return {
            "count": self.count,
            "mean_ms": self.sum_ns / self.count / 1e6 if self.count else 0.0,
            "p50_ms": self.percentile_ms(50),
            "p99_ms": self.percentile_ms(99),
            "max_ms": self.max_ns / 1e6,
        }


# A worker's row in the shared stats block (int64 slots), then its two histograms.
_F_COUNT, _F_SUM, _F_MAX, _F_FCOUNT, _F_FSUM, _F_FMAX, _F_REQ, _F_ACTIVE, _F_CPU, _F_SYS = range(10)
_ROW_HEAD = 12
_ROW = _ROW_HEAD + 2 * _HIST_BINS


class SharedStats:
    """Stats of several server processes in one shared anonymous mmap (made before fork).

    Header: reset generation, reset time. Then one row per worker of cumulative counters
    (published every 100 ms and whenever the worker answers ``/stats``) and one baseline
    row per worker, the rows as they were at the last reset: a reset never races with
    the counting, it only moves the baseline (other workers' rows are up to 100 ms old
    then, which is exact when the reset falls in an idle moment, as between benchmark
    levels). Maxima restart when a worker sees the new generation.
    """

    _HEAD = 2

    def __init__(self, workers: int) -> None:
        import numpy as np

        self.workers = workers
        self.mm = mmap.mmap(-1, 8 * (self._HEAD + 2 * workers * _ROW))
        self.arr = np.frombuffer(self.mm, dtype=np.int64)
        self.arr[1] = perf_counter_ns()

    def row(self, w: int) -> Any:
        start = self._HEAD + w * _ROW
        return self.arr[start : start + _ROW]

    def base(self, w: int) -> Any:
        start = self._HEAD + (self.workers + w) * _ROW
        return self.arr[start : start + _ROW]

    def since_reset(self) -> list[Any]:
        """Each worker's counters minus its baseline (maxima as they are)."""
        out = []
        for w in range(self.workers):
            d = self.row(w) - self.base(w)
            d[_F_MAX] = self.row(w)[_F_MAX]
            d[_F_FMAX] = self.row(w)[_F_FMAX]
            d[_F_ACTIVE] = self.row(w)[_F_ACTIVE]
            out.append(d)
        return out


def _merged(rows: list[Any], base: int, count: int, total: int, mx: int) -> dict[str, float]:
    st = LatenessStats()
    for r in rows:
        st.count += int(r[count])
        st.sum_ns += int(r[total])
        st.max_ns = max(st.max_ns, int(r[mx]))
        for i, c in enumerate(r[base : base + _HIST_BINS].tolist()):
            if c:
                st.hist[i] += c
    return st.to_dict()


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
        self, conn: _Conn, t: _Templates, total: int, prompt_tokens: int, usage: bool
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


class FixedServer:
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
        self.lateness = LatenessStats()
        self.first_lateness = LatenessStats()
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
        last_bin = _HIST_BINS - 1
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
            b = lat // _HIST_BIN_NS
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

    def start_stream(self, conn: _Conn, body: dict[str, Any], chat: bool, recv_ns: int) -> None:
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

    def complete(self, conn: _Conn, body: dict[str, Any], chat: bool, recv_ns: int) -> None:
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
        gen = int(sh.arr[0])
        if gen != self.gen:
            self.gen = gen
            late.max_ns = first.max_ns = 0
        row = sh.row(self.worker)
        row[:_ROW_HEAD] = [
            late.count,
            late.sum_ns,
            late.max_ns,
            first.count,
            first.sum_ns,
            first.max_ns,
            self.requests,
            self.active,
            int(time.process_time() * 1e9),
            int(resource.getrusage(resource.RUSAGE_SELF).ru_stime * 1e9),
            0,
            0,
        ]
        row[_ROW_HEAD : _ROW_HEAD + _HIST_BINS] = late.hist
        row[_ROW_HEAD + _HIST_BINS :] = first.hist

    def _publish_soon(self) -> None:
        self.publish()
        loop = self.loop or asyncio.get_running_loop()
        loop.call_later(0.1, self._publish_soon)

    def stats(self) -> dict[str, Any]:
        wall = (perf_counter_ns() - self.wall0) / 1e9
        if self.shared is not None:
            self.publish()
            rows = self.shared.since_reset()
            wall = (perf_counter_ns() - int(self.shared.arr[1])) / 1e9
            cpu = sum(int(r[_F_CPU]) for r in rows) / 1e9
            return {
                "ttft_ms": self.ttft_ns / 1e6,
                "itl_ms": self.itl_ns / 1e6,
                "tokens": self.tokens,
                "tokens_per_chunk": self.per_chunk,
                "workers": self.shared.workers,
                "requests": sum(int(r[_F_REQ]) for r in rows),
                "active": sum(int(r[_F_ACTIVE]) for r in rows),
                "lateness": _merged(rows, _ROW_HEAD, _F_COUNT, _F_SUM, _F_MAX),
                "first_token_lateness": _merged(
                    rows, _ROW_HEAD + _HIST_BINS, _F_FCOUNT, _F_FSUM, _F_FMAX
                ),
                "cpu_s": cpu,
                "sys_s": sum(int(r[_F_SYS]) for r in rows) / 1e9,
                "cpu_util": cpu / wall if wall > 0 else 0.0,  # all workers, in cores
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
        for w in range(sh.workers):
            sh.base(w)[:] = sh.row(w)
        sh.arr[1] = perf_counter_ns()
        sh.arr[0] += 1

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


class _Conn(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection."""

    def __init__(self, server: FixedServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.stream: _Stream | None = None
        self.busy = False
        self.read_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        s = self.stream
        if s is not None and not s.done:
            s.done = True
            self.server.active -= 1
        self.stream = None
        self.transport = None

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def stream_done(self) -> None:
        self.stream = None
        self.busy = False
        if self.buf:
            asyncio.get_running_loop().call_soon(self._process)

    def data_received(self, data: bytes) -> None:
        self.received(data, perf_counter_ns())

    def received(self, data: bytes, ts: int) -> None:
        """``data`` arrived at ``ts``: the kernel's receive stamp where the socket gives one
        (``stamped.py``), so a request's clock starts when it reached this host, not when
        this process got round to reading it (which is the server's own lateness)."""
        self.read_ns = ts
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while not self.busy and self.buf:
            i = self.buf.find(b"\r\n\r\n")
            if i < 0:
                if len(self.buf) > 65536:
                    self.respond(431, b'{"error":"header too large"}')
                return
            head = self.buf[:i]
            lines = head.split(b"\r\n")
            parts = lines[0].split()
            if len(parts) < 2:
                self.respond(400, b'{"error":"bad request line"}', close=True)
                return
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    try:
                        length = int(value.strip())
                    except ValueError:
                        self.respond(400, b'{"error":"bad content-length"}', close=True)
                        return
            if len(self.buf) < i + 4 + length:
                return
            body = self.buf[i + 4 : i + 4 + length]
            self.buf = self.buf[i + 4 + length :]
            self._handle(parts[0], parts[1], body, self.read_ns)

    def respond(
        self,
        status: int,
        payload: bytes,
        content_type: str = "application/json",
        close: bool = False,
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 431: "Too Large"}.get(
            status, "Error"
        )
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        ).encode()
        self.write(head + payload)
        self.busy = False
        if close and self.transport is not None:
            self.transport.close()
        elif self.buf:
            asyncio.get_running_loop().call_soon(self._process)

    def _handle(self, method: bytes, target: bytes, body: bytes, recv_ns: int) -> None:
        srv = self.server
        path = target.split(b"?", 1)[0]
        self.busy = True
        if method == b"POST" and path in (b"/v1/chat/completions", b"/v1/completions"):
            try:
                req = json.loads(body) if body else {}
            except ValueError:
                self.respond(400, b'{"error":{"message":"body is not JSON","code":400}}')
                return
            if not isinstance(req, dict):
                self.respond(400, b'{"error":{"message":"body is not an object","code":400}}')
                return
            chat = path == b"/v1/chat/completions"
            if req.get("stream"):
                srv.start_stream(self, req, chat, recv_ns)
            else:
                srv.complete(self, req, chat, recv_ns)
        elif path == b"/health":
            self.respond(200, b'{"status":"ok"}')
        elif path == b"/v1/models":
            self.respond(
                200,
                json.dumps(
                    {"object": "list", "data": [{"id": srv.model, "object": "model"}]}
                ).encode(),
            )
        elif path == b"/stats" and method == b"GET":
            self.respond(200, json.dumps(srv.stats()).encode())
        elif path == b"/stats/reset" and method == b"POST":
            srv.reset_all()
            self.respond(200, b'{"reset":true}')
        else:
            self.respond(404, b'{"error":{"message":"not found","code":404}}')


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    ready: asyncio.Future[int] | None = None,
    stop: asyncio.Event | None = None,
    sock: socket.socket | None = None,
    **kwargs: Any,
) -> FixedServer:
    """Serve until ``stop`` is set (or forever); ``ready`` gets the bound port."""
    srv = FixedServer(**kwargs)
    loop = asyncio.get_running_loop()
    srv.loop = loop
    if srv.shared is not None:
        srv._publish_soon()
    kernel = stamped.AVAILABLE and srv.request_stamps == "kernel"
    if kernel:
        # Requests dated by the kernel's arrival stamp (``_Conn.received``).
        listener = sock if sock is not None else _listen_socket(host, port, False)
        listener.listen(4096)
        close: Callable[[], None] = stamped.serve_stamped(listener, lambda: _Conn(srv))
        bound = listener.getsockname()[1]
    else:
        if sock is not None:
            server = await loop.create_server(lambda: _Conn(srv), sock=sock, backlog=4096)
        else:
            server = await loop.create_server(lambda: _Conn(srv), host, port, backlog=4096)
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
        prog="python -m pytest_llmslo.sim.fixed",
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
    sock = _listen_socket(args.host, args.port, args.workers > 1)
    port = sock.getsockname()[1]
    children: list[int] = []
    ready_r, ready_w = os.pipe()
    parent = os.getpid()
    # Fork before any event loop or thread exists; each child listens on its own socket
    # in the same SO_REUSEPORT group, and the kernel spreads connections over them.
    for w in range(1, args.workers):
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.close(ready_r)
            child_sock = _listen_socket(args.host, port, True)
            code = _run_worker(args.loop, child_sock, shared, w, kwargs, ready_w, parent)
            os._exit(code)
        children.append(pid)
    os.close(ready_w)
    for _ in children:
        os.read(ready_r, 1)
    os.close(ready_r)

    def on_ready(kind: str) -> None:
        print(f"llmslo fixed server ({kind}) ready on http://{args.host}:{port}", flush=True)

    try:
        srv = _run_loop(args.loop, sock, shared, 0, kwargs, on_ready, None)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    print(json.dumps({"stats": srv.stats()}), file=sys.stderr, flush=True)
    return 0


def _listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def _new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise SystemExit("--loop uvloop needs the uvloop package") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def _run_loop(
    kind: str,
    sock: socket.socket,
    shared: SharedStats | None,
    worker: int,
    kwargs: dict[str, Any],
    on_ready: Callable[[str], None] | None,
    parent: int | None,
) -> FixedServer:
    loop = _new_loop(kind)

    async def run() -> FixedServer:
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if parent is not None:
            # A worker whose parent died (killed without a chance to stop it) stops too.
            def watch() -> None:
                if os.getppid() != parent:
                    stop.set()
                else:
                    loop.call_later(1.0, watch)

            watch()
        ready: asyncio.Future[int] = loop.create_future()
        task = asyncio.ensure_future(
            serve(ready=ready, stop=stop, sock=sock, shared=shared, worker=worker, **kwargs)
        )
        await ready
        if on_ready is not None:
            on_ready(type(loop).__module__.split(".")[0])
        return await task

    try:
        return loop.run_until_complete(run())
    finally:
        loop.close()


def _run_worker(
    kind: str,
    sock: socket.socket,
    shared: SharedStats | None,
    worker: int,
    kwargs: dict[str, Any],
    ready_w: int,
    parent: int,
) -> int:
    def on_ready(_: str) -> None:
        os.write(ready_w, b"r")
        os.close(ready_w)

    try:
        _run_loop(kind, sock, shared, worker, kwargs, on_ready, parent)
    except BaseException:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
