"""An OpenAI-compatible streaming server that misbehaves on purpose, one way per ``--mode``.

Run as ``python tests/misbehaving_server.py --mode MODE [--port 0] [--tls-cert C --tls-key K]``;
it prints ``ready on URL`` once it listens (on 127.0.0.1 only). The tests of "no gate passes
on failures, hangs, or loses a level" point the plugin at it as an external engine.

Modes (a chat completion otherwise streams ``max_tokens`` tokens, 2 ms apart, then usage):

- ``ok``               a well-behaved server;
- ``reset``            every completion request: the connection is reset (RST);
- ``http500-every-3``  every third completion request answers HTTP 500;
- ``empty-choices``    every chunk has ``choices: []``; usage still claims the tokens;
- ``ping-forever``     3 tokens, then an SSE comment ``: ping`` every second, forever;
- ``stall``            3 tokens, then nothing, the connection held open;
- ``huge-line``        one 10 MB content chunk, then a normal finish;
- ``auth``             every path but /health needs ``Authorization: Bearer $SERVER_KEY``;
- ``auth-completions`` only the completions need the key (readiness passes, requests 401);
- ``short-output``     ignores ``min_tokens``/``ignore_eos``: 2 tokens, ``finish_reason=stop``;
- ``metrics-endless``  ``/metrics`` answers 200 and sends comment lines as fast as it can, forever;
- ``metrics-trickle``  ``/metrics`` answers 200 and sends one comment line every 0.2 s, forever;
- ``metrics-silent``   ``/metrics`` accepts the request and never answers;
- ``models-silent``    ``/v1/models`` accepts the request and never answers;
- ``models-slow``      ``/v1/models`` sends its headers, then one byte of the body every 0.5 s;
- ``models-empty``     ``/v1/models`` lists no model;
- ``models-other``     ``/v1/models`` lists only ``other-model``;
- ``echo-key``         odd completions answer 401 with the ``Authorization`` header in the error
                       message, even ones a 200 stream whose error event echoes it too;
- ``usage-inflated``   4 tokens 300 ms apart, then usage claims 1000 completion tokens (far
                       beyond the stream and the request's ``max_tokens``);
- ``reset-mid``        3 tokens, then 300 ms later the connection is reset (RST);
- ``close-mid``        3 tokens, then 300 ms later the connection is closed (FIN) in the
                       middle of the chunked body;
- ``truncated``        3 tokens, then 300 ms later the body ends without a finish or [DONE];
- ``gzip-error``       completions answer HTTP 500 with a gzip-encoded JSON error body
                       (``Content-Encoding: gzip``, though the client asked for identity);
- ``gzip-stream``      a 200 stream whose whole body is gzip-encoded;
- ``done-held``        a normal stream up to ``data: [DONE]``, then the body is never ended
                       (no last chunk, the connection held open);
- ``tool-calls``       a tool call streamed as ``delta.tool_calls`` deltas, no content;
- ``random-text``      each completion's first token is a random number: the same prompt
                       never gets the same answer, as from an engine that ignores
                       ``temperature: 0``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import ssl
import struct
import sys
import zlib

MODES = (
    "ok",
    "reset",
    "http500-every-3",
    "empty-choices",
    "ping-forever",
    "stall",
    "huge-line",
    "auth",
    "auth-completions",
    "short-output",
    "metrics-endless",
    "metrics-trickle",
    "metrics-silent",
    "models-silent",
    "models-slow",
    "models-empty",
    "models-other",
    "echo-key",
    "usage-inflated",
    "reset-mid",
    "close-mid",
    "truncated",
    "gzip-error",
    "gzip-stream",
    "done-held",
    "tool-calls",
    "random-text",
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _delta(content: str | None, finish: str | None = None) -> dict:
    delta = {} if content is None else {"content": content}
    return {"id": "x", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _gzip(data: str | bytes) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    z = zlib.compressobj(wbits=31)  # the gzip container
    return z.compress(raw) + z.flush()


def _usage(prompt: int, completion: int) -> dict:
    return {
        "id": "x",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


class Server:
    def __init__(self, mode: str, key: str) -> None:
        self.mode = mode
        self.key = key
        self.completions = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = b""
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                keep = await self.route(method, path, headers, body, writer)
                if not keep:
                    return
        finally:
            if not writer.is_closing():
                writer.close()

    async def respond(self, writer: asyncio.StreamWriter, status: str, obj: object) -> bool:
        data = json.dumps(obj).encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        return True

    def authorized(self, headers: dict[str, str]) -> bool:
        return headers.get("authorization") == f"Bearer {self.key}"

    async def route(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        unauthorized = {"error": "Unauthorized"}  # vLLM's API-key middleware answers this
        if path == "/health":
            return await self.respond(writer, "200 OK", {"status": "ok"})
        if self.mode == "auth" and not self.authorized(headers):
            return await self.respond(writer, "401 Unauthorized", unauthorized)
        if path == "/metrics" and self.mode in ("metrics-endless", "metrics-trickle"):
            return await self.endless_metrics(writer)
        if path == "/metrics" and self.mode == "metrics-silent":
            await asyncio.sleep(3600)
        if path == "/v1/models":
            return await self.models(writer)
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return await self.respond(writer, "404 Not Found", {"error": {"message": "no route"}})
        if self.mode == "auth-completions" and not self.authorized(headers):
            return await self.respond(writer, "401 Unauthorized", unauthorized)
        self.completions += 1
        if self.mode == "echo-key":
            return await self.echo_key(writer, headers.get("authorization", ""))
        req = json.loads(body or b"{}")
        max_tokens = int(req.get("max_tokens") or 16)
        if self.mode == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        if self.mode == "gzip-error":
            data = _gzip(json.dumps({"error": {"message": "engine overloaded", "code": 500}}))
            writer.write(
                b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)
            )
            await writer.drain()
            return True
        if self.mode == "http500-every-3" and self.completions % 3 == 0:
            # vLLM's ErrorResponse shape.
            err = {
                "object": "error",
                "message": "engine overloaded",
                "type": "InternalServerError",
                "code": 500,
            }
            return await self.respond(writer, "500 Internal Server Error", err)
        if self.mode == "gzip-stream":
            body = b"".join(_event(_delta("tok ")) for _ in range(max_tokens))
            body += _event(_delta(None, "length")) + b"data: [DONE]\n\n"
            data = _gzip(body)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Content-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)
            )
            await writer.drain()
            return True
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        if self.mode in ("usage-inflated", "reset-mid", "close-mid", "truncated", "tool-calls"):
            return await self.odd_stream(writer)
        await self.stream(writer, max_tokens)
        return self.mode != "done-held"

    async def odd_stream(self, writer: asyncio.StreamWriter) -> bool:
        """The streams that end (or count) wrongly; False: the connection is done."""
        mode = self.mode
        if mode == "tool-calls":
            # vLLM's shape (entrypoints/openai/serving_chat.py): the first delta names the
            # function, the next ones carry pieces of its JSON arguments.
            call = {"index": 0, "id": "call-0", "type": "function"}
            deltas = [{**call, "function": {"name": "get_weather", "arguments": ""}}]
            deltas += [
                {"index": 0, "function": {"arguments": a}} for a in ('{"city": ', '"Paris"}')
            ]
            for d in deltas:
                await asyncio.sleep(0.002)
                obj = {"id": "x", "choices": [{"index": 0, "delta": {"tool_calls": [d]}}]}
                writer.write(_chunk(_event(obj)))
                await writer.drain()
            tail = _event(_delta(None, "tool_calls")) + _event(_usage(8, 3)) + b"data: [DONE]\n\n"
            writer.write(_chunk(tail) + b"0\r\n\r\n")
            await writer.drain()
            return True
        n, gap = (4, 0.3) if mode == "usage-inflated" else (3, 0.002)
        for _ in range(n):
            await asyncio.sleep(gap)
            writer.write(_chunk(_event(_delta("tok "))))
            await writer.drain()
        if mode == "usage-inflated":
            tail = _event(_delta(None, "length")) + _event(_usage(8, 1000)) + b"data: [DONE]\n\n"
            writer.write(_chunk(tail) + b"0\r\n\r\n")
            await writer.drain()
            return True
        await asyncio.sleep(0.3)
        if mode == "truncated":
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        if mode == "reset-mid":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        writer.write(b"40\r\npartial")  # close-mid: a chunk announced, cut short
        await writer.drain()
        writer.close()
        return False

    async def models(self, writer: asyncio.StreamWriter) -> bool:
        ids = {"models-empty": [], "models-other": ["other-model"]}.get(self.mode, ["m"])
        listing = {"object": "list", "data": [{"id": i} for i in ids]}
        if self.mode == "models-silent":
            await asyncio.sleep(3600)
            return False
        if self.mode == "models-slow":
            data = json.dumps(listing).encode()
            writer.write(
                f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode()
            )
            for i in range(len(data)):
                writer.write(data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0.5)
            return True
        return await self.respond(writer, "200 OK", listing)

    async def endless_metrics(self, writer: asyncio.StreamWriter) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        line = b"# HELP vllm:num_requests_running Requests in the running batch.\n"
        burst = _chunk(line * 1000)
        try:
            while True:
                if self.mode == "metrics-endless":
                    writer.write(burst)
                else:
                    writer.write(_chunk(line))
                    await asyncio.sleep(0.2)
                await writer.drain()
        except ConnectionError:
            return False

    async def echo_key(self, writer: asyncio.StreamWriter, auth: str) -> bool:
        """What some gateways do: the rejected credentials in the error text."""
        if self.completions % 2:
            err = {"error": {"message": f"invalid key {auth}", "type": "auth", "code": 401}}
            return await self.respond(writer, "401 Unauthorized", err)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        err = {"error": {"message": f"quota exceeded for {auth}", "code": 429}}
        writer.write(_chunk(_event(err) + b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        return True

    async def stream(self, writer: asyncio.StreamWriter, max_tokens: int) -> None:
        mode = self.mode
        n = 2 if mode == "short-output" else max_tokens
        if mode in ("ping-forever", "stall"):
            n = min(n, 3)
        if mode == "huge-line":
            writer.write(_chunk(_event(_delta("x" * 10_000_000))))
            n = 0
        for i in range(n):
            await asyncio.sleep(0.002)
            random_first = mode == "random-text" and i == 0
            text = f"{int.from_bytes(os.urandom(4), 'little')} " if random_first else "tok "
            obj = {"id": "x", "choices": []} if mode == "empty-choices" else _delta(text)
            writer.write(_chunk(_event(obj)))
            await writer.drain()
        if mode in ("ping-forever", "stall") and max_tokens > 3:
            while True:
                await asyncio.sleep(1.0)
                if mode == "ping-forever":
                    writer.write(_chunk(b": ping\n\n"))
                    await writer.drain()
        finish = "stop" if mode == "short-output" else "length"
        claimed = max_tokens if mode != "short-output" else 2
        tail = b""
        if mode != "empty-choices":
            tail += _event(_delta(None, finish))
        tail += _event(_usage(8, claimed)) + b"data: [DONE]\n\n"
        if mode == "done-held":
            writer.write(_chunk(tail))  # and never the last chunk: the body is not ended
            await writer.drain()
            await asyncio.sleep(3600)
            return
        writer.write(_chunk(tail) + b"0\r\n\r\n")
        await writer.drain()


async def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=MODES, default="ok")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tls-cert")
    ap.add_argument("--tls-key")
    args = ap.parse_args(argv)
    ctx = None
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    srv = Server(args.mode, os.environ.get("SERVER_KEY", "secret"))
    server = await asyncio.start_server(srv.handle, "127.0.0.1", args.port, ssl=ctx)
    port = server.sockets[0].getsockname()[1]
    scheme = "https" if ctx else "http"
    print(f"ready on {scheme}://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1:]))
    except KeyboardInterrupt:
        pass
