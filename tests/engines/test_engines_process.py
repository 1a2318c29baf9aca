"""The process launcher: start, readiness, log tail on failure, teardown of the whole
process group, port release, secrets kept out of metadata and logs."""

from __future__ import annotations

import dataclasses
import importlib
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from pytest_llmslo.engines import lifecycle
from pytest_llmslo.engines.base import EngineConfig
from pytest_llmslo.engines.launch import launch
from pytest_llmslo.engines.launchplan import LaunchPlan
from pytest_llmslo.engines.ports import pick_free_port, port_is_free
from pytest_llmslo.engines.readiness import http_ok, version_from_json
from pytest_llmslo.engines.running import EngineTeardownWarning, RunningEngine
from pytest_llmslo.engines.runtimes.process import ManagedProcess, read_tail
from pytest_llmslo.engines.units import ProcessUnit
from pytest_llmslo.errors import EngineStartError

# The module (the package exports its ``launch`` function under the same name).
running_mod = importlib.import_module("pytest_llmslo.engines.running")


def _plan(argv: list[str], port: int, timeout: float = 30.0, **env: str) -> LaunchPlan:
    cfg = EngineConfig(kind="external", name="fake", env=env, startup_timeout_s=timeout)
    return LaunchPlan(
        config=cfg,
        host="127.0.0.1",
        port=port,
        model="fake-model",
        ready=http_ok("/health"),
        processes=(ProcessUnit(argv=(*argv, "--port", str(port)), env=env, role="fake"),),
        version_probe=version_from_json("/version"),
        ports=(port,),
    )


def _pids_in_group(pgid: int) -> list[int]:
    out = subprocess.run(["ps", "-eo", "pid=,pgid="], capture_output=True, text=True).stdout
    return [int(p) for p, g in (line.split() for line in out.splitlines()) if int(g) == pgid]


def test_pick_free_port_is_bindable() -> None:
    port = pick_free_port()
    assert 0 < port < 65536
    assert port_is_free(port)


def test_start_ready_stream_stop_leaves_nothing(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    handle = launch(_plan([*fake_engine_argv, "--ready-after", "0.5", "--spawn-child"], port))
    try:
        assert handle.base_url == f"http://127.0.0.1:{port}"
        assert handle.alive()
        assert handle.version() == "9.9.9-fake"
        with httpx.stream(
            "POST", handle.base_url + "/v1/chat/completions", json={"max_tokens": 4}
        ) as r:
            chunks = [line for line in r.iter_lines() if line.startswith("data: {")]
        assert len(chunks) == 5
        proc = handle._units[0]
        assert isinstance(proc, ManagedProcess)
        pgid = proc.pgid
        assert len(_pids_in_group(pgid)) >= 2  # the server and its child
        assert not port_is_free(port)
    finally:
        handle.stop()
    assert not handle.alive()
    assert _pids_in_group(pgid) == []
    assert port_is_free(port)
    handle.stop()  # idempotent


def test_sigkill_after_grace_when_sigterm_is_ignored(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    spec = ProcessUnit(argv=(*fake_engine_argv, "--port", str(port), "--ignore-sigterm"))
    proc = ManagedProcess(spec, grace_s=0.5)
    try:
        time.sleep(0.5)
        assert proc.alive()
    finally:
        t0 = time.monotonic()
        proc.stop()
    assert time.monotonic() - t0 < 30  # the grace period, then SIGKILL (not the 600 s sleep)
    assert not proc.alive()
    assert proc.returncode() == -signal.SIGKILL


def test_exit_before_ready_raises_with_log_tail(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    with pytest.raises(EngineStartError) as info:
        launch(_plan([*fake_engine_argv, "--exit-after", "0.2"], port))
    assert "exited before it was ready" in str(info.value)
    assert "exit status 3" in str(info.value)
    assert "simulated start failure" in info.value.log_tail
    assert port_is_free(port)


def test_timeout_raises_with_last_check_and_tail(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    with pytest.raises(EngineStartError) as info:
        launch(_plan([*fake_engine_argv, "--ready-after", "60"], port, timeout=2))
    msg = str(info.value)
    assert "not ready after 2 s" in msg
    assert "HTTP 503" in msg
    assert "fake engine listening" in info.value.log_tail


def test_missing_program_is_a_start_error() -> None:
    with pytest.raises(EngineStartError, match="cannot start"):
        ManagedProcess(ProcessUnit(argv=("/nonexistent/engine-binary",)))


def test_port_in_use_is_reported(fake_engine_argv: list[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(EngineStartError, match="already in use"):
            launch(_plan(fake_engine_argv, port))


def _temp_dir(tmp_path: Path, name: str) -> str:
    d = tmp_path / name
    d.mkdir()
    (d / "generated.yaml").write_text("{}")
    return str(d)


def test_stop_removes_the_launchers_temporary_dirs(
    fake_engine_argv: list[str], tmp_path: Path
) -> None:
    port = pick_free_port()
    made = _temp_dir(tmp_path, "discovery")
    plan = dataclasses.replace(_plan(fake_engine_argv, port), temp_dirs=(made,))
    handle = launch(plan)
    try:
        (unit,) = handle._units
        assert isinstance(unit, ManagedProcess)
        log_dir = unit.log_path.parent
        assert log_dir.is_dir() and Path(made).is_dir()
    finally:
        handle.stop()
    # The plan's directory and the process log directory are both gone.
    assert not Path(made).exists()
    assert not log_dir.exists()


def test_failed_start_keeps_the_logs_it_points_to(
    fake_engine_argv: list[str], tmp_path: Path
) -> None:
    port = pick_free_port()
    made = _temp_dir(tmp_path, "discovery")
    plan = dataclasses.replace(
        _plan([*fake_engine_argv, "--exit-after", "0.2"], port), temp_dirs=(made,)
    )
    with pytest.raises(EngineStartError) as info:
        launch(plan)
    found = re.search(r"full logs in (\S+)", str(info.value).splitlines()[0])
    assert found, str(info.value)
    log_dir = Path(found.group(1))
    # What the message names is still there to read, with the whole log ...
    assert "simulated start failure" in (log_dir / "fake.log").read_text()
    # ... while the launcher's other temporary directories are gone.
    assert not Path(made).exists()
    for f in log_dir.iterdir():
        f.unlink()
    log_dir.rmdir()


def test_port_still_held_after_stop_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(running_mod, "PORT_FREE_TIMEOUT_S", 0.3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        plan = dataclasses.replace(_plan(["unused"], port), processes=())
        handle = RunningEngine(plan, [])
        with pytest.warns(EngineTeardownWarning, match=rf"'fake': port {port} on 127.0.0.1"):
            handle.stop()


def test_free_port_after_stop_is_not_reported(recwarn: pytest.WarningsRecorder) -> None:
    port = pick_free_port()
    plan = dataclasses.replace(_plan(["unused"], port), processes=())
    RunningEngine(plan, []).stop()
    assert not [w for w in recwarn if issubclass(w.category, EngineTeardownWarning)]


def test_tokens_are_redacted_in_metadata_and_log_tail(fake_engine_argv: list[str]) -> None:
    port = pick_free_port()
    secret = "hf_abcdefSECRET"
    plan = _plan([*fake_engine_argv, "--api-key", "sk-verysecret"], port, HF_TOKEN=secret)
    handle = launch(plan)
    try:
        meta = repr(handle.metadata())
        tail = handle.log_tail()
    finally:
        handle.stop()
    assert secret not in meta and "sk-verysecret" not in meta
    assert "***" in meta
    assert "token=***" in tail and secret not in tail


def test_read_tail_lines(tmp_path) -> None:
    p = tmp_path / "x.log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert read_tail(p, 3).splitlines() == ["line 97", "line 98", "line 99"]
    assert read_tail(tmp_path / "missing.log") == ""


def test_sigterm_to_harness_stops_engines(tmp_path, fake_engine_argv: list[str]) -> None:
    """A harness killed with SIGTERM (CI cancel) stops its engine process groups."""
    port = pick_free_port()
    script = tmp_path / "harness.py"
    argv = [*fake_engine_argv, "--port", str(port), "--spawn-child"]
    script.write_text(
        textwrap.dedent(f"""
        import sys, time
        from pytest_llmslo.engines.runtimes.process import ManagedProcess
        from pytest_llmslo.engines.units import ProcessUnit
        p = ManagedProcess(ProcessUnit(argv={argv!r}))
        print(p.pgid, flush=True)
        time.sleep(600)
    """)
    )
    harness = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert harness.stdout is not None
        pgid = int(harness.stdout.readline())
        deadline = time.monotonic() + 20
        while port_is_free(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pids_in_group(pgid)
        harness.send_signal(signal.SIGTERM)
        assert harness.wait(timeout=30) != 0  # interrupted, as by Ctrl-C
    finally:
        if harness.poll() is None:
            harness.kill()
    assert _pids_in_group(pgid) == []
    assert port_is_free(port)


def test_harness_killed_outright_takes_the_engine_with_it(
    tmp_path, fake_engine_argv: list[str]
) -> None:
    """SIGKILL skips every handler; the parent-death signal still ends the engine."""
    port = pick_free_port()
    script = tmp_path / "harness.py"
    argv = [*fake_engine_argv, "--port", str(port)]
    script.write_text(
        textwrap.dedent(f"""
        import time
        from pytest_llmslo.engines.runtimes.process import ManagedProcess
        from pytest_llmslo.engines.units import ProcessUnit
        p = ManagedProcess(ProcessUnit(argv={argv!r}))
        print(p.pid, flush=True)
        time.sleep(600)
    """)
    )
    harness = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert harness.stdout is not None
    pid = int(harness.stdout.readline())
    harness.kill()
    harness.wait()
    deadline = time.monotonic() + 10
    while lifecycle.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
        # The engine was re-parented; reap it if it became our zombie (it is not ours).
    assert not _alive_not_zombie(pid)


def _alive_not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_lifecycle_stop_all_runs_every_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    # A private registry: the session's real engines must not be stopped by this test.
    monkeypatch.setattr(lifecycle, "_stops", {})
    calls: list[int] = []
    lifecycle.register(lambda: calls.append(1))
    lifecycle.register(lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    lifecycle.register(lambda: calls.append(3))
    lifecycle.stop_all()
    assert calls == [3, 1]


def test_sigterm_to_pytest_session_stops_engines_and_interrupts(
    tmp_path, fake_engine_argv: list[str]
) -> None:
    """Under pytest, SIGTERM stops the engines and ends the session as interrupted."""
    port = pick_free_port()
    argv = [*fake_engine_argv, "--port", str(port), "--spawn-child"]
    marker = tmp_path / "pgid.txt"
    (tmp_path / "test_long.py").write_text(
        textwrap.dedent(f"""
        import time
        from pytest_llmslo.engines.runtimes.process import ManagedProcess
        from pytest_llmslo.engines.units import ProcessUnit

        def test_long():
            p = ManagedProcess(ProcessUnit(argv={argv!r}))
            open({str(marker)!r}, "w").write(str(p.pgid))
            time.sleep(600)
    """)
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_long.py"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        # The test's own code runs (it wrote the marker): a signal interrupts it wherever
        # it lands, in its write or in its sleep.
        pgid = int(marker.read_text())
        assert _pids_in_group(pgid)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, out  # pytest's "interrupted"
    assert "KeyboardInterrupt" in out
    assert _pids_in_group(pgid) == []
    assert port_is_free(port)
