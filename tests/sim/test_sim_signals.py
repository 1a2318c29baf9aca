"""Engine signals end to end on the sim: it publishes vLLM's names (queue time, KV usage,
the engine-side latency histograms), and a missed objective is attributed to the signal
that explains it: a KV-bound setup, a batch-bound one and a prefill-bound workload."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sim_helpers import MODEL, start_sim

from pytest_llmslo.load import ClientSettings, LoadJob, WorkloadSpec, run_load_sync
from pytest_llmslo.records import LoadLevel, Run
from pytest_llmslo.signals.scraper import Scraper, ScrapeSettings
from pytest_llmslo.slo import evaluate


def _run(url: str, wl: WorkloadSpec, c: int, requests: int) -> Run:
    scraper = Scraper([url + "/metrics"], ScrapeSettings(interval_s=0.2), nvml=False).start()

    def progress(p) -> None:  # type: ignore[no-untyped-def]
        if p.phase == "measuring":
            scraper.mark_measuring()

    run = run_load_sync(LoadJob(
        ClientSettings(base_url=url, model=MODEL), wl, LoadLevel.concurrency(c),
        requests=requests, warmup=c, progress=progress,
    ))  # fmt: skip
    sig = scraper.stop()
    return dataclasses.replace(run, meta={**run.meta, "signals": sig.to_dict()})


@pytest.mark.slow
def test_kv_bound(tmp_path: Path) -> None:
    # 320 blocks of 16 tokens: room for about 13 requests of 384 tokens at c=32.
    with start_sim(tmp_path, "--num-gpu-blocks", "320", "--max-model-len", "4096") as sim:
        run = _run(sim.url, WorkloadSpec(isl=256, osl=64, calibrate=False), 32, 64)
    s = run.meta["signals"]
    assert s["engines"] == ["vllm"] and s["kv_usage_max"] > 0.9
    assert s["waiting_mean"] > 5 and s["queue_time_p99_ms"] > 100
    v = evaluate(run, "ttft_p99 < 50")
    assert not v.passed and len(v.attribution) == 1
    assert v.attribution[0].startswith("TTFT P99 ")
    assert v.attribution[0].endswith("KV-cache bound"), v.attribution
    assert "why: TTFT P99" in v.format()


@pytest.mark.slow
def test_batch_bound_queue(tmp_path: Path) -> None:
    with start_sim(tmp_path, "--max-num-seqs", "4", "--max-model-len", "4096") as sim:
        run = _run(sim.url, WorkloadSpec(isl=128, osl=32, calibrate=False), 16, 48)
    s = run.meta["signals"]
    assert s["kv_usage_max"] < 0.5 and s["running_mean"] <= 4.01
    v = evaluate(run, "ttft_p99 < 50")
    assert v.attribution and "queue-bound" in v.attribution[0], v.attribution


@pytest.mark.slow
def test_prefill_bound_workload(tmp_path: Path) -> None:
    with start_sim(tmp_path, "--max-model-len", "16384") as sim:
        run = _run(sim.url, WorkloadSpec(isl=12000, osl=8, calibrate=False), 1, 8)
    s = run.meta["signals"]
    # One request at a time: no queue; the engine's TTFT is the client's, less the path.
    assert s["queue_time_p99_ms"] < 5
    ttft = [(r.chunk_ns[0] - r.sent_ns) / 1e6 for r in run.records if r.ok]
    assert s["ttft_p50_ms"] == pytest.approx(sorted(ttft)[len(ttft) // 2], rel=0.25)
    v = evaluate(run, "ttft_p99 < 10")
    assert v.attribution and v.attribution[0].endswith(
        "prefill-bound (computing the prompts takes the time)"
    ), v.attribution


async def _delay_proxy(target_port: int, delay_s: float):  # type: ignore[no-untyped-def]
    """A TCP proxy on loopback that holds each response's first bytes back ``delay_s``:
    a slow network or API server between the client and the engine."""
    import asyncio

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", target_port)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, hold: bool) -> None:
            first = True
            try:
                while data := await src.read(65536):
                    if hold and first:
                        await asyncio.sleep(delay_s)
                    first = False
                    if hold and data.startswith(b"HTTP/1.1"):
                        first = True  # the next response on this connection waits too
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_w, False), pipe(up_r, writer, True))

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_client_or_network_bound(tmp_path: Path) -> None:
    import asyncio
    import threading

    with start_sim(tmp_path, "--max-model-len", "4096") as sim:
        port = int(sim.url.rsplit(":", 1)[1])
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(_delay_proxy(port, 0.25))
        t = threading.Thread(target=loop.run_forever, daemon=True)
        t.start()
        try:
            proxy = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            scraper = Scraper(
                [sim.url + "/metrics"], ScrapeSettings(interval_s=0.2), nvml=False
            ).start()
            scraper.mark_measuring()
            run = run_load_sync(LoadJob(
                ClientSettings(base_url=proxy, model=MODEL, fresh_connection=True),
                WorkloadSpec(isl=64, osl=8, calibrate=False), LoadLevel.concurrency(2),
                requests=12, warmup=0,
            ))  # fmt: skip
            sig = scraper.stop()
        finally:
            loop.call_soon_threadsafe(server.close)
            loop.call_soon_threadsafe(loop.stop)
            t.join(5)
    run = dataclasses.replace(run, meta={**run.meta, "signals": sig.to_dict()})
    assert all(r.ok for r in run.records)
    v = evaluate(run, "ttft_p99 < 100")
    assert v.attribution and "client/network-bound" in v.attribution[0], v.attribution
    assert "is spent between the client and the engine" in v.attribution[0]


def _gauges(url: str, c: int, duration_s: float) -> dict[str, float]:
    """The gauges of a closed loop at ``c`` over ``duration_s``, scraped every 0.25 s, the
    scraper told "measuring" at every progress report as the session tells it."""
    scraper = Scraper([url + "/metrics"], ScrapeSettings(interval_s=0.25), nvml=False).start()

    def progress(p) -> None:  # type: ignore[no-untyped-def]
        if p.phase == "measuring":
            scraper.mark_measuring()

    wl = WorkloadSpec(isl=64, osl=96, calibrate=False)
    run_load_sync(LoadJob(
        ClientSettings(base_url=url, model=MODEL), wl, LoadLevel.concurrency(c),
        requests=None, warmup=c, duration_s=duration_s, progress=progress,
    ))  # fmt: skip
    return scraper.stop().to_dict()


@pytest.mark.parametrize(
    ("c", "seqs", "running", "waiting"),
    [
        (4, "62", 4.0, 0.0),
        pytest.param(48, "62", 48.0, 0.0, marks=pytest.mark.slow),
        pytest.param(48, "16", 16.0, 32.0, marks=pytest.mark.slow),
    ],
    ids=["c4", "c48", "c48-past-saturation"],
)
def test_gauges_are_sampled_while_the_load_runs(
    tmp_path: Path, c: int, seqs: str, running: float, waiting: float
) -> None:
    # The sim's scheduler knows the truth: a closed loop at c keeps c requests in the
    # engine, all running below --max-num-seqs, the rest waiting above it. The time-weighted
    # means read within 15 % of c (plus 1.5 requests: the client's gap between one
    # request's end and the next one's send), from a sample about every 0.25 s.
    with start_sim(tmp_path, "--max-num-seqs", seqs, "--max-model-len", "4096") as sim:
        s = _gauges(sim.url, c, 4.0)
    assert s["gauge_samples"] >= 8, s
    tolerance = 0.15 * c + 1.5
    assert abs(s["running_mean"] - running) <= tolerance, s
    assert abs(s["waiting_mean"] - waiting) <= tolerance, s
    assert s["running_max"] <= float(seqs)
    assert s["running_max"] <= c
    assert 0.0 < s["kv_usage_mean"] <= s["kv_usage_max"] <= 1.0
