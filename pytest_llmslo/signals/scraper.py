"""Scraping engine /metrics around and during a load level, off the load's hot path.

``Scraper`` runs in a thread of its own: it scrapes every URL (an engine's /metrics;
Dynamo's frontend and its workers) once when started, again when the level's measured
part begins (``mark_measuring``: the baseline of counters and histograms, so warm-up is
not counted), then about every ``interval_s`` (the gauges' samples), and a last time in
``stop``, which returns the level's ``LevelSignals``. A load worker's event loop never
scrapes or parses: with several client processes the load runs in other processes
altogether, and in one process the scrapes are an HTTP GET and a parse once a second on
another thread (benchmarks/bench_signals.py measures what that costs).

Nothing here fails a level, and nothing here can hold one: every scrape is bounded as a
whole (``deadline_s``: connect, headers and the whole body; ``probe.fetch``) and in size
(``max_bytes``), so a /metrics whose body never ends (endless or trickling) costs one
deadline, and is not scraped again in that level. A /metrics that is missing (connection
refused, 404), slow, endless or malformed leaves the signals absent with a ``note`` that
says why (secrets masked: ``redact``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..probe import MAX_BYTES, BodyTooLarge, ExchangeTooSlow, fetch
from ..redact import redact, redact_url
from .exposition import ExpositionError, Snapshot, parse
from .gpu import NvmlSampler, from_dcgm
from .levelsignals import LevelSignals, compute
from .names import wanted

#: The families a scrape parses: all the signals' at the level's start and end, the
#: gauges' alone in between (their samples are all that is read of those scrapes).
_ALL = wanted()
_GAUGES = wanted(("gauge", "ratio"))


@dataclass(frozen=True)
class ScrapeSettings:
    """How a ``Scraper`` scrapes: how often (``interval_s``, between the gauges'
    samples), how long one scrape may take (``timeout_s`` for the HTTP client,
    ``deadline_s`` for connect, headers and the whole body), how large a body may be, and
    what the requests carry (``headers``; ``verify``: TLS verification, as httpx takes
    it)."""

    interval_s: float = 1.0
    timeout_s: float = 2.0
    deadline_s: float = 5.0
    max_bytes: int = MAX_BYTES
    headers: Mapping[str, str] = field(default_factory=dict)
    verify: Any = True


class Scraper:
    def __init__(
        self,
        urls: Sequence[str],
        settings: ScrapeSettings | None = None,
        *,
        dcgm_url: str | None = None,
        nvml: bool = True,
    ) -> None:
        import httpx

        cfg = settings if settings is not None else ScrapeSettings()
        self.urls = list(urls)
        self.dcgm_url = dcgm_url
        self.interval_s = cfg.interval_s
        self._client = httpx.Client(
            timeout=cfg.timeout_s, trust_env=False, verify=cfg.verify, headers=dict(cfg.headers)
        )
        self._timeout_s = cfg.timeout_s
        self._deadline_s = max(cfg.deadline_s, 0.01)
        self._max_bytes = cfg.max_bytes
        # URLs given up for this level: their body did not end (or was too large).
        self._dead: set[str] = set()
        self._stop = threading.Event()
        self._measuring = threading.Event()
        # Set by mark_measuring and stop: the thread takes the baseline (or ends) at once,
        # not at its next tick, so that a short level is counted from its start.
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._before: Snapshot | None = None
        self._dcgm_before: Snapshot | None = None
        self._during: list[Snapshot] = []
        self._dcgm_during: list[Snapshot] = []
        self._errors: dict[str, str] = {}
        self._thread: threading.Thread | None = None
        self._nvml = NvmlSampler.open() if nvml else None
        self.cpu_s = 0.0  # the scraping thread's CPU time
        self.stopped = False
        self._result: LevelSignals | None = None

    # -- scraping ----------------------------------------------------------------------

    def _get(self, url: str, families: frozenset[str] = _ALL) -> Snapshot | None:
        import httpx

        if url in self._dead:
            return None
        shown = redact_url(url)
        try:
            resp = fetch(self._client, url, total_s=self._deadline_s, max_bytes=self._max_bytes)
        except (BodyTooLarge, ExchangeTooSlow) as exc:
            self._dead.add(url)
            self._error(url, f"GET {shown}: {exc}; not scraped again in this level")
            return None
        except httpx.TimeoutException:
            self._error(url, f"GET {shown} timed out after {self._timeout_s:g} s")
            return None
        except httpx.HTTPError as exc:
            self._error(url, f"GET {shown} failed: {type(exc).__name__}: {exc}")
            return None
        if resp.status_code != 200:
            self._error(url, f"GET {shown} answered HTTP {resp.status_code}")
            return None
        try:
            return parse(resp.text, families)
        except ExpositionError as exc:
            self._error(url, f"GET {shown}: {exc}")
            return None

    def _error(self, url: str, text: str) -> None:
        self._errors.setdefault(url, redact(text))

    def _scrape(self, families: frozenset[str] = _ALL) -> Snapshot | None:
        merged: Snapshot | None = None
        for url in self.urls:
            snap = self._get(url, families)
            if snap is None:
                continue
            if merged is None:
                merged = snap
            else:
                merged.merge(snap)
        if merged is not None:
            merged.t = time.monotonic()
        return merged

    def _tick(self, baseline: bool) -> None:
        c0 = time.thread_time()
        snap = self._scrape(_ALL if baseline else _GAUGES)
        dcgm = self._get(self.dcgm_url) if self.dcgm_url else None
        if self._nvml is not None and not baseline:
            self._nvml.sample()
        with self._lock:
            if baseline:
                if snap is not None:
                    self._before = snap
                self._dcgm_before = dcgm or self._dcgm_before
                self._during.clear()
                self._dcgm_during.clear()
            else:
                if snap is not None:
                    self._during.append(snap)
                if dcgm is not None:
                    self._dcgm_during.append(dcgm)
        self.cpu_s += time.thread_time() - c0

    def _run(self) -> None:
        self._tick(baseline=True)
        measuring_seen = False
        while not self._stop.is_set():
            if self._measuring.is_set() and not measuring_seen:
                measuring_seen = True
                self._tick(baseline=True)
                if self._nvml is not None:
                    self._nvml = NvmlSampler(self._nvml._nvml, self._nvml._handles)
                continue
            woke = self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            if woke:
                continue  # the measured part began: the baseline, at the loop's top
            self._tick(baseline=False)

    # -- the level ---------------------------------------------------------------------

    def start(self) -> Scraper:
        self._thread = threading.Thread(target=self._run, name="llmslo-signals", daemon=True)
        self._thread.start()
        return self

    def mark_measuring(self) -> None:
        """The measured part begins (thread-safe, returns at once). Only the first call
        wakes the thread: the load's progress says "measuring" about four times a second,
        and a wake-up each time would keep the thread from ever taking a gauge sample."""
        if self._measuring.is_set():
            return
        self._measuring.set()
        self._wake.set()

    def stop(self) -> LevelSignals:
        """End the level: the last scrape, and its signals (the same on a second call)."""
        if self._result is not None:
            return self._result
        self.stopped = True
        self._result = self._finish()
        return self._result

    def _finish(self) -> LevelSignals:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            # A scrape in progress ends within its deadline (plus one read timeout).
            self._thread.join((self._deadline_s + self._timeout_s) * (len(self.urls) + 1) + 1)
        c0 = time.thread_time()
        after = self._scrape()
        dcgm_after = self._get(self.dcgm_url) if self.dcgm_url else None
        self.cpu_s += time.thread_time() - c0
        self._client.close()
        with self._lock:
            before, during = self._before, list(self._during)
            dcgm_before, dcgm_during = self._dcgm_before, list(self._dcgm_during)
        gpu = None
        if dcgm_before is not None and dcgm_after is not None:
            gpu = from_dcgm(dcgm_before, dcgm_during, dcgm_after)
        elif self._nvml is not None:
            gpu = self._nvml.result()
        note = "; ".join(dict.fromkeys(self._errors.values())) or None
        if before is None or after is None:
            why = note or "no scrape of /metrics succeeded"
            return LevelSignals(sources=tuple(self.urls), note=f"no engine signals: {why}", gpu=gpu)
        return compute(before, during, after, self.urls, note=note, gpu=gpu)
