"""Stop signals at random moments, many times over: sessions of the plugin and of
``llmslo run``, with the sim engine (a process the session starts) and an external one,
get 1, 2 or 3 of SIGINT and SIGTERM at seeded random delays after the session has taken
the signals over (its first line of output), on a quiet machine and beside a process that
burns a CPU. Every run must end with its documented exit status, a parseable results
document (``complete: false`` when interrupted, the complete one when it had finished), no
Python traceback and no process left behind.

``SIGNAL_STRESS_RUNS`` sets the number of runs (24 by default, a few minutes on two
cores), ``SIGNAL_STRESS_SEED`` the seed (a failure names its seed and run: rerun with both,
``SIGNAL_STRESS_FIRST`` the first run to play). ``SIGNAL_STRESS_TERM_TWICE`` sets the runs of
``llmslo run`` against an external endpoint that get SIGTERM twice 0.3 s apart (10).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"

TEST = """
import pytest

@pytest.mark.slo(concurrency=[1, 2])
def test_chat(slo_run):
    pass
"""

LEVELS = 2  # concurrency 1 and 2, each a point of a complete document

CLI = "import sys\nfrom pytest_llmslo import cli\nsys.exit(cli.main(sys.argv[1:]))"

# The exit statuses each runner documents: finished (passed or failed), interrupted.
FINISHED = {0, 1}
INTERRUPTED = {"pytest": int(pytest.ExitCode.INTERRUPTED), "cli": 130}


@dataclasses.dataclass(frozen=True)
class Plan:
    index: int
    runner: str  # "pytest" or "cli"
    kind: str  # "sim" or "external"
    busy: bool
    signals: tuple[tuple[float, signal.Signals], ...]  # (seconds after the first line, which)
    # Count the signals' times from when the server has received this many requests more
    # (the level is under way), not from the first line.
    after_requests: int = 0

    def describe(self) -> str:
        sigs = ", ".join(f"{s.name}@{t:.2f}s" for t, s in self.signals)
        machine = "busy" if self.busy else "quiet"
        return f"run {self.index}: {self.runner} {self.kind} {machine} [{sigs}]"


def plans(seed: int, runs: int) -> list[Plan]:
    """The runs of a seed: every runner x kind, quiet then busy, signals at random."""
    rng = random.Random(seed)
    out = []
    for i in range(runs):
        runner = ("pytest", "cli")[i % 2]
        kind = ("sim", "external")[(i // 2) % 2]
        # Long enough to cover the engine start, both levels and the reports.
        span = 10.0 if kind == "sim" else 6.0
        t = rng.uniform(0.0, span)
        times = [t]
        count = rng.choice((1, 2, 3))
        if count >= 2:
            times.append(t + rng.uniform(0.0, 0.6))
        if count == 3:
            times.append(times[-1] + rng.uniform(0.0, 3.0))
        sigs = tuple((x, rng.choice((signal.SIGTERM, signal.SIGINT))) for x in times)
        out.append(Plan(i, runner, kind, i >= runs // 2, sigs))
    return out


def _argv(plan: Plan, url: str) -> list[str]:
    common = [
        "--warmup=1", "--requests=40", "--isl=16", "--osl=8",
        "--client-max-lag=2000", "--client-max-cpu=1.5", "--slo-json=r.json",
    ]  # fmt: skip
    common.append("--engine=sim" if plan.kind == "sim" else f"--engine-url={url}")
    if plan.runner == "pytest":
        return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *common]
    return [sys.executable, "-c", CLI, "run", "--concurrency=1,2", *common]


def _served(url: str) -> int:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as r:
        return int(json.load(r)["requests"])


def _processes_in(path: Path) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if Path(os.readlink(entry / "cwd")) == path:
                out.append(int(entry.name))
    return out


def _left_running(path: Path, grace_s: float = 5.0) -> list[str]:
    """The command lines of the processes still working in ``path`` once ``grace_s`` has
    passed: a short helper that was finishing as the run ended (a ``git rev-parse`` of the
    history's provenance) ends by itself; an engine or a load worker left behind does not."""
    deadline = time.monotonic() + grace_s
    while (pids := _processes_in(path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
            out.append(f"{pid}: " + " ".join(a.decode(errors="replace") for a in argv)[:200])
    return out


@dataclasses.dataclass
class Outcome:
    code: int | None
    sent: int
    problems: list[str]
    label: str


def play(plan: Plan, url: str, root: Path) -> Outcome:
    """One run: start it, signal it on its plan, check how it ended."""
    path = root / f"run{plan.index}"
    path.mkdir()
    (path / "pytest.ini").write_text(INI)
    (path / "test_chat.py").write_text(TEST)
    log = path / "out.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            _argv(plan, url), cwd=path, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    sent = 0
    try:
        # The session takes the signals over before its first line of output.
        deadline = time.monotonic() + 60
        while log.stat().st_size == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if plan.after_requests:
            base = _served(url)
            while _served(url) - base < plan.after_requests and proc.poll() is None:
                assert time.monotonic() < deadline + 60, "the level did not get under way"
                time.sleep(0.01)
        t0 = time.monotonic()
        for at, sig in plan.signals:
            while time.monotonic() - t0 < at and proc.poll() is None:
                time.sleep(min(0.01, max(at - (time.monotonic() - t0), 0.0)))
            if proc.poll() is not None:
                break
            proc.send_signal(sig)
            sent += 1
        code: int | None = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return Outcome(code, sent, _problems(plan, path, code, sent), _label(plan, code, sent))


def _label(plan: Plan, code: int | None, sent: int) -> str:
    if code is None:
        return "hung"
    if sent == 0 or code in FINISHED:
        return "finished"
    if code == INTERRUPTED[plan.runner]:
        return "interrupted"
    return "third signal" if code >= 128 else f"exit {code}"


def _problems(plan: Plan, path: Path, code: int | None, sent: int) -> list[str]:
    text = (path / "out.log").read_text(errors="replace")
    problems = []
    if code is None:
        problems.append("did not end in 120 s")
    # Signals that arrive together are delivered in the order of their numbers, so the
    # third one the process saw may be any of those sent.
    third = {128 + s for _, s in plan.signals}
    documented = FINISHED | {INTERRUPTED[plan.runner]} | (third if sent == 3 else set())
    if code not in documented:
        problems.append(f"exit status {code}, not one of {sorted(documented)}")
    if "Traceback" in text:
        problems.append("a Python traceback")
    doc_path = path / "r.json"
    if not doc_path.exists():
        # Only a third signal before anything was written ends a run without a document.
        if code not in third:
            problems.append("no results document")
    else:
        try:
            doc = json.loads(doc_path.read_text())
        except ValueError as exc:
            problems.append(f"the document does not parse: {exc}")
        else:
            complete = doc.get("complete")
            if code in FINISHED and sent == 0 and complete is not True:
                problems.append("a finished run's document is not complete")
            # A complete document after a signal: the run had measured all it was asked
            # before the signal came (it landed in the reports or after them).
            if complete is True and len(doc.get("points", [])) != LEVELS:
                problems.append("a document says it is complete without all its levels")
            if complete is not True and complete is not False:
                problems.append(f"the document's complete is {complete!r}")
    left = _left_running(path)
    if left:
        problems.append("a process was left running")
        problems.append("left running: " + "; ".join(left))
    if problems:  # what the run said last, to tell why
        problems.append("its output ends:\n    " + "\n    ".join(text.splitlines()[-6:]))
    return problems


@contextlib.contextmanager
def burning(on: bool) -> Iterator[None]:
    """A process that burns a CPU beside the runs, while ``on``."""
    if not on:
        yield
        return
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        proc.kill()
        proc.wait(10)


def _report(title: str, outcomes: list[tuple[Plan, Outcome]]) -> list[str]:
    counts = Counter(o.label for _, o in outcomes)
    by_signals = Counter(o.sent for _, o in outcomes)
    lost = sum("no results document" in o.problems for _, o in outcomes)
    tracebacks = sum("a Python traceback" in o.problems for _, o in outcomes)
    orphans = sum("a process was left running" in o.problems for _, o in outcomes)
    print(
        f"\n{title}: {len(outcomes)} runs; "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + "; signals sent: "
        + ", ".join(f"{k}: {v}" for k, v in sorted(by_signals.items()))
        + f"; lost documents {lost}, tracebacks {tracebacks}, orphans {orphans}"
    )
    return [f"{p.describe()}: {'; '.join(o.problems)}" for p, o in outcomes if o.problems]


@pytest.mark.slow
def test_stop_signals_at_random_moments_never_lose_the_document(
    fixed_server: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SIGNAL_STRESS_SEED", "39"))
    runs = int(os.environ.get("SIGNAL_STRESS_RUNS", "24"))
    first = int(os.environ.get("SIGNAL_STRESS_FIRST", "0"))
    outcomes: list[tuple[Plan, Outcome]] = []
    for busy in (False, True):
        todo = [p for p in plans(seed, runs)[first:] if p.busy == busy]
        with burning(busy):
            outcomes.extend((p, play(p, fixed_server, tmp_path)) for p in todo)
    failures = _report(f"stop signals, seed {seed}", outcomes)
    assert not failures, "\n".join(failures)


@pytest.mark.slow
def test_sigterm_twice_to_llmslo_run_against_an_endpoint_keeps_the_document(
    fixed_server: str, tmp_path: Path
) -> None:
    """The CI system's way: SIGTERM, a second 0.3 s later; each run right after the last
    one's load, once the level is under way (the server counted its requests)."""
    runs = int(os.environ.get("SIGNAL_STRESS_TERM_TWICE", "10"))
    outcomes = []
    signals = ((0.0, signal.SIGTERM), (0.3, signal.SIGTERM))
    for i in range(runs):
        # A third of the sessions are signalled at their first line (before their load),
        # the rest once their level is under way (the server received 10 or 30 requests).
        plan = Plan(i, "cli", "external", False, signals, after_requests=(0, 10, 30)[i % 3])
        outcomes.append((plan, play(plan, fixed_server, tmp_path)))
    failures = _report("SIGTERM twice, 0.3 s apart", outcomes)
    assert not failures, "\n".join(failures)
    assert all(o.label == "interrupted" for _, o in outcomes)
