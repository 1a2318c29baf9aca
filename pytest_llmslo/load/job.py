"""Stage 2 of a level (job): ``LoadJob``, what the load generator is asked to run.

What a load is asked to do: one ``LoadJob`` (the level, the workload and its request
counts, the client, the bounds, the health thresholds, the callbacks), and the progress
reports it makes. ``runner.run_load`` takes one; ``jobsource.py`` is another thing, the
requests a worker builds from the workload's seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..errors import LoadError
from ..records import LoadLevel, RequestRecord
from ..recordstore import DEFAULT_LIMIT
from .backlog import DEFAULT_BUDGET
from .client import ClientSettings
from .health import HealthThresholds
from .workload import WorkloadSpec

__all__ = ["EarlyStop", "LoadJob", "Phase", "Progress", "RemoteWorkers"]

Phase = Literal["calibrating", "warm-up", "measuring", "draining"]

#: Sees the records decoded so far; returns why the level may stop now, or None.
EarlyStop = Callable[[Sequence[RequestRecord]], "str | None"]


class RemoteWorkers(Protocol):
    """Where a level's remote workers come from (``remote.WorkerHub``): ``ensure`` waits
    for them (bounded) and returns their connections (``remote.RemoteLink``)."""

    def ensure(self, say: Callable[[str], None] | None = None) -> Sequence[Any]: ...


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress report: ``done`` of ``total`` requests of the current ``phase``
    (``total`` 0: bounded by time alone; ``calibrating``: probes; ``draining``: the
    duration bound passed or the level stopped early, the requests in flight may finish).
    ``left_s`` is the time to the level's bound, when it has one."""

    done: int
    total: int
    failed: int
    elapsed_s: float
    warmup: bool
    phase: Phase = "measuring"
    left_s: float | None = None


@dataclass(frozen=True, slots=True)
class LoadJob:
    """One level's load: ``warmup`` + ``requests`` requests of ``workload`` sent by a
    client of ``client`` settings at ``level``.

    - what: ``client``, ``workload``, ``level``;
    - how much: ``requests`` measured (None: until ``duration_s``; a trace: its length)
      after ``warmup`` discarded;
    - limits: ``duration_s`` from the first measured send, ``grace_s`` for the requests
      in flight after it, ``level_timeout_s`` over every phase (see ``runner``);
    - health: ``thresholds`` (None: the defaults of ``HealthThresholds``);
    - callbacks: ``progress`` gets ``Progress`` reports, ``early_stop`` sees the records
      decoded so far and says why the level may stop;
    - ``meta`` goes into ``Run.meta`` as given; ``defer_bytes`` is the decoding budget of
      ``backlog.py`` (the parent's, whatever the number of worker processes);
      ``records_memory`` the bytes of decoded records kept in memory, the rest written to
      files until the run is released (``recordstore.RecordStore``; None: no bound);
    - ``workers``: remote workers to run the level on (``remote.WorkerHub``, one plan a
      worker) instead of local worker processes; ``say`` gets what the load has to tell
      (waiting for them).
    """

    client: ClientSettings
    workload: WorkloadSpec
    level: LoadLevel
    requests: int | None
    warmup: int = 200
    duration_s: float | None = None
    grace_s: float = 30.0
    level_timeout_s: float | None = None
    thresholds: HealthThresholds | None = None
    progress: Callable[[Progress], None] | None = field(default=None, compare=False)
    early_stop: EarlyStop | None = field(default=None, compare=False)
    meta: Mapping[str, Any] | None = None
    defer_bytes: int = DEFAULT_BUDGET
    records_memory: int | None = DEFAULT_LIMIT
    workers: RemoteWorkers | None = field(default=None, compare=False)
    say: Callable[[str], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.requests is None and self.duration_s is None and self.level.arrival != "trace":
            raise LoadError("a level needs a request count, a duration, or both (a trace: neither)")
        if self.requests is not None and self.requests < 1:
            raise LoadError(f"requests must be >= 1, got {self.requests}")
        if self.warmup < 0:
            raise LoadError(f"warmup must be >= 0, got {self.warmup}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise LoadError(f"duration_s must be > 0, got {self.duration_s}")
        if not self.grace_s >= 0:
            raise LoadError(f"grace_s must be >= 0, got {self.grace_s}")
        if self.level_timeout_s is not None and not self.level_timeout_s > 0:
            raise LoadError(f"level_timeout_s must be > 0, got {self.level_timeout_s}")
        if self.records_memory is not None and self.records_memory < 0:
            raise LoadError(f"records_memory must be >= 0 bytes, got {self.records_memory}")

    @property
    def health(self) -> HealthThresholds:
        return self.thresholds or HealthThresholds()
