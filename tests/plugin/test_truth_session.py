"""A session tells the truth about what it measured and keeps it: SIGTERM and SIGINT, once
or twice, in every phase (startup, readiness, load, reports) and with a process engine
(the sim) and an external one; the target that ``--engine-url`` names.

Every signal is sent at a known phase, found by a marker (a line of the output, a request
count on the server, a file the session writes), never after a fixed sleep. Sessions run in
a subprocess through a driver (``DRIVER``) that runs pytest or ``llmslo run`` and, asked to
(``HOLD_DOCUMENT``), holds the writing of the results document until the test lets it go:
the only way to land a signal inside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DRIVER = r"""
import os, sys, time
from pathlib import Path

hold = os.environ.get("HOLD_DOCUMENT")
if hold:
    from pytest_llmslo import session

    document = session.Session.document
    held = []

    def holding(self, *, complete):
        if not held and complete == (hold == "complete"):
            held.append(1)
            Path("holding").write_text("")
            while not Path("go").exists():
                time.sleep(0.02)
        return document(self, complete=complete)

    session.Session.document = holding

if sys.argv[1] == "pytest":
    import pytest

    sys.exit(int(pytest.main(sys.argv[2:])))
from pytest_llmslo import cli

sys.exit(cli.main(sys.argv[2:]))
"""

TEST = """
import pytest

@pytest.mark.slo(concurrency=[2])
def test_chat(slo_run):
    pass
"""

INTERRUPTED = {"pytest": int(pytest.ExitCode.INTERRUPTED), "cli": 130}


class SilentServer:
    """Accepts connections and never answers: an endpoint that never becomes ready.
    ``accepted`` counts the connections (the readiness probe has reached it)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted = 0
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted += 1

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


class Session:
    """A session in a subprocess, its output collected line by line."""

    def __init__(self, path: Path, runner: str, argv: list[str], hold: str | None) -> None:
        self.path = path
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("HOLD_DOCUMENT", None)
        if hold:
            env["HOLD_DOCUMENT"] = hold
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, runner, *argv],
            cwd=path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.proc.poll() is not None:
                self._reader.join(5)
                raise AssertionError(f"the session ended before {what}:\n{self.output}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} in {timeout:g} s:\n{self.output}")
            time.sleep(0.05)

    def line(self, pattern: str) -> re.Match[str] | None:
        for text in self.lines:
            m = re.search(pattern, text)
            if m:
                return m
        return None

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 120.0) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
        self._reader.join(10)
        return code


def _fixed_requests(url: str) -> int:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as r:
        return int(json.load(r)["requests"])


def _sim_finished(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def _processes_in(path: Path) -> list[int]:
    """Processes whose working directory is ``path`` (an engine the session left behind),
    but this one (pytester works in ``path``)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) == path:
                out.append(int(entry.name))
        except OSError:
            continue
    return out


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str  # "external" or "sim"
    phase: str  # "startup", "readiness", "load", "reports", "shutdown"
    signals: tuple[signal.Signals, ...]

    @property
    def id(self) -> str:
        names = "+".join(s.name.removeprefix("SIG").lower() for s in self.signals)
        return f"{self.kind}-{self.phase}-{names}"


TERM, INT = signal.SIGTERM, signal.SIGINT
CASES = [
    # An external engine that never becomes ready: today SIGTERM kills the session (143).
    Case("external", "readiness", (TERM,)),
    Case("external", "readiness", (INT, TERM)),
    Case("external", "load", (TERM,)),
    Case("external", "load", (INT, TERM)),
    # The second signal lands while the results document is being written.
    Case("external", "shutdown", (TERM, TERM)),
    Case("external", "reports", (INT,)),
    Case("sim", "startup", (TERM,)),
    Case("sim", "startup", (TERM, INT)),
    Case("sim", "load", (INT,)),
    Case("sim", "shutdown", (INT, INT)),
    Case("sim", "reports", (TERM,)),
]


def _argv(runner: str, case: Case, url: str | None) -> list[str]:
    long_level = case.phase in ("load", "shutdown")
    common = [
        "--concurrency=2", "--warmup=1", "--isl=16", "--osl=16",
        f"--requests={100000 if long_level else 6}", f"--duration={60 if long_level else 0}",
        "--client-max-lag=2000", "--client-max-cpu=1.5",
        "--slo-json=r.json", "--slo-save=base",
    ]  # fmt: skip
    if case.kind == "sim":
        common.append("--engine=sim")
    else:
        common.append(f"--engine-url={url}")
    if runner == "pytest":
        return ["-p", "no:cacheprovider", "-s", "-v", *common]
    return ["run", *common]


# About 20 s a case, 22 cases: behind the slow marker, which CI runs as a step of its own.
@pytest.mark.slow
@pytest.mark.parametrize("runner", ["pytest", "cli"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_signal_in_any_phase_keeps_what_was_measured(
    slo_pytester: pytest.Pytester, fixed_server: str, silent: SilentServer, runner: str, case: Case
) -> None:
    path = slo_pytester.path
    slo_pytester.makepyfile(test_chat=TEST)
    baselines = path / ".llmslo" / "baselines"
    baselines.mkdir(parents=True)
    (baselines / "base.json").write_text('{"sentinel": "the baseline of before"}')
    url = silent.url if case.phase == "readiness" else fixed_server
    hold = {"reports": "complete", "shutdown": "partial"}.get(case.phase)
    before = _fixed_requests(fixed_server)
    run = Session(path, runner, _argv(runner, case, url), hold)
    first, *more = case.signals
    try:
        if case.phase == "readiness":
            run.wait_for("readiness probe", lambda: silent.accepted > 0)
        elif case.phase == "startup":
            run.wait_for("engine start", lambda: run.line("starting engine sim") is not None)
            assert run.line("ready at") is None, run.output
        elif case.phase in ("load", "shutdown") and case.kind == "external":
            run.wait_for("load", lambda: _fixed_requests(fixed_server) - before >= 20)
        elif case.phase in ("load", "shutdown"):
            run.wait_for("engine", lambda: run.line(r"ready at (http://\S+)") is not None)
            sim = run.line(r"ready at (http://\S+)")
            assert sim is not None
            run.wait_for("load", lambda: _sim_finished(sim.group(1)) >= 10)
        else:
            run.wait_for("the results document", lambda: (path / "holding").exists())
        run.signal(first)
        if case.phase == "shutdown":
            run.wait_for("the results document", lambda: (path / "holding").exists())
        for sig in more:
            run.signal(sig)
        if hold:
            (path / "go").write_text("")
        code = run.finish()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
    out = run.output
    assert code == INTERRUPTED[runner], out
    assert "Traceback" not in out, out
    doc = json.loads((path / "r.json").read_text())
    assert doc["complete"] is False, out
    points = doc["points"]
    if case.phase in ("startup", "readiness"):
        assert points == [], out
    elif case.phase == "reports":
        (point,) = points
        assert point["interrupted"] is False and point["summary"]["requests"] == 6
    else:
        (point,) = points
        assert point["interrupted"] is True and point["summary"]["requests"] > 0, out
    # A partial run never replaces the baseline; what it measured is kept beside it.
    assert json.loads((baselines / "base.json").read_text()) == {
        "sentinel": "the baseline of before"
    }
    assert (baselines / "base.partial.json").exists() == bool(points), out
    assert _processes_in(path) == [], "an engine process was left running"


# --------------------------------------------------------------------------- the target


def test_an_engine_url_alone_measures_that_url(
    slo_pytester: pytest.Pytester, fixed_server: str
) -> None:
    """Today the URL is ignored without --engine=external: the built-in sim is measured."""
    slo_pytester.makepyfile(test_chat=TEST)
    before = _fixed_requests(fixed_server)
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--engine-url={fixed_server}", "--warmup=1",
        "--requests=6", "--isl=16", "--osl=8", "--client-max-lag=2000",
        "--client-max-cpu=1.5", "--slo-json=r.json", "-v",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    # The header and the test's line name the URL that was measured.
    result.stdout.fnmatch_lines(
        [
            f"llmslo: engines=external ({fixed_server}) levels=c1,c4,*",
            f"llmslo: test_chat.py::test_chat: external ({fixed_server}) x c2; *",
            "*test_chat.py::test_chat[[]external-c2]*",
        ]
    )
    assert _fixed_requests(fixed_server) - before >= 7  # 1 warm-up + 6 measured, at least
    doc = json.loads((slo_pytester.path / "r.json").read_text())
    assert doc["engines"]["external"]["metadata"]["base_url"] == fixed_server


def test_an_engine_url_beside_an_engine_that_is_not_external_is_a_usage_error(
    slo_pytester: pytest.Pytester,
) -> None:
    slo_pytester.makepyfile(test_chat=TEST)
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "--engine=sim", "--engine-url=http://bob:s3cret@127.0.0.1:9"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --engine-url http://bob:***@127.0.0.1:9: --engine chose sim, none of them "
            "external, so the URL would not be measured. Leave --engine out*"
        ]
    )
    assert "s3cret" not in result.stderr.str() + result.stdout.str()


def test_the_header_names_each_engine_and_masks_a_url_password(
    slo_pytester: pytest.Pytester,
) -> None:
    slo_pytester.makefile(
        ".toml",
        engines="""
        [engines.remote]
        kind = "external"
        url = "http://bob:s3cret@127.0.0.1:9"
        [engines.local]
        kind = "sim"
        """,
    )
    slo_pytester.makepyfile(test_chat=TEST)
    result = slo_pytester.runpytest_subprocess(
        "--collect-only", "--engine-config=engines.toml", "--engine=remote,local",
        "--sim-profile=llama3-8b-fp8-1xh100-vllm",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "llmslo: engines=remote (http://bob:***@127.0.0.1:9), local (built-in sim, "
            "llama3-8b-fp8-1xh100-vllm) levels=*",
            "llmslo: test_chat.py::test_chat: remote (http://bob:***@127.0.0.1:9), local "
            "(built-in sim, llama3-8b-fp8-1xh100-vllm) x c2; *",
        ]
    )
    assert "s3cret" not in result.stdout.str()


# --------------------------------------------------------------------------- repeatability


def _start_sim(tmp: Path) -> subprocess.Popen[str]:
    argv = [
        sys.executable, "-m", "pytest_llmslo.sim", "--host", "127.0.0.1", "--port", "0",
        "--profile", "llama3-8b-fp8-1xh100-vllm",
    ]  # fmt: skip
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp
    )


def _prefix_counts(url: str) -> tuple[float, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    hits = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$", text, re.M)
    queries = re.search(r"^vllm:prefix_cache_queries_total\{[^}]*\} (\S+)$", text, re.M)
    assert hits and queries, text
    return float(hits.group(1)), float(queries.group(1))


def test_a_second_run_against_a_warm_engine_shares_no_prompts_unless_it_shares_the_salt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs against one engine that stays up (the sim, which has a prefix cache and
    counts its hits in /metrics): with the seed's prompts alone (--prompt-salt=none) the
    second run is served from the cache the first one filled; with the default salt it is
    not; the salt the document records repeats a run's prompts exactly."""
    from pytest_llmslo import cli

    monkeypatch.chdir(tmp_path)
    sim = _start_sim(tmp_path)
    try:
        assert sim.stdout is not None
        ready = sim.stdout.readline()
        assert "ready on " in ready, ready
        url = ready.split("ready on ", 1)[1].split()[0]

        def run(name: str, *extra: str) -> tuple[float, dict[str, object]]:
            before = _prefix_counts(url)
            code = cli.main(
                [
                    "run",
                    f"--engine-url={url}",
                    "--concurrency=2",
                    "--warmup=2",
                    "--requests=16",
                    "--isl=256",
                    "--osl=4",
                    "--slo-signals=false",
                    "--client-max-lag=2000",
                    "--client-max-cpu=1.5",
                    f"--slo-json={name}.json",
                    *extra,
                ]
            )
            assert code == cli.EXIT_OK, capsys.readouterr().err
            after = _prefix_counts(url)
            hit_rate = (after[0] - before[0]) / (after[1] - before[1])
            return hit_rate, json.loads((tmp_path / f"{name}.json").read_text())

        first, doc = run("none-1", "--prompt-salt=none")
        assert first < 0.1 and doc["constants"]["prompt_salt"] is None
        again, _ = run("none-2", "--prompt-salt=none")
        assert again > 0.8  # the seed's prompts, served from the cache of the first run
        salted, doc = run("auto")
        assert salted < 0.1  # a salt of its own: nothing of the earlier runs is reused
        salt = doc["constants"]["prompt_salt"]
        assert isinstance(salt, str) and salt
        assert doc["constants"]["tests"]["llmslo-run"]["prompt_salt"] == salt
        repeated, doc = run("repeat", f"--prompt-salt={salt}")
        assert repeated > 0.8  # the same prompts as the salted run
        assert doc["constants"]["prompt_salt"] == salt
    finally:
        sim.terminate()
        sim.wait(10)


# --------------------------------------------------------------------------- the plan


def test_the_plan_comes_first_and_the_estimate_after_the_first_level(
    slo_pytester: pytest.Pytester, fixed_server: str
) -> None:
    slo_pytester.makepyfile(
        test_chat="""
        import pytest

        @pytest.mark.slo(concurrency=[1, 2, 4])
        def test_chat(slo_run):
            pass
        """
    )
    result = slo_pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--engine-url={fixed_server}", "--warmup=1",
        "--requests=6", "--isl=16", "--osl=8", "--client-max-lag=2000",
        "--client-max-cpu=1.5", "-v",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "llmslo: plan: 3 levels (1 test, 1 engine); each level 1 warm-up request (at "
            "least one wave of a closed loop), then 6 measured requests; an estimate follows "
            "the first level",
            "*llmslo external c1: 6/6 requests ok*",
            "llmslo: estimate: c1 took * s; the 2 levels left take about * s more (until "
            "about *); scaled from the first level*",
            "*llmslo external c2: 6/6 requests ok*",
        ]
    )
    assert result.stdout.str().count("llmslo: estimate:") == 1
