"""The proxy in front of the engine, against the fixed-timing server
(``python -m pytest_llmslo.sim.truth_server``): bytes pass unchanged; a delay adds its
latency both ways while it lasts and nothing after; a drop cuts the open streams and the
new connections while it lasts (all of them, or the share asked: exactly those it says it
cut), and nothing after."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from pytest_llmslo.faults import FaultProxy


@pytest.fixture(scope="module")
def slow_stream_url() -> Iterator[str]:
    """A fixed-timing server whose streams last 3 s (TTFT 20 ms, 300 tokens of 10 ms)."""
    argv = [
        sys.executable, "-m", "pytest_llmslo.sim.truth_server", "--port", "0",
        "--ttft-ms", "20", "--itl-ms", "10", "--tokens", "300", "--loop", "asyncio",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert "ready on " in line, line
        yield line.rsplit("ready on ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _proxy(url: str) -> FaultProxy:
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    return FaultProxy(host, int(port))


def _completion(url: str, max_tokens: int | None = None) -> tuple[float, float, str]:
    """(seconds to the first token, seconds to the end, the body) of one streamed
    completion on a connection of its own."""
    body: dict = {"model": "m", "prompt": "hello", "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    t0 = time.perf_counter()
    first = None
    text = []
    with httpx.Client(timeout=30, trust_env=False) as client:
        with client.stream("POST", url + "/v1/completions", json=body) as resp:
            for chunk in resp.iter_text():
                if first is None and '"text":"' in chunk and '"text":""' not in chunk:
                    first = time.perf_counter() - t0
                text.append(chunk)
    end = time.perf_counter() - t0
    return (first if first is not None else end), end, "".join(text)


def test_bytes_pass_unchanged(fixed_server: str) -> None:
    with _proxy(fixed_server) as proxy:
        via = f"http://127.0.0.1:{proxy.port}"
        _first, _end, text = _completion(via)
        _f, _e, direct = _completion(fixed_server)
        assert text.count("data: ") == direct.count("data: ") and "[DONE]" in text
        assert proxy.connections == 1 and proxy.cut == 0


def test_a_delay_adds_its_latency_both_ways_while_it_lasts(fixed_server: str) -> None:
    with _proxy(fixed_server) as proxy:
        via = f"http://127.0.0.1:{proxy.port}"
        done = proxy.delay(0.2, 2.0)
        assert done["how"] == "proxy delay" and done["by_s"] == 0.2
        first, end, text = _completion(via)
        assert "[DONE]" in text
        # The request waits 200 ms on its way in, every chunk 200 ms on its way out: the
        # first token (20 ms at the server) cannot come before 420 ms.
        assert first >= 0.42, first
        assert end - first < 0.2, (first, end)  # the stream itself keeps its pace
        time.sleep(2.1)
        after, _end, _ = _completion(via)
        assert after < 0.4, after  # nothing added once it is over


def test_a_drop_cuts_open_streams_and_new_connections_while_it_lasts(
    slow_stream_url: str,
) -> None:
    with _proxy(slow_stream_url) as proxy:
        via = f"http://127.0.0.1:{proxy.port}"
        got: list[BaseException | str] = []

        def stream() -> None:
            try:
                got.append(_completion(via)[2])
            except httpx.HTTPError as exc:
                got.append(exc)

        t = threading.Thread(target=stream)
        t.start()
        time.sleep(0.5)
        done = proxy.drop(1.0, 1.0)
        assert done == {"how": "proxy drop", "rate": 1.0, "for_s": 1.0, "cut_open": 1, "open": 1}
        t.join(10)
        outcome = got[0]
        assert isinstance(outcome, httpx.HTTPError) or "[DONE]" not in outcome
        with pytest.raises(httpx.HTTPError):
            _completion(via, max_tokens=2)  # refused while the drop lasts
        time.sleep(1.1)
        assert "[DONE]" in _completion(via, max_tokens=2)[2]  # and served after it


def test_a_partial_drop_cuts_the_share_it_says(slow_stream_url: str) -> None:
    with _proxy(slow_stream_url) as proxy:
        via = f"http://127.0.0.1:{proxy.port}"
        got: list[bool] = []
        lock = threading.Lock()

        def stream() -> None:
            try:
                ok = "[DONE]" in _completion(via, max_tokens=150)[2]
            except httpx.HTTPError:
                ok = False
            with lock:
                got.append(ok)

        threads = [threading.Thread(target=stream) for _ in range(10)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while len(proxy._pipes) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        done = proxy.drop(0.5, 0.1)
        for t in threads:
            t.join(15)
        assert done["open"] == 10 and 0 < done["cut_open"] < 10
        assert got.count(False) == done["cut_open"], (got, done)
