"""A TCP proxy in front of the engine that drops or delays connections on demand.

The harness starts one for a level with a ``drop`` or ``delay`` fault and points the load
generator at it (``session.faultlevel``); everything passes through unchanged until a fault:

- ``drop(rate, for_s)``: each open connection is cut (reset: the client sees its stream
  end mid-way) with probability ``rate`` (1: all), and for ``for_s`` seconds each new
  connection is cut on arrival with the same probability;
- ``delay(by_s, for_s)``: for ``for_s`` seconds, every chunk read on either side is
  written to the other ``by_s`` later (order kept; a chunk read after the delay ends
  still waits behind the ones before it).

The proxy runs its own event loop on a thread of its own (the load generator's loop never
waits for it). Which connections a partial drop cuts is drawn from a seeded generator:
the same run cuts the same ones. Loopback only by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from typing import Any

__all__ = ["FaultProxy"]

_CHUNK = 65536


class _Pipe:
    """One client connection and its connection to the engine."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.writers = (client, upstream)
        self.cut = False

    def abort(self) -> None:
        self.cut = True
        for w in self.writers:
            with contextlib.suppress(Exception):
                w.transport.abort()


class FaultProxy:
    """Forwards ``listen_host:<port>`` to ``target_host:target_port`` (module docstring).
    ``start()`` returns the port; ``stop()`` closes everything."""

    def __init__(
        self, target_host: str, target_port: int, listen_host: str = "127.0.0.1", seed: int = 0
    ) -> None:
        self.target = (target_host, target_port)
        self.listen_host = listen_host
        self.port = 0
        self.connections = 0
        self.cut = 0
        self._rng = random.Random(seed)
        self._pipes: set[_Pipe] = set()
        self._drop_until = 0.0
        self._drop_rate = 0.0
        self._delay_until = 0.0
        self._delay_s = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout_s: float = 10.0) -> int:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="llmslo-proxy", daemon=True)
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), loop)
        self.port = fut.result(timeout_s)
        return self.port

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._accept, self.listen_host, 0)
        return int(self._server.sockets[0].getsockname()[1])

    def stop(self, timeout_s: float = 10.0) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._close(), loop).result(timeout_s)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout_s)
        loop.close()
        self._loop = None

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.abort()
        self._pipes.clear()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults --------------------------------------------------------------------------

    def drop(self, rate: float, for_s: float) -> dict[str, Any]:
        """Cut ``rate`` of the open connections now and of the new ones for ``for_s``."""
        if self._loop is None:
            raise RuntimeError("the proxy is not running")
        fut = asyncio.run_coroutine_threadsafe(self._drop(rate, for_s), self._loop)
        cut = fut.result(10.0)
        return {"how": "proxy drop", "rate": rate, "for_s": for_s, "cut_open": cut,
                "open": cut + len(self._pipes)}  # fmt: skip

    async def _drop(self, rate: float, for_s: float) -> int:
        self._drop_rate = rate
        self._drop_until = time.monotonic() + for_s
        doomed = [p for p in self._pipes if self._rng.random() < rate]
        for pipe in doomed:
            self._kill(pipe)
        return len(doomed)

    def delay(self, by_s: float, for_s: float) -> dict[str, Any]:
        """Add ``by_s`` to every chunk's way for ``for_s`` seconds."""
        self._delay_s = by_s
        self._delay_until = time.monotonic() + for_s
        return {"how": "proxy delay", "by_s": by_s, "for_s": for_s, "open": len(self._pipes)}

    def _kill(self, pipe: _Pipe) -> None:
        self._pipes.discard(pipe)
        pipe.abort()
        self.cut += 1

    # -- forwarding ----------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if time.monotonic() < self._drop_until and self._rng.random() < self._drop_rate:
            self.cut += 1
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        pipe = _Pipe(writer, up_writer)
        self._pipes.add(pipe)
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, pipe), self._pump(up_reader, writer, pipe)
            )
        finally:
            self._pipes.discard(pipe)
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pipe: _Pipe
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, writer, pipe))
        try:
            while not pipe.cut:
                data = await reader.read(_CHUNK)
                now = time.monotonic()
                due = now + self._delay_s if now < self._delay_until else now
                await queue.put((due, data))
                if not data:
                    break
        except (ConnectionError, OSError):
            pass
        finally:
            await queue.put((0.0, b""))
            with contextlib.suppress(Exception):
                await sender

    async def _send(
        self, queue: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, pipe: _Pipe
    ) -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if pipe.cut:
                return
            if not data:
                with contextlib.suppress(Exception):
                    if writer.can_write_eof():
                        writer.write_eof()
                return
            writer.write(data)
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                return
