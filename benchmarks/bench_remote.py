"""Remote load workers against a server whose timing is known: one level from 1, 2 and 3
workers, side by side.

    .venv/bin/python benchmarks/bench_remote.py [--concurrency 96] [--seconds 8] [--workers 1,2,3]
    .venv/bin/python benchmarks/bench_remote.py --concurrency 512 --workers 1 --local

``--local`` runs each count a second time as local worker processes (``processes=n``;
one is the session's own process), the row marked ``L``, side by side with the remote
level: the cost of the key handshake and of the data-only frames (``load/wire.py``) on
rate and client CPU per token. Run it a few times, alternating: on a shared machine the
spread between runs is larger than the difference.

Starts ``python -m pytest_llmslo.sim.truth_server`` (TTFT 50 ms, a token every 10 ms, 100
tokens), a session that listens on loopback (``load.remote.WorkerHub``) and, for each count,
that many ``llmslo worker --connect`` processes, each in a Linux time namespace of its own
where one can be made (``unshare --time --monotonic``, root; else on the host's clock, and
the table says so), so every worker's clock starts at another epoch, as another host's
does. It runs one closed-loop level and prints per count: requests, req/s against the
ideal (concurrency / true e2e), output tokens/s, TTFT P50 and mean ITL against the truth
(server TTFT plus the P50 of its own first-token lateness; the server's ITL), the
workers' client CPU per streamed token, the largest clock-offset uncertainty and the
level's health.

Bounded: every level is cut at ``--seconds`` * 3. On one machine the workers share its
cores with the server, so the throughput column shows the split's cost, not a scale-out;
docs/load.md ('How many worker pods for 1M tokens/s') does the arithmetic for hosts of
their own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.load.remote import WorkerHub
from pytest_llmslo.metrics import summarize
from pytest_llmslo.records import LoadLevel

ROOT = Path(__file__).resolve().parents[1]
OFFSETS_S = (1_000, 250_000, 7_000_000, 90_000)


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "pytest_llmslo.sim.truth_server", "--port", "0",
            "--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms),
            "--tokens", str(args.tokens), "--workers", str(args.server_workers),
        ],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    line = proc.stdout.readline() if proc.stdout else ""
    if "ready on " not in line:
        proc.kill()
        raise SystemExit(f"fixed server did not start: {line!r}")
    return proc, line.rsplit("ready on ", 1)[1].split()[0]


def stats(url: str, reset: bool = False) -> dict:
    if reset:
        req = urllib.request.Request(url + "/stats/reset", method="POST")
        urllib.request.urlopen(req, timeout=10).read()
        return {}
    return json.loads(urllib.request.urlopen(url + "/stats", timeout=10).read())


def namespaces_allowed() -> bool:
    if os.geteuid() != 0:
        return False
    out = subprocess.run(["unshare", "--time", "--monotonic", "1", "true"], capture_output=True)
    return out.returncode == 0


def start_workers(address: str, n: int, timens: bool) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for i in range(n):
        cmd = [sys.executable, "-m", "pytest_llmslo.cli", "worker", "--connect", address]
        cmd += ["--name", f"w{i}"]
        if timens:
            cmd = ["unshare", "--time", "--monotonic", str(OFFSETS_S[i % len(OFFSETS_S)]), *cmd]
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL))
    return procs


def one_level(args: argparse.Namespace, url: str, n: int, timens: bool, local: bool) -> dict:
    c, tokens = args.concurrency, args.tokens
    e2e_s = (args.ttft_ms + (tokens - 1) * args.itl_ms) / 1e3
    ideal = c / e2e_s
    waves = max(1, math.ceil(ideal * args.seconds / c))
    hub = None if local else WorkerHub("127.0.0.1:0", n, wait_s=60)
    procs = []
    if hub is not None:
        hub.open()
        procs = start_workers(hub.address, n, timens)
    try:
        stats(url, reset=True)
        run = run_load_sync(
            LoadJob(
                ClientSettings(url, "fixed", processes=n if local else None),
                WorkloadSpec(isl=64, osl=tokens, calibrate=False),
                LoadLevel.concurrency(c),
                requests=waves * c,
                warmup=c,
                duration_s=args.seconds * 3,
                workers=hub,
            )
        )
        st = stats(url)
    finally:
        if hub is not None:
            hub.close()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    s = summarize(run)
    ok = [r for r in run.records if r.ok]
    streamed = sum(len(r.chunk_ns) for r in run.records)
    all_tokens = streamed + run.meta["warmup_completed"] * tokens
    truth_ttft = args.ttft_ms + st["first_token_lateness"]["p50_ms"]
    remote = run.meta.get("remote") or {"clock_uncertainty_ms": 0.0}
    return {
        "workers": f"L{n}" if local else str(n),
        "requests": len(run.records),
        "unique": len({r.index for r in run.records}),
        "ratio": (len(ok) / run.duration_s) / ideal if run.duration_s else 0.0,
        "tok_s": streamed / run.duration_s if run.duration_s else 0.0,
        "ttft_err": s.metric("ttft", 50) / truth_ttft - 1,
        "itl_err": s.metric("itl", "mean") / args.itl_ms - 1,
        "us_tok": run.health.cpu_s / max(all_tokens, 1) * 1e6,
        "clock_ms": remote["clock_uncertainty_ms"],
        "valid": run.health.valid,
        "reasons": run.health.reasons,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=96)
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds (about)")
    ap.add_argument("--workers", default="1,2,3", help="worker counts (default: %(default)s)")
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=10.0)
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--server-workers", type=int, default=2)
    ap.add_argument(
        "--local", action="store_true", help="also run each count as local processes (L rows)"
    )
    args = ap.parse_args()
    timens = namespaces_allowed()
    print(
        f"c={args.concurrency}, {args.tokens} tokens, workers "
        + ("each in a time namespace of its own" if timens else "on the host's clock (no timens)")
    )
    print(
        f"{'workers':>7} {'requests':>8} {'once':>5} {'ratio':>6} {'tok/s':>8} {'TTFTerr':>8} "
        f"{'ITLerr':>7} {'us/tok':>7} {'clock±ms':>8} valid"
    )
    proc, url = start_server(args)
    try:
        counts = [int(x) for x in args.workers.split(",") if x]
        for n, local in [
            (n, loc) for n in counts for loc in ((False, True) if args.local else (False,))
        ]:
            r = one_level(args, url, n, timens, local)
            print(
                f"{r['workers']:>7} {r['requests']:>8} "
                f"{'yes' if r['unique'] == r['requests'] else 'NO':>5} {r['ratio']:>6.1%} "
                f"{r['tok_s']:>8.0f} {r['ttft_err']:>+8.2%} {r['itl_err']:>+7.2%} "
                f"{r['us_tok']:>7.1f} {r['clock_ms']:>8.3f} {'yes' if r['valid'] else 'NO'}",
                flush=True,
            )
            for why in r["reasons"]:
                print(f"        {why}")
            time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
