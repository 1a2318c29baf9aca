"""The plugin with remote load workers: ``--worker-listen`` and ``--remote-workers`` split
every level over workers started with ``llmslo worker --connect``; the results document
keeps one line a worker (its clock and health); too few workers is a clear error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from pytest_llmslo.load.workerkey import session_key

ROOT = Path(__file__).resolve().parents[2]

SWEEP = """
import pytest

@pytest.mark.slo(concurrency=[2, 4])
def test_chat(slo_run):
    pass
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(address: str, name: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "pytest_llmslo.cli", "worker", "--connect", address]
    cmd += ["--name", name, "--connect-timeout", "120"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)


def test_a_session_splits_its_levels_over_remote_workers(slo_pytester, tiny_args) -> None:
    address = f"127.0.0.1:{_free_port()}"
    slo_pytester.makepyfile(test_chat=SWEEP)
    # The workers read the default key file as they start: make it first, as the session
    # would (alone, this test ran before any other had made it, and the workers quit).
    session_key()
    workers = [_worker(address, f"w{i}") for i in range(2)]
    try:
        result = slo_pytester.runpytest_subprocess(
            *tiny_args(f"--worker-listen={address}", "--remote-workers=2", "--slo-json=r.json"),
            timeout=180,
        )
        # The session ended: its workers exit by themselves.
        codes = [w.wait(timeout=60) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(timeout=10)
    result.assert_outcomes(passed=2)
    assert codes == [0, 0]
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    for point in doc["points"]:
        lines = point["summary"]["traffic"]["workers"]
        assert sorted(line["name"].split()[3] for line in lines) == ["w0", "w1"]
        assert sum(line["requests"] for line in lines) == 12
        assert all(0 <= line["uncertainty_ms"] < 1.0 for line in lines)


def test_too_few_workers_is_a_clear_error(slo_pytester, tiny_args) -> None:
    slo_pytester.makepyfile(test_chat=SWEEP)
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--worker-listen=127.0.0.1:0", "--remote-workers=2", "--worker-wait=1"),
        timeout=120,
    )
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*only 0 of 2 remote load workers connected to 127.0.0.1:* within 1 s*"]
    )
