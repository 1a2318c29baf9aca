"""How long a stop signal takes to cut a loaded level and put the results in place.

    .venv/bin/python benchmarks/bench_stop_cut.py [--concurrency 512] [--tries 3]

Starts ``python -m pytest_llmslo.sim.truth_server`` (TTFT 50 ms, a token every 10 ms, 400
tokens: every request outlives the run) and, per try, ``llmslo run`` against it at the
concurrency (a level bounded by 60 s), sends SIGTERM once the server has received
2 x concurrency requests, and prints: signal to the load's return (the level's
"interrupted by" line: the load cut, its partial run collected and assembled), signal to
the results document in place (its
mtime: the load cut, the partial run assembled, the document written), signal to the
process's exit, the exit status and the interrupted point's request count. Bounded: a
try that has not ended 60 s after its signal is killed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CLI = "import sys\nfrom pytest_llmslo import cli\nsys.exit(cli.main(sys.argv[1:]))"


def start_server() -> tuple[subprocess.Popen[str], str]:
    argv = [
        sys.executable, "-m", "pytest_llmslo.sim.truth_server", "--port", "0",
        "--ttft-ms", "50", "--itl-ms", "10", "--tokens", "400",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if "ready on " not in line:
        proc.kill()
        raise SystemExit(f"the truth server did not start: {line!r}")
    return proc, line.rsplit("ready on ", 1)[1].split()[0]


def received(url: str) -> int:
    with urllib.request.urlopen(url + "/stats", timeout=10) as r:
        return int(json.load(r)["requests"])


def one_try(url: str, concurrency: int, work: Path) -> dict[str, object]:
    doc = work / "r.json"
    argv = [
        sys.executable, "-c", CLI, "run", f"--engine-url={url}", "--model=fixed",
        f"--concurrency={concurrency}", "--requests=none", "--duration=60", "--warmup=0",
        "--isl=16", "--osl=400", "--client-max-lag=5000", "--client-max-cpu=2",
        f"--slo-json={doc}",
    ]  # fmt: skip
    before = received(url)
    with (work / "out.log").open("w") as out:
        proc = subprocess.Popen(argv, cwd=work, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while received(url) - before < 2 * concurrency:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the level did not get under way: {proc.poll()}")
            time.sleep(0.05)
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        cut: float | None = None
        while proc.poll() is None and time.time() - sent < 60:
            if cut is None and "interrupted by" in (work / "out.log").read_text(errors="replace"):
                cut = time.time() - sent
            time.sleep(0.005)
        code = proc.wait(timeout=5)
        exited = time.time() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    points = json.loads(doc.read_text())["points"] if doc.exists() else []
    return {
        "load_returned_s": None if cut is None else round(cut, 3),
        "document_s": round(doc.stat().st_mtime - sent, 3) if doc.exists() else None,
        "exit_s": round(exited, 3),
        "status": code,
        "requests": points[0]["summary"]["requests"] if points else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--tries", type=int, default=3)
    args = ap.parse_args()
    server, url = start_server()
    try:
        for i in range(args.tries):
            with tempfile.TemporaryDirectory() as tmp:
                result = one_try(url, args.concurrency, Path(tmp))
            print(f"c{args.concurrency} try {i + 1}: {json.dumps(result)}", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
