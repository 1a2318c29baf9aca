"""Servers for the load generator's tests: the known-timing server as a subprocess and a
scripted in-loop server that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest


@contextmanager
def fixed_server(*args: str) -> Iterator[str]:
    """Start ``python -m pytest_llmslo.sim.truth_server --port 0 ARGS``; yield its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_llmslo.sim.truth_server", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "ready on " not in line:
            raise RuntimeError(f"fixed server did not start: {line!r}")
        yield line.rsplit("ready on ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def fixed_url() -> Iterator[str]:
    # asyncio's own loop, as where uvloop is not installed; the benchmark takes uvloop.
    args = ("--ttft-ms", "50", "--itl-ms", "10", "--tokens", "20", "--loop", "asyncio")
    with fixed_server(*args) as url:
        yield url


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return await reader.readexactly(length) if length else b""


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), not FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@asynccontextmanager
async def scripted_server(
    handler: Handler, ssl_context: object | None = None
) -> AsyncIterator[str]:
    """An asyncio server on 127.0.0.1 that runs ``handler`` per connection."""

    async def wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if not writer.is_closing():
                writer.close()

    server = await asyncio.start_server(wrapped, "127.0.0.1", 0, ssl=ssl_context)  # type: ignore[arg-type]
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()
