"""A deployment of engine instances behind a frontend, on one simulated clock.

Two shapes (``Topology``):

- **aggregated**: ``replicas`` data-parallel copies of one engine (each on the profile's
  ``tp`` GPUs), every request served whole by one of them;
- **disaggregated** (Dynamo-like): a prefill pool and a decode pool, each of its own
  instances and tensor parallelism. A request is prefilled on a prefill instance, which
  samples its first token; the KV cache of its prompt then moves to a decode instance over
  the ``link`` (NVLink within a node, InfiniBand across nodes), costed as
  ``latency + KV bytes / (link bandwidth x GPU pairs)``; the decode instance streams the
  first token on arrival, then decodes the rest. Decode steps never carry a prefill, which
  is what keeps inter-token latency flat under load; the price is fewer GPUs per step and
  the transfer.

A frontend routes each new request (after ``frontend_overhead_s``) to a replica or prefill
instance: ``round_robin``, or ``kv`` (Dynamo's KV-aware router): the instance whose prefix
cache holds the longest prefix of the request's blocks, ties to the least loaded.
Transferred requests go to the least loaded decode instance.

Everything is on the simulated clock and does no I/O: ``submit`` a request, ask
``next_event_s`` when something happens next, ``advance`` to a time to get the tokens
emitted until then. The wall-clock server (``server.EngineLoop``) and the fake-clock
sweeps (``offline.py``) drive it the same way.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from dataclasses import replace as _shifted
from typing import Any, Literal

from .costmodel import CostModel
from .scheduler import Scheduler, SchedulerConfig, SchedulerStalled, SchedulerStats, SimRequest

__all__ = [
    "LINKS",
    "Cluster",
    "Emission",
    "Link",
    "Pool",
    "RouterPolicy",
    "Topology",
    "topology_from_mapping",
]

RouterPolicy = Literal["round_robin", "kv"]
Role = Literal["aggregated", "prefill", "decode"]


@dataclass(frozen=True, slots=True)
class Link:
    """How KV moves from a prefill GPU to a decode GPU: bandwidth per GPU pair (bytes/s)
    and a fixed cost per transfer (handshake, descriptor exchange)."""

    name: str
    bandwidth: float
    latency_s: float


#: NVLink 4 within an H100 node (450 GB/s per direction per GPU); InfiniBand NDR
#: (400 Gb/s per GPU) between nodes. Latencies: the transfer setup of NIXL-style engines.
LINKS: dict[str, Link] = {
    "nvlink": Link("NVLink", 450e9, 1.0e-3),
    "ib": Link("InfiniBand NDR 400 Gb/s", 50e9, 2.0e-3),
}


@dataclass(frozen=True, slots=True)
class Pool:
    """``instances`` engine instances of ``tp`` GPUs each."""

    instances: int = 1
    tp: int = 1

    def __post_init__(self) -> None:
        if self.instances < 1 or self.tp < 1:
            raise ValueError(f"a pool needs instances >= 1 and tp >= 1, got {self}")


@dataclass(frozen=True, slots=True)
class Topology:
    """The deployment of a profile (see the module docstring). The default is one
    aggregated instance: a plain engine."""

    mode: Literal["aggregated", "disaggregated"] = "aggregated"
    replicas: int = 1
    prefill: Pool | None = None
    decode: Pool | None = None
    router: RouterPolicy = "round_robin"
    link: str = "nvlink"
    frontend_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in ("aggregated", "disaggregated"):
            raise ValueError(
                f"topology mode must be aggregated or disaggregated, not {self.mode!r}"
            )
        if self.router not in ("round_robin", "kv"):
            raise ValueError(f"router must be round_robin or kv, not {self.router!r}")
        if self.link not in LINKS:
            raise ValueError(f"link must be one of {', '.join(LINKS)}, not {self.link!r}")
        if self.mode == "disaggregated" and (self.prefill is None or self.decode is None):
            raise ValueError("a disaggregated topology needs a prefill and a decode pool")
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")

    @property
    def disaggregated(self) -> bool:
        return self.mode == "disaggregated"

    def gpus(self, tp: int) -> int:
        """GPUs of the whole deployment (``tp``: an aggregated replica's)."""
        if self.prefill is not None and self.decode is not None and self.disaggregated:
            return self.prefill.instances * self.prefill.tp + self.decode.instances * self.decode.tp
        return self.replicas * tp

    def describe(self) -> str:
        if self.disaggregated and self.prefill and self.decode:
            return (
                f"disaggregated: {self.prefill.instances} prefill x TP{self.prefill.tp} + "
                f"{self.decode.instances} decode x TP{self.decode.tp}, {self.router} router, "
                f"KV over {LINKS[self.link].name}"
            )
        if self.replicas > 1:
            return f"aggregated: {self.replicas} replicas, {self.router} router"
        return "aggregated"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "replicas": self.replicas,
            "prefill": None if self.prefill is None else vars_of(self.prefill),
            "decode": None if self.decode is None else vars_of(self.decode),
            "router": self.router,
            "link": self.link,
            "frontend_overhead_s": self.frontend_overhead_s,
        }


def vars_of(pool: Pool) -> dict[str, int]:
    return {"instances": pool.instances, "tp": pool.tp}


def _pool(value: Any, where: str) -> Pool:
    if isinstance(value, Pool):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a table with instances and tp, not {value!r}")
    unknown = sorted(set(value) - {"instances", "tp"})
    if unknown:
        raise ValueError(f"unknown {where} field(s) {unknown}; valid: ['instances', 'tp']")
    return Pool(int(value.get("instances", 1)), int(value.get("tp", 1)))


def topology_from_mapping(d: Mapping[str, Any], base: Topology | None = None) -> Topology:
    """A topology from a JSON table: ``{"mode", "replicas", "prefill": {"instances", "tp"},
    "decode": {...}, "router", "link", "frontend_overhead_s"}``, each field overriding
    ``base`` (default: one aggregated instance). ``ValueError`` names a bad field."""
    base = base or Topology()
    names = {f.name for f in fields(Topology)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(f"unknown topology field(s) {unknown}; valid: {sorted(names)}")
    values: dict[str, Any] = {k: v for k, v in d.items() if k not in ("prefill", "decode")}
    for role in ("prefill", "decode"):
        if d.get(role) is not None:
            values[role] = _pool(d[role], f"topology.{role}")
    if "replicas" in values:
        values["replicas"] = int(values["replicas"])
    if "frontend_overhead_s" in values:
        values["frontend_overhead_s"] = float(values["frontend_overhead_s"])
    return replace(base, **values)


@dataclass(slots=True, eq=False)
class _Instance:
    name: str
    role: Role
    scheduler: Scheduler
    step: Any = None  # the StepResult in progress (its tokens exist at its end)
    stalled_until: float = 0.0  # no step ends before this (a stall, ``stall_replica``)

    @property
    def load(self) -> int:
        s = self.scheduler
        return len(s.running) + len(s.waiting)


@dataclass(frozen=True, slots=True)
class Emission:
    """Token ``index`` of the client's request ``req``, emitted at ``at_s``; ``last`` when
    it is the request's final token."""

    req: SimRequest
    index: int
    at_s: float
    last: bool


@dataclass(slots=True)
class Advance:
    """What happened up to a time: tokens emitted (in time order) and requests that failed
    (an instance could never schedule them), each with why."""

    emitted: list[Emission] = field(default_factory=list)
    failed: list[tuple[SimRequest, str]] = field(default_factory=list)
    #: Requests that found no replica serving (every one killed): the frontend refuses them.
    lost: list[tuple[SimRequest, str]] = field(default_factory=list)


class Cluster:
    """The instances of a topology and the frontend in front of them (module docstring).

    ``configs`` gives each role's scheduler config and cost model:
    ``{"aggregated": (cfg, cost)}`` or ``{"prefill": ..., "decode": ...}``."""

    def __init__(
        self,
        topology: Topology,
        configs: dict[str, tuple[SchedulerConfig, CostModel]],
    ) -> None:
        self.topology = topology
        self.link = LINKS[topology.link]
        self._configs = configs
        self.instances: list[_Instance] = []
        if topology.disaggregated:
            assert topology.prefill is not None and topology.decode is not None
            pools: tuple[tuple[Role, Pool], ...] = (
                ("prefill", topology.prefill),
                ("decode", topology.decode),
            )
            for role, pool in pools:
                cfg, cost = configs[role]
                for i in range(pool.instances):
                    self.instances.append(_Instance(f"{role}{i}", role, Scheduler(cfg, cost)))
        else:
            cfg, cost = configs["aggregated"]
            for i in range(topology.replicas):
                self.instances.append(_Instance(f"replica{i}", "aggregated", Scheduler(cfg, cost)))
        self._front = [i for i in self.instances if i.role != "decode"]
        self._decoders = [i for i in self.instances if i.role == "decode"]
        self._template = self._front[0]  # its config stands for every front instance's
        self._rr = itertools.cycle(range(len(self._front)))
        self._seq = itertools.count()
        # (arrival time, seq, kind, payload): frontend arrivals and KV transfers.
        self._events: list[tuple[float, int, str, Any]] = []
        self._client: dict[SimRequest, SimRequest] = {}  # an instance's request -> client's
        self._where: dict[SimRequest, tuple[_Instance | None, SimRequest | None]] = {}
        self.transfers = 0
        self.transfer_s = 0.0
        self._failed: list[tuple[SimRequest, str]] = []  # stalls found while routing
        #: Replicas added while running (``add_replica``), each with the simulated time it
        #: came up; the server logs them.
        self.replicas_up: list[tuple[str, float]] = []
        self._pending = 0
        self._named = len(self.instances)  # replicas ever named (a new one's number)
        #: What happened to replicas while running, on the simulated clock: (replica,
        #: ``down``/``up``/``stalled``/``resumed``, time, why). The admin endpoint shows it.
        self.replica_log: list[tuple[str, str, float, str]] = []
        self._lost: list[tuple[SimRequest, str]] = []
        self._dead: list[_Instance] = []  # killed replicas (their counters still count)

    # -- the clients' side -----------------------------------------------------------

    @property
    def block_size(self) -> int:
        return self._template.scheduler.config.block_size

    @property
    def enable_prefix_caching(self) -> bool:
        return self._template.scheduler.config.enable_prefix_caching

    def check(self, req: SimRequest) -> None:
        """``ValueError`` when no instance could ever serve ``req`` (as ``Scheduler.add``)."""
        probe = SimRequest(req.rid, req.prompt_tokens, req.max_tokens)
        for inst in (self._template, *self._decoders[:1]):
            cfg = inst.scheduler.config
            need = inst.scheduler.blocks.blocks_for(req.prompt_tokens + req.max_tokens)
            if need > cfg.num_blocks:
                raise ValueError(
                    f"request {req.rid} needs more KV blocks than the {inst.role} instance "
                    f"has ({cfg.num_blocks} blocks of {cfg.block_size} tokens)"
                )
        if not self.topology.disaggregated:
            # The scheduler's own checks (chunked prefill off and a prefill too long).
            Scheduler(self._template.scheduler.config, self._template.scheduler.cost).add(probe)

    def submit(self, req: SimRequest, now: float) -> None:
        """A client's request reaches the frontend at ``now``."""
        self.check(req)
        req.arrival_s = now
        self._where[req] = (None, None)
        at = now + self.topology.frontend_overhead_s
        heapq.heappush(self._events, (at, next(self._seq), "arrive", req))

    def abort(self, req: SimRequest) -> None:
        """The client went away: free what its request holds, wherever it is."""
        inst, inner = self._where.pop(req, (None, None))
        if inst is not None and inner is not None:
            inst.scheduler.abort(inner)
            self._client.pop(inner, None)
        req.status = "aborted"

    @property
    def has_work(self) -> bool:
        return bool(self._events) or any(
            i.step is not None or i.scheduler.has_work for i in self.instances
        )

    def next_event_s(self) -> float | None:
        """When the next step ends or the next arrival or transfer happens (None: idle)."""
        times = [i.step.end_s for i in self.instances if i.step is not None]
        if self._events:
            times.append(self._events[0][0])
        return min(times) if times else None

    def advance(self, now: float) -> Advance:
        """Process every event up to ``now``; steps start as soon as their instance is free
        and has work, at the time it became free."""
        out = Advance()
        out.failed.extend(self._failed)
        self._failed.clear()
        while True:
            t = self.next_event_s()
            if t is None or t > now:
                break
            ended = [i for i in self.instances if i.step is not None and i.step.end_s <= t]
            for inst in ended:
                self._finish_step(inst, out)
            while self._events and self._events[0][0] <= t:
                at, _, kind, payload = heapq.heappop(self._events)
                if kind == "arrive":
                    self._route(payload, at)
                elif kind == "replica":
                    self._bring_up(payload, at)
                else:
                    self._land(payload, at, out)
            for inst in self.instances:
                if inst.step is None and inst.scheduler.has_work:
                    self._start_step(inst, t, out)
        out.lost.extend(self._lost)
        self._lost.clear()
        return out

    def add_replica(self, now: float, startup_s: float = 0.0) -> str:
        """Scale out an aggregated deployment: a new replica, asked at ``now``, takes new
        requests from ``now + startup_s`` (its cold start) on; the router sends it its
        share from then. Returns its name. ``ValueError`` for a disaggregated topology."""
        if self.topology.disaggregated:
            raise ValueError("only an aggregated sim adds replicas (its pools are fixed)")
        if not startup_s >= 0:
            raise ValueError(f"a replica's startup_s must be >= 0, got {startup_s}")
        name = f"replica{self._named}"
        self._named += 1
        self._pending += 1
        heapq.heappush(self._events, (now + startup_s, next(self._seq), "replica", name))
        return name

    @property
    def replicas(self) -> int:
        """Replicas serving now (an aggregated deployment's instances)."""
        return len(self._front)

    @property
    def replicas_planned(self) -> int:
        """Replicas serving and coming up."""
        return len(self._front) + self._pending

    # -- faults: a replica killed, restarted or stalled while running -----------------

    def _serving(self, name: str | None) -> _Instance:
        if self.topology.disaggregated:
            raise ValueError(
                "only an aggregated sim's replicas can be killed, restarted or stalled"
            )
        if not self._front:
            raise ValueError("no replica is serving")
        if name is None:
            return self._front[0]
        wanted = f"replica{name}" if str(name).isdigit() else str(name)
        for inst in self._front:
            if inst.name == wanted:
                return inst
        raise ValueError(
            f"no replica {name!r} is serving; serving: " + ", ".join(i.name for i in self._front)
        )

    def kill_replica(
        self, name: str | None, now: float, why: str = "killed"
    ) -> tuple[str, list[SimRequest]]:
        """The replica ``name`` (None: the first serving) dies at ``now``: it takes no more
        requests, and the client requests it held (running or queued on it) are lost and
        returned, to be failed. Returns its name and them."""
        inst = self._serving(name)
        # Every client request routed to it and not finished: running, queued, or in the
        # step in progress (a request whose last token that step would emit has already
        # left the scheduler's running list).
        lost = [client for client, (at, _inner) in self._where.items() if at is inst]
        for client in lost:
            _at, inner = self._where.pop(client)
            if inner is not None:
                self._client.pop(inner, None)
            client.status = "aborted"
        inst.step = None
        self.instances.remove(inst)
        self._front.remove(inst)
        self._dead.append(inst)
        self._rr = itertools.cycle(range(len(self._front)))
        self.replica_log.append((inst.name, "down", now, why))
        return inst.name, lost

    def restart_replica(
        self, name: str | None, now: float, startup_s: float = 0.0
    ) -> tuple[str, list[SimRequest]]:
        """Kill the replica ``name`` and start it again: it serves ``startup_s`` later
        (its cold start), empty. Returns as ``kill_replica``."""
        if not startup_s >= 0:
            raise ValueError(f"a replica's startup_s must be >= 0, got {startup_s}")
        killed, lost = self.kill_replica(name, now, "restarted")
        self._pending += 1
        heapq.heappush(self._events, (now + startup_s, next(self._seq), "replica", killed))
        return killed, lost

    def stall_replica(self, name: str | None, now: float, for_s: float) -> str:
        """The replica ``name`` produces nothing from ``now`` for ``for_s`` seconds: its
        step in progress ends that much later and no step ends before the stall does.
        Returns its name."""
        if not (for_s > 0 and for_s < float("inf")):
            raise ValueError(f"a stall lasts a number of seconds > 0, got {for_s}")
        inst = self._serving(name)
        until = max(inst.stalled_until, now + for_s)
        inst.stalled_until = until
        if inst.step is not None and inst.step.end_s > now:
            inst.step = _shifted(inst.step, duration_s=inst.step.duration_s + for_s)
        self.replica_log.append((inst.name, "stalled", now, f"for {for_s:g} s"))
        self.replica_log.append((inst.name, "resumed", until, "stall over"))
        return inst.name

    # -- inside ----------------------------------------------------------------------

    def _bring_up(self, name: str, at: float) -> None:
        cfg, cost = self._configs["aggregated"]
        inst = _Instance(name, "aggregated", Scheduler(cfg, cost))
        self.instances.append(inst)
        self._front.append(inst)
        self._pending -= 1
        # Round robin over every replica, the new one next.
        self._rr = itertools.cycle([len(self._front) - 1, *range(len(self._front) - 1)])
        self.replicas_up.append((name, at))
        self.replica_log.append((name, "up", at, "serving"))

    def _route(self, req: SimRequest, at: float) -> None:
        if req.status == "aborted":
            return
        inst = self._pick(req)
        if inst is None:
            self._where.pop(req, None)
            req.status = "aborted"
            self._lost.append((req, "no replica is serving: every one is down"))
            return
        if self.topology.disaggregated:
            inner = SimRequest(
                req.rid, req.prompt_tokens, 1, arrival_s=at, block_hashes=req.block_hashes
            )
        else:
            inner = req
        self._client[inner] = req
        self._where[req] = (inst, inner)
        inst.scheduler.add(inner)
        if inst.step is None:
            self._start_step(inst, at, None)

    def _pick(self, req: SimRequest) -> _Instance | None:
        front = self._front
        if not front:
            return None
        if len(front) == 1:
            return front[0]
        if self.topology.router == "kv" and req.block_hashes:
            bs = front[0].scheduler.config.block_size
            limit = (req.prompt_tokens - 1) // bs
            scored = [(i.scheduler.blocks.match(req.block_hashes, limit)[0], -i.load, n)
                      for n, i in enumerate(front)]  # fmt: skip
            return front[max(scored)[2]]
        return front[next(self._rr)]

    def _start_step(self, inst: _Instance, at: float, out: Advance | None) -> None:
        at = max(at, inst.stalled_until)
        while inst.scheduler.has_work:
            try:
                inst.step = inst.scheduler.step(at)
                return
            except SchedulerStalled as exc:
                inner = exc.request
                inst.scheduler.fail(inner)
                client = self._client.pop(inner, inner)
                self._where.pop(client, None)
                (out.failed if out is not None else self._failed).append((client, str(exc)))

    def _finish_step(self, inst: _Instance, out: Advance) -> None:
        result = inst.step
        inst.step = None
        finished = set(result.finished)
        for inner, idx in result.emitted:
            client = self._client.get(inner)
            if client is None:
                continue
            if inst.role == "prefill":
                # The prompt is in the KV cache and the first token sampled: move them.
                self._client.pop(inner, None)
                client.first_scheduled_s = inner.first_scheduled_s
                self._send_kv(client, result.end_s)
                continue
            last = inner in finished
            out.emitted.append(Emission(client, idx, result.end_s, last))
            if last:
                self._client.pop(inner, None)
                self._where.pop(client, None)
                client.status = "finished"

    def _send_kv(self, req: SimRequest, at: float) -> None:
        assert self.topology.prefill is not None and self.topology.decode is not None
        cost = self._decoders[0].scheduler.cost
        kv_bytes = req.prompt_tokens * cost.model.kv_bytes_per_token
        pairs = min(self.topology.prefill.tp, self.topology.decode.tp)
        took = self.link.latency_s + kv_bytes / (self.link.bandwidth * pairs)
        self.transfers += 1
        self.transfer_s += took
        self._where[req] = (None, None)
        heapq.heappush(self._events, (at + took, next(self._seq), "kv", req))

    def _land(self, req: SimRequest, at: float, out: Advance) -> None:
        if req.status == "aborted":
            return
        # The decode instance streams the first token the prefill sampled, then decodes.
        last = req.max_tokens == 1
        out.emitted.append(Emission(req, 0, at, last))
        if last:
            self._where.pop(req, None)
            req.status = "finished"
            return
        inst = min(self._decoders, key=lambda i: i.load)
        inner = SimRequest(req.rid, req.prompt_tokens, req.max_tokens, arrival_s=at)
        inner.num_computed = req.prompt_tokens
        inner.num_output = 1
        self._client[inner] = req
        self._where[req] = (inst, inner)
        inst.scheduler.add(inner)
        if inst.step is None:
            self._start_step(inst, at, out)

    # -- what /metrics shows -----------------------------------------------------------

    def stats(self) -> SchedulerStats:
        """The counters of every instance, summed."""
        total = SchedulerStats()
        for inst in (*self.instances, *self._dead):
            for f in fields(total):
                name = f.name
                setattr(total, name, getattr(total, name) + getattr(inst.scheduler.stats, name))
        return total

    def prefix_hit_rate(self) -> float | None:
        """Prompt tokens found in a prefix cache over prompt tokens looked up, on the
        instances that receive new requests (the decode side looks up nothing)."""
        queries = sum(i.scheduler.stats.prefix_queries for i in self._front)
        hits = sum(i.scheduler.stats.prefix_hits for i in self._front)
        return hits / queries if queries else None

    def reset_prefix_cache(self) -> tuple[bool, int]:
        """Empty every instance's prefix cache of the blocks no request holds: (whether
        the cache is now empty, as vLLM's reset succeeds only with no request running;
        blocks evicted)."""
        freed = sum(i.scheduler.blocks.evict_idle() for i in self.instances)
        return self.running() == 0 and self.waiting() == 0, freed

    def running(self) -> int:
        return sum(len(i.scheduler.running) for i in self.instances)

    def waiting(self) -> int:
        return sum(len(i.scheduler.waiting) for i in self.instances) + sum(
            1 for e in self._events if e[2] == "arrive"
        )

    def kv_usage(self) -> float:
        """KV-cache usage over every instance's blocks (1 = full)."""
        used = sum(i.scheduler.blocks.used for i in self.instances)
        total = sum(i.scheduler.config.num_blocks for i in self.instances)
        return used / total if total else 0.0

    def kv_blocks(self) -> int:
        return sum(i.scheduler.config.num_blocks for i in self.instances)

    def __iter__(self) -> Iterator[_Instance]:
        return iter(self.instances)
