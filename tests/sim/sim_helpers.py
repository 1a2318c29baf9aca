"""Helpers of the sim engine's tests: sim servers started as real processes on loopback,
always stopped (process group killed) when the block ends."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

MODEL = "sim-70b"


@dataclass
class SimProc:
    url: str
    proc: subprocess.Popen[str]
    trace: Path | None
    stderr_path: Path

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {name: value} (labels dropped; histogram buckets skipped)."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#") or "_bucket{" in line:
                continue
            name_labels, value = line.rsplit(" ", 1)
            out[name_labels.split("{", 1)[0]] = float(value)
        return out


@contextlib.contextmanager
def start_sim(tmp: Path, *args: str, trace: bool = False) -> Iterator[SimProc]:
    """Start ``python -m pytest_llmslo.sim --port 0 ARGS`` and wait for its ready line."""
    trace_path = tmp / "trace.jsonl" if trace else None
    argv = [sys.executable, "-m", "pytest_llmslo.sim", "--port", "0", "--model", MODEL, *args]
    if trace_path is not None:
        argv += ["--trace-file", str(trace_path)]
    err_path = tmp / "sim.stderr"
    err = open(err_path, "w")  # closed in finally
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "ready on " not in line:
            proc.wait(timeout=10)
            raise RuntimeError(f"sim did not start: {line!r}\n{err_path.read_text()}")
        url = line.split("ready on ", 1)[1].split()[0]
        yield SimProc(url, proc, trace_path, err_path)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        err.close()


def wait_for(pred, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False
