"""Faults through the plugin on the sim as a process: each done when asked, the records
around it right (the requests failed are those the sim lost), the recovery measured
against the sim's own log of when its replica was back; assert_recovery's messages; a
drop through the proxy; a fault that cannot be done is recorded, not raised."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

ENGINES = """
[engines.sim2]
kind = "sim"
extra_args = ["--replicas", "2", "--max-num-seqs", "4"]
"""

ARGS = (
    "-p", "no:cacheprovider", "--engine-config=engines.toml", "--engine=sim2",
    "--warmup=4", "--isl=32", "--osl=16", "--slo-retries=0", "-s",
    "--client-max-lag=2000", "--client-max-cpu=1.5", "--client-min-load=0.5",
    "--slo-json=out.json",
)  # fmt: skip

RESTART = """
import httpx
import pytest
from pytest_llmslo import assert_recovery

# Two replicas of 4 requests at a time each: at concurrency 8 one replica alone queues half
# the requests past the TTFT objective, so goodput and the objective are back only when the
# restarted replica serves again.
@pytest.mark.slo(concurrency=[8], duration=10, requests=None, objectives="ttft_p99 < 600",
                 fault="restart at=3s,replica=replica1,startup_s=1.5")
def test_restart(slo_run, slo_engine):
    (fault,) = slo_run.meta["faults"]
    events = httpx.get(slo_engine.base_url + "/admin/events", timeout=10).json()["events"]
    print("FAULT", fault)
    print("EVENTS", events)
    down = [e for e in events if e["event"] == "down"][-1]
    up = [e for e in events if e["event"] == "up" and e["unix"] > down["unix"]][0]
    # The sim went down when asked, and the client lost exactly the requests it lost.
    assert 0 <= down["unix"] - fault["asked_unix"] < 0.5, (down, fault)
    assert fault["failed"] == fault["done"]["answer"]["lost"] > 0, fault
    back_s = up["unix"] - fault["asked_unix"]  # the sim's account: 1.5 s
    assert 1.4 <= back_s <= 2.0, back_s
    # One-second bins, and the queue the replica found: recovered at most 2 s after the
    # sim had it back, and not before (less one bin).
    assert back_s - 1.0 <= fault["recovery_s"], (back_s, fault)
    assert_recovery(max_recovery_s=back_s + 2.0, max_failed=fault["done"]["answer"]["lost"])
    assert fault["goodput_dip"] > 0.3, fault
    series = slo_run.meta["series"]
    assert sum(series["errors"]) == fault["failed_total"] == fault["failed"]
"""


@pytest.mark.slow
def test_a_restart_is_timed_against_the_sims_log(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makefile(".toml", engines=ENGINES)
    slo_pytester.makepyfile(test_restart=RESTART)
    result = slo_pytester.runpytest_subprocess(*ARGS, "--junitxml=out.xml", timeout=180)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*restart at 3s (replica1): done at 3.* s; * request(s) failed; goodput *"]
    )
    doc = json.loads((slo_pytester.path / "out.json").read_text())
    (point,) = doc["points"]
    (fault,) = point["faults"]
    assert fault["done"]["how"] == "POST /admin/fault"
    assert fault["recovery_s"] is not None and fault["asked"]["kind"] == "restart"
    assert len(point["series"]["goodput_tok_s"]) == len(point["series"]["seconds"]) >= 10
    root = ET.parse(slo_pytester.path / "out.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert float(props["llmslo.fault.0.recovery_s"]) == fault["recovery_s"]
    assert props["llmslo.fault.0.kind"] == "restart" and props["llmslo.fault.0.at"] == "3s"


MESSAGES = """
import pytest
from pytest_llmslo import assert_recovery

@pytest.mark.slo(concurrency=[8], duration=9, requests=None, objectives="ttft_p99 < 600",
                 fault="restart at=2s,replica=replica0,startup_s=1")
def test_too_slow(slo_run):
    assert_recovery(max_recovery_s=0.5, max_failed=0)

@pytest.mark.slo(concurrency=[8], duration=7, requests=None, objectives="ttft_p99 < 600",
                 fault="restart at=2s,replica=replica0,startup_s=0")
def test_in_time(slo_run):
    verdict = assert_recovery(max_recovery_s=4, max_failed=8)
    print("PASSED", verdict.format())
"""


@pytest.mark.slow
def test_assert_recovery_names_each_bound_with_the_measured_numbers(
    slo_pytester: pytest.Pytester,
) -> None:
    slo_pytester.makefile(".toml", engines=ENGINES)
    slo_pytester.makepyfile(test_messages=MESSAGES)
    result = slo_pytester.runpytest_subprocess(*ARGS, timeout=180)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*SloViolation: recovery objectives missed: restart at 2s (replica0): recovered "
            "in *.* s, more than 0.5 s, * requests failed, more than 0",
            "*restart at 2s (replica0): recovered in *.* s (max 0.5 s); * request(s) failed "
            "(max 0) -> FAIL: *",
        ]
    )
    passed = "*PASSED   restart at 2s (replica0): recovered in *.* s (max 4 s); * request(s) "
    result.stdout.fnmatch_lines([passed + "failed (max 8) -> pass"])


DROP_AND_EXTERNAL = """
import pytest
from pytest_llmslo import assert_recovery

@pytest.mark.slo(concurrency=[4], duration=9, requests=None, fault="drop at=3s,for=1s")
def test_drop(slo_run):
    (fault,) = slo_run.meta["faults"]
    print("DROP", fault)
    cut = fault["done"]["cut_open"]
    assert fault["done"]["how"] == "proxy drop" and cut >= 1
    # Every stream open at the drop was cut; new connections too while it lasted.
    assert fault["failed"] >= cut, fault
    assert_recovery(max_recovery_s=4)
    print("DROP RECOVERED", fault["recovery_s"])

@pytest.mark.slo(concurrency=[2], duration=4, requests=None, fault="kill at=1s")
def test_cannot(slo_run):
    (fault,) = slo_run.meta["faults"]
    print("CANNOT", fault)
    assert "was not started here" in fault["error"], fault
    with pytest.raises(AssertionError, match="not done: ConfigError"):
        assert_recovery(max_recovery_s=4)
"""


@pytest.mark.slow
def test_a_drop_through_the_proxy_and_a_fault_that_cannot_be_done(
    slo_pytester: pytest.Pytester, fixed_server: str
) -> None:
    slo_pytester.makefile(".toml", engines=ENGINES)
    slo_pytester.makepyfile(test_proxyfaults=DROP_AND_EXTERNAL)
    # The drop on the engine the harness starts; the kill on an external engine that is
    # no sim (the fixed-timing server): nothing here can kill it.
    first = slo_pytester.runpytest_subprocess(*ARGS, "-k", "drop", timeout=180)
    first.assert_outcomes(passed=1)
    ext = [a for a in ARGS if not a.startswith("--engine")]
    second = slo_pytester.runpytest_subprocess(
        *ext, "--engine=external", f"--engine-url={fixed_server}", "-k", "cannot", timeout=180
    )
    second.assert_outcomes(passed=1)


STEADY = """
import pytest

# As RESTART: while replica1 restarts, half the requests queue past 600 ms. The body
# asserts nothing: the configured objective judges the level's steady part.
@pytest.mark.slo(concurrency=[8], duration=10, requests=None, objectives="ttft_p99 < 600",
                 fault="restart at=3s,replica=replica1,startup_s=1.5")
def test_steady(slo_run):
    pass
"""


@pytest.mark.slow
def test_a_fault_levels_slo_is_judged_over_its_steady_part(slo_pytester: pytest.Pytester) -> None:
    slo_pytester.makefile(".toml", engines=ENGINES)
    slo_pytester.makepyfile(test_steady=STEADY)
    result = slo_pytester.runpytest_subprocess(*ARGS, timeout=180)
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*no SLO judged*")
    (point,) = json.loads((slo_pytester.path / "out.json").read_text())["points"]
    (fault,) = point["faults"]
    assert fault["recovered_at_s"] is not None, fault
    (judged,) = point["verdict"]["results"]
    note = next(n for n in point["notes"] if n.startswith("a fault level:"))
    steady, impact = (int(w) for w in re.findall(r"the (\d+) ", note))
    # The objective judged the steady part alone, and the report says how many each judged.
    assert judged["count"] == steady and steady + impact == point["summary"]["requests"]
    assert impact > 0 and judged["passed"] is True
    assert point["judged"]["outcome"] == "pass"
    assert f"({fault['asked_s']:.1f} s to {float(fault['recovered_at_s']):.1f} s)" in note
