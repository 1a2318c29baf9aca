"""Baseline comparisons in a session: capacity tests, per-engine constants, what JUnit and
the terminal say about a comparison, interrupted sessions and their baselines."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_llmslo import cli

CHAT = """
import pytest
from pytest_llmslo import assert_goodput, ttft_p50

@pytest.mark.slo(concurrency=[1])
def test_chat(slo_run):
    assert_goodput(ttft_p50 < 500)
"""

CAPACITY = """
import pytest
from pytest_llmslo import ttft_p99

@pytest.mark.slo(ttft_p99 < 500, concurrency=[1])
def test_chat(slo_run):
    pass
"""


def _props(path: Path, name: str) -> dict[str, str]:
    root = ET.parse(path).getroot()
    case = next(c for c in root.iter("testcase") if c.get("name") == name)
    return {p.get("name"): p.get("value") for p in case.iter("property")}


def _baseline(pytester: pytest.Pytester, name: str = "base") -> Path:
    return pytester.path / ".llmslo" / "baselines" / f"{name}.json"


def _edit(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.slow
def test_capacity_is_compared_with_the_baselines_capacity(
    slo_pytester: pytest.Pytester, tiny_args, capsys: pytest.CaptureFixture[str]
) -> None:
    slo_pytester.makepyfile(test_cap=CAPACITY)
    cap = ("--slo-capacity", "--slo-capacity-max=8")
    result = slo_pytester.runpytest_subprocess(
        *tiny_args(*cap, "--slo-save=base", "--slo-json=r.json")
    )
    result.assert_outcomes(passed=1)
    # The search is in the document and in `llmslo report`.
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    (sweep,) = doc["sweeps"]
    assert sweep["capacity"]["capacity"]["value"] == 8.0
    assert [h["level"]["value"] for h in sweep["capacity"]["history"]] == [1.0, 2.0, 4.0, 8.0]
    assert sweep["capacity"]["reason"].startswith("every level passed up to max_value")
    assert cli.main(["report", str(slo_pytester.path / "r.json"), "--width", "100"]) == 0
    assert "capacity: c8 (no level failed: at least that), 4 levels" in capsys.readouterr().out
    result.stdout.fnmatch_lines(["*capacity: c8 (no level failed: at least that), 4 levels*"])

    # The same capacity: compared, by the capacity and by the points at c8.
    same = tiny_args(*cap, "--slo-compare=base", "--slo-compare-fail=ttft_p50:1000%")
    result = slo_pytester.runpytest_subprocess(*same, "--junitxml=x.xml")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*comparison with baseline base*", "external test_cap.py::test_chat capacity: ok"]
    )
    assert "not compared" not in result.stdout.str()
    props = _props(slo_pytester.path / "x.xml", "test_chat[external-capacity]")
    assert props["llmslo.compare.status"] == "unchanged"
    assert props["llmslo.compare.capacity.old"] == props["llmslo.compare.capacity.new"] == "8"
    assert props["llmslo.compare.ttft_p50.status"] in ("within tolerance", "noise")

    # Capacity c8 -> c6: beyond the default 15 %, the test fails with old vs new.
    lower = tiny_args("--slo-capacity", "--slo-capacity-max=6", "--slo-compare=base")
    result = slo_pytester.runpytest_subprocess(*lower, "--junitxml=y.xml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*RegressionError: regression against baseline base (external, capacity):*",
            "*capacity*8*6*-2*-25.0%*15%*REGRESSED*",
        ]
    )
    props = _props(slo_pytester.path / "y.xml", "test_chat[external-capacity]")
    assert props["llmslo.compare.status"] == "regressed"
    assert props["llmslo.compare.capacity.status"] == "regressed"
    assert props["llmslo.regressed"] == "true"


@pytest.mark.slow
def test_capacity_test_without_a_search_in_the_baseline_is_not_compared(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(test_cap=CAPACITY)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-save=base"))
    result.assert_outcomes(passed=1)
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--slo-capacity", "--slo-capacity-max=2", "--slo-compare=base")
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*capacity: the baseline base has no capacity search of this test*"]
    )


@pytest.mark.slow
def test_engine_gpus_pin_a_comparison_the_client_machine_does_not(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(test_cmp=CHAT)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-save=base", "--slo-json=r.json"))
    result.assert_outcomes(passed=1)
    consts = json.loads((slo_pytester.path / "r.json").read_text())["constants"]
    mine = consts["per_engine"]["external"]
    assert isinstance(mine["hardware"]["gpus"], list)  # a loopback engine: this machine's
    assert set(mine) == {"model", "precision", "hardware"}
    assert consts["client"]["cpus"] == os.cpu_count()
    base = _baseline(slo_pytester)

    # Another client machine: compared.
    def other_client(doc: dict[str, Any]) -> None:
        doc["constants"]["client"].update(cpus=4096, machine="arm64")

    _edit(base, other_client)
    args = tiny_args("--slo-compare=base", "--slo-compare-fail=ttft_p50:1000%", "--junitxml=x.xml")
    result = slo_pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["external test_cmp.py::test_chat c1: ok"])
    props = _props(slo_pytester.path / "x.xml", "test_chat[external-c1]")
    assert props["llmslo.compare.status"] == "unchanged"
    assert props["llmslo.baseline"] == "base"
    assert "llmslo.compare.ttft_p50.old" in props

    # Other GPUs: not compared, and the test case and its report section say why.
    def other_gpus(doc: dict[str, Any]) -> None:
        doc["constants"]["per_engine"]["external"]["hardware"]["gpus"] = ["Test GPU, 1 MiB"]

    _edit(base, other_gpus)
    result = slo_pytester.runpytest_subprocess(*args, "-rA")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*not compared with baseline base: constants differ: hardware.gpus: *Test GPU*",
            "*c1: not compared, constants differ: hardware.gpus*",
        ]
    )
    props = _props(slo_pytester.path / "x.xml", "test_chat[external-c1]")
    assert props["llmslo.compare.status"] == "not_compared"
    assert props["llmslo.compare.reason"].startswith("constants differ: hardware.gpus: ")
    root = ET.parse(slo_pytester.path / "x.xml").getroot()
    out = next(root.iter("system-out")).text or ""
    assert "not compared with baseline base: constants differ: hardware.gpus" in out


@pytest.mark.slow
def test_one_engine_compares_with_a_baseline_of_two(
    slo_pytester: pytest.Pytester, fixed_server: str, slow_fixed_server: str
) -> None:
    """Model and precision are each engine's: joined over two engines they would never
    match a run of one."""
    slo_pytester.makefile(
        ".toml",
        engines=f"""
        [engines.fast]
        kind = "external"
        url = "{fixed_server}"
        dtype = "bfloat16"

        [engines.slow]
        kind = "external"
        url = "{slow_fixed_server}"
        dtype = "float16"
        """,
    )
    slo_pytester.makepyfile(test_cmp=CHAT)
    common = [
        "-p", "no:cacheprovider", "--engine-config=engines.toml", "--warmup=1",
        "--requests=12", "--isl=16", "--osl=8", "--client-max-lag=2000",
        "--client-max-cpu=1.5",
    ]  # fmt: skip
    result = slo_pytester.runpytest_subprocess(*common, "--engine=fast,slow", "--slo-save=both")
    result.assert_outcomes(passed=2)
    per_engine = json.loads(_baseline(slo_pytester, "both").read_text())["constants"]["per_engine"]
    assert per_engine["fast"]["precision"] == "bfloat16"
    assert per_engine["slow"]["precision"] == "float16"
    result = slo_pytester.runpytest_subprocess(
        *common, "--engine=fast", "--slo-compare=both", "--slo-compare-fail=ttft_p50:1000%"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["fast test_cmp.py::test_chat c1: ok"])
    assert "not compared" not in result.stdout.str()


@pytest.mark.slow
def test_an_interrupted_session_keeps_the_baseline(
    slo_pytester: pytest.Pytester, tiny_args
) -> None:
    slo_pytester.makepyfile(test_cmp=CHAT)
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-save=base"))
    result.assert_outcomes(passed=1)
    before = _baseline(slo_pytester).read_bytes()
    slo_pytester.makepyfile(
        test_cmp="""
        import pytest

        @pytest.mark.slo(concurrency=[1, 2])
        def test_chat(slo_run, slo_level):
            if slo_level.value == 2:
                raise KeyboardInterrupt
        """
    )
    result = slo_pytester.runpytest_subprocess(*tiny_args("--slo-save=base"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert _baseline(slo_pytester).read_bytes() == before
    partial = _baseline(slo_pytester, "base.partial")
    assert json.loads(partial.read_text())["complete"] is False
    result.stdout.fnmatch_lines(
        [
            "llmslo: the session was interrupted: baseline 'base' was left as it was; the "
            f"partial results are saved as 'base.partial' in {partial}"
        ]
    )
    slo_pytester.makepyfile(test_cmp=CHAT)
    result = slo_pytester.runpytest_subprocess(
        *tiny_args("--slo-compare=base.partial", "--slo-compare-fail=ttft_p50:1000%")
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["llmslo: warning: baseline 'base.partial' is incomplete (its session was interrupted)*"]
    )


def _sim_finished(url: str) -> float:
    """The requests the sim engine has finished (its Prometheus counter)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


@pytest.mark.slow
def test_ctrl_c_during_a_load_keeps_the_partial_point_and_stops_the_engine(
    slo_pytester: pytest.Pytester,
) -> None:
    """SIGINT to a real session while the sim engine (started by the plugin) serves a long
    level: the measured requests are kept as an interrupted point of a partial document,
    and no engine process or port is left."""
    import signal
    import socket
    import subprocess
    import sys
    import threading
    import time

    slo_pytester.makepyfile(
        test_long="""
        import pytest

        @pytest.mark.slo(concurrency=[2])
        def test_chat(slo_run):
            pass
        """
    )
    argv = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--engine=sim",
        "--sim-profile=llama3-8b-fp8-1xh100-vllm", "--warmup=1", "--requests=3000",
        "--duration=60", "--isl=64", "--osl=8", "--client-max-lag=2000",
        "--client-max-cpu=1.5", "--slo-json=out.json",
    ]  # fmt: skip
    proc = slo_pytester.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    ready = threading.Event()
    urls: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"llmslo: engine sim ready at (http://\S+)", line)
            if m:
                urls.append(m.group(1))
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(60), "".join(lines)
        # Signalled once the sim has finished the warm-up request and a few measured ones
        # (its own counter), not after a guessed sleep.
        deadline = time.monotonic() + 60
        while _sim_finished(urls[0]) < 6:
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == pytest.ExitCode.INTERRUPTED, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    reader.join(timeout=10)
    doc = json.loads((slo_pytester.path / "out.json").read_text())
    assert doc["complete"] is False
    (point,) = doc["points"]
    assert point["interrupted"] is True
    assert point["level"]["value"] == 2.0
    assert 0 < point["summary"]["requests"] < 3000
    meta = doc["engines"]["sim"]["metadata"]
    (unit,) = meta["units"]
    with pytest.raises(ProcessLookupError):
        os.kill(unit["pid"], 0)
    port = int(meta["base_url"].rsplit(":", 1)[1])
    with socket.socket() as s:
        s.settimeout(2.0)
        assert s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow  # three pytest sessions in subprocesses (about a minute)
def test_every_session_is_kept_and_compare_latest_gates_the_next(
    slo_pytester: pytest.Pytester, tiny_args, slow_fixed_server: str
) -> None:
    slo_pytester.makepyfile(test_chat=CHAT)
    first = slo_pytester.runpytest_subprocess(*tiny_args())
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*kept in the run history*"])
    runs = sorted((slo_pytester.path / ".llmslo" / "runs").glob("*.json"))
    assert len(runs) == 1
    record = json.loads(runs[0].read_text())["run"]
    assert record["id"] == runs[0].stem and "external" in record["engines"]

    slow = slo_pytester.runpytest_subprocess(
        *tiny_args("--slo-compare=latest", "--slo-compare-fail=ttft_p50:20%", url=slow_fixed_server)
    )
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines([f"*regression against baseline latest (run {runs[0].stem})*"])
    assert len(list((slo_pytester.path / ".llmslo" / "runs").glob("*.json"))) == 2

    off = slo_pytester.runpytest_subprocess(*tiny_args("--slo-history=none"))
    off.assert_outcomes(passed=1)
    assert len(list((slo_pytester.path / ".llmslo" / "runs").glob("*.json"))) == 2
