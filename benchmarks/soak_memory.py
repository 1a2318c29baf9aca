"""The parent process's memory over a long level, against the fixed-timing server.

    .venv/bin/python benchmarks/soak_memory.py [--concurrency 512] [--seconds 180]
        [--every 10] [--records-memory MB] [--export PATH]

Starts ``python -m pytest_llmslo.sim.truth_server`` (TTFT 50 ms, a token every 10 ms, 100
tokens, one token per chunk), runs one closed-loop level bounded by time alone in this
process (``run_load_sync``: the workers ship their finished requests to it, it decodes them
into the run's record store), then does what a session does with the run: its summary,
its per-request samples for the results document, and, with ``--export``, every record
written to a file. Every ``--every`` seconds it prints this process's RSS (``VmRSS`` of
/proc/self/status) and the phase; at the end the peak (``VmHWM``), the RSS at the end of
minute 2 of the level and the growth after it (the target of issue 24: a 10-minute c=512
level keeps the peak <= 800 MB and the growth after minute 2 <= 100 MB). The store's
files are removed when the run is released.

Bounded in time: the level is cut at ``--seconds`` (plus the grace for the requests in
flight), the server is stopped at the end. Numbers are noisy when other work shares the
machine; the RSS is this process's own (the workers are separate processes).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import threading
import time
import weakref
from array import array
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_llmslo import metrics
from pytest_llmslo.document import compact_samples
from pytest_llmslo.load import ClientSettings, LoadJob, Progress, WorkloadSpec, run_load_sync
from pytest_llmslo.load.backlog import Backlog
from pytest_llmslo.metrics.columns import clear_cache
from pytest_llmslo.records import LoadLevel, RequestRecord, Run

try:
    from pytest_llmslo.load.backlog import trim_heap
    from pytest_llmslo.recordstore import RecordStore
except ImportError:  # a version before the record store (records kept as objects)
    RecordStore = None  # type: ignore[assignment,misc]


# The backlogs of this process, so that the samples can say what the decoding budget holds.
_BACKLOGS: weakref.WeakSet[Backlog] = weakref.WeakSet()
_init = Backlog.__init__


def _tracked_init(self: Backlog, *args: Any, **kw: Any) -> None:
    _init(self, *args, **kw)
    _BACKLOGS.add(self)


Backlog.__init__ = _tracked_init  # type: ignore[method-assign]


def held() -> str:
    """The raw bytes waiting to be decoded and the records' bytes in memory, in MB."""
    raw = sum(b.bytes for b in list(_BACKLOGS)) / 2**20
    records = sum(getattr(b.records, "memory_bytes", 0) for b in list(_BACKLOGS)) / 2**20
    return f"raw {raw:6.1f} MB  records {records:5.1f} MB"


def status_mb(key: str) -> float:
    """A ``Vm*`` line of /proc/self/status in MB (0 where there is none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Sampler:
    """This process's RSS every ``every`` seconds, printed with the phase it is in."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.phase = "start"
        self.t0 = time.monotonic()
        self.level_t0: float | None = None  # when the first measured request was reported
        self.samples: list[tuple[float, float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.take()

    def take(self) -> None:
        t = time.monotonic() - self.t0
        rss = status_mb("VmRSS")
        self.samples.append((t, rss, self.phase))
        peak = status_mb("VmHWM")
        print(f"{t:7.1f} s  RSS {rss:7.1f} MB  peak {peak:7.1f} MB  {held()}  {self.phase}")
        sys.stdout.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.take()

    def progress(self, p: Progress) -> None:
        if p.phase in ("measuring", "draining") and self.level_t0 is None:
            self.level_t0 = time.monotonic() - self.t0
        self.phase = f"load: {p.phase} {p.done} requests"

    def at(self, since_level_s: float) -> float | None:
        """The RSS sampled closest after ``since_level_s`` seconds of measurement."""
        if self.level_t0 is None:
            return None
        after = [rss for t, rss, _ in self.samples if t >= self.level_t0 + since_level_s]
        return after[0] if after else None


def synthetic_run(n: int, tokens: int, limit: int | None) -> Run:
    """A run of ``n`` requests as the fixed server answers them (50 ms to the first token,
    then one every 10 ms, a jitter of up to 0.1 ms), 512 in flight, in a store as the
    load generator fills it: what the phases after a long level read, without the load."""
    store = RecordStore(limit) if limit is not None else RecordStore()
    rng = np.random.default_rng(0)
    e2e = 50_000_000 + (tokens - 1) * 10_000_000
    step = e2e // 512
    for i in range(n):
        sent = 1_000_000_000 + i * step
        jitter = rng.integers(0, 100_000, tokens)
        chunks = array("q", (sent + 50_000_000 + k * 10_000_000 for k in range(tokens)))
        for k in range(tokens):
            chunks[k] += int(jitter[k])
        store.append(
            RequestRecord(
                index=i, scheduled_ns=sent, sent_ns=sent, end_ns=chunks[-1] + 100_000,
                chunk_ns=chunks, first_content_ns=chunks[0], prompt_tokens=64,
                completion_tokens=tokens, requested_prompt_tokens=64,
                requested_output_tokens=tokens, status=200, finish_reason="length",
                worker=i % 2,
            )
        )  # fmt: skip
    store.finish()
    trim_heap()
    end = int(store.column("end_ns").max())
    return Run(LoadLevel.concurrency(512), store, 1_000_000_000, end)


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest_llmslo.sim.truth_server",
            "--port",
            "0",
            "--ttft-ms",
            "50",
            "--itl-ms",
            "10",
            "--tokens",
            str(args.tokens),
            "--workers",
            str(args.server_workers),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = proc.stdout.readline() if proc.stdout else ""
    if "ready on " not in line:
        proc.kill()
        raise SystemExit(f"fixed server did not start: {line!r}")
    return proc, line.rsplit("ready on ", 1)[1].split()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=180.0, help="measured seconds")
    ap.add_argument("--every", type=float, default=10.0, help="RSS sample period, seconds")
    ap.add_argument(
        "--records-memory",
        type=float,
        default=None,
        help="MB of records kept in memory (default: the store's default); 0: all in files",
    )
    ap.add_argument("--tokens", type=int, default=100)
    ap.add_argument("--processes", type=int, default=None)
    ap.add_argument("--server-workers", type=int, default=2)
    ap.add_argument("--export", default=None, help="write every record to this .npz file")
    ap.add_argument(
        "--synthetic",
        type=int,
        default=None,
        metavar="N",
        help="no load: N requests built as the fixed server answers them, in a store, then "
        "the phases after the level (the post-run peak of a long level without running it)",
    )
    args = ap.parse_args()
    limit = None if args.records_memory is None else int(args.records_memory * 1024 * 1024)
    if args.synthetic:
        sampler = Sampler(args.every).start()
        sampler.phase = f"building {args.synthetic} records"
        sampler.level_t0 = 0.0
        after_level(sampler, synthetic_run(args.synthetic, args.tokens, limit), args)
        sampler.stop()
        print(f"peak RSS {status_mb('VmHWM'):.1f} MB (VmHWM)")
        return 0
    server, url = start_server(args)
    sampler = Sampler(args.every).start()
    try:
        extra = {}
        if limit is not None:
            extra["records_memory"] = limit
        job = LoadJob(
            ClientSettings(url, "fixed", processes=args.processes),
            WorkloadSpec(isl=64, osl=args.tokens, calibrate=False),
            LoadLevel.concurrency(args.concurrency),
            requests=None,
            warmup=args.concurrency,
            duration_s=args.seconds,
            grace_s=30.0,
            progress=sampler.progress,
            **extra,  # type: ignore[arg-type]
        )
        after_level(sampler, run_load_sync(job), args)
    finally:
        sampler.stop()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    report(sampler)
    return 0


def after_level(sampler: Sampler, run: Run, args: argparse.Namespace) -> None:
    """What a session does with a level's run: summary, samples, optionally the export."""
    sampler.phase = "run assembled"
    sampler.take()
    store = run.records if RecordStore and isinstance(run.records, RecordStore) else None
    sampler.phase = "summary"
    s = metrics.summarize(run)
    sampler.take()
    sampler.phase = "samples"
    samples = compact_samples(run)
    sampler.take()
    if args.export:
        sampler.phase = "export"
        if store is not None:
            store.save(args.export)
        sampler.take()
    sampler.phase = "done"
    files = store.spilled_segments if store is not None else 0
    in_memory = store.memory_bytes / 2**20 if store is not None else float("nan")
    where = store.file_dir if store is not None else None
    n = len(run.records)
    print(
        f"\n{n} requests in {run.duration_s:.0f} s ({n / max(run.duration_s, 1e-9):.0f}/s), "
        f"TTFT P50 {s.metric('ttft', 50):.2f} ms, mean ITL {s.metric('itl', 'mean'):.3f} ms, "
        f"valid={run.health.valid}; samples {len(samples['ok'])}"
    )
    print(f"store: {in_memory:.1f} MB in memory, {files} segments in files under {where}")
    del samples, s, store, run
    clear_cache()  # the metrics' cache holds the last runs
    gc.collect()
    if where is not None:
        print(f"store files removed with the run: {not os.path.exists(where)}")


def report(sampler: Sampler) -> None:
    peak = status_mb("VmHWM")
    at2 = sampler.at(120.0)
    load = max((rss for _, rss, ph in sampler.samples if ph.startswith("load")), default=0.0)
    after = max((rss for _, rss, ph in sampler.samples if ph != "start"), default=0.0)
    print(f"peak RSS {peak:.1f} MB (VmHWM); highest sample during the load {load:.1f} MB")
    if at2 is not None:
        print(
            f"RSS after minute 2 of the level {at2:.1f} MB; growth after it: during the load "
            f"{load - at2:+.1f} MB, with the summary and samples {after - at2:+.1f} MB"
        )
    else:
        print("the level was shorter than 2 minutes: no growth after minute 2 to report")


if __name__ == "__main__":
    raise SystemExit(main())
