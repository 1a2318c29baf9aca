"""Concurrency sweep of the sim engine with the project's load generator.

    .venv/bin/python benchmarks/sim_sweep.py [--profile llama3-70b-fp8-4xh100-vllm]
        [--levels 1,4,8,16,32,48,64] [--isl 512] [--osl 256] [--rounds 3]
        [--slo "ttft_p99<500,itl_p50<30"]

Starts ``python -m pytest_llmslo.sim`` on a free loopback port, runs one closed-loop load
per level (``warm-up = one round of requests``, then ``rounds`` x level measured requests,
at least ``--min-requests``; prompts seeded per level so that no level hits the prefix
cache the one before filled), and prints one row per level: TTFT P50/P99, ITL P50, TPOT
P50, output tok/s, goodput, attainment and whether the SLO held; the knee (the highest
level where every objective holds) is marked. ``--trace-file`` keeps the server's token
trace. Every request count and the whole run are bounded; the server is stopped at the
end whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.metrics import summarize
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.slo import evaluate, parse_objectives


def server_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) the server process used so far (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def lateness(url: str) -> tuple[float, float]:
    """(sum of token write lateness in s, token writes) from the server's /metrics."""
    total = count = 0.0
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("llmslo_sim_emit_lateness_seconds_sum"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith("llmslo_sim_emit_lateness_seconds_count"):
            count = float(line.rsplit(" ", 1)[1])
    return total, count


@contextlib.contextmanager
def sim_server(profile: str, model: str, trace_file: str | None) -> Iterator[tuple[str, int]]:
    """A sim engine on a free port; yields (base URL, pid) and stops it on exit."""
    argv = [sys.executable, "-m", "pytest_llmslo.sim", "--port", "0"]
    argv += ["--profile", profile, "--model", model, "--log-level", "WARNING"]
    if trace_file:
        argv += ["--trace-file", trace_file]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if "ready on " not in line:
            raise RuntimeError(f"sim engine did not start: {line!r}")
        url = line.split("ready on ", 1)[1].split()[0]
        yield url, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="llama3-70b-fp8-4xh100-vllm")
    ap.add_argument("--model", default="llama-3.1-70b-fp8")
    ap.add_argument("--levels", default="1,4,8,16,32,48,64")
    ap.add_argument("--isl", type=int, default=512)
    ap.add_argument("--osl", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3, help="Measured requests = rounds x level.")
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--slo", default="ttft_p99<500,itl_p50<30")
    ap.add_argument("--endpoint", default="chat", choices=("chat", "completions"))
    ap.add_argument("--trace-file")
    args = ap.parse_args(argv)

    levels = [int(x) for x in args.levels.split(",") if x]
    objectives = parse_objectives(args.slo)
    workload = WorkloadSpec(isl=args.isl, osl=args.osl)
    rows: list[tuple[int, object, object]] = []
    t_start = time.monotonic()
    server_rows: list[str] = []
    with sim_server(args.profile, args.model, args.trace_file) as (url, pid):
        client = ClientSettings(base_url=url, model=args.model, endpoint=args.endpoint)
        for c in levels:
            requests = max(args.rounds * c, args.min_requests)
            cpu0, wall0, (lsum0, lcnt0) = server_cpu_s(pid), time.monotonic(), lateness(url)
            run = run_load_sync(
                LoadJob(
                    client,
                    # Prompts of its own per level, as the plugin draws them: the same
                    # prompts again would hit the prefix cache the previous level filled.
                    workload.for_level("concurrency", c),
                    LoadLevel.concurrency(c),
                    requests=requests,
                    warmup=max(c, 1),
                    duration_s=600.0,
                )
            )
            summary = summarize(run, objectives)
            verdict = evaluate(run, objectives)
            rows.append((c, summary, verdict))
            cpu1, wall1, (lsum1, lcnt1) = server_cpu_s(pid), time.monotonic(), lateness(url)
            mean_late = (lsum1 - lsum0) / max(lcnt1 - lcnt0, 1) * 1e3
            util = (
                "n/a" if cpu0 is None or cpu1 is None else f"{(cpu1 - cpu0) / (wall1 - wall0):.0%}"
            )
            server_rows.append(f"c{c}: mean write lateness {mean_late:.2f} ms, CPU {util}")
            print(f"  c{c}: {summary.completed}/{summary.requests} ok", file=sys.stderr)

    knee = None
    for c, _s, v in rows:
        if v.passed:  # type: ignore[attr-defined]
            knee = c
    print(f"profile {args.profile}, ISL {args.isl} / OSL {args.osl}, SLO {args.slo}")
    header = (
        f"{'level':>6} {'reqs':>5} {'TTFT P50':>9} {'TTFT P99':>9} {'ITL P50':>8} "
        f"{'TPOT P50':>9} {'tok/s':>7} {'goodput':>8} {'attain':>7}  SLO"
    )
    print(header)
    print("-" * len(header))
    for c, s, v in rows:
        m = s.metric  # type: ignore[attr-defined]
        good = s.goodput_tok_s  # type: ignore[attr-defined]
        att = s.attainment  # type: ignore[attr-defined]
        mark = "pass" if v.passed else "FAIL"  # type: ignore[attr-defined]
        if not v.run_valid:  # type: ignore[attr-defined]
            mark = "INVALID (" + "; ".join(v.invalid_reasons) + ")"  # type: ignore[attr-defined]
        if c == knee:
            mark += "  <- knee"
        print(
            f"{'c' + str(c):>6} {s.completed:>5} {m('ttft', 50):>9.1f} {m('ttft', 99):>9.1f} "  # type: ignore[attr-defined]
            f"{m('itl', 50):>8.1f} {m('tpot', 50):>9.1f} {s.output_tok_s:>7.0f} "  # type: ignore[attr-defined]
            f"{(good or 0):>8.0f} {(att or 0) * 100:>6.1f}%  {mark}"
        )
    print(f"knee: c{knee}" if knee is not None else "knee: none (no level met the SLO)")
    print("sim server: " + "; ".join(server_rows))
    print(f"(ms; tok/s = output tokens/s; {time.monotonic() - t_start:.0f} s wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
