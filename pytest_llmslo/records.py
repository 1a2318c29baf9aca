"""Raw measurements: one ``RequestRecord`` per request and the ``Run`` that holds them.

Every timestamp is ``time.perf_counter_ns()`` taken by the load generator, stored as an int
of nanoseconds on one clock (the parent process's; worker processes share the same
monotonic clock on Linux). Nothing here is derived: metrics come later from ``metrics.py``,
so a record can always be re-analysed with other definitions.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

FailureKind = Literal[
    "http",  # non-2xx status
    "stream_error",  # an error event or error object inside the stream
    "timeout",  # connect/read/total timeout
    "connect",  # connection refused or failed
    "reset",  # connection reset or closed mid-stream
    "truncated",  # stream ended without [DONE] / finish
    "malformed",  # a chunk that is not the protocol (bad JSON, wrong shape)
    "no_output",  # a 2xx stream that finished without any chunk carrying output
    "cancelled",  # still in flight when the run ended (duration bound + grace) or was interrupted
]

FAILURE_KINDS: tuple[FailureKind, ...] = (
    "http",
    "stream_error",
    "timeout",
    "connect",
    "reset",
    "truncated",
    "malformed",
    "no_output",
    "cancelled",
)


def _int64s(values: Iterable[int]) -> array[int]:
    return values if isinstance(values, array) and values.typecode == "q" else array("q", values)


def _counts(values: Iterable[int]) -> array[int]:
    """Tokens per chunk; empty when every chunk carried one (the common case costs nothing)."""
    a = values if isinstance(values, array) and values.typecode == "I" else array("I", values)
    return array("I") if a.count(1) == len(a) else a


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one request.

    ``chunk_ns`` holds the arrival time of every chunk that carried output (content or
    reasoning text, or token ids); role-only, empty and usage-only chunks are not in it.
    ``chunk_tokens[i]`` is the number of tokens chunk ``i`` carried when the server said so
    (per-chunk usage deltas or token ids); it is empty when every chunk carried one token.
    ``tokens_exact`` says whether the counts came from the server.
    ``first_content_ns`` is the first chunk carrying *content* (not reasoning): TTFOT.

    Both are compact arrays (``array('q')`` of int64 ns, ``array('I')``), given as any
    sequence of ints: a record of a 100-token stream keeps about 1.2 KB, where tuples of
    Python ints kept 4.8 KB, which is what lets an hour-long soak fit in memory.
    """

    index: int
    scheduled_ns: int
    sent_ns: int
    end_ns: int
    chunk_ns: array[int] = field(default_factory=lambda: array("q"))
    chunk_tokens: array[int] = field(default_factory=lambda: array("I"))
    tokens_exact: bool = False
    first_content_ns: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    requested_prompt_tokens: int | None = None
    requested_output_tokens: int | None = None
    status: int = 0
    error: str | None = None
    error_kind: FailureKind | None = None
    finish_reason: str | None = None
    worker: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "chunk_ns", _int64s(self.chunk_ns))
        object.__setattr__(self, "chunk_tokens", _counts(self.chunk_tokens))

    @property
    def ok(self) -> bool:
        """Completed: 2xx, no in-stream error, stream finished."""
        return self.error_kind is None and 200 <= self.status < 300

    @property
    def first_token_ns(self) -> int | None:
        return self.chunk_ns[0] if self.chunk_ns else None

    @property
    def output_tokens(self) -> int:
        """Server-reported completion tokens, else the tokens counted in the chunks."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return sum(self.chunk_tokens) if self.chunk_tokens else len(self.chunk_ns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "scheduled_ns": self.scheduled_ns,
            "sent_ns": self.sent_ns,
            "end_ns": self.end_ns,
            "chunk_ns": list(self.chunk_ns),
            "chunk_tokens": list(self.chunk_tokens),
            "tokens_exact": self.tokens_exact,
            "first_content_ns": self.first_content_ns,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "requested_prompt_tokens": self.requested_prompt_tokens,
            "requested_output_tokens": self.requested_output_tokens,
            "status": self.status,
            "error": self.error,
            "error_kind": self.error_kind,
            "finish_reason": self.finish_reason,
            "worker": self.worker,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestRecord:
        kw = dict(d)
        kw["chunk_ns"] = kw.get("chunk_ns", ())
        kw["chunk_tokens"] = kw.get("chunk_tokens", ())
        return cls(**kw)


LoadMode = Literal["concurrency", "rate"]
Arrival = Literal["closed", "constant", "poisson"]


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """One load level: a closed loop at ``value`` concurrent requests, or an open loop at
    ``value`` requests per second with constant or Poisson (seeded) arrivals."""

    mode: LoadMode
    value: float
    arrival: Arrival = "closed"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode == "concurrency" and self.arrival != "closed":
            raise ValueError("a concurrency level is a closed loop (arrival='closed')")
        if self.mode == "rate" and self.arrival == "closed":
            raise ValueError("a rate level needs arrival 'constant' or 'poisson'")
        if not self.value > 0:
            raise ValueError(f"load level must be > 0, got {self.value!r}")

    @classmethod
    def concurrency(cls, n: int) -> LoadLevel:
        return cls("concurrency", float(n), "closed")

    @classmethod
    def rate(cls, rps: float, arrival: Arrival = "poisson", seed: int = 0) -> LoadLevel:
        return cls("rate", float(rps), arrival, seed)

    @property
    def label(self) -> str:
        """Short id used in test ids and tables: ``c32``, ``r2.5``."""
        v = int(self.value) if float(self.value).is_integer() else self.value
        return f"c{v}" if self.mode == "concurrency" else f"r{v}"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "value": self.value, "arrival": self.arrival, "seed": self.seed}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoadLevel:
        return cls(d["mode"], float(d["value"]), d.get("arrival", "closed"), int(d.get("seed", 0)))


@dataclass(frozen=True, slots=True)
class ClientHealth:
    """How the load generator itself did. ``valid`` is False when the client, not the
    engine, was the bottleneck; ``reasons`` says why in words."""

    schedule_lag_p50_ms: float = 0.0
    schedule_lag_p99_ms: float = 0.0
    schedule_lag_max_ms: float = 0.0
    loop_lag_p99_ms: float = 0.0
    loop_lag_max_ms: float = 0.0
    cpu_s: float = 0.0
    cpu_util: float = 0.0  # busiest process: CPU seconds / wall seconds (1.0 = a full core)
    processes: int = 1
    valid: bool = True
    reasons: tuple[str, ...] = ()
    stalls: int = 0  # event-loop wakes later than the loop-lag threshold
    stalled_tokens: int = 0  # chunk timestamps taken inside those stall windows
    stalled_share: float = 0.0  # ... as a share of every streamed chunk

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule_lag_p50_ms": self.schedule_lag_p50_ms,
            "schedule_lag_p99_ms": self.schedule_lag_p99_ms,
            "schedule_lag_max_ms": self.schedule_lag_max_ms,
            "loop_lag_p99_ms": self.loop_lag_p99_ms,
            "loop_lag_max_ms": self.loop_lag_max_ms,
            "cpu_s": self.cpu_s,
            "cpu_util": self.cpu_util,
            "processes": self.processes,
            "valid": self.valid,
            "reasons": list(self.reasons),
            "stalls": self.stalls,
            "stalled_tokens": self.stalled_tokens,
            "stalled_share": self.stalled_share,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClientHealth:
        kw = dict(d)
        kw["reasons"] = tuple(kw.get("reasons", ()))
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class Run:
    """The measured part of one load run at one level (warm-up already discarded).

    ``start_ns``/``end_ns`` bound the measured window: from the first measured request's
    send to the last measured request's last byte (or the moment a request still in flight
    was cut). ``records`` holds every measured request that was sent, those the run's end
    cut included (``error_kind="cancelled"``). ``meta`` holds the constants that make the
    run reproducible (engine, model, workload, endpoint, ...), JSON-serialisable.
    """

    level: LoadLevel
    records: tuple[RequestRecord, ...]
    start_ns: int
    end_ns: int
    warmup_requests: int = 0
    health: ClientHealth = field(default_factory=ClientHealth)
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9

    @property
    def valid(self) -> bool:
        return self.health.valid

    @property
    def ok_records(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if r.ok)

    @property
    def failed_records(self) -> tuple[RequestRecord, ...]:
        return tuple(r for r in self.records if not r.ok)

    def to_dict(self, *, with_records: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "level": self.level.to_dict(),
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "warmup_requests": self.warmup_requests,
            "health": self.health.to_dict(),
            "meta": dict(self.meta),
        }
        if with_records:
            d["records"] = [r.to_dict() for r in self.records]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Run:
        return cls(
            level=LoadLevel.from_dict(d["level"]),
            records=tuple(RequestRecord.from_dict(r) for r in d.get("records", ())),
            start_ns=int(d["start_ns"]),
            end_ns=int(d["end_ns"]),
            warmup_requests=int(d.get("warmup_requests", 0)),
            health=ClientHealth.from_dict(d.get("health", {})),
            meta=dict(d.get("meta", {})),
        )
