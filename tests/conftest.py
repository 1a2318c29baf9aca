"""Shared fixtures of the test suite: a known-timing streaming server and helpers to run
pytest sessions that use the plugin in a subprocess (``pytester``)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpcore  # noqa: F401  (see below)
import httpx
import pytest

# httpx imports httpcore on its first request. Were that inside a pytester test, pytester
# would drop httpcore's modules when the test ends, and the copies imported next would
# raise exceptions (httpcore.ConnectError) that httpx no longer maps to its own, so every
# later "server not up yet" check would fail instead of retrying. Imported here, httpcore
# is in every snapshot pytester takes.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_fixed(ttft_ms: float, itl_ms: float, tokens: int) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    argv = [
        sys.executable, "-m", "pytest_llmslo.sim.truth_server", "--host", "127.0.0.1",
        "--port", str(port), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
        "--tokens", str(tokens),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"fixed server exited: {err}")
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("fixed server did not become ready in 60 s")
    except BaseException:
        proc.kill()  # whatever ended the wait, no server is left behind
        proc.wait(10)
        raise


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def fixed_server() -> Iterator[str]:
    """Base URL of a fixed-timing server (TTFT 20 ms, 2 ms per token): fast and known."""
    proc, url = _start_fixed(20, 2, 16)
    try:
        yield url
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def slow_fixed_server() -> Iterator[str]:
    """The same server with a slower first token (TTFT 60 ms): a 'regressed' engine."""
    proc, url = _start_fixed(60, 2, 16)
    try:
        yield url
    finally:
        _stop(proc)


@contextlib.contextmanager
def misbehaving_server(mode: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start ``tests/misbehaving_server.py --mode MODE ARGS``; yield its base URL."""
    script = Path(__file__).with_name("misbehaving_server.py")
    proc = subprocess.Popen(
        [sys.executable, str(script), "--mode", mode, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "ready on " not in line:
            raise RuntimeError(f"misbehaving server did not start: {line!r}")
        yield line.rsplit("ready on ", 1)[1].strip()
    finally:
        _stop(proc)


@pytest.fixture
def misbehaving() -> Iterator[Callable[..., str]]:
    """``misbehaving(mode, *args, env=None) -> url``: a misbehaving server for this test."""
    with contextlib.ExitStack() as stack:
        yield lambda mode, *args, env=None: stack.enter_context(
            misbehaving_server(mode, *args, env=env)
        )


# Plugins installed beside ours that no pytester session here uses: each costs a pytester
# subprocess a second or more of start-up on a loaded 2-core machine, and the plugin tier
# starts some 250 of them. A test that needs one names it again (``-p xdist``).
UNUSED_PLUGINS = ("hypothesispytest", "benchmark", "kmock", "anyio", "xdist", "xdist.looponfail")

INI = f"""[pytest]
asyncio_default_fixture_loop_scope = function
addopts = {" ".join("-p no:" + name for name in UNUSED_PLUGINS)}
"""


@pytest.fixture
def slo_pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory with an ini that silences unrelated plugin warnings."""
    pytester.makefile(".ini", pytest=INI)
    return pytester


def _tiny_args(url: str, *extra: str) -> list[str]:
    """Command line of a tiny SLO session against ``url`` (a few requests per level)."""
    return [
        "-p", "no:cacheprovider",
        "--slo-engine=external", f"--slo-engine-url={url}",
        "--slo-warmup=1", "--slo-requests=12", "--slo-isl=16", "--slo-osl=8",
        # This machine is shared and loaded: client health must not flip these tests.
        "--slo-client-max-lag=2000", "--slo-client-max-cpu=1.5", "--slo-client-min-load=0.5",
        *extra,
    ]  # fmt: skip


@pytest.fixture
def tiny_args(fixed_server: str):  # type: ignore[no-untyped-def]
    """``tiny_args(*extra)``: a tiny SLO session's command line against the fixed server."""
    return lambda *extra, url=fixed_server: _tiny_args(url, *extra)


ENGINE_MARKERS = ("docker", "vllm", "dynamo")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """With ``LLMSLO_REQUIRE_ENGINES=1`` (CI sets it) a real-engine test that would skip
    because its engine is not set up fails instead: a green CI must mean the real engines
    ran, not that they were missing."""
    report = yield
    if (
        report.skipped
        and os.environ.get("LLMSLO_REQUIRE_ENGINES") == "1"
        and any(item.get_closest_marker(m) for m in ENGINE_MARKERS)
        and not hasattr(report, "wasxfail")
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"LLMSLO_REQUIRE_ENGINES=1 but this real-engine test skipped: {reason}\n"
            "set the engines up with: bash .ci/engines.sh"
        )
    return report


@pytest.fixture(scope="session", autouse=True)
def _shared_bytecode(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Where ``PYTHONDONTWRITEBYTECODE`` is set, every Python subprocess of the run (some
    300 pytester sessions, servers, workers) compiled the whole package again from source:
    about 0.8 s of CPU a start. Its children write their bytecode under this run's
    temporary directory instead (``PYTHONPYCACHEPREFIX``), never into the source tree, and
    read it back from there. Unset, nothing changes: Python keeps its own ``__pycache__``."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONDONTWRITEBYTECODE")
        mp.setenv("PYTHONPYCACHEPREFIX", str(tmp_path_factory.getbasetemp() / "pycache"))
        yield


@pytest.fixture(autouse=True)
def _worker_key_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default worker key file (``load/workerkey.py``) in a directory of the test
    run's own, never the user's: a session makes it, its workers (subprocesses that
    inherit the environment) read it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "config"))
    for name in ("LLMSLO_WORKER_KEY", "LLMSLO_WORKER_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
