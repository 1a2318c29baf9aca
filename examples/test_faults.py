"""A replica dies in the middle of the load: does the cluster recover, and what did it cost?

The engine is a sim cluster of two replicas (engines.toml: sim-cluster). Four seconds into
the level one replica is killed: the requests it was serving fail (their streams are cut),
the frontend sends the new ones to the other replica. The test asserts the recovery:
goodput back to 80 % of its level before the kill (one replica alone runs twice the
batch, each step a little slower: it gives about 88 % of what two gave), no error and the
TTFT objective met, for 3 s in a row, within 5 s of the kill, and at most 8 requests lost
(the concurrency: all a replica could hold). The marker's TTFT objective judges the
level's steady part, the requests that ran outside the kill's impact window (from the kill
to the recovery): the report says how many each verdict judged (docs/faults.md). The
level's JSON point holds the per-second series and the fault's record; the sim's own log
of the kill is at GET /admin/events."""

import httpx
import pytest

from pytest_llmslo import assert_recovery, ttft_p99


@pytest.mark.slo(
    ttft_p99 < 1000,
    engines=["sim-cluster"],
    concurrency=[8],
    isl=256,
    osl=64,
    warmup=8,
    requests=None,
    duration=12,
    fault="kill at=4s,share=80%",
)
def test_a_replica_dies(slo_run, slo_engine):
    verdict = assert_recovery(max_recovery_s=5, max_failed=8)
    (fault,) = slo_run.meta["faults"]
    # The sim's own account: the replica it killed, at the time the harness asked.
    events = httpx.get(slo_engine.base_url + "/admin/events", timeout=10).json()["events"]
    down = [e for e in events if e["event"] == "down"]
    assert down and down[-1]["replica"] == fault["done"]["answer"]["replica"]
    assert abs(down[-1]["unix"] - fault["asked_unix"]) < 1.0
    print(verdict.format())
