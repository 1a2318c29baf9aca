"""Capacity added to a running sim: a replica that comes up after its cold start and takes
its share of new requests (on the simulated clock), the admin endpoint and the log line of
its coming up, and a scale-up through the plugin measured against that log."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import httpx
import pytest

from pytest_llmslo.sim.profiles import PROFILES
from pytest_llmslo.sim.scheduler import SimRequest

try:
    from tests.sim.sim_helpers import start_sim, wait_for
except ImportError:  # tests/ is not a package: pytest put tests/sim on sys.path
    from sim_helpers import start_sim, wait_for  # type: ignore[no-redef]

VLLM = PROFILES["llama3-70b-fp8-4xh100-vllm"]
DYNAMO = PROFILES["llama3-70b-fp8-4xh100-dynamo-vllm"]
UP = re.compile(r"replica (\w+) up at unix ([0-9.]+); (\d+) replicas serving")


def test_a_replica_comes_up_after_its_cold_start_and_takes_new_requests() -> None:
    cluster = VLLM.cluster()
    assert cluster.replicas == 1
    assert cluster.add_replica(1.0, startup_s=0.5) == "replica1"
    assert cluster.replicas == 1 and cluster.replicas_planned == 2
    early = [SimRequest(f"e{i}", 64, 4) for i in range(4)]
    for r in early:
        cluster.submit(r, 1.2)  # before it is up: all on replica0
    while (t := cluster.next_event_s()) is not None and t < 1.5:
        cluster.advance(t)
    assert cluster.replicas_up == []  # not before its cold start is over
    late = [SimRequest(f"l{i}", 64, 4) for i in range(4)]
    for r in late:
        cluster.submit(r, 2.0)
    placed = {}
    while (t := cluster.next_event_s()) is not None and t < 2.001:
        cluster.advance(t)
    for inst in cluster:
        placed[inst.name] = {r.rid for r in (*inst.scheduler.running, *inst.scheduler.waiting)}
    assert cluster.replicas_up == [("replica1", 1.5)]
    assert cluster.replicas == 2
    # Round robin over both replicas from then on, the new one first; the requests that
    # came before it stayed where they were.
    assert placed["replica1"] == {"l0", "l2"}


def test_a_disaggregated_sim_adds_no_replica() -> None:
    with pytest.raises(ValueError, match="only an aggregated sim adds replicas"):
        DYNAMO.cluster().add_replica(0.0)


def test_the_admin_endpoint_adds_and_the_log_says_when_it_came_up(tmp_path: Path) -> None:
    with start_sim(tmp_path) as sim:
        r = httpx.post(sim.url + "/admin/replicas", json={"add": 1, "startup_s": 0.3}, timeout=10)
        assert r.status_code == 200
        answer = r.json()
        assert answer["replicas"] == 1 and answer["adding"] == ["replica1"]
        assert wait_for(lambda: UP.search(sim.log()) is not None, timeout=10)
        name, unix, serving = UP.search(sim.log()).groups()  # type: ignore[union-attr]
        assert name == "replica1" and serving == "2"
        assert 0.25 <= float(unix) - answer["asked_unix"] <= 1.0
        again = httpx.post(sim.url + "/admin/replicas", json={"replicas": 2}, timeout=10)
        assert again.status_code == 400
        assert "nothing to add: 2 replicas serve or are coming up" in again.text
        bad = httpx.post(sim.url + "/admin/replicas", json={"startup_s": -1}, timeout=10)
        assert bad.status_code == 400 and "startup_s" in bad.text


SUITE = """
import re
import pytest

UP = re.compile(r"replica (\\w+) up at unix ([0-9.]+); (\\d+) replicas serving")

@pytest.mark.slo(concurrency=[8], duration=10, requests=None, objectives="ttft_p99 < 600",
                 scale_up="at=3s,startup_s=1")
def test_grows(slo_run, slo_engine):
    record = slo_run.meta["scale_up"]
    found = UP.search(slo_engine.log_tail(200))
    assert found, slo_engine.log_tail(200)
    came_up = float(found.group(2)) - record["asked_unix"]  # the sim's own account
    assert 0.9 <= came_up <= 1.6, (came_up, record)
    # Bins of one second: the new capacity shows at most two seconds after it came up
    # (the second it came up in, and the one in which the queue it found drained).
    assert came_up - 1.0 <= record["capacity_s"] <= came_up + 2.0, (came_up, record)
    assert record["after_tok_s"] > 1.4 * record["before_tok_s"], record
    print("SCALE", came_up, record["capacity_s"])
"""


ENGINES = """
[engines.sim4]
kind = "sim"
extra_args = ["--max-num-seqs", "4"]
"""


@pytest.mark.slow
def test_a_scale_up_through_the_plugin_is_timed_against_the_sims_log(
    slo_pytester: pytest.Pytester,
) -> None:
    # One replica runs 4 requests at a time (--max-num-seqs 4): at concurrency 8 half the
    # requests queue and miss the TTFT objective; a second replica serves all 8 at once.
    slo_pytester.makefile(".toml", engines=ENGINES)
    slo_pytester.makepyfile(test_grow=SUITE)
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--engine-config=engines.toml", "--engine=sim4",
        "--warmup=4", "--isl=32", "--osl=16", "--slo-retries=0", "-s",
        "--client-max-lag=2000", "--client-max-cpu=1.5", "--client-min-load=0.5",
        "--slo-json=out.json", "--junitxml=out.xml", "-v",
        timeout=180,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*scale-up at 3s (one replica more): asked at *"])
    doc = json.loads((slo_pytester.path / "out.json").read_text())
    scale = doc["points"][0]["scale_up"]
    assert scale["done"]["how"] == "POST /admin/replicas"
    assert scale["capacity_s"] is not None and scale["shows_at_s"] >= 3
    root = ET.parse(slo_pytester.path / "out.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert float(props["llmslo.scale_up.capacity_s"]) == scale["capacity_s"]
    assert props["llmslo.scale_up.at"] == "3s"
