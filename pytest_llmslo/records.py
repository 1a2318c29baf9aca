"""Stage 3 of a level (records): the ``Run`` a load measured, one record a request.

Raw measurements: one ``RequestRecord`` per request and the ``Run`` that holds them.

Every timestamp is ``time.perf_counter_ns()`` taken by the load generator, stored as an int
of nanoseconds on one clock (the parent process's; worker processes share the same
monotonic clock on Linux). Nothing here is derived: metrics come later from ``metrics.py``,
so a record can always be re-analysed with other definitions.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from . import arrivals
from .runmeta import RunMeta

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


#: A server's ``usage.completion_tokens`` agrees with the stream when it is within this many
#: tokens of the tokens that streamed, or within this share of them, whichever is larger
#: (an end-of-sequence token that decodes to no text, a reasoning parser's swallowed
#: ``</think>``, text a detokenizer held back into the next chunk). Beyond it, or above the
#: ``max_tokens`` the request sent, the count is not credited (``RequestRecord.credit``).
USAGE_TOLERANCE_TOKENS = 2
USAGE_TOLERANCE_SHARE = 0.05


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
    #: Multi-turn: the conversation this request is a turn of (-1: single-turn) and the
    #: turn's index in it (0 = the first).
    session: int = -1
    turn: int = 0

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
    def streamed_tokens(self) -> int:
        """The tokens the client saw stream: the per-chunk counts when the server gave them
        (token ids, per-chunk usage), else one per output chunk (each carried at least
        one; more per chunk cannot be known without the server saying so)."""
        return sum(self.chunk_tokens) if self.chunk_tokens else len(self.chunk_ns)

    def credit(self) -> tuple[int, bool]:
        """(output tokens credited to the request, whether its usage disagreed).

        The server's ``usage.completion_tokens`` N is credited when it agrees with the S
        streamed tokens (|N − S| within ``USAGE_TOLERANCE_TOKENS`` or
        ``USAGE_TOLERANCE_SHARE`` of S) and does not exceed the ``max_tokens`` the
        request sent; otherwise usage *disagrees* and S is credited, so no number rests on
        a count the client did not see (a server that streams 4 chunks and claims 1000
        tokens would read as 1 ms per token). Never more than ``requested_output_tokens``."""
        streamed = self.streamed_tokens
        n = self.completion_tokens
        cap = self.requested_output_tokens
        mismatch = n is not None and (
            bool(cap and n > cap)
            or abs(n - streamed) > max(USAGE_TOLERANCE_TOKENS, USAGE_TOLERANCE_SHARE * streamed)
        )
        tokens = streamed if n is None or mismatch or not self.chunk_ns else n
        return (min(tokens, cap) if cap else tokens), mismatch

    @property
    def output_tokens(self) -> int:
        """The output tokens credited to the request (:meth:`credit`): the server's usage
        when it agrees with the stream, else the streamed tokens."""
        return self.credit()[0]

    @property
    def usage_mismatch(self) -> bool:
        """The server's usage disagreed with the stream (:meth:`credit`)."""
        return self.credit()[1]

    def to_dict(self) -> dict[str, Any]:
        d = {
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
        if self.session >= 0:
            d["session"] = self.session
            d["turn"] = self.turn
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestRecord:
        kw = dict(d)
        kw["chunk_ns"] = kw.get("chunk_ns", ())
        kw["chunk_tokens"] = kw.get("chunk_tokens", ())
        return cls(**kw)


LoadMode = Literal["concurrency", "rate"]
#: The built-in arrivals; a process registered later (``arrivals.register``) is a ``str``.
Arrival = Literal["closed", "constant", "poisson", "gamma", "trace"]
#: The arrivals of a rate level: the registry's processes (``arrivals.py``), then ``trace``.
ARRIVALS: tuple[str, ...] = (*arrivals.names(), "trace")

#: A rate profile: segments of ``(seconds, rate at the start, rate at the end)``, the
#: rate linear in between (a ramp), or equal at both ends (a step).
Profile = tuple[tuple[float, float, float], ...]


_num = arrivals.num


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """One load level.

    - a closed loop at ``value`` concurrent requests (or concurrent sessions, for a
      multi-turn workload);
    - an open loop at ``value`` requests (or sessions) per second, arrivals ``constant``,
      ``poisson`` or ``gamma`` (``burstiness`` is the gamma shape: 1 is Poisson, below 1
      burstier, above 1 more regular; vLLM bench's ``--burstiness``), or any process
      registered in ``arrivals.py`` (its parameters in ``arrival_params``), all seeded. A
      ``profile`` makes the rate vary over time (``ramp``, ``steps``); ``value`` is then
      its mean rate;
    - a trace replay (``arrival="trace"``): requests leave at the workload trace's
      timestamps divided by ``value``, the speed-up (2 = twice as fast);
    - ``max_concurrency`` caps the requests in flight of any open loop (vLLM bench's
      ``--max-concurrency``): an arrival that finds the cap reached waits for a slot.
    """

    mode: LoadMode
    value: float
    arrival: Arrival = "closed"
    seed: int = 0
    burstiness: float = 1.0
    profile: Profile = ()
    max_concurrency: int | None = None
    #: The parameters of a registered process other than the gamma's ``burstiness``, as
    #: ``(name, value)`` pairs sorted by name (a mapping is accepted); those left out take
    #: the registry's defaults.
    arrival_params: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in ("concurrency", "rate"):
            raise ValueError(f"load mode must be 'concurrency' or 'rate', got {self.mode!r}")
        if self.mode == "concurrency" and self.arrival != "closed":
            raise ValueError("a concurrency level is a closed loop (arrival='closed')")
        if self.mode == "rate" and self.arrival not in (*arrivals.names(), "trace"):
            known = (*arrivals.names(), "trace")
            raise ValueError(
                f"a rate level needs arrival {', '.join(map(repr, known))}, got {self.arrival!r}"
            )
        if not self.value > 0 or not math.isfinite(self.value):
            raise ValueError(f"load level must be > 0, got {self.value!r}")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise ValueError(f"burstiness must be > 0, got {self.burstiness!r}")
        params = dict(self.arrival_params)
        if "burstiness" in params:
            raise ValueError("burstiness is a field of its own: LoadLevel(..., burstiness=k)")
        object.__setattr__(
            self, "arrival_params", tuple(sorted((k, float(v)) for k, v in params.items()))
        )
        arrivals.check_params(self.arrival, self._given_params())
        if self.max_concurrency is not None:
            if self.mode != "rate":
                raise ValueError("max_concurrency caps an open loop (a rate or trace level)")
            if self.max_concurrency < 1:
                raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency!r}")
        if self.profile:
            if self.mode != "rate" or self.arrival == "trace":
                raise ValueError("a rate profile (ramp, steps) belongs to a rate level")
            object.__setattr__(
                self, "profile", tuple(tuple(float(x) for x in seg) for seg in self.profile)
            )
            for secs, a, b in self.profile:
                if not (secs > 0 and a >= 0 and b >= 0 and a + b > 0):
                    raise ValueError(
                        f"a profile segment needs seconds > 0 and rates >= 0 (not both 0), "
                        f"got {(secs, a, b)}"
                    )

    @classmethod
    def concurrency(cls, n: int) -> LoadLevel:
        return cls("concurrency", float(n), "closed")

    @classmethod
    def rate(
        cls,
        rps: float,
        arrival: Arrival = "poisson",
        seed: int = 0,
        *,
        burstiness: float = 1.0,
        max_concurrency: int | None = None,
        params: Mapping[str, float] | None = None,
    ) -> LoadLevel:
        """An open loop at ``rps``; ``params`` are a registered process's parameters."""
        pairs = tuple((params or {}).items())
        return cls("rate", float(rps), arrival, seed, burstiness, (), max_concurrency, pairs)

    @classmethod
    def ramp(
        cls,
        start: float,
        end: float,
        seconds: float,
        arrival: Arrival = "poisson",
        seed: int = 0,
        **kw: Any,
    ) -> LoadLevel:
        """The rate rises (or falls) linearly from ``start`` to ``end`` over ``seconds``."""
        return cls.shaped(((seconds, start, end),), arrival, seed, **kw)

    @classmethod
    def steps(
        cls,
        rates: Iterable[float],
        seconds: float,
        arrival: Arrival = "poisson",
        seed: int = 0,
        **kw: Any,
    ) -> LoadLevel:
        """Each rate held for ``seconds``, one after the other."""
        return cls.shaped(tuple((seconds, r, r) for r in rates), arrival, seed, **kw)

    @classmethod
    def shaped(
        cls, profile: Profile, arrival: Arrival = "poisson", seed: int = 0, **kw: Any
    ) -> LoadLevel:
        segs = tuple((float(s), float(a), float(b)) for s, a, b in profile)
        if not segs:
            raise ValueError("a rate profile needs at least one segment")
        total = sum(s for s, _, _ in segs)
        arrivals = sum(s * (a + b) / 2 for s, a, b in segs)
        mean = arrivals / total if total > 0 else 0.0
        return cls("rate", mean, arrival, seed, profile=segs, **kw)

    @classmethod
    def trace(cls, speed: float = 1.0, *, max_concurrency: int | None = None) -> LoadLevel:
        """Replay the workload's trace at ``speed`` times its own pace."""
        return cls("rate", float(speed), "trace", max_concurrency=max_concurrency)

    def scaled(self, value: float) -> LoadLevel:
        """The same level at another ``value`` (a sweep's extension, a capacity probe): a
        profile's rates scaled in proportion, everything else kept."""
        if not self.profile:
            return replace(self, value=float(value))
        k = float(value) / self.value
        return replace(
            self, value=float(value), profile=tuple((s, a * k, b * k) for s, a, b in self.profile)
        )

    def _given_params(self) -> dict[str, float]:
        given = dict(self.arrival_params)
        if self.burstiness != 1.0:
            given["burstiness"] = self.burstiness
        return given

    @property
    def params(self) -> dict[str, float]:
        """The arrival process's parameters, defaults included (none for a closed loop or
        a trace)."""
        return arrivals.check_params(self.arrival, self._given_params())

    @property
    def profile_s(self) -> float:
        """The profile's length in seconds (0: no profile)."""
        return sum(s for s, _, _ in self.profile)

    @property
    def label(self) -> str:
        """Short id used in test ids and tables: ``c32``, ``r2.5``, ``r2-8`` (a ramp),
        ``r2/4/8`` (steps), ``r4g0.5`` (gamma, burstiness 0.5), ``x2`` (a trace at twice
        its pace), with ``m16`` appended for a cap of 16 requests in flight."""
        if self.mode == "concurrency":
            return f"c{_num(self.value)}"
        if self.arrival == "trace":
            text = f"x{_num(self.value)}"
        elif self.profile:
            if all(a == b for _, a, b in self.profile):
                text = "r" + "/".join(_num(a) for _, a, _ in self.profile)
            else:
                points = [_num(self.profile[0][1])] + [_num(b) for _, _, b in self.profile]
                text = "r" + "-".join(points)
        else:
            text = f"r{_num(self.value)}"
        if self.arrival != "trace":
            text += arrivals.get(self.arrival).suffix(self.params)
        if self.max_concurrency is not None:
            text += f"m{self.max_concurrency}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "mode": self.mode,
            "value": self.value,
            "arrival": self.arrival,
            "seed": self.seed,
        }
        if self.burstiness != 1.0:
            d["burstiness"] = self.burstiness
        if self.profile:
            d["profile"] = [list(seg) for seg in self.profile]
        if self.max_concurrency is not None:
            d["max_concurrency"] = self.max_concurrency
        if self.arrival_params:
            d["arrival_params"] = dict(self.arrival_params)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoadLevel:
        cap = d.get("max_concurrency")
        return cls(
            d["mode"],
            float(d["value"]),
            d.get("arrival", "closed"),
            int(d.get("seed", 0)),
            float(d.get("burstiness", 1.0)),
            tuple(tuple(seg) for seg in d.get("profile", ())),
            None if cap is None else int(cap),
            tuple((k, float(v)) for k, v in (d.get("arrival_params") or {}).items()),
        )


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
    receive_stamps: str = "read"  # "kernel": arrival stamps (stamped.py); "read": the read's
    idle_share: float = 0.0  # closed loop: share of slot time spent waiting for the client
    #: The load applied against the load asked (``load.health.applied_load``): ``in_flight``
    #: (a closed loop's time-averaged requests in flight) or ``arrival_rate`` (an open
    #: loop's requests/s); "" when there was too little to say.
    load_kind: str = ""
    load_asked: float = 0.0
    load_achieved: float = 0.0

    @property
    def load_share(self) -> float:
        """The load applied as a share of the load asked (1.0 when not measured)."""
        return self.load_achieved / self.load_asked if self.load_asked > 0 else 1.0

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
            "receive_stamps": self.receive_stamps,
            "idle_share": self.idle_share,
            "load_kind": self.load_kind,
            "load_asked": self.load_asked,
            "load_achieved": self.load_achieved,
            "load_share": self.load_share,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClientHealth:
        kw = dict(d)
        kw["reasons"] = tuple(kw.get("reasons", ()))
        kw.pop("load_share", None)  # derived
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class Run:
    """The measured part of one load run at one level (warm-up already discarded).

    ``start_ns``/``end_ns`` bound the measured window: from the first measured request's
    send to the last measured request's last byte (or the moment a request still in flight
    was cut). ``records`` holds every measured request that was sent, those the run's end
    cut included (``error_kind="cancelled"``). ``meta`` holds the constants that make the
    run reproducible (engine, model, workload, endpoint, ...) and what happened around it,
    a typed ``runmeta.RunMeta`` (a JSON object given here is read into one).

    ``records`` is a sequence sorted by index: a tuple, or, for a run the load generator
    measured, its ``recordstore.RecordStore`` (columns in memory up to a bound and in files
    beyond it; each record built when it is read).
    """

    level: LoadLevel
    records: Sequence[RequestRecord]
    start_ns: int
    end_ns: int
    warmup_requests: int = 0
    health: ClientHealth = field(default_factory=ClientHealth)
    meta: RunMeta = field(default_factory=RunMeta)

    def __post_init__(self) -> None:
        if not isinstance(self.meta, RunMeta):  # a JSON object: read into its fields
            object.__setattr__(self, "meta", RunMeta.from_dict(self.meta))

    @property
    def duration_s(self) -> float:
        return max(self.end_ns - self.start_ns, 0) / 1e9

    @property
    def valid(self) -> bool:
        return self.health.valid

    @property
    def ok_count(self) -> int:
        """How many records completed (read from the store's columns where there is one)."""
        ok = getattr(self.records, "ok", None)
        if callable(ok):
            return int(ok().sum())
        return sum(1 for r in self.records if r.ok)

    @property
    def ok_records(self) -> tuple[RequestRecord, ...]:
        return self._where_ok(True)

    @property
    def failed_records(self) -> tuple[RequestRecord, ...]:
        return self._where_ok(False)

    def _where_ok(self, want: bool) -> tuple[RequestRecord, ...]:
        ok = getattr(self.records, "ok", None)
        if callable(ok):  # a store: only the records asked for are built
            rows = (ok() == want).nonzero()[0].tolist()
            return tuple(self.records[i] for i in rows)
        return tuple(r for r in self.records if r.ok == want)

    def to_dict(self, *, with_records: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "level": self.level.to_dict(),
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "warmup_requests": self.warmup_requests,
            "health": self.health.to_dict(),
            "meta": self.meta.to_dict(),
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
            meta=RunMeta.from_dict(d.get("meta", {})),
        )
