"""Several server processes on one port, forked before any event loop or thread exists.

``prefork`` binds the port, forks ``workers - 1`` children, each listening on its own
socket in the same ``SO_REUSEPORT`` group (the kernel spreads connections over them), and
serves in the first process itself once every child is ready. Each process runs one event
loop (uvloop where asked for and installed) until SIGINT or SIGTERM; a child whose parent
died stops too. The truth server (``truth_server.py``) runs this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: ``serve(sock, worker, ready, stop)``: serve on ``sock`` as worker ``worker`` (0 is the
#: first process), set ``ready`` to the bound port, return once ``stop`` is set.
Serve = Callable[[socket.socket, int, asyncio.Future[int], asyncio.Event], Coroutine[Any, Any, T]]


def prefork(
    host: str,
    port: int,
    workers: int,
    loop: str,
    serve: Serve[T],
    on_ready: Callable[[str, int], None],
) -> T:
    """Serve on ``host:port`` (0: any) in ``workers`` processes; ``on_ready(loop kind,
    port)`` once all are listening. Returns what the first process's ``serve`` returned."""
    sock = listen_socket(host, port, workers > 1)
    port = sock.getsockname()[1]
    children: list[int] = []
    ready_r, ready_w = os.pipe()
    parent = os.getpid()
    # Fork before any event loop or thread exists; each child listens on its own socket
    # in the same SO_REUSEPORT group, and the kernel spreads connections over them.
    for w in range(1, workers):
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.close(ready_r)
            child_sock = listen_socket(host, port, True)
            code = _run_worker(loop, child_sock, w, serve, ready_w, parent)
            os._exit(code)
        children.append(pid)
    os.close(ready_w)
    for _ in children:
        os.read(ready_r, 1)
    os.close(ready_r)
    try:
        return run_loop(loop, sock, 0, serve, lambda kind: on_ready(kind, port), None)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise SystemExit("--loop uvloop needs the uvloop package") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run_loop(
    kind: str,
    sock: socket.socket,
    worker: int,
    serve: Serve[T],
    on_ready: Callable[[str], None] | None,
    parent: int | None,
) -> T:
    """``serve`` on a new event loop of ``kind`` until SIGINT or SIGTERM (or, with a
    ``parent``, until that process is gone)."""
    loop = new_loop(kind)

    async def run() -> T:
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
        task = asyncio.ensure_future(serve(sock, worker, ready, stop))
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
    worker: int,
    serve: Serve[Any],
    ready_w: int,
    parent: int,
) -> int:
    def on_ready(_: str) -> None:
        os.write(ready_w, b"r")
        os.close(ready_w)

    try:
        run_loop(kind, sock, worker, serve, on_ready, parent)
    except BaseException:
        return 1
    return 0
