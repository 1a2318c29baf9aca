"""The scraper against /metrics servers that answer, fail, stall or talk nonsense, and the
GPU telemetry with a fake NVML and a DCGM exporter."""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from expositions import vllm

from pytest_llmslo.signals.exposition import parse
from pytest_llmslo.signals.gpu import NvmlSampler, from_dcgm, per_token
from pytest_llmslo.signals.scraper import Scraper, ScrapeSettings


def serve(respond: Callable[[int], tuple[int, str, float]]) -> Iterator[str]:
    """A /metrics server: ``respond(n)`` gives (status, body, delay) for the n-th scrape."""
    count = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body, delay = respond(count[0])
            count[0] += 1
            time.sleep(delay)
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def growing() -> Iterator[str]:
    # Scrape 0 (start) and 1 (measured part begins) read level 0; later ones level 1.
    yield from serve(lambda n: (200, vllm(0 if n < 2 else 1), 0.0))


def test_a_level_of_scrapes(growing: str) -> None:
    s = Scraper([growing], ScrapeSettings(interval_s=0.05), nvml=False).start()
    s.mark_measuring()
    time.sleep(0.3)
    sig = s.stop()
    assert sig.present and sig.note is None and sig.scrapes >= 4
    assert sig.ttft_mean_ms == pytest.approx(600) and sig.preemptions == 38
    assert sig.kv_usage_max == pytest.approx(0.97)
    assert s.stop() is sig  # idempotent


@pytest.mark.parametrize(
    ("respond", "why"),
    [
        (lambda n: (404, "not found", 0.0), "answered HTTP 404"),
        (lambda n: (200, "<html>{{{ nope", 0.0), "not the Prometheus text format"),
        (lambda n: (200, vllm(0), 1.5), "timed out after 0.3 s"),
    ],
)
def test_bad_metrics_leave_a_note_never_an_error(respond: Callable, why: str) -> None:  # type: ignore[type-arg]
    for url in serve(respond):
        s = Scraper([url], ScrapeSettings(interval_s=0.05, timeout_s=0.3), nvml=False).start()
        time.sleep(0.1)
        sig = s.stop()
        assert not sig.present and sig.note is not None and why in sig.note
        assert sig.note.startswith("no engine signals:")


def test_nothing_listening() -> None:
    s = Scraper(["http://127.0.0.1:9/metrics"], ScrapeSettings(interval_s=0.05), nvml=False).start()
    sig = s.stop()
    assert not sig.present and "failed: ConnectError" in (sig.note or "")


def _fake_nvml(energy: list[float]) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=80 + 10 * h)  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=40 * 2**30)  # type: ignore[attr-defined]
    m.nvmlDeviceGetPowerUsage = lambda h: 350_000  # type: ignore[attr-defined]

    def total_energy(h: int) -> float:
        energy[h] += 50_000.0  # 50 J more at every read
        return energy[h]

    m.nvmlDeviceGetTotalEnergyConsumption = total_energy  # type: ignore[attr-defined]
    return m


def test_nvml_present(monkeypatch: pytest.MonkeyPatch, growing: str) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml([0.0, 0.0]))
    s = Scraper([growing], ScrapeSettings(interval_s=0.05)).start()
    s.mark_measuring()
    time.sleep(0.2)
    sig = s.stop()
    gpu = sig.gpu
    assert gpu is not None and gpu["source"] == "nvml" and gpu["devices"] == 2
    assert gpu["util_pct_mean"] == pytest.approx(85) and gpu["power_w_mean"] == pytest.approx(350)
    assert gpu["mem_used_mib_max"] == pytest.approx(40 * 1024)
    assert gpu["energy_j"] == pytest.approx(100.0)  # 50 J per device between two reads
    assert per_token(gpu, 200) == pytest.approx(0.5)


def test_nvml_energy_is_left_out_when_a_device_has_no_counter() -> None:
    nvml = _fake_nvml([0.0, 0.0])

    def first_only(h: int) -> float:
        if h == 1:  # a card before Volta: no energy counter
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 1000.0

    nvml.nvmlDeviceGetTotalEnergyConsumption = first_only  # type: ignore[attr-defined]
    out = NvmlSampler(nvml, [0, 1]).result()
    assert out["devices"] == 2 and "energy_j" not in out


def test_nvml_absent_or_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    assert NvmlSampler.open() is None
    broken = types.ModuleType("pynvml")

    def no_driver() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    broken.nvmlInit = no_driver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    assert NvmlSampler.open() is None


def test_dcgm_exporter() -> None:
    def dcgm(energy_mj: float, util: float) -> str:
        lines = []
        for name, v in (("DCGM_FI_DEV_GPU_UTIL", util), ("DCGM_FI_DEV_FB_USED", 30000.0),
                        ("DCGM_FI_DEV_POWER_USAGE", 300.0),
                        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy_mj)):  # fmt: skip
            lines.append(f"# TYPE {name} gauge")
            for gpu in (0, 1):
                lines.append(f'{name}{{gpu="{gpu}",UUID="GPU-{gpu}"}} {v}')
        return "\n".join(lines) + "\n"

    got = from_dcgm(parse(dcgm(1e6, 0)), [parse(dcgm(1.5e6, 70))], parse(dcgm(2e6, 90)))
    assert got is not None and got["source"] == "dcgm" and got["devices"] == 2
    assert got["energy_j"] == pytest.approx(2000.0)  # (2e6 - 1e6) mJ on each of 2 GPUs
    assert got["util_pct_mean"] == pytest.approx(70)
    assert from_dcgm(parse(vllm(0)), [], parse(vllm(1))) is None


@pytest.mark.parametrize(
    ("mode", "seen"),
    [("metrics-endless", "is over 1 MiB"), ("metrics-trickle", "did not end within 0.5 s")],
)
def test_a_body_that_never_ends_costs_one_deadline(
    misbehaving: Callable[..., str], mode: str, seen: str
) -> None:
    # Before: httpx's per-read timeout never fired, and the scrape (on the main thread
    # after the load, too) held the session forever.
    url = misbehaving(mode) + "/metrics"
    s = Scraper(
        [url], ScrapeSettings(interval_s=0.05, deadline_s=0.5, max_bytes=1024 * 1024), nvml=False
    )
    s.start()
    s.mark_measuring()
    time.sleep(0.3)
    sig = s.stop()
    assert not sig.present
    assert sig.note is not None and seen in sig.note and "not scraped again" in sig.note
