"""Remote load workers as separate processes on loopback, each in a time namespace of its
own (its monotonic clock at another epoch, as another host's), one in a network namespace
of its own, against the fixed-timing server: the merged level reads the server's truth,
every request once, on the session's clock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from time import perf_counter_ns

import numpy as np
import pytest

from pytest_llmslo.errors import LoadError
from pytest_llmslo.load import ClientSettings, LoadJob, Progress, WorkloadSpec, run_load_sync
from pytest_llmslo.load.remote import WorkerHub
from pytest_llmslo.load.schedule import arrival_offsets_ns
from pytest_llmslo.metrics import summarize
from pytest_llmslo.records import LoadLevel

from .conftest import fixed_server
from .remote_helpers import (
    ROOT,
    network_namespace,
    network_namespaces,
    time_namespaces,
    workers,
)

NO_TIME_NS = time_namespaces()
needs_time_ns = pytest.mark.skipif(NO_TIME_NS is not None, reason=str(NO_TIME_NS))
SERVER = ("--ttft-ms", "50", "--itl-ms", "10", "--tokens", "20", "--loop", "asyncio")
#: Each worker's monotonic clock this many seconds ahead of the host's.
OFFSETS_S = [1_000, 250_000, 7_000_000]


def _stats(url: str, reset: bool = False) -> dict:
    if reset:
        req = urllib.request.Request(url + "/stats/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()
        return {}
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=10).read())


def _job(url: str, hub: WorkerHub, level: LoadLevel, requests: int, **kw: object) -> LoadJob:
    return LoadJob(
        ClientSettings(url, "fixed"),
        WorkloadSpec(isl=16, osl=20, calibrate=False, seed=5),
        level,
        requests=requests,
        warmup=kw.pop("warmup", 8),  # type: ignore[arg-type]
        workers=hub,
        **kw,  # type: ignore[arg-type]
    )


def _check_truth(url: str, hub: WorkerHub, c: int, requests: int) -> None:
    """One closed-loop level on the hub's workers against the server's truth."""
    _stats(url, reset=True)
    t_before = perf_counter_ns()
    run = run_load_sync(_job(url, hub, LoadLevel.concurrency(c), requests, warmup=c))
    t_after = perf_counter_ns()
    st = _stats(url)
    # Every request counted once, by every worker together.
    assert sorted(r.index for r in run.records) == list(range(c, c + requests))
    assert all(r.ok for r in run.records), [r.error for r in run.records][:3]
    # On the session's clock: inside the level as this process saw it.
    assert t_before <= run.start_ns and run.end_ns <= t_after
    s = summarize(run)
    truth_ttft = 50.0 + st["first_token_lateness"]["p50_ms"]
    assert s.metric("ttft", 50) == pytest.approx(truth_ttft, rel=0.03)
    assert s.metric("itl", "mean") == pytest.approx(10.0, rel=0.01)
    remote = run.meta["remote"]
    assert [w["requests"] for w in remote["workers"]] and not remote["lost"]
    assert sum(w["requests"] for w in remote["workers"]) == requests
    return run


@needs_time_ns
@pytest.mark.slow
def test_three_workers_in_time_namespaces_read_the_truth() -> None:
    with fixed_server(*SERVER) as url:
        hub = WorkerHub("127.0.0.1:0", 3, wait_s=60)
        hub.open()
        try:
            with workers(hub.address, list(OFFSETS_S)):
                run = _check_truth(url, hub, c=12, requests=240)
                # Each worker's offset is its namespace's, to well within a millisecond.
                by_name = {e["name"].split()[3]: e for e in run.meta["remote"]["workers"]}
                for i, off in enumerate(OFFSETS_S):
                    entry = by_name[f"w{i}"]
                    clock = entry["clock"]
                    assert abs(clock["before"]["offset_ms"] - off * 1e3) < 1.0
                    assert 0 < clock["uncertainty_ms"] < 1.0
                    assert entry["valid"], entry["reasons"]
                assert run.health.valid, run.health.reasons
                _open_loop_union(url, hub)
        finally:
            hub.close()


def _open_loop_union(url: str, hub: WorkerHub) -> None:
    """An open loop split over the workers: the union of their arrivals is the asked
    schedule, to within the clocks' uncertainty and the send lag."""
    level = LoadLevel.rate(30, "poisson", 11)
    run = run_load_sync(_job(url, hub, level, 150, warmup=0))
    offsets = np.array(arrival_offsets_ns(level, 150), dtype=np.int64)
    sched = np.array(sorted(r.scheduled_ns for r in run.records), dtype=np.int64)
    assert len(sched) == 150
    err_ms = np.abs((sched - sched[0]) - offsets) / 1e6
    assert err_ms.max() < 2.0, err_ms.max()
    lag_ms = np.array([r.sent_ns - r.scheduled_ns for r in run.records]) / 1e6
    assert np.median(lag_ms) < 5.0


@needs_time_ns
@pytest.mark.slow
def test_a_worker_in_its_own_network_namespace() -> None:
    why = network_namespaces()
    if why is not None:
        pytest.skip(why)
    with network_namespace(os.getpid() % 50 + 3) as (ns, host_ip, _ns_ip):
        with fixed_server(*SERVER, "--host", host_ip) as url:
            hub = WorkerHub(f"{host_ip}:0", 2, wait_s=60)
            hub.open()
            try:
                with workers(hub.address, [3_000, 90_000], netns={1: ns}):
                    run = _check_truth(url, hub, c=8, requests=160)
                    names = [w["name"] for w in run.meta["remote"]["workers"]]
                    # The namespaced worker came from its own address, not loopback.
                    assert any(_ns_ip in n for n in names), names
            finally:
                hub.close()


@needs_time_ns
def test_a_worker_killed_mid_level_is_named_and_the_others_are_kept() -> None:
    with fixed_server(*SERVER) as url:
        hub = WorkerHub("127.0.0.1:0", 2, wait_s=60)
        hub.open()
        try:
            with workers(hub.address, [500, 9_000]) as procs:
                hub.ensure()

                def kill_when_measuring(p: Progress) -> None:
                    # Half-way through the measured window: the worker dies mid-level.
                    if p.phase == "measuring" and p.done >= 40 and procs[1].poll() is None:
                        procs[1].kill()

                job = _job(
                    url,
                    hub,
                    LoadLevel.concurrency(4),
                    None,
                    duration_s=4.0,
                    grace_s=2.0,
                    progress=kill_when_measuring,
                )
                run = run_load_sync(job)
                remote = run.meta["remote"]
                lost = remote["lost"]
                assert list(lost) == [w["name"] for w in remote["workers"] if w["lost"]]
                assert len(lost) == 1 and "w1" in next(iter(lost))
                assert not run.health.valid
                assert any(
                    "w1" in r and "was lost during the level" in r for r in run.health.reasons
                )
                (alive,) = [w["worker"] for w in remote["workers"] if not w["lost"]]
                kept = [r for r in run.records if r.worker == alive]
                assert len(kept) > 20 and all(r.ok for r in kept)
                # A later level names the lost worker rather than run short of it.
                with pytest.raises(LoadError, match=r"w1.*lost|lost.*w1"):
                    run_load_sync(_job(url, hub, LoadLevel.concurrency(2), 4))
        finally:
            hub.close()


def _address_from(proc: subprocess.Popen[str], head: list[str]) -> str:
    """The address ``llmslo run`` says it listens on (read from its standard error)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        head.append(line)
        if not line:
            break
        if "remote load worker(s) on " in line:
            return line.split("--connect ", 1)[1].split("`", 1)[0].split()[0]
    raise AssertionError("".join(head))


@needs_time_ns
@pytest.mark.slow
def test_a_coordinator_stopped_by_sigterm_keeps_what_its_workers_measured(tmp_path: Path) -> None:
    with fixed_server(*SERVER) as url:
        cmd = [
            sys.executable, "-m", "pytest_llmslo.cli", "run", "--engine", "external",
            "--engine-url", url, "--model", "fixed", "--concurrency", "4", "--requests", "none",
            "--duration", "30", "--warmup", "4", "--isl", "16", "--osl", "20",
            "--worker-listen", "127.0.0.1:0", "--remote-workers", "2", "--worker-wait", "60",
            "--slo-json", str(tmp_path / "r.json"),
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
        )
        head: list[str] = []
        try:
            address = _address_from(proc, head)
            with workers(address, [2_000, 40_000]) as procs:
                before = _stats(url)["requests"]
                deadline = time.monotonic() + 60
                while _stats(url)["requests"] - before < 40 and time.monotonic() < deadline:
                    time.sleep(0.2)
                proc.send_signal(signal.SIGTERM)
                _, rest = proc.communicate(timeout=120)
                # The session ended: each worker exits by itself, cleanly.
                assert [p.wait(timeout=30) for p in procs] == [0, 0]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        err = "".join(head) + rest
        assert proc.returncode == 130, err
        doc = json.loads((tmp_path / "r.json").read_text())
        assert doc["complete"] is False
        (point,) = doc["points"]
        assert point["interrupted"] is True and point["summary"]["requests"] > 10, err


def test_conversations_stay_on_one_remote_worker() -> None:
    # No namespaces: this one runs wherever processes can listen on loopback.
    with fixed_server(*SERVER) as url:
        hub = WorkerHub("127.0.0.1:0", 2, wait_s=60)
        hub.open()
        try:
            with workers(hub.address, [None, None]):
                job = LoadJob(
                    ClientSettings(url, "fixed"),
                    WorkloadSpec(isl=16, osl=20, calibrate=False, seed=5, turns=3),
                    LoadLevel.concurrency(4),
                    requests=36,
                    warmup=0,
                    workers=hub,
                )
                run = run_load_sync(job)
        finally:
            hub.close()
    assert all(r.ok for r in run.records), [r.error for r in run.records][:3]
    by_conv: dict[int, set[int]] = {}
    for r in run.records:
        by_conv.setdefault(r.session, set()).add(r.worker)
    assert sorted(by_conv) == list(range(12))
    assert all(len(w) == 1 for w in by_conv.values())
    assert {w for ws in by_conv.values() for w in ws} == {0, 1}
    assert sorted(r.index for r in run.records) == list(range(36))
