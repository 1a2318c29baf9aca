"""The port-forward access path's local side (``k8s/forward.py``) against a stand-in for
the client library's proxy thread: one end of a socket pair that floods the engine's
bytes and reads what the forwarder sends, as ``kubernetes.stream.ws_client.PortForward``
does with its own end (``port.python``)."""

from __future__ import annotations

import socket
import threading
import time

from pytest_llmslo.engines.runtimes.k8s.forward import PortForwarder


class LibrarySide:
    """The library's end of the socket pair: sends a stream without pause and records how
    its reads end (``b""``, the end of stream it handles, or the error that kills its
    thread in the real library)."""

    def __init__(self) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.ended: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import select

        chunk = b"data: " + b"x" * 4000 + b"\n\n"
        try:
            while True:
                readable, writable, _ = select.select([self.theirs], [self.theirs], [], 5)
                if readable:
                    if not self.theirs.recv(1 << 16):
                        self.ended.append("end of stream")
                        return
                if writable:
                    self.theirs.send(chunk)
        except OSError as exc:
            self.ended.append(type(exc).__name__)
        finally:
            self.theirs.close()


def test_a_client_that_goes_away_mid_stream_ends_the_forward_with_an_end_of_stream() -> None:
    sides: list[LibrarySide] = []

    def open_socket(pod: str, port: int) -> socket.socket:
        side = LibrarySide()
        sides.append(side)
        return side.ours

    forwarder = PortForwarder(open_socket, lambda: "pod-0", 8000)
    try:
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", forwarder.local_port)) as conn:
                conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n")
                assert conn.recv(1024)  # the stream flows, then the client goes away
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(s.thread.is_alive() for s in sides):
            time.sleep(0.01)
    finally:
        forwarder.close()
    assert len(sides) == 20
    # Every library side saw its stream end; none was reset (which kills its thread).
    assert [s.ended for s in sides] == [["end of stream"]] * 20
