"""What resolution gives: ``SessionSettings``, one per session, and ``TestSettings``, one per
SLO test, made of the groups that the components take (``groups.py``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from pytest_llmslo.choices import ResetCacheMode
from pytest_llmslo.engines.scaling import ScaleUp
from pytest_llmslo.faults.faultspec import Fault
from pytest_llmslo.records import LoadLevel
from pytest_llmslo.slo.quality import QualityObjective

from .groups import (
    ClientOptions,
    GateOptions,
    HealthOptions,
    LoadOptions,
    SignalsOptions,
    SweepOptions,
    WorkloadOptions,
)


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """Session-wide settings (engines, files, regression); one per pytest session."""

    engines: tuple[str, ...] = ("sim",)
    engine_url: str | None = None
    engine_config: str | None = None
    engine_opts: tuple[str, ...] = ()
    engine_restarts: int = 1
    sim_profile: str | None = None
    json_path: str | None = None
    markdown_path: str | None = None
    svg_path: str | None = None
    csv_path: str | None = None
    html_path: str | None = None
    save: str | None = None
    compare: str | None = None
    compare_fail: str | None = None
    #: The run history's directory (None: ``.llmslo/runs``; ``none``: off), newest runs
    #: kept and the age limit in days (0: none).
    history: str | None = None
    history_keep: int = 100
    history_days: float = 0.0
    external_ready_timeout_s: float = 60.0
    #: Remote load workers: where the session listens (None: local worker processes), how
    #: many it waits for, and how long.
    worker_listen: str | None = None
    remote_workers: int = 1
    worker_wait_s: float = 120.0
    #: The workers' image, to start them as a Kubernetes Indexed Job, and the address
    #: they connect to.
    worker_image: str | None = None
    worker_advertise: str | None = None
    #: Where the workers' key is, and TLS on their link (certificate, key, the CA of the
    #: workers' certificates for mutual TLS).
    worker_key_file: str | None = None
    worker_tls_cert: str | None = None
    worker_tls_key: str | None = None
    worker_tls_ca: str | None = None
    #: The path of every output setting (topic ``outputs``: ``slo_json`` and each report
    #: format's ``slo_<name>``) by setting name; None where none was asked for.
    outputs: Mapping[str, str | None] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    #: Problems worth a warning that stop nothing (an ``LLMSLO_*`` variable no setting reads).
    warnings: tuple[str, ...] = ()


# The bases are listed last group first: a dataclass orders the fields of its bases from the
# last base to the first, so the fields read in the order of ``groups.GROUPS``.
@dataclass(frozen=True)
class TestSettings(
    SignalsOptions,
    SweepOptions,
    GateOptions,
    HealthOptions,
    ClientOptions,
    WorkloadOptions,
    LoadOptions,
):
    """What one SLO test runs: its load levels, workload, requests and SLO. Every group's
    fields are its own (``ts.isl``, ``ts.objectives``); ``ts.client_settings(url, model)``,
    ``ts.workload_spec(salt)``, ``ts.health_thresholds()`` and ``ts.gate_kwargs()`` hand them
    to the load generator and the gates."""

    __test__ = False  # not a test class, despite the name

    #: The model to serve and request (``--model``; the engine config's when empty).
    model: str = ""
    reset_cache: ResetCacheMode = "auto"
    #: Capacity added in the middle of each level (``--slo-scale-up``, ``scale_up=``).
    scale_up: ScaleUp | None = None
    #: Faults done in the middle of each level (``--slo-fault``, ``fault=``).
    faults: tuple[Fault, ...] = ()
    #: Objectives on the level's eval answers (``--slo-quality``, ``quality=``).
    quality: tuple[QualityObjective, ...] = ()
    #: The test's own engines (``engines=`` on its marker); empty: the session's.
    engines: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def grace_s(self) -> float:
        """How long requests sent inside the duration may run after it: to their end,
        bounded by their own deadline (``--request-timeout``). Cutting them sooner would
        drop the slowest requests, the tail a P99 is about, and count the harness's cut as
        the engine's failure."""
        return self.request_timeout_s

    def level_bound_s(self, level: LoadLevel | None = None) -> float | None:
        """The wall-clock bound of one level: ``--level-timeout`` when set; by default
        (``auto``) with a duration, what the level can need: its warm-up (each wave of the
        closed loop, or the sends of an open one, plus the longest request the deadlines
        allow), the duration, and the drain of the requests sent in it (the longest again).
        A healthy level is never cut by it: a stalled engine is caught by the request
        deadlines first. None: no bound."""
        if self.level_timeout_s is not None:
            return None if math.isinf(self.level_timeout_s) else self.level_timeout_s
        if not self.duration_s:
            return None
        longest = self.request_timeout_s + self.connect_timeout_s
        warm = self.warmup if level is None else self.warmup_for(level)
        if level is not None and level.mode == "rate" and level.value > 0:
            warm_s = warm / float(level.value) + longest if warm else 0.0
        else:
            per_wave = max(int(level.value), 1) if level is not None else 1
            warm_s = math.ceil(warm / per_wave) * longest
        # Calibration probes (a few requests, each as long as one) come before the warm-up.
        return longest + warm_s + self.duration_s + longest
