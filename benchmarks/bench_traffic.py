"""Production-shaped traffic against a server of known timing: a long trace replay, and
multi-turn conversations against single-turn requests, side by side in one run.

    .venv/bin/python benchmarks/bench_traffic.py [--lines 100000] [--rate 500]
        [--sessions 256] [--turns 4] [--skip-replay] [--skip-turns]

Starts ``python -m pytest_llmslo.sim.truth_server`` (TTFT 50 ms, a token every 10 ms; each
request's ``max_tokens`` is its length) and:

1. **Replay**: writes a Mooncake-format trace of ``--lines`` rows (Poisson arrivals at
   ``--rate`` req/s, ISL 600 over two 512-token hash-id blocks of which the first is one
   of 8 shared ones, OSL 10), replays it at its own pace in two client processes with no
   request count (the prompts are built as they are due, not up front) and prints: offered
   and sent rate, schedule lag P50/P99/max, the load workers' RSS at 10 %, 50 % and 95 %
   of the run (from /proc) and the parent's growth per request (the records it keeps and
   the responses it has not decoded yet), requests built during the run, TTFT P50 and
   mean ITL against the truth (server TTFT + its own measured first-token lateness).
   Target: schedule lag P99 < 5 ms, the workers' RSS flat (95 % within 10 % of the 10 %
   sample).
2. **Turns**: ``--sessions`` concurrent 4-turn conversations (the history grows each
   turn) against single-turn requests at the same concurrency and length, each measured
   against the truth: multi-turn must measure as accurately as single-turn.

At 500 req/s the 100,000-line replay takes 200 s (``--lines 20000`` for a 40 s one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_loadgen import RssSampler, server_stats, start_server

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.metrics import summarize
from pytest_llmslo.metrics.traffic import summarize as traffic
from pytest_llmslo.records import LoadLevel, Run


class Rss:
    """The RSS (MB) of this process and of its children (the load workers), every second."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.workers: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Rss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(5)

    def _run(self) -> None:
        kb = RssSampler._rss_kb
        while not self._stop.wait(1.0):
            workers = [k for k in RssSampler._children() if "load.worker" in self._cmd(k)]
            self.samples.append(kb(os.getpid()) / 1024)
            if workers:
                self.workers.append(sum(kb(p) for p in workers) / 1024)

    @staticmethod
    def _cmd(pid: int) -> str:
        try:
            return Path(f"/proc/{pid}/cmdline").read_text()
        except OSError:
            return ""

    @staticmethod
    def at(samples: list[float], fraction: float) -> float:
        if not samples:
            return float("nan")
        return samples[min(int(fraction * (len(samples) - 1)), len(samples) - 1)]


def write_trace(path: Path, lines: int, rate: float) -> None:
    rng = np.random.default_rng(11)
    ts = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0 / rate, lines - 1)))) * 1e3
    shared = rng.integers(0, 8, lines)
    with open(path, "w") as f:
        for i in range(lines):
            row = {"timestamp": round(float(ts[i]), 3), "input_length": 600,
                   "output_length": 10, "hash_ids": [int(shared[i]), 1000 + i]}  # fmt: skip
            f.write(json.dumps(row) + "\n")


def errors(run: Run, url: str, ttft_ms: float, itl_ms: float) -> tuple[float, float]:
    st = server_stats(url)
    s = summarize(run)
    truth = ttft_ms + st["first_token_lateness"]["p50_ms"]
    return s.metric("ttft", 50) / truth - 1, s.metric("itl", "mean") / itl_ms - 1


def replay(args: argparse.Namespace, url: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.jsonl"
        t = time.monotonic()
        write_trace(path, args.lines, args.rate)
        print(f"trace: {args.lines} lines at {args.rate:g} req/s written in "
              f"{time.monotonic() - t:.1f} s ({path.stat().st_size / 1e6:.1f} MB)")  # fmt: skip
        # Two client processes: the workers hold the hot path (their RSS is the figure),
        # the parent keeps the records.
        client = ClientSettings(url, "fixed", processes=2)
        wl = WorkloadSpec(kind="trace", path=str(path), calibrate=False)
        server_stats(url, reset=True)
        t = time.monotonic()
        with Rss() as rss:
            run = run_load_sync(LoadJob(client, wl, LoadLevel.trace(1.0), requests=None, warmup=0,
                                grace_s=10))  # fmt: skip
        wall = time.monotonic() - t
    ttft_err, itl_err = errors(run, url, args.ttft_ms, args.itl_ms)
    h = run.health
    tr = traffic(run) or {}
    lags = np.array([r.sent_ns - r.scheduled_ns for r in run.records]) / 1e6
    ok = sum(r.ok for r in run.records)
    cc = run.meta["client_cpu"]
    print(
        f"replay: {len(run.records)} requests ({ok} ok) in {wall:.0f} s, {h.processes} "
        f"process(es); offered {tr.get('offered_req_s', 0):.1f} req/s, sent "
        f"{tr.get('sent_req_s', 0):.1f} req/s"
    )
    print(
        f"  schedule lag P50 {np.percentile(lags, 50):.2f} ms, P99 {np.percentile(lags, 99):.2f} "
        f"ms, max {lags.max():.1f} ms (target P99 < 5 ms); valid={h.valid} {list(h.reasons)}"
    )
    w10, w50, w95 = (rss.at(rss.workers, f) for f in (0.1, 0.5, 0.95))
    p10, p95 = rss.at(rss.samples, 0.1), rss.at(rss.samples, 0.95)
    print(
        f"  load workers' RSS {w10:.0f} / {w50:.0f} / {w95:.0f} MB at 10/50/95 % of the run "
        f"({(w95 / w10 - 1) * 100:+.1f} %); {cc['requests_built_during_run']} requests built "
        f"during the run; the parent (records, undecoded responses) {p10:.0f} -> {p95:.0f} MB "
        f"({(p95 - p10) * 1e6 / max(len(run.records), 1) / 1e3:.1f} KB per request)"
    )
    print(f"  TTFT P50 {ttft_err:+.1%} and mean ITL {itl_err:+.2%} against the truth")


def turns(args: argparse.Namespace, url: str) -> None:
    c = args.sessions
    client = ClientSettings(url, "fixed")
    rows = []
    for label, wl, requests in (
        ("single-turn", WorkloadSpec(isl=64, osl=20, calibrate=False), c * args.turns * 2),
        (
            f"{args.turns}-turn",
            WorkloadSpec(isl=64, osl=20, turns=args.turns, calibrate=False),
            c * args.turns * 2,
        ),
    ):
        server_stats(url, reset=True)
        t = time.monotonic()
        run = run_load_sync(LoadJob(client, wl, LoadLevel.concurrency(c), requests=requests,
                            warmup=c * args.turns, duration_s=120))  # fmt: skip
        wall = time.monotonic() - t
        ttft_err, itl_err = errors(run, url, args.ttft_ms, args.itl_ms)
        prompts = [r.prompt_tokens or 0 for r in run.records if r.ok]
        rows.append((label, len(run.records), wall, ttft_err, itl_err, run.health.valid,
                     float(np.mean(prompts)), run.health))  # fmt: skip
    print(f"turns at c={c} (conversations for multi-turn), OSL 20:")
    for label, n, wall, te, ie, valid, p, h in rows:
        print(
            f"  {label:>12}: {n} requests in {wall:.1f} s, prompt {p:.0f} tokens mean; "
            f"TTFT P50 {te:+.1%}, mean ITL {ie:+.2%} against the truth; valid={valid}; "
            f"{h.processes} processes, loop lag P99 {h.loop_lag_p99_ms:.1f} ms, schedule lag "
            f"P99 {h.schedule_lag_p99_ms:.1f} ms, CPU {h.cpu_util:.0%}"
        )
        for r in h.reasons:
            print(f"      invalid: {r}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--sessions", type=int, default=256)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--skip-replay", action="store_true")
    ap.add_argument("--skip-turns", action="store_true")
    args = ap.parse_args()
    args.ttft_ms, args.itl_ms, args.tokens = 50.0, 10.0, 20
    args.server_loop, args.server_workers = "auto", 1
    proc, url = start_server(args)
    try:
        if not args.skip_replay:
            replay(args, url)
        if not args.skip_turns:
            turns(args, url)
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
