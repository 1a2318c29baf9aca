"""Faults on a running sim: a replica killed (its requests lost, the rest served by the
others), restarted after its cold start, stalled (no token for a while); the admin
endpoint that does them and the sim's own log of when a replica went down and came back."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from pytest_llmslo.sim.cluster import Topology
from pytest_llmslo.sim.profiles import PROFILES
from pytest_llmslo.sim.scheduler import SimRequest

try:
    from tests.sim.sim_helpers import MODEL, start_sim, wait_for
except ImportError:  # tests/ is not a package: pytest put tests/sim on sys.path
    from sim_helpers import MODEL, start_sim, wait_for  # type: ignore[no-redef]

VLLM = PROFILES["llama3-70b-fp8-4xh100-vllm"]
DYNAMO = PROFILES["llama3-70b-fp8-4xh100-dynamo-vllm"]


def _two_replicas():  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(VLLM, topology=Topology(replicas=2)).cluster()


def _run_until(cluster, until: float) -> list:  # type: ignore[no-untyped-def]
    emitted = []
    while (t := cluster.next_event_s()) is not None and t <= until:
        emitted.extend(cluster.advance(t).emitted)
    return emitted


def test_a_killed_replica_loses_its_requests_and_the_other_serves_the_new_ones() -> None:
    cluster = _two_replicas()
    reqs = [SimRequest(f"r{i}", 64, 8) for i in range(4)]
    for r in reqs:
        cluster.submit(r, 0.0)
    _run_until(cluster, 0.01)
    held = cluster.instances[0].scheduler
    on0 = {r.rid for r in (*held.running, *held.waiting)}
    name, lost = cluster.kill_replica("replica0", 0.02)
    assert name == "replica0" and {r.rid for r in lost} == on0 and len(on0) == 2
    assert cluster.replicas == 1 and [i.name for i in cluster] == ["replica1"]
    late = [SimRequest(f"l{i}", 64, 4) for i in range(2)]
    for r in late:
        cluster.submit(r, 0.03)
    done = {e.req.rid for e in _run_until(cluster, 60.0) if e.last}
    assert done == ({r.rid for r in reqs} - on0) | {"l0", "l1"}
    assert cluster.replica_log == [("replica0", "down", 0.02, "killed")]


def test_a_restarted_replica_serves_again_after_its_cold_start() -> None:
    cluster = _two_replicas()
    name, lost = cluster.restart_replica(None, 1.0, startup_s=0.5)
    assert name == "replica0" and lost == []
    assert cluster.replicas == 1 and cluster.replicas_planned == 2
    _run_until(cluster, 2.0)
    assert [e[:3] for e in cluster.replica_log] == [
        ("replica0", "down", 1.0),
        ("replica0", "up", 1.5),
    ]
    assert sorted(i.name for i in cluster) == ["replica0", "replica1"]


def test_killing_every_replica_refuses_new_requests() -> None:
    cluster = VLLM.cluster()
    cluster.kill_replica(None, 0.0)
    req = SimRequest("x", 64, 4)
    cluster.submit(req, 0.1)
    out = cluster.advance(1.0)
    assert [(r.rid, why) for r, why in out.lost] == [
        ("x", "no replica is serving: every one is down")
    ]


def test_a_stall_holds_the_tokens_for_its_duration() -> None:
    steady, stalled = VLLM.cluster(), VLLM.cluster()
    for c in (steady, stalled):
        c.submit(SimRequest("s", 64, 16), 0.0)
    _run_until(stalled, 0.0)
    stalled.stall_replica("0", 0.0, 0.5)
    t_steady = [e.at_s for e in _run_until(steady, 60.0)]
    t_stalled = [e.at_s for e in _run_until(stalled, 60.0)]
    assert len(t_steady) == len(t_stalled) == 16
    # Every token comes 0.5 s later than without the stall, none during it.
    assert all(b - a == pytest.approx(0.5) for a, b in zip(t_steady, t_stalled, strict=True))
    assert [e[1] for e in stalled.replica_log] == ["stalled", "resumed"]


def test_faults_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="no replica 'replica7' is serving; serving: replica0"):
        VLLM.cluster().kill_replica("replica7", 0.0)
    with pytest.raises(ValueError, match="only an aggregated sim"):
        DYNAMO.cluster().kill_replica(None, 0.0)
    with pytest.raises(ValueError, match="a stall lasts"):
        VLLM.cluster().stall_replica(None, 0.0, 0.0)


def _stream(url: str, max_tokens: int) -> httpx.Response:
    return httpx.post(
        url + "/v1/completions",
        json={"model": MODEL, "prompt": "hi " * 16, "max_tokens": max_tokens, "stream": True,
              "ignore_eos": True},
        timeout=30,
    )  # fmt: skip


def test_the_admin_endpoint_kills_restarts_and_logs_it(tmp_path: Path) -> None:
    with start_sim(tmp_path, "--replicas", "2") as sim:
        asked = time.time()
        r = httpx.post(
            sim.url + "/admin/fault",
            json={"kind": "restart", "replica": "replica1", "startup_s": 0.4},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["replica"] == "replica1" and answer["replicas"] == 1
        assert wait_for(
            lambda: len(httpx.get(sim.url + "/admin/events", timeout=10).json()["events"]) == 2
        )
        log = httpx.get(sim.url + "/admin/events", timeout=10).json()
        down, up = log["events"]
        assert (down["event"], up["event"]) == ("down", "up")
        assert abs(down["unix"] - asked) < 0.5
        assert up["unix"] - down["unix"] == pytest.approx(0.4, abs=0.05)
        assert log["replicas"] == 2
        assert "replica replica1 down at unix" in sim.log()
        bad = httpx.post(sim.url + "/admin/fault", json={"kind": "melt"}, timeout=10)
        assert bad.status_code == 400 and "kind: one of kill, restart, stall" in bad.text
        stalled = httpx.post(
            sim.url + "/admin/fault", json={"kind": "stall", "replica": 0, "for_s": 0.5}, timeout=10
        )
        assert stalled.status_code == 200 and stalled.json()["replica"] == "replica0"
        rows = httpx.get(sim.url + "/admin/events", timeout=10).json()["events"]
        stall = {e["event"]: e["unix"] for e in rows if e["replica"] == "replica0"}
        assert stall["resumed"] - stall["stalled"] == pytest.approx(0.5, abs=0.01)
        no_for = httpx.post(sim.url + "/admin/fault", json={"kind": "stall"}, timeout=10)
        assert no_for.status_code == 400 and "for_s: required" in no_for.text
        gone = httpx.post(sim.url + "/admin/fault", json={"kind": "kill", "replica": 9}, timeout=10)
        assert gone.status_code == 400 and "no replica '9' is serving" in gone.text


def test_a_kill_closes_the_streams_on_that_replica(tmp_path: Path) -> None:
    import threading

    with start_sim(tmp_path) as sim:
        got: list[BaseException | httpx.Response] = []

        def one() -> None:
            try:
                got.append(_stream(sim.url, 2000))
            except httpx.HTTPError as exc:
                got.append(exc)

        t = threading.Thread(target=one)
        t.start()
        time.sleep(0.5)
        r = httpx.post(sim.url + "/admin/fault", json={"kind": "kill"}, timeout=10)
        assert r.status_code == 200 and r.json()["lost"] == 1
        t.join(30)
        assert len(got) == 1
        outcome = got[0]
        # The stream ends without its [DONE]: the connection was closed mid-way.
        assert isinstance(outcome, httpx.HTTPError) or "[DONE]" not in outcome.text
        refused = _stream(sim.url, 4)
        assert "no replica is serving" in refused.text


def test_a_kill_loses_the_requests_whose_last_token_was_in_the_step_in_progress() -> None:
    cluster = VLLM.cluster()
    reqs = [SimRequest(f"r{i}", 64, 1) for i in range(2)]
    for r in reqs:
        cluster.submit(r, 0.0)
    cluster.advance(0.0)  # routed; their one-token step is in progress
    (inst,) = list(cluster)
    assert inst.step is not None and not inst.scheduler.running  # they finish in it
    _name, lost = cluster.kill_replica(None, 0.001)
    assert sorted(r.rid for r in lost) == ["r0", "r1"]
    assert cluster.advance(10.0).emitted == []
