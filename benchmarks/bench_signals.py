"""What scraping engine signals costs the load generator, side by side in one run.

    .venv/bin/python benchmarks/bench_signals.py [--c 512] [--seconds 20] [--rounds 2]

Starts the known-timing server (``pytest_llmslo.sim.truth_server``: TTFT 50 ms, a token every
10 ms, 100 tokens) and, in another process, a /metrics endpoint serving a vLLM-sized
exposition (every vLLM v0.11 family with its histograms, ~40 KB). Then runs the load at
``--c`` for ``--seconds``, alternately without and with a ``signals.scraper.Scraper``
scraping at 1 Hz, ``--rounds`` times each, and prints per run the TTFT P50 and mean ITL
errors against the truth, the client's CPU seconds and the scraper's thread CPU seconds.
Target: the scraper costs < 1 % of the client's CPU, and the accuracy figures do not move
beyond the run-to-run spread.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "signals"))

from bench_loadgen import server_stats, start_server
from expositions import exposition

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.metrics import summarize
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.signals.scraper import Scraper


def big_exposition() -> str:
    buckets = tuple(0.001 * 1.5**i for i in range(30))
    values = [0.05 + 0.001 * i for i in range(500)]
    hists = {f"vllm:{n}": (values, buckets) for n in (
        "request_queue_time_seconds", "time_to_first_token_seconds",
        "inter_token_latency_seconds", "e2e_request_latency_seconds",
        "request_prefill_time_seconds", "request_decode_time_seconds",
        "request_inference_time_seconds", "request_prompt_tokens", "request_generation_tokens",
        "iteration_tokens_total", "request_max_num_generation_tokens",
        "request_time_per_output_token_seconds",
    )}  # fmt: skip
    gauges = {"vllm:num_requests_running": 512.0, "vllm:num_requests_waiting": 0.0,
              "vllm:kv_cache_usage_perc": 0.5}  # fmt: skip
    counters = {f"vllm:{n}_total": 1e6 for n in (
        "num_preemptions", "prefix_cache_queries", "prefix_cache_hits", "prompt_tokens",
        "generation_tokens", "request_success",
    )}  # fmt: skip
    return exposition(gauges, counters, hists)


def _marker(scraper: Scraper | None):  # type: ignore[no-untyped-def]
    if scraper is None:
        return None

    def progress(p) -> None:  # type: ignore[no-untyped-def]
        if p.phase == "measuring":
            scraper.mark_measuring()

    return progress


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--c", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    args.ttft_ms, args.itl_ms, args.tokens = 50.0, 10.0, 100
    args.server_loop, args.server_workers = "auto", 1
    with tempfile.TemporaryDirectory() as d:
        text = big_exposition()
        (Path(d) / "metrics").write_text(text)
        metrics = subprocess.Popen(
            [sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory", d],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        line = metrics.stdout.readline() if metrics.stdout else ""
        port = int(line.split("port ")[1].split()[0])
        murl = f"http://127.0.0.1:{port}/metrics"
        proc, url = start_server(args)
        print(
            f"exposition: {len(text) / 1e3:.0f} KB at {murl}; load c={args.c}, {args.seconds:g} s"
        )
        try:
            for _ in range(args.rounds):
                for scrape in (False, True):
                    server_stats(url, reset=True)
                    scraper = Scraper([murl], nvml=False).start() if scrape else None
                    t = time.monotonic()
                    run = run_load_sync(LoadJob(
                        ClientSettings(url, "fixed"),
                        WorkloadSpec(isl=64, osl=args.tokens, calibrate=False),
                        LoadLevel.concurrency(args.c),
                        requests=None, warmup=args.c, duration_s=args.seconds,
                        progress=_marker(scraper),
                    ))  # fmt: skip
                    wall = time.monotonic() - t
                    sig = scraper.stop() if scraper else None
                    st = server_stats(url)
                    s = summarize(run)
                    truth = args.ttft_ms + st["first_token_lateness"]["p50_ms"]
                    h = run.health
                    cost = ""
                    if scraper is not None and sig is not None:
                        cost = (
                            f"; scraper {scraper.cpu_s:.3f} CPU s over {sig.scrapes} scrapes = "
                            f"{scraper.cpu_s / max(h.cpu_s, 1e-9):.2%} of the client's CPU"
                        )
                    print(
                        f"  signals {'on ' if scrape else 'off'}: {len(run.records)} requests in "
                        f"{wall:.0f} s; TTFT P50 {s.metric('ttft', 50) / truth - 1:+.1%}, "
                        f"mean ITL {s.metric('itl', 'mean') / args.itl_ms - 1:+.2%}; client "
                        f"{h.cpu_s:.1f} CPU s, valid={h.valid}{cost}"
                    )
        finally:
            proc.terminate()
            metrics.terminate()
            proc.wait(10)
            metrics.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
