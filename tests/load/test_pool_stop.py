"""How a pool of load worker processes ends: an interrupt's bounded wait for their results,
and their death with the process that started them (``pool.py``, ``parentdeath.py``)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, pool
from pytest_llmslo.load.levelplan import Limits, plan_level
from pytest_llmslo.load.parentdeath import die_with_parent
from pytest_llmslo.load.pool import Interrupted, Pool, drive_pool
from pytest_llmslo.load.workload import LengthModel
from pytest_llmslo.records import LoadLevel

ROOT = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux: /proc, prctl")


def _job(url: str) -> LoadJob:
    return LoadJob(
        ClientSettings(url, "fixed", processes=2),
        WorkloadSpec(isl=8, osl=20, calibrate=False),
        LoadLevel.concurrency(4),
        requests=None,
        duration_s=120,
        warmup=0,
    )


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its exit status is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _gone_within(pids: list[int], bound_s: float) -> list[int]:
    """Those of ``pids`` still running after ``bound_s`` (polled, not slept)."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.02)
    return [p for p in pids if _alive(p)]


@linux
def test_a_worker_that_does_not_answer_the_stop_keeps_what_it_shipped(
    fixed_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted with one worker frozen (it cannot cut nor answer): the level ends within
    the bounds, the frozen worker is killed, and what it shipped before is kept."""
    monkeypatch.setattr(pool, "_STOP_RESULTS_S", 1.0)
    monkeypatch.setattr(pool, "_CLOSE_S", 1.0)
    job = _job(fixed_url)

    async def main() -> None:
        p = Pool(plan_level(job, LengthModel()).plans, lambda *a: None, None)
        task = asyncio.ensure_future(drive_pool(p, Limits.of(job, None), lambda *a: None, 0))
        deadline = time.monotonic() + 60
        # A worker's tally follows the batches of what it counted: once both workers
        # have counted finished requests, the parent holds records of both.
        while min(done for done, _, _ in p.tallies.values()) < 2:
            assert time.monotonic() < deadline and not task.done(), "the load did not start"
            await asyncio.sleep(0.02)
        frozen = p.procs[1]
        os.kill(frozen.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            task.cancel()
            out = await task
            took = time.monotonic() - t0
        finally:
            if frozen.poll() is None:
                frozen.kill()
                frozen.wait(5)
        assert isinstance(out, Interrupted)
        by_worker = {r.worker: len(r.records) for r in out.results}
        assert by_worker.get(0, 0) > 0 and by_worker.get(1, 0) > 0, by_worker
        # The answering worker's in-flight requests were cut and kept as such.
        assert out.results[0].cancelled > 0
        assert took < 1.0 + 1.0 + 5.0, took  # results bound + exit bound + the decoding
        assert frozen.returncode == -signal.SIGKILL

    asyncio.run(main())


# Starts a pool whose workers wait for their start, prints their pids and sleeps. A sleeper
# of its own holds the workers' connections open: when this process is killed, the workers
# see no end of their connection, and only their parent-death signal can end them.
_POOL_SCRIPT = """
import asyncio, os, subprocess, sys
from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec
from pytest_llmslo.load.levelplan import plan_level
from pytest_llmslo.load.pool import Pool
from pytest_llmslo.load.workload import LengthModel
from pytest_llmslo.records import LoadLevel

async def main():
    job = LoadJob(ClientSettings(sys.argv[1], "fixed", processes=2),
                  WorkloadSpec(isl=8, osl=20, calibrate=False), LoadLevel.concurrency(4),
                  requests=None, duration_s=120, warmup=0)
    pool = Pool(plan_level(job, LengthModel()).plans, lambda *a: None, None)
    await pool.start()
    fds = [c.fileno() for c in pool.conns]
    holder = subprocess.Popen(["sleep", "120"], pass_fds=fds, start_new_session=True)
    print(holder.pid, *(p.pid for p in pool.procs), flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


@linux
def test_the_workers_die_with_a_killed_parent(fixed_url: str) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", _POOL_SCRIPT, fixed_url],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    holder = 0
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()  # once every worker said ready
        holder, *workers = (int(x) for x in line.split())
        assert len(workers) == 2 and all(_alive(w) for w in workers), line
        parent.kill()
        parent.wait(10)
        assert _gone_within(workers, 10.0) == [], "load workers outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if holder:
            os.kill(holder, signal.SIGKILL)


@linux
def test_a_worker_whose_parent_is_already_gone_exits() -> None:
    """The fork race: the parent died before the signal was in place (the pid given is not
    the parent's any more); the worker exits at once instead of running as an orphan."""
    code = (
        "import os\n"
        "from pytest_llmslo.load.parentdeath import die_with_parent\n"
        "die_with_parent(os.getppid() + 1)\n"
        "raise SystemExit(7)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, timeout=30)
    assert proc.returncode == 1


def test_the_parent_death_signal_says_why_where_there_is_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    why = die_with_parent(os.getppid())
    assert why is not None and "Linux only" in why
